"""The smallest difference a paired design detects: the paired t-test's power from the noncentral t."""

from __future__ import annotations

import math

# The power at which the minimum detectable effect is stated (the convention of power analysis).
MDE_POWER = 0.8


def paired_t_power(delta: float, sd: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t-test at level α against a true mean difference δ.

    With n paired differences of SD σ, T = d̄ / (s/√n) follows the noncentral t with df = n − 1 and
    noncentrality λ = δ·√n / σ, so power(δ) = 1 − F(t_c; df, λ) + F(−t_c; df, λ), t_c = t_{1−α/2, n−1}
    (F: the noncentral t CDF, scipy's ``nctdtr``, the function ``scipy.stats.nct.cdf`` evaluates).
    ``nctdtr`` returns NaN where a CDF value has underflowed (below 1e-15 wherever it was probed, df 1..199,
    λ up to 200): such a value is taken as 0.
    """
    from scipy import special  # imported on first use: scipy is slow to import

    df = n - 1
    critical = float(special.stdtrit(df, 1 - alpha / 2))
    noncentrality = delta * math.sqrt(n) / sd
    below_upper, below_lower = (_cdf_or_zero(special.nctdtr(df, noncentrality, t)) for t in (critical, -critical))
    return 1 - below_upper + below_lower


def _cdf_or_zero(value: float) -> float:
    """A noncentral t CDF value, 0 where scipy returned NaN for an underflowed tail."""
    return 0.0 if math.isnan(value) else float(value)


def minimum_detectable_effect(sd: float | None, n: int, alpha: float, power: float = MDE_POWER) -> float | None:
    """The smallest true mean difference δ ≥ 0 the paired t-test detects with probability ``power``.

    δ solves power(δ) = ``power`` (``paired_t_power``: noncentral t, df = n − 1, λ = δ·√n/σ) with σ the
    observed SD of the paired differences, by Brent's method; no normal approximation (which, at
    (z_{1−α/2} + z_power)·σ/√n, understates δ badly for few seeds). None when n < 2 (no SD); 0 when
    the differences have no spread.
    """
    if sd is None or n < 2:
        return None
    if sd == 0:
        return 0.0
    from scipy import optimize

    high = sd
    while paired_t_power(high, sd, n, alpha) < power:  # the power rises with δ: bracket the root
        high *= 2
    return float(optimize.brentq(lambda d: paired_t_power(d, sd, n, alpha) - power, 0.0, high, xtol=1e-14 * high,
                                 rtol=1e-13))
