"""The hierarchical bootstrap over seeds, then prompts: an interval of pass@1 that counts both the training seeds'
spread and the evaluation's prompts (numpy only, vectorised: it runs on the build's and the audit's path)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from evidence import stats

if TYPE_CHECKING:
    import numpy as np

# Recorded in every row that carries the interval, so that the audit redraws the same resamples. 2,000
# resamples as rliable's stratified bootstrap draws: the cost is resamples x seeds x prompts (below).
HIERARCHICAL_METHOD = "percentile, seeds then prompts"
HIERARCHICAL_RESAMPLES = 2000
HIERARCHICAL_SEED = 22
# At most this many gathered values (resamples x seeds x prompts) at once: 4 Mi values, ~32 MiB per array.
CHUNK_VALUES = 1 << 22


def hierarchical_means(rates, n_resamples: int = HIERARCHICAL_RESAMPLES,
                       seed: int = HIERARCHICAL_SEED) -> np.ndarray:
    """The bootstrap distribution of the mean over seeds of each seed's mean over prompts.

    ``rates``: S seeds x P prompts (an array or nested lists) (row s: seed s's per-prompt pass rates, or a pair's per-prompt differences
    with prompt i the same prompt in both arms). Each resample draws S seeds with replacement (the first
    ``rng.integers(0, S, S)``), then for each drawn seed, independently, P of its prompts with replacement
    (``rng.integers(0, P, (S, P))``), and gives (1/(S·P))·Σ_j Σ_i rates[s_j, i_{j,i}];
    ``rng = numpy.random.default_rng(seed)``, resamples drawn in chunks of whole resamples (seed draws
    first, then prompt draws, for each chunk) so that memory stays below ``CHUNK_VALUES`` values.
    Cost: O(n_resamples·S·P) time, O(CHUNK_VALUES) memory: linear in the runs of the arm (or pair).
    """
    import numpy as np  # imported on first use: the tables' importers (a dry run's summary) need none of it

    rates = np.asarray(rates, dtype=np.float64)
    n_seeds, n_prompts = rates.shape
    rng = np.random.default_rng(seed)
    flat, out = rates.ravel(), np.empty(n_resamples)
    chunk = max(1, CHUNK_VALUES // (n_seeds * n_prompts))
    for start in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - start)
        chosen_seeds = rng.integers(0, n_seeds, (size, n_seeds))
        cells = rng.integers(0, n_prompts, (size, n_seeds, n_prompts))
        cells += (chosen_seeds * n_prompts)[..., None]  # rates[s, i] is flat[s·P + i]
        out[start:start + size] = np.take(flat, cells).sum(axis=(1, 2)) / (n_seeds * n_prompts)
    return out


def hierarchical_interval(rates, level: float = stats.CI_LEVEL, n_resamples: int = HIERARCHICAL_RESAMPLES,
                          seed: int = HIERARCHICAL_SEED) -> tuple[float, float] | None:
    """The percentile interval [q_{(1−level)/2}, q_{(1+level)/2}] (numpy's default linear quantile) of
    ``hierarchical_means``; None with fewer than two seeds or two prompts (nothing to resample at one level)."""
    import numpy as np

    rates = np.asarray(rates, dtype=np.float64)
    if rates.ndim != 2 or rates.shape[0] < 2 or rates.shape[1] < 2:
        return None
    low, high = np.quantile(hierarchical_means(rates, n_resamples, seed), [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)
