"""K looks at a paired design whose seeds run in waves: Lan–DeMets boundaries and the design's operating
characteristics, by recursive numerical integration.

The stage statistics (as the two-look design's, ``evidence.statistics.sequential``): wave k's paired differences,
its own seeds only, give the paired t statistic t_k = d̄_k/(s_k/√n_k), mapped to the standard normal by its own t
distribution, z_k = Φ⁻¹(F_t(t_k; n_k − 1)). Under the null z_k is exactly N(0, 1) whatever n_k is, and the waves'
z_k are independent (each wave's seeds are new). Look k tests the inverse normal combination

    Z_k = (√m₁·z₁ + … + √m_k·z_k) / √M_k,   m_j the planned size of wave j, M_k = m₁ + … + m_k,

with weights fixed before any seed runs (Lehmacher and Wassmer 1999), so a wave that loses a seed (a rejected job)
changes z_k's precision, never its null distribution. Under the null (Z₁, …, Z_K) is multivariate normal with
corr(Z_j, Z_k) = √(M_j/M_k): the canonical joint distribution of a group sequential test at information fractions
t_k = M_k/M_K (Jennison and Turnbull 2000, ch. 3).

Boundaries (``boundaries``): two-sided c₁ … c_K with P(|Z_j| < c_j for j < k, |Z_k| ≥ c_k) = α(t_k) − α(t_{k−1})
for the Lan–DeMets spending function α(t) (``sequential.spent_alpha``: O'Brien–Fleming-type 2 − 2Φ(z_{1−α/2}/√t),
Pocock-type α·ln(1 + (e − 1)·t)). c₁ = Φ⁻¹(1 − α(t₁)/2); each later c_k is found by bisection (to 1e-12) after the
earlier ones, its crossing probability computed by the recursive numerical integration of Armitage, McPherson and
Rowe (1969) (Jennison and Turnbull ch. 19): the sub-density of Z_{k−1} on the region where the design goes on is
carried on Gauss–Legendre nodes, and Z_k = a·Z_{k−1} + b·z_k with a = √(M_{k−1}/M_k), b = √(m_k/M_k) integrates the
next wave's increment against it. For two looks this is the one integral of ``sequential``.

Futility (optional, ``futility: f``): an interim look k < K whose Z_k is below f stops the design. The efficacy
boundaries ignore it (non-binding), so the looks reject a true null with probability at most α whether or not a
launcher obeys it; the operating characteristics count it as obeyed (the launcher obeys it).

Operating characteristics (``operating``): at a true standardized difference δ/σ of normal seed differences, the
probability that the design stops crossing upward (told from 0 in the treatment's favour), downward, or for
futility at each look: the same recursion with each wave's z_k distributed as Φ⁻¹(F_t(T; m_k − 1)) for T noncentral
t with λ = (δ/σ)·√m_k (exact for normal differences at the planned sizes, no normal approximation of the t).
``detectable_effect``: the δ/σ the design tells from 0 upward with the stated power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from evidence.statistics.sequential import spent_alpha
from study.design import fractions

_NODES = 96  # Gauss–Legendre nodes on each look's continuation region (the two-look integral's count)


@dataclass(frozen=True)
class Stops:
    """Per look, the probability that the design stops there crossing upward, downward, or for futility."""

    up: tuple[float, ...]
    down: tuple[float, ...]
    futile: tuple[float, ...]

    @property
    def rejects(self) -> float:
        """The probability that some look rejects 0 (either direction): the design's two-sided type I error under
        the null."""
        return sum(self.up) + sum(self.down)


@dataclass(frozen=True)
class _Increment:
    """Wave k's stage statistic z_k: N(0, 1) (``df`` None), or Φ⁻¹(F_t(T; df)) for T noncentral t(df, λ)."""

    df: int | None = None
    nc: float = 0.0

    def cdf(self, x):
        import numpy as np
        from scipy import special

        if self.df is None:
            return special.ndtr(x)
        q = special.stdtrit(self.df, special.ndtr(x))  # the t quantile whose z is x
        return np.nan_to_num(special.nctdtr(self.df, self.nc, q), nan=0.0)

    def sf(self, x):
        import numpy as np
        from scipy import special

        if self.df is None:
            return special.ndtr(-x)
        q = -special.stdtrit(self.df, special.ndtr(-x))  # by the upper tail, for precision
        return 1 - np.nan_to_num(special.nctdtr(self.df, self.nc, q), nan=0.0)

    def span(self) -> tuple[float, float]:
        """Where z_k lies but for 1e-16 of its probability on each side, on a grid of 0.05 (widened by one step)."""
        return _span(self)

    def pdf(self, x):
        import numpy as np
        from scipy import special, stats

        if self.df is None:
            return np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        q = special.stdtrit(self.df, special.ndtr(x))
        with np.errstate(divide="ignore", invalid="ignore"):  # both densities 0 far in a tail: no mass there
            return np.nan_to_num(stats.nct.pdf(q, self.df, self.nc) * (np.exp(-x * x / 2) / math.sqrt(2 * math.pi))
                                 / stats.t.pdf(q, self.df), nan=0.0, posinf=0.0)


@lru_cache(maxsize=256)
def _span(inc: _Increment) -> tuple[float, float]:
    import numpy as np

    grid = np.linspace(-80.0, 80.0, 3201)
    low = grid[np.asarray(inc.cdf(grid)) <= 1e-16]
    high = grid[np.asarray(inc.sf(grid)) <= 1e-16]
    return (float(low[-1]) - 0.05 if low.size else -80.0), (float(high[0]) + 0.05 if high.size else 80.0)


@lru_cache(maxsize=1)
def _legendre():
    import numpy as np

    return np.polynomial.legendre.leggauss(_NODES)


