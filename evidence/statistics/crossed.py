"""The evaluation's noise in the design it has: every seed evaluated on the same frozen prompts (seeds crossed with
prompts, "paired by question"), so that a prompt's effect is shared by every seed and is drawn once, not once per
seed. Two intervals of the mean over seeds and prompts of an S x P block of per-prompt values (an arm's pass rates,
or a pair's per-prompt differences, prompt i the same prompt in every row): the crossed bootstrap and the
question-clustered t-interval (numpy only, vectorised: it runs on the build's and the audit's path; the t quantile
from scipy.special, imported on first use).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from evidence.statistics import claims, descriptive

if TYPE_CHECKING:
    import numpy as np

# Recorded in every row that carries the interval, so that the audit redraws the same resamples. 2,000
# resamples as rliable's stratified bootstrap draws: the cost is resamples x seeds x prompts (below).
CROSSED_METHOD = "percentile, seeds and prompts crossed"
CROSSED_RESAMPLES = 2000
CROSSED_SEED = 22
# At most this many gathered values (resamples x seeds x prompts) at once: 4 Mi values, ~32 MiB per array.
CHUNK_VALUES = 1 << 22
# The names the claims rules read the two intervals by (``claims.PairedDesign.noise``).
CROSSED_NOISE = "crossed bootstrap over seeds and prompts"
QUESTION_NOISE = "question-clustered paired t-interval"


def crossed_means(values, n_resamples: int = CROSSED_RESAMPLES, seed: int = CROSSED_SEED) -> np.ndarray:
    """The crossed bootstrap distribution of the grand mean of ``values`` (S seeds x P prompts).

    Each resample draws S seeds with replacement and P prompts with replacement, the prompts once for all the
    drawn seeds (the design's prompts are the same for every seed), and gives (1/(S·P))·Σ_j Σ_i values[s_j, i_i].
    ``rng = numpy.random.default_rng(seed)``; per chunk of whole resamples, first the seed draws
    ``rng.integers(0, S, (size, S))``, then the prompt draws ``rng.integers(0, P, (size, P))``; chunks keep memory
    below ``CHUNK_VALUES`` values. A nested bootstrap (each drawn seed its own prompts) would count a prompt's effect
    as if every seed had drawn it independently and shrink its share of the variance by 1/S: too narrow an
    interval whenever prompts differ (adversarial finding F9). Cost: O(n_resamples·S·P) time.
    """
    import numpy as np  # imported on first use: the tables' importers (a dry run's summary) need none of it

    values = np.asarray(values, dtype=np.float64)
    n_seeds, n_prompts = values.shape
    rng = np.random.default_rng(seed)
    out = np.empty(n_resamples)
    chunk = max(1, CHUNK_VALUES // (n_seeds * n_prompts))
    for start in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - start)
        seeds = rng.integers(0, n_seeds, (size, n_seeds))
        prompts = rng.integers(0, n_prompts, (size, n_prompts))
        cells = (seeds * n_prompts)[:, :, None] + prompts[:, None, :]  # values[s, i] is flat[s·P + i]
        out[start:start + size] = np.take(values.ravel(), cells).sum(axis=(1, 2)) / (n_seeds * n_prompts)
    return out


def _block(values):
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    return values if values.ndim == 2 and values.shape[0] >= 2 and values.shape[1] >= 2 else None


def tied(values) -> claims.Shortfall | None:
    """``claims.tied_evaluations`` on the values an interval of their mean reads (its rule, not a second copy): their
    SD zero up to float rounding. The exact-tie clause only, without the grid's (a grid's near-tie clause is written
    for a few seed-level values; applied to hundreds of cells or question means it would withhold real intervals of
    an easy evaluation). None: the interval may be shown."""
    import numpy as np

    flat = np.asarray(values, dtype=np.float64).ravel()
    return claims.tied_evaluations(claims.PairedDesign(tuple(float(v) for v in flat))) if flat.size >= 2 else None


def crossed_shortfall(values) -> claims.Shortfall | None:
    """What withholds the crossed bootstrap's interval of an S x P block: every value tied (``tied``), so that every
    resample gives the same mean and the percentile interval is a point that says nothing of the noise."""
    return tied(values) if _block(values) is not None else None


def question_shortfall(values) -> claims.Shortfall | None:
    """What withholds the question-clustered interval of an S x P block (S ≥ 1, P ≥ 2): the per-question means
    q_i tied (``tied``), so that s_q = 0 and the t-interval would collapse to the point q̄ (issue 32 §1: no interval
    from tied evaluations; adversarial finding: [0.2500, 0.2500] from every question 2/4 against 3/4)."""
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] < 1 or values.shape[1] < 2:
        return None
    return tied(values.mean(axis=0))


def no_interval_words(found: claims.Shortfall | None) -> str:
    """What a table's cell says in place of a withheld interval, in ``claims.missing_sentence``'s words
    ("tied evaluations: no interval; run more evaluation prompts"); "" when there is an interval."""
    return "" if found is None else claims.missing_sentence([found])


def crossed_interval(values, level: float = descriptive.CI_LEVEL, n_resamples: int = CROSSED_RESAMPLES,
                     seed: int = CROSSED_SEED, withhold_tied: bool = True) -> tuple[float, float] | None:
    """The percentile interval [q_{(1−level)/2}, q_{(1+level)/2}] (numpy's default linear quantile) of
    ``crossed_means``; None with fewer than two seeds or two prompts (nothing to resample at one level) and, unless
    ``withhold_tied`` is False, when every value ties (``crossed_shortfall``: no interval shown from tied
    evaluations; the claims' ``PairedDesign.noise`` reads the point, its own rules judging the seeds)."""
    import numpy as np

    block = _block(values)
    if block is None or (withhold_tied and crossed_shortfall(block) is not None):
        return None
    low, high = np.quantile(crossed_means(block, n_resamples, seed), [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def question_interval(values, level: float = descriptive.CI_LEVEL,
                      withhold_tied: bool = True) -> tuple[float, float] | None:
    """The question-clustered t-interval of the grand mean of ``values`` (S seeds x P prompts; S ≥ 1).

    The question is the unit the evaluation samples (Miller 2024, "Adding Error Bars to Evals"): q_i, the mean over
    the seeds of prompt i's value (each already the mean of its k responses), is one observation per question;
    q̄ ± t_{(1+level)/2, P−1}·s_q/√P with s_q the SD of the q_i (ddof=1). For a pair's per-prompt differences it is
    the paired interval clustered by question; it counts the prompts' spread and, through each q_i, the seeds' and
    the responses' noise within a question, but not a seed's shift of every prompt alike (the seed-level interval
    counts that). None with fewer than two prompts, and when the q_i tie (``question_shortfall``: a point is no
    interval to show) unless ``withhold_tied`` is False (then the point q̄, as ``crossed_interval``'s).
    """
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] < 1 or values.shape[1] < 2:
        return None
    if withhold_tied and question_shortfall(values) is not None:
        return None
    per_question = values.mean(axis=0)
    n = per_question.size
    mean, sd = float(per_question.mean()), float(per_question.std(ddof=1))
    if sd == 0:
        return mean, mean
    from scipy import special  # imported on first use: scipy is slow to import

    half = float(special.stdtrit(n - 1, (1 + level) / 2)) * sd / math.sqrt(n)
    return mean - half, mean + half
