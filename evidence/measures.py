"""Run-level measures as experiment specs and ``evidence compare`` name them.

A measure is ``eval/<name>`` at the final checkpoint (``eval/pass@1``, from ``eval.csv``) or a
training metric's last-k mean (``rollout/raw_reward``, ``train/loss``, any ``metrics.jsonl`` key,
from ``steps.csv``). Rates (pass@k, rewards in [0, 1], fractions) can also be read in points
(100 x the rate). Errors are one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidence import stats
from evidence.dataset import EVAL_FLOAT_COLUMNS, BundleData
from evidence.tables import accepted_runs, eval_runs, series
from facts.metrics import (
    ALL_ZERO_REWARD_KEY,
    CLIP_FRAC_KEY,
    EVAL_TAG_PREFIX,
    RAW_REWARD_KEY,
    TRUNCATED_KEY,
    ZERO_VARIANCE_KEY,
    eval_tag,
)

EVAL_PREFIX = f"{EVAL_TAG_PREFIX}/"
FINAL, LAST_K = "final", "last_k"
# Metrics whose values are fractions in [0, 1]: a difference of 0.04 reads as 4 points.
RATE_METRICS = frozenset({
    *(eval_tag(key) for key in ("pass@1", "pass@2", "pass@4", "truncation", "mean_reward")),
    RAW_REWARD_KEY, TRUNCATED_KEY, ZERO_VARIANCE_KEY, ALL_ZERO_REWARD_KEY,
    CLIP_FRAC_KEY,
})
POINTS_PER_UNIT = 100.0


class MeasureError(ValueError):
    """A measure that cannot be read (one-line message naming the problem and the fix)."""


@dataclass(frozen=True)
class Measure:
    """One run-level value: ``metric`` at ``at`` (``final`` for eval metrics, ``last_k`` for training ones).

    ``last_k`` None means the bundle's own last-K window (``evidence build --last-k``).
    """

    metric: str
    at: str
    last_k: int | None = None

    @property
    def is_eval(self) -> bool:
        return self.metric.startswith(EVAL_PREFIX)

    @property
    def is_rate(self) -> bool:
        return self.metric in RATE_METRICS

    def window(self, data: BundleData) -> int:
        return self.last_k if self.last_k is not None else data.last_k

    def label(self, data: BundleData | None = None) -> str:
        if self.is_eval:
            return f"{self.metric} (final checkpoint)"
        k = self.last_k if self.last_k is not None else (data.last_k if data is not None else "K")
        return f"{self.metric} (last-{k} mean)"


def parse_measure(metric, at=None, last_k=None) -> Measure:
    """Check a measure's spelling: ``eval/<column of eval.csv>`` at final, anything else a training key at last_k."""
    if not isinstance(metric, str) or "/" not in metric or metric.startswith("/") or metric.endswith("/"):
        raise MeasureError(f"metric {metric!r}: name a metric as eval/pass@1 or a metrics.jsonl key such as "
                           f"{RAW_REWARD_KEY}")
    if metric.startswith(EVAL_PREFIX):
        name = metric.removeprefix(EVAL_PREFIX)
        if name not in EVAL_FLOAT_COLUMNS:
            raise MeasureError(f"unknown eval metric {metric}; known: "
                               + ", ".join(EVAL_PREFIX + c for c in EVAL_FLOAT_COLUMNS))
        if at not in (None, FINAL):
            raise MeasureError(f"{metric}: evaluations are read at 'final', not {at!r}")
        if last_k is not None:
            raise MeasureError(f"{metric}: last_k applies to training metrics only")
        return Measure(metric, FINAL)
    if at not in (None, LAST_K):
        raise MeasureError(f"{metric}: a training metric is read as its 'last_k' mean, not at {at!r}")
    if last_k is not None and (not isinstance(last_k, int) or isinstance(last_k, bool) or last_k < 1):
        raise MeasureError(f"{metric}: last_k must be a positive integer, not {last_k!r}")
    return Measure(metric, LAST_K, last_k)


def logged_by(data: BundleData, measure: Measure, arm: str) -> bool:
    """Whether any accepted run of ``arm`` has a value of ``measure``."""
    return bool(arm_values(data, measure, arm))


def run_value(data: BundleData, measure: Measure, arm: str, seed: int) -> float | None:
    """The measure of one accepted run: its final-checkpoint eval value, or its last-k training mean."""
    if measure.is_eval:
        entry = data.evals.get((arm, seed), {}).get(FINAL)
        return None if entry is None else entry.get(measure.metric.removeprefix(EVAL_PREFIX))
    if (arm, seed) not in data.steps:
        return None
    values = series(data, arm, seed, measure.metric)
    return None if values is None else stats.last_k_mean(values, measure.window(data))


def arm_values(data: BundleData, measure: Measure, arm: str) -> dict[int, float]:
    """``{seed: value}`` over the accepted runs of ``arm`` that have the measure, in grid order."""
    runs = eval_runs(data, arm) if measure.is_eval else accepted_runs(data, arm)
    values = {s: run_value(data, measure, arm, s) for s in runs}
    return {s: v for s, v in values.items() if v is not None}


def trajectory(data: BundleData, measure: Measure, arm: str, seed: int) -> list[float]:
    """The measure over one run, oldest first: eval values at each evaluated checkpoint (initial control
    first, final last); for a training metric the trailing k-step mean at every step from k-1 on (the
    last entry is the run's last-k mean)."""
    if measure.is_eval:
        entries = data.evals.get((arm, seed), {})
        kinds = ["initial"] + sorted(k for k in entries if k not in ("initial", FINAL)) + [FINAL]
        name = measure.metric.removeprefix(EVAL_PREFIX)
        return [entries[k][name] for k in kinds if k in entries and entries[k].get(name) is not None]
    values = series(data, arm, seed, measure.metric) if (arm, seed) in data.steps else None
    if not values:
        return []
    k = min(measure.window(data), len(values))
    return [stats.mean(values[end - k:end]) for end in range(k, len(values) + 1)]