def _region(low: float, high: float):
    """Gauss–Legendre nodes and weights on [low, high]."""
    nodes, weights = _legendre()
    half = (high - low) / 2
    return (low + high) / 2 + half * nodes, half * weights


def weights(waves: tuple[int, ...]) -> tuple[float, ...]:
    """The combination's fixed weights at the last look: w_j = √(m_j/M_K) (look k divides by √(t_k))."""
    total = sum(waves)
    return tuple(math.sqrt(size / total) for size in waves)


def combine(waves: tuple[int, ...], stage_z: list[float]) -> float:
    """Look k's statistic from the first k waves' stage statistics: Z_k = Σ √m_j·z_j / √M_k."""
    used = waves[:len(stage_z)]
    return sum(math.sqrt(m) * z for m, z in zip(used, stage_z)) / math.sqrt(sum(used))


def _stops(ts: tuple[float, ...], bounds: tuple[float, ...], increments: tuple[_Increment, ...],
           futility: float | None) -> Stops:
    """The recursion at information fractions ``ts``: each look's probability of stopping upward, downward, for
    futility (interim looks only)."""
    import numpy as np

    up, down, futile = [], [], []
    mass = None  # (nodes, weights × sub-density) of the previous look's continuation region
    span = (-math.inf, math.inf)  # the previous look's continuation region, as integrated
    for k, (t, c, inc) in enumerate(zip(ts, bounds, increments)):
        last = k == len(ts) - 1
        floor = -c if futility is None or last else max(-c, min(futility, c))
        if mass is None:
            up.append(float(inc.sf(c)))
            down.append(float(inc.cdf(-c)))
            futile.append(float(inc.cdf(floor) - inc.cdf(-c)))
            density = None
        else:
            u, vg = mass
            a, b = math.sqrt(ts[k - 1] / t), math.sqrt((t - ts[k - 1]) / t)
            up.append(float(np.sum(vg * inc.sf((c - a * u) / b))))
            down.append(float(np.sum(vg * inc.cdf((-c - a * u) / b))))
            futile.append(float(np.sum(vg * (inc.cdf((floor - a * u) / b) - inc.cdf((-c - a * u) / b)))))
            density = (a, b, u, vg)
        if last or floor >= c:
            break
        low, high = inc.span()
        if density is not None:  # Z_k = a·Z_{k−1} + b·z_k, Z_{k−1} within the previous region
            low, high = a * span[0] + b * low, a * span[1] + b * high
        span = (max(floor, low), min(c, high))  # where the sub-density holds any mass (a c₁ of 11 holds none past 8.3)
        if span[0] >= span[1]:
            break
        x, v = _region(*span)
        if density is None:
            g = inc.pdf(x)
        else:
            a, b, u, vg = density
            g = (inc.pdf((x[:, None] - a * u[None, :]) / b) / b) @ vg
        mass = (x, v * g)
    while len(up) < len(ts):  # nothing goes on past a look whose futility bound meets its boundary
        up.append(0.0), down.append(0.0), futile.append(0.0)
    return Stops(tuple(up), tuple(down), tuple(futile))


@lru_cache(maxsize=64)
def boundaries(rule: str, ts: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    """The K looks' two-sided boundaries at information fractions ``ts`` (increasing, the last 1) on the standard
    normal scale for the named spending rule: ``spending_boundaries`` of α(t₁), …, α(t_K)."""
    return spending_boundaries(ts, tuple(spent_alpha(rule, t, alpha) for t in ts))


def spending_boundaries(ts: tuple[float, ...], spent: tuple[float, ...]) -> tuple[float, ...]:
    """Two-sided boundaries that spend ``spent`` (α spent by each look, cumulative): c₁ = Φ⁻¹(1 − α(t₁)/2); c_k
    solves P(no earlier look crossed, |Z_k| ≥ c_k) = α(t_k) − α(t_{k−1}) under the null (bisection to 1e-12; the
    probability by the recursion, futility ignored: non-binding), so the looks together reject a true null with
    probability α(t_K)."""
    from scipy import special

    found = [float(-special.ndtri(spent[0] / 2))]  # by the tail: a first look spending ~1e-30 keeps a finite c₁
    null = tuple(_Increment() for _ in ts)
    for k in range(1, len(ts)):
        target = spent[k] - spent[k - 1]
        low, high = 0.0, 40.0
        while high - low > 1e-12:  # the crossing probability falls as c_k rises
            mid = (low + high) / 2
            stops = _stops(ts[:k + 1], (*found, mid), null[:k + 1], None)
            low, high = (mid, high) if stops.up[k] + stops.down[k] > target else (low, mid)
        found.append((low + high) / 2)
    return tuple(found)


def operating(rule: str, waves: tuple[int, ...], alpha: float, futility: float | None, effect_sd: float) -> Stops:
    """The design's stopping probabilities at a true standardized difference δ/σ of normal seed differences,
    each wave at its planned size (0: the null, where each z_k is exactly N(0, 1))."""
    ts = fractions(waves)
    increments = tuple(_Increment() if effect_sd == 0 else _Increment(m - 1, effect_sd * math.sqrt(m)) for m in waves)
    return _stops(ts, boundaries(rule, ts, alpha), increments, futility)


@lru_cache(maxsize=64)
def detectable_effect(rule: str, waves: tuple[int, ...], alpha: float, futility: float | None,
                      power: float) -> float:
    """The standardized true difference δ/σ that the design tells from 0 upward (some look crossing upward before
    any stop) with probability ``power``, by Brent's method on ``operating``."""
    from scipy import optimize

    def short(effect: float) -> float:
        return sum(operating(rule, waves, alpha, futility, effect).up) - power

    high = 1.0
    while short(high) < 0:
        high *= 2
    return float(optimize.brentq(short, 0.0, high, xtol=1e-10))
