"""The smallest difference a paired design detects: the paired t-test's power from the noncentral t."""

from __future__ import annotations

import math

from study.design import MDE_POWER


def paired_t_power(delta: float, sd: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t-test at level α against a true mean difference δ.

    With n paired differences of SD σ, T = d̄ / (s/√n) follows the noncentral t with df = n − 1 and
    noncentrality λ = δ·√n / σ, so power(δ) = 1 − F(t_c; df, λ) + F(−t_c; df, λ), t_c = t_{1−α/2, n−1}
    (F: the noncentral t CDF, scipy's ``nctdtr``, the function ``scipy.stats.nct.cdf`` evaluates).
    ``nctdtr`` returns NaN where a CDF value has underflowed (below 1e-15 wherever it was probed, df 1..199,
    λ up to 200): such a value is taken as 0.
    """
    return t_power(delta * math.sqrt(n) / sd, n - 1, alpha)


def t_power(noncentrality: float, df: float, alpha: float) -> float:
    """Power of a two-sided t-test at level α whose statistic follows the noncentral t with ``df`` degrees of freedom
    (any positive real: a Satterthwaite df too) and noncentrality λ: 1 − F(t_c; df, λ) + F(−t_c; df, λ),
    t_c = t_{1−α/2, df} (``paired_t_power``'s formula, λ and df given)."""
    from scipy import special  # imported on first use: scipy is slow to import

    critical = float(special.stdtrit(df, 1 - alpha / 2))
    below_upper, below_lower = (_cdf_or_zero(special.nctdtr(df, noncentrality, t)) for t in (critical, -critical))
    return 1 - below_upper + below_lower


def _cdf_or_zero(value: float) -> float:
    """A noncentral t CDF value, 0 where scipy returned NaN for an underflowed tail."""
    return 0.0 if math.isnan(value) else float(value)


def minimum_detectable_effect(sd: float | None, n: int, alpha: float, power: float = MDE_POWER) -> float | None:
    """The smallest true mean difference δ ≥ 0 the paired t-test detects with probability ``power``.

    δ solves power(δ) = ``power`` (``paired_t_power``: noncentral t, df = n − 1, λ = δ·√n/σ) with σ the
    observed SD of the paired differences, by bisection (``_rising_root``); no normal approximation (which,
    at (z_{1−α/2} + z_power)·σ/√n, understates δ badly for few seeds). None when n < 2 (no SD); 0 when
    the differences have no spread.
    """
    if sd is None or n < 2:
        return None
    if sd == 0:
        return 0.0
    return _rising_root(lambda d: paired_t_power(d, sd, n, alpha) - power, sd)


def _rising_root(f, scale: float) -> float:
    """The root of an increasing f with f(0) < 0: bracket it by doubling from ``scale``, then halve the bracket
    until it is 1e-14 of its upper end wide (about 50 steps). Bisection, not ``scipy.optimize.brentq``: importing
    scipy.optimize costs half a second in every evidence process, and fifty power evaluations cost nothing."""
    low, high = 0.0, scale
    while f(high) < 0:
        low, high = high, high * 2
    while high - low > 1e-14 * high:
        middle = (low + high) / 2
        if f(middle) < 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2
