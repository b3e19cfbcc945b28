"""rliable's aggregate measures of runs (Agarwal et al. 2021): the interquartile mean and the probability of improvement."""

from __future__ import annotations

from collections.abc import Sequence

# Below this many runs per arm both measures are refused. The interquartile mean trims the lowest and the
# highest quarter, floor(n/4) runs each: with fewer than 4 it trims nothing and is just the mean. The
# probability of improvement is held to the same floor so that the two robust measures appear together.
MIN_RUNS = 4


def interquartile_mean(values: Sequence[float]) -> float | None:
    """IQM: the mean of the runs left after dropping floor(n/4) from each end of the sorted values
    (what ``scipy.stats.trim_mean(values, 0.25)`` and rliable's ``aggregate_iqm`` compute); None below ``MIN_RUNS``."""
    if len(values) < MIN_RUNS:
        return None
    import numpy as np

    trimmed = len(values) // 4
    return float(np.mean(np.sort(np.asarray(values, dtype=np.float64))[trimmed:len(values) - trimmed]))


def probability_of_improvement(a: Sequence[float], b: Sequence[float]) -> float | None:
    """P(X_a > X_b) + ½·P(X_a = X_b) over every pair of a run of ``a`` and a run of ``b``: counted over the
    n_a·n_b pairs, which is the Mann–Whitney U of a over b divided by n_a·n_b (rliable's
    ``probability_of_improvement`` for one task); None when either arm has fewer than ``MIN_RUNS`` runs."""
    if len(a) < MIN_RUNS or len(b) < MIN_RUNS:
        return None
    import numpy as np

    x, y = np.asarray(a, dtype=np.float64)[:, None], np.asarray(b, dtype=np.float64)[None, :]
    wins = int(np.count_nonzero(x > y)) + 0.5 * int(np.count_nonzero(x == y))
    return wins / (len(a) * len(b))
