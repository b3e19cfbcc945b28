"""Run-level measures read from a bundle's data (their grammar: ``study.measure``).

A measure is ``eval/<name>`` at the final checkpoint (``eval/pass@1``, from ``eval.csv``) or a
training metric's last-k mean (``rollout/raw_reward``, ``train/loss``, any ``metrics.jsonl`` key,
from ``steps.csv``). Rates (pass@k, rewards in [0, 1], fractions) can also be read in points
(100 x the rate). Errors are one line.
"""

from __future__ import annotations

from evidence.dataset import BundleData
from evidence.statistics import descriptive
from evidence.tables import accepted_runs, eval_runs, series
from study.measure import (
    EVAL_PREFIX,
    FINAL,
    Measure,
)
from study.spec import Experiment, VerdictError


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
    return None if values is None else descriptive.last_k_mean(values, measure.window(data))


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
    return [descriptive.mean(values[end - k:end]) for end in range(k, len(values) + 1)]


def check_logged(experiment: Experiment, data: BundleData) -> None:
    """Refuse (one line) a criterion or tuning metric that no accepted run of ``data`` (e.g. the probe) logs."""
    measures = [("criterion", experiment.criterion.measure)]
    if experiment.tuning is not None:
        measures.append(("tuning", experiment.tuning.measure))
    for role, measure in measures:
        if not any(arm_values(data, measure, arm) for arm in data.arms):
            logged = sorted(data.step_keys)
            raise VerdictError(f"{role} metric {measure.metric} is logged by no accepted run"
                               + ("" if measure.is_eval else f"; logged: {', '.join(logged) or 'nothing'}"))
