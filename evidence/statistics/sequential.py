"""A sized paired design with two looks: the alpha-spending rule's boundaries, the stage-wise combination and the seeds
the second look needs.

The design: the first ``n1`` seeds run (stage 1); from their paired differences the seeds the threshold needs
at 80 % power are computed (``required_seeds``), and the second look adds seeds up to that number (stage 2, at
least two, at most the spec's ``max``). The verdict's α holds whatever that number turns out to be, because each
look tests a combination of independent stage-wise statistics with weights fixed before any seed runs
(Lehmacher and Wassmer's inverse normal method):

- stage k's paired t statistic, over its own seeds only, mapped to a standard normal by its own t distribution:
  z_k = Φ⁻¹(F_t(t_k; n_k − 1)), exactly N(0, 1) under the null whatever n_k is;
- look 1 tests Z₁ = z₁; look 2 tests Z₂ = w₁·z₁ + w₂·z₂ with w₁ = √(n1/max), w₂ = √(1 − w₁²) (the information
  fraction at the design's largest size, fixed before any seed runs);
- corr(Z₁, Z₂) = w₁, so the pair is the canonical two-look Gaussian process at information fraction t = w₁², and
  the boundaries of a Lan–DeMets spending function at t give a two-sided overall α exactly (``evidence.statistics.waves.boundaries`` at (t, 1): the K = 2 case of seeds in waves).

Only stage 1 decides stage 2's size, and stage 2's seeds are new, so z₂ is N(0, 1) and independent of z₁ under
the null for every size: a size chosen from stage 1's SD (or anything else stage 1 shows) costs no α.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from study.design import OBRIEN_FLEMING, POCOCK, SPENDING_RULES

# Gauss–Legendre nodes for the one integral the second boundary needs (its integrand is smooth on [−c₁, c₁]).
_NODES = 96


def spent_alpha(rule: str, t: float, alpha: float) -> float:
    """The α a Lan–DeMets spending function has spent by information fraction t ∈ (0, 1] (two-sided):
    O'Brien–Fleming-type α(t) = 2 − 2Φ(z_{1−α/2}/√t); Pocock-type α(t) = α·ln(1 + (e − 1)·t). Both reach α at t = 1."""
    from scipy import special  # imported on first use: scipy is slow to import

    if rule == OBRIEN_FLEMING:
        return float(2 * special.ndtr(-special.ndtri(1 - alpha / 2) / math.sqrt(t)))  # by the tail: a small t keeps it
    if rule == POCOCK:
        return alpha * math.log(1 + (math.e - 1) * t)
    raise ValueError(f"unknown spending rule {rule!r}; known: {', '.join(SPENDING_RULES)}")


def nominal_alpha(boundary: float) -> float:
    """The two-sided p-value level a boundary c stands for: 2·(1 − Φ(c))."""
    from scipy import special

    return float(2 * special.ndtr(-boundary))


def stage_z(differences: list[float]) -> float | None:
    """One stage's paired t statistic t = d̄/(s/√n) mapped to the standard normal by its own distribution:
    z = Φ⁻¹(F_t(t; n − 1)) (None when n < 2; ±∞ when the differences have no spread and a non-zero mean)."""
    from scipy import special

    n = len(differences)
    if n < 2:
        return None
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    if sd == 0:
        return 0.0 if mean == 0 else math.copysign(math.inf, mean)
    t = mean / (sd / math.sqrt(n))
    # Φ⁻¹(F_t(t)), by the upper tail where t > 0 so that a large t keeps its precision
    return float(-special.ndtri(special.stdtr(n - 1, -t))) if t > 0 else float(special.ndtri(special.stdtr(n - 1, t)))


@dataclass(frozen=True)
class Weights:
    """The inverse normal combination's fixed weights: w₁ = √(n1/max), w₂ = √(1 − w₁²)."""

    first: float
    second: float

    @classmethod
    def planned(cls, first_seeds: int, max_seeds: int) -> Weights:
        w1 = math.sqrt(first_seeds / max_seeds)
        return cls(w1, math.sqrt(1 - w1 * w1))

    def combine(self, z1: float, z2: float) -> float:
        """The second look's statistic Z₂ = w₁·z₁ + w₂·z₂."""
        return self.first * z1 + self.second * z2


def required_seeds(sd: float | None, delta: float, alpha: float, power: float, low: int, high: int) -> int:
    """The seeds the paired design needs to detect a true difference δ with ``power``: the smallest n in
    [low, high] whose two-sided paired t-test at level α has power(δ) ≥ ``power`` with σ the first stage's
    observed SD (``paired_t_power``: noncentral t, df = n − 1, λ = δ·√n/σ); ``high`` when none does, ``low``
    when the differences have no spread. A planning number: the fixed design's power at the second look's
    nominal α, not the combination test's."""
    from evidence.statistics.power import paired_t_power

    if sd is None:
        return high
    if sd == 0:
        return low
    for n in range(low, high + 1):
        if paired_t_power(delta, sd, n, alpha) >= power:
            return n
    return high
