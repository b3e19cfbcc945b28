"""A run-level measure as experiment specs and ``evidence compare`` name it: its grammar, checked before
anything is read.

A measure is ``eval/<name>`` at the final checkpoint (``eval/pass@1``, from ``eval.csv``) or a
training metric's last-k mean (``rollout/raw_reward``, ``train/loss``, any ``metrics.jsonl`` key,
from ``steps.csv``). Rates (pass@k, rewards in [0, 1], fractions) can also be read in points
(100 x the rate). Errors are one line. Reading a measure's values is the evidence's
(``evidence.report.measures``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from facts.bundle_layout import EVAL_FLOAT_COLUMNS
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


class BundleData(Protocol):
    """What a measure reads of a bundle's data (``evidence.dataset.BundleData``): its own last-K window."""

    last_k: int


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
