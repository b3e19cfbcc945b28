"""rliable's aggregate measures of runs (Agarwal et al. 2021): the interquartile mean and the probability of improvement."""

from __future__ import annotations

from collections.abc import Sequence

# Below this many runs per arm both measures are refused. The interquartile mean trims the lowest and the
# highest quarter, floor(n/4) runs each: with fewer than 4 it trims nothing and is just the mean. The
# probability of improvement is held to the same floor so that the two robust measures appear together.
MIN_RUNS = 4


def interquartile_mean(values: Sequence[float]) -> float | None:
    """IQM: the mean of the runs left after dropping floor(n/4) from each end of the sorted values
    (``scipy.stats.trim_mean(values, 0.25)``, rliable's ``aggregate_iqm``); None below ``MIN_RUNS``."""
    if len(values) < MIN_RUNS:
        return None
    from scipy import stats as scipy_stats  # imported on first use: scipy.stats is slow to import

    return float(scipy_stats.trim_mean(list(values), 0.25))


def probability_of_improvement(a: Sequence[float], b: Sequence[float]) -> float | None:
    """P(X_a > X_b) + ½·P(X_a = X_b) over every pair of a run of ``a`` and a run of ``b``: the Mann–Whitney U of
    a over b divided by n_a·n_b (rliable's ``probability_of_improvement`` for one task); None when either arm
    has fewer than ``MIN_RUNS`` runs."""
    if len(a) < MIN_RUNS or len(b) < MIN_RUNS:
        return None
    from scipy import stats as scipy_stats

    return float(scipy_stats.mannwhitneyu(list(a), list(b), alternative="two-sided").statistic / (len(a) * len(b)))
