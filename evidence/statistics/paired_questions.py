"""The question-level paired difference of two arms evaluated on the same frozen prompts: each question's difference
(its mean over its k responses and the seeds, arm a − arm b), the standard error clustered by question and the
paired t-interval it gives (Miller 2024, "Adding Error Bars to Evals", §§2–4: the question is the unit the evaluation
samples, and a paired comparison on the same questions removes what the questions share). numpy only on the build's
and the audit's path; the t quantile from scipy.special, imported on first use.

The estimator. With d_{s,i} = p_{a,s,i} − p_{b,s,i} (p the share of correct responses of seed s on question i, in
each arm), q_i = (1/S)·Σ_s d_{s,i} and D̄ = (1/P)·Σ_i q_i, the clustered (CR1) variance of D̄ is the sandwich
V_CR = G/(G − 1)·(N − 1)/(N − K)·Σ_g (Σ_{o∈g} e_o)²/N² with G = P clusters, N = S·P observations d_{s,i}, K = 1
regressor (the constant) and e_o = d_o − D̄; since Σ_{o∈g} e_o = S·(q_g − D̄), it is exactly
s_q²/P with s_q² = Σ_i (q_i − D̄)²/(P − 1): the sample variance of the per-question differences over P, the SE
statsmodels' OLS with ``cov_type='cluster'`` gives for the constant. The interval is D̄ ± t_{(1+level)/2, P−1}·SE
(df = clusters − 1, statsmodels' ``use_t`` convention for a clustered fit).

What it counts: the questions' spread in how much a beats b, and through each q_i the seeds' and the responses' noise
within a question; not a seed's shift of every question alike (a training seed's luck common to all prompts), which
the seed-level interval and the crossed variance components (``evidence.statistics.components``) count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evidence.statistics import claims, crossed, descriptive


@dataclass(frozen=True)
class QuestionDifference:
    """D̄ and its question-clustered SE and interval; ``unpaired_se`` is what the same two arms' question means
    would give were they not paired by question (√(s²_a/P + s²_b/P) of each arm's per-question means), and
    ``correlation`` the Pearson correlation of the two arms' per-question means (what pairing removes: the
    paired variance is s²_a + s²_b − 2·r·s_a·s_b); None where undefined (fewer than two questions, no spread)."""

    n_seeds: int
    n_questions: int
    mean: float
    se: float | None
    df: int | None
    low: float | None
    high: float | None
    unpaired_se: float | None
    correlation: float | None
    missing: claims.Shortfall | None = None


def question_means(block) -> list[float]:
    """Per question, its mean over the seeds of an S x P block (rows: seeds; columns: the same questions)."""
    import numpy as np

    return [float(v) for v in np.asarray(block, dtype=np.float64).mean(axis=0)]


def clustered_se(per_question) -> float | None:
    """s_q/√P of the per-question values q_i (ddof=1): the CR1 standard error of their mean clustered by question
    (module docstring); None with fewer than two questions."""
    values = [float(v) for v in per_question]
    sd = descriptive.sample_sd(values)
    return None if sd is None else sd / math.sqrt(len(values))


def t_interval(mean: float, se: float | None, df: int | None, level: float) -> tuple[float, float] | None:
    """mean ± t_{(1+level)/2, df}·se; the point when se is 0; None without an SE."""
    if se is None or df is None or df < 1:
        return None
    if se == 0:
        return mean, mean
    from scipy import special  # imported on first use: scipy is slow to import

    half = float(special.stdtrit(df, (1 + level) / 2)) * se
    return mean - half, mean + half


def question_difference(block_a, block_b, level: float = descriptive.CI_LEVEL) -> QuestionDifference | None:
    """The question-level paired difference a − b from two S x P blocks of per-question rates (the same seeds in the
    same row order, the same questions in the same column order; S ≥ 1): D̄, its question-clustered SE s_q/√P and
    the t-interval with P − 1 df (module docstring), beside the unpaired SE and the arms' correlation over
    questions. None for blocks of different shapes or with no question; no interval (``missing`` says why) when the
    per-question differences tie."""
    import numpy as np

    a, b = np.asarray(block_a, dtype=np.float64), np.asarray(block_b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape or a.shape[0] < 1 or a.shape[1] < 1:
        return None
    qa, qb = a.mean(axis=0), b.mean(axis=0)
    q = (a - b).mean(axis=0)
    n_seeds, n_questions = a.shape
    mean = descriptive.mean([float(v) for v in q])
    se = clustered_se(q)
    df = n_questions - 1 if se is not None else None
    missing = crossed.question_shortfall(a - b)
    low, high = (None, None) if missing is not None else t_interval(mean, se, df, level) or (None, None)
    unpaired = None
    correlation = None
    if n_questions >= 2:
        sa, sb = float(qa.std(ddof=1)), float(qb.std(ddof=1))
        unpaired = math.sqrt((sa * sa + sb * sb) / n_questions)
        if sa > 0 and sb > 0:
            correlation = float(np.corrcoef(qa, qb)[0, 1])
    return QuestionDifference(n_seeds, n_questions, mean, se, df, low, high, unpaired, correlation, missing)
