"""The paired bootstrap interval of a mean difference: scipy's ``bootstrap``, its method and seed fixed and recorded."""

from __future__ import annotations

from collections.abc import Sequence

from evidence import stats

# Recorded in every row that carries a bootstrap interval, so that the audit redraws the same resamples.
BOOTSTRAP_METHOD = "percentile"  # rliable's default; BCa's jackknife is unstable at a handful of seeds
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 22


def paired_bootstrap_interval(differences: Sequence[float], level: float = stats.CI_LEVEL,
                              seed: int = BOOTSTRAP_SEED, n_resamples: int = BOOTSTRAP_RESAMPLES,
                              method: str = BOOTSTRAP_METHOD) -> tuple[float, float] | None:
    """Bootstrap interval of the mean paired difference: resample the seeds with replacement (each seed keeps
    its pair, so resampling d_s = a_s − b_s is resampling the pairs), the mean of each resample, and the
    percentile interval [q_{(1−level)/2}, q_{(1+level)/2}] of those means (``scipy.stats.bootstrap``, its
    generator ``numpy.random.default_rng(seed)``). None when n < 2; the point itself when the differences
    have no spread (every resample's mean is that value).
    """
    sd = stats.sample_sd(differences)
    if sd is None:
        return None
    if sd == 0:
        return (differences[0], differences[0])
    import numpy as np
    from scipy import stats as scipy_stats  # imported on first use: scipy.stats is slow to import

    result = scipy_stats.bootstrap((np.asarray(differences, dtype=np.float64),), np.mean, n_resamples=n_resamples,
                                   confidence_level=level, method=method, rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)
