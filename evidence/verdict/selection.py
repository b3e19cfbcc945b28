"""The tuning stage's selection: per spec arm, the grid value whose runs score best on the declared metric.

A winner at the low or high end of its (numerically ordered) grid is on its edge: the launcher extends
the grid once by ``extend_grid``'s value (``on_edge: extend``), else the verdict is provisional.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evidence.dataset import BundleData, load_bundle_data
from evidence.measures import arm_values
from evidence.problems import VerdictError
from evidence.statistics import descriptive
from facts.files import bundle_payload_dir
from study.spec import Experiment, Tuning, arm_owner, canonical


@dataclass(frozen=True)
class Selection:
    """One arm's tuning result: the winning value, every value's score, and whether it sits on the grid's edge."""

    arm: str
    setting: str
    value: str
    scores: dict[str, float | None]  # grid value -> mean over the value's accepted seeds (None: no run)
    edge: str | None  # "low" / "high" when the winner is the grid's smallest / largest value


def grid_order(values: Sequence[str]) -> list[str]:
    """A grid from low to high: numerically when every value is a number, else as declared."""
    if all(isinstance(canonical(v), float) for v in values):
        return sorted(values, key=lambda v: float(v))
    return list(values)


def select_setting(arm: str, setting: str, scores: Mapping[str, float | None], goal: str = "max") -> Selection:
    """The best-scoring grid value (ties: the lower one), and the edge it sits on, if any.

    ``scores`` maps each grid value, as declared, to the arm's mean selection metric at that value.
    """
    order = grid_order(list(scores))
    scored = [v for v in order if scores[v] is not None]
    if not scored:
        raise VerdictError(f"tuning: no accepted run of arm {arm} scores any value of {setting}")
    sign = 1.0 if goal == "max" else -1.0
    best = max(scored, key=lambda v: (sign * scores[v], -order.index(v)))
    edge = "low" if best == order[0] else "high" if best == order[-1] else None
    return Selection(arm, setting, best, dict(scores), edge)


def extend_grid(values: Sequence[str], side: str) -> str:
    """The one value an edge winner's grid is extended by: the grid's outer ratio (or step) continued.

    Numeric grids only: high -> last x (last / second-to-last) when both are positive, else last + (last - prev).
    """
    order = grid_order(values)
    if len(order) < 2 or not all(isinstance(canonical(v), float) for v in order):
        raise VerdictError("tuning: only a numeric grid of at least two values can be extended")
    outer, inner = (float(order[-1]), float(order[-2])) if side == "high" else (float(order[0]), float(order[1]))
    value = outer * (outer / inner) if outer > 0 and inner > 0 else outer + (outer - inner)
    return f"{value:.6g}"


def tuning_scores(tuning: Tuning, arms: Mapping[str, Mapping[str, str]], data: BundleData) -> dict[str, dict[str, float | None]]:
    """``{spec arm: {grid value: mean selection metric}}`` from the tuning stage's evidence.

    A tuning-stage arm belongs to the spec arm that owns its overrides (``arm_owner``); its
    grid value is its ``tuning.setting`` override, named as the sweep recorded it (YAML may have
    turned the spec's ``1.6e-4`` into 0.00016). Values run beyond the declared grid (an
    extension) join it.
    """
    # canonical value -> (text, score); a value that ran is named as the sweep recorded it
    grids = {name: {canonical(v): (v, None) for v in tuning.values[name]} for name in arms}
    for label, (_, overrides) in data.arms.items():
        owner = arm_owner(arms, overrides)
        if owner is None or tuning.setting not in overrides:
            continue
        values = list(arm_values(data, tuning.measure, label).values())
        text = overrides[tuning.setting]
        grids[owner][canonical(text)] = (text, descriptive.mean(values) if values else None)
    return {name: dict(grid.values()) for name, grid in grids.items()}


def select_settings(tuning: Tuning, arms: Mapping[str, Mapping[str, str]], data: BundleData) -> dict[str, Selection]:
    """Per spec arm, the tuning stage's winner on the declared selection metric."""
    scores = tuning_scores(tuning, arms, data)
    return {name: select_setting(name, tuning.setting, scores[name], tuning.goal) for name in arms}


def select_from_bundle(experiment: Experiment, bundle_dir: str | Path) -> dict[str, Selection]:
    """The launcher's call after the tuning stage: per spec arm, the winner in that stage's built bundle."""
    if experiment.tuning is None:
        raise VerdictError("experiment: no tuning declared")
    return select_settings(experiment.tuning, experiment.arms, load_bundle_data(bundle_payload_dir(bundle_dir)))
