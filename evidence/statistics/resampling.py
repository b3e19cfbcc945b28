"""The paired bootstrap interval of a mean difference: the percentile bootstrap, its method and seed fixed and recorded."""

from __future__ import annotations

from collections.abc import Sequence

from evidence.statistics import descriptive

# Recorded in every row that carries a bootstrap interval, so that the audit redraws the same resamples.
BOOTSTRAP_METHOD = "percentile"  # rliable's default; BCa's jackknife is unstable at a handful of seeds
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 22


def paired_bootstrap_interval(differences: Sequence[float], level: float = descriptive.CI_LEVEL,
                              seed: int = BOOTSTRAP_SEED, n_resamples: int = BOOTSTRAP_RESAMPLES,
                              method: str = BOOTSTRAP_METHOD) -> tuple[float, float] | None:
    """Bootstrap interval of the mean paired difference: resample the seeds with replacement (each seed keeps
    its pair, so resampling d_s = a_s − b_s is resampling the pairs), the mean of each resample, and the
    percentile interval [q_{(1−level)/2}, q_{(1+level)/2}] of those means (linear interpolation between order
    statistics). The resamples are the indices ``numpy.random.default_rng(seed).integers(0, n, (n_resamples, n))``:
    the draws ``scipy.stats.bootstrap`` makes with that generator, so its interval is this one (the tests hold
    it to scipy; numpy here because importing ``scipy.stats`` costs a second in every build and audit).
    None when n < 2; the point itself when the differences have no spread (every resample's mean is that value).
    """
    if method != "percentile":
        raise ValueError(f"bootstrap method {method!r} is not implemented: the recorded method is 'percentile'")
    sd = descriptive.sample_sd(differences)
    if sd is None:
        return None
    if sd == 0:
        return (differences[0], differences[0])
    import numpy as np

    sample = np.asarray(differences, dtype=np.float64)
    indices = np.random.default_rng(seed).integers(0, len(sample), (n_resamples, len(sample)), dtype=np.int64)
    means = sample[indices].mean(axis=-1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)
