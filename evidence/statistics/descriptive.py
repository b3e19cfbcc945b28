"""The statistics of seed 000's report, one short function per definition.

Only accepted runs reach these functions (the report's loaders drop rejected jobs first).
With fewer than two seeds a dispersion or an interval does not exist: the functions return
None for it, and the report prints "n<2" — never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_LAST_K = 10
CI_LEVEL = 0.95


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean, summed with ``math.fsum`` so the result does not depend on summation order."""
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def sample_sd(values: Sequence[float]) -> float | None:
    """Sample standard deviation (ddof=1); None when n < 2."""
    n = len(values)
    if n < 2:
        return None
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))


def last_k_mean(values: Sequence[float], k: int = DEFAULT_LAST_K) -> float:
    """Mean over the last K steps of a run (seed 000: steps 40..49 of 50); all steps if the run is shorter."""
    return mean(values[-k:])


def all_steps_mean(values: Sequence[float]) -> float:
    """Mean over every training step of a run (seed 000's all-50-step summaries)."""
    return mean(values)


@dataclass(frozen=True)
class K1Activation:
    """rollout/returns − rollout/raw_reward averaged over all steps, over the last K steps, and at the final step."""

    all_steps: float
    last_k: float
    final_step: float


def k1_activation(returns: Sequence[float], raw_reward: Sequence[float], k: int = DEFAULT_LAST_K) -> K1Activation:
    """Seed 000's k1 check: the same-step difference returns − raw_reward is non-zero once k1 shaping acts."""
    if len(returns) != len(raw_reward):
        raise ValueError("returns and raw_reward differ in length")
    diffs = [g - r for g, r in zip(returns, raw_reward)]
    return K1Activation(all_steps=all_steps_mean(diffs), last_k=last_k_mean(diffs, k), final_step=diffs[-1])


@dataclass(frozen=True)
class Summary:
    """Across-seed summary of run-level values: n, mean, sample SD (None when n < 2)."""

    n: int
    mean: float | None
    sd: float | None


def across_seeds(values: Sequence[float]) -> Summary:
    """Mean ± sample SD (ddof=1) of one run-level value per seed; the SD needs n >= 2."""
    if not values:
        return Summary(0, None, None)
    return Summary(len(values), mean(values), sample_sd(values))


def t_quantile(level: float, df: float) -> float:
    """Two-sided Student t quantile t_{(1+level)/2, df}: scipy's inverse Student t CDF ``stdtrit``, the
    function ``scipy.stats.t.ppf`` calls, without importing scipy.stats (a third of a second per process)."""
    from scipy import special  # imported on first use: scipy is slow to import

    return float(special.stdtrit(df, (1 + level) / 2))


def t_interval(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float] | None:
    """Exploratory t-interval for the mean: mean ± t_{(1+level)/2, n-1} · SD/√n; None when n < 2."""
    sd = sample_sd(values)
    if sd is None:
        return None
    m = mean(values)
    half = t_quantile(level, len(values) - 1) * sd / math.sqrt(len(values))
    return (m - half, m + half)


@dataclass(frozen=True)
class PairedDifference:
    """Per-seed differences a − b over the seeds both algorithms have, their summary and t-interval."""

    by_seed: dict[int, float]
    summary: Summary
    interval: tuple[float, float] | None


def paired_difference(a: Mapping[int, float], b: Mapping[int, float], level: float = CI_LEVEL) -> PairedDifference:
    """Paired by training seed: d_s = a_s − b_s for each seed in both; mean ± SD (ddof=1), t-interval with df = n−1."""
    seeds = [s for s in a if s in b]
    diffs = {s: a[s] - b[s] for s in seeds}
    values = list(diffs.values())
    return PairedDifference(by_seed=diffs, summary=across_seeds(values), interval=t_interval(values, level))


@dataclass(frozen=True)
class UnpairedDifference:
    """mean(b) − mean(a) of two independent groups, and its Welch t-interval (None when a group has n < 2)."""

    mean: float
    interval: tuple[float, float] | None
    df: float | None


def welch_difference(a: Sequence[float], b: Sequence[float], level: float = CI_LEVEL) -> UnpairedDifference:
    """Welch: d = m_b − m_a, se = √(s_a²/n_a + s_b²/n_b), df = se⁴ / Σ (s_i²/n_i)² / (n_i − 1), d ± t_{df}·se."""
    diff = mean(b) - mean(a)
    sd_a, sd_b = sample_sd(a), sample_sd(b)
    if sd_a is None or sd_b is None:
        return UnpairedDifference(diff, None, None)
    va, vb = sd_a**2 / len(a), sd_b**2 / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return UnpairedDifference(diff, (diff, diff), None)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(level, df) * se
    return UnpairedDifference(diff, (diff - half, diff + half), df)
