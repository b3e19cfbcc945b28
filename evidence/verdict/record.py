"""``verdict.json``: an experiment's verdict and every number it used, from its confirm-stage evidence.

The sweep's arms are matched to the spec's by their overrides (and each arm's selected tuning value);
the values are paired by training seed and given to the rule (``evidence.verdict.rule.decide``).
Values in the record are in the criterion's units (points for ``*_points``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from evidence import stats
from evidence.dataset import BundleData
from evidence.fileio import dumps_json, write_text
from evidence.measures import arm_values, trajectory
from evidence.problems import VerdictError
from evidence.statistics import MDE_POWER, minimum_detectable_effect
from evidence.verdict.rule import Outcome, decide, mean_curve, under_powered
from evidence.verdict.selection import Selection, select_settings
from evidence.verdict.spec import MIN_SEEDS, Experiment, arm_owner, parse_experiment, same_overrides
from evidence.verdict.stages import TUNING_STAGE
from facts.files import VERDICT_FILE

SCHEMA = 1
ROLES = ("baseline", "treatment")


def resolve_arm(experiment: Experiment, name: str, data: BundleData, selected: Mapping[str, str] | None = None) -> str:
    """The sweep's arm label that runs spec arm ``name``: the one arm whose overrides it owns
    (``arm_owner``) carrying its selected tuning value too; never found by label (a label can be any
    arm's name)."""
    wanted = {**experiment.arms[name], **(selected or {})}
    matches = [label for label, (_, overrides) in data.arms.items()
               if arm_owner(experiment.arms, overrides) == name and same_overrides(wanted, overrides)]
    if len(matches) != 1:
        shown = ", ".join(f"{k}={v}" for k, v in wanted.items())
        raise VerdictError(f"spec arm {name} ({shown}) matches {len(matches)} arms of the sweep "
                           f"({', '.join(data.arms)}); it must match exactly one")
    return matches[0]


def _role_values(experiment: Experiment, data: BundleData, labels: dict[str, str]) -> dict[str, dict[int, float]]:
    """Per role, the criterion's value of every accepted seed of its arm (refused when neither arm logs it)."""
    measure = experiment.criterion.measure
    values = {role: arm_values(data, measure, label) for role, label in labels.items()}
    if not values["baseline"] and not values["treatment"]:
        raise VerdictError(f"criterion metric {measure.metric} is logged by no accepted run of "
                           f"{labels['baseline']} or {labels['treatment']}")
    return values


def _tuning_record(experiment: Experiment, selections: dict[str, Selection], tuning_data: BundleData | None):
    tuning = experiment.tuning
    if tuning is None:
        return None
    return {"setting": tuning.setting, "metric": tuning.measure.metric, "goal": tuning.goal, "on_edge": tuning.on_edge,
            "scores": {name: s.scores for name, s in selections.items()},
            "evidence": "tuning stage" if tuning_data is not None else "not in this bundle"}


def _collapse_record(experiment: Experiment, outcome: Outcome):
    drop = experiment.criterion.collapse_drop
    return None if drop is None else {"drop": drop, **{role: vars(check) for role, check in outcome.collapse.items()}}


def experiment_verdict(experiment: Experiment, data: BundleData, tuning_data: BundleData | None = None) -> dict:
    """The ``verdict.json`` record of an experiment, from its confirm-stage evidence (and its tuning stage's)."""
    criterion = experiment.criterion
    selections: dict[str, Selection] = {}
    if experiment.tuning is not None and tuning_data is not None:
        selections = select_settings(experiment.tuning, experiment.arms, tuning_data)
    selected = {name: {s.setting: s.value} for name, s in selections.items()}
    names = {"baseline": criterion.baseline, "treatment": criterion.treatment}
    labels = {role: resolve_arm(experiment, name, data, selected.get(name)) for role, name in names.items()}
    values = _role_values(experiment, data, labels)
    paired = [s for s in values["baseline"] if s in values["treatment"]]
    curves = {role: mean_curve([trajectory(data, criterion.measure, labels[role], s) for s in paired])
              if paired else [] for role in labels}
    outcome = decide(criterion, values["baseline"], values["treatment"], curves["baseline"], curves["treatment"],
                     data.ci_level, min_seeds=2 if experiment.exploratory else MIN_SEEDS)
    edges = [{"arm": s.arm, "setting": s.setting, "value": s.value, "side": s.edge}
             for s in selections.values() if s.edge]

    def summary(role: str) -> dict:
        found = stats.across_seeds([criterion.scale * v for s, v in values[role].items() if s in paired])
        return {"n": found.n, "mean": found.mean, "sd": found.sd}

    return {
        "schema": SCHEMA, "verdict": outcome.verdict, "rule": outcome.rule, "reason": outcome.reason,
        "provisional": bool(edges),
        "metric": {"name": criterion.measure.metric, "at": criterion.measure.at,
                   "last_k": criterion.measure.window(data) if not criterion.measure.is_eval else None,
                   "units": criterion.units},
        "arms": {role: {"name": name, "arm": labels[role], "overrides": {**experiment.arms[name], **selected.get(name, {})}}
                 for role, name in names.items()},
        "seeds": paired,
        "seeds_missing": [s for s in experiment.seeds if s not in paired],  # pre-registered, not paired here
        "per_seed": [{"seed": s, "baseline": b, "treatment": t, "difference": d}
                     for s, (b, t, d) in outcome.by_seed.items()],
        "baseline": summary("baseline"), "treatment": summary("treatment"),
        "difference_mean": outcome.summary.mean, "difference_sd": outcome.summary.sd,
        "difference_ci95": list(outcome.interval) if outcome.interval else None,
        "ci_level": data.ci_level, "threshold": criterion.threshold,
        "mde": {"power": MDE_POWER, "alpha": 1 - data.ci_level,
                "value": minimum_detectable_effect(outcome.summary.sd, outcome.summary.n, 1 - data.ci_level)},
        "under_powered": under_powered(outcome, criterion),
        "inconclusive_below": criterion.inconclusive_below, "ci_excludes_zero": criterion.ci_excludes_zero,
        "collapse": _collapse_record(experiment, outcome),
        "edge_of_grid": edges,
        "selected": selected,
        "tuning": _tuning_record(experiment, selections, tuning_data),
        "exploratory": experiment.exploratory,
    }


def bundle_verdict(data: BundleData) -> dict | None:
    """The verdict a bundle's own files give (its tuning stage's under ``data/stages/tuning/``);
    None when it carries no experiment spec."""
    if data.experiment is None:
        return None
    return experiment_verdict(parse_experiment(data.experiment), data, data.stages.get(TUNING_STAGE))


def write_verdict(data_dir: Path, data: BundleData) -> None:
    """Build hook, after the data is loaded: write ``data/verdict.json`` when the bundle carries a spec."""
    record = bundle_verdict(data)
    if record is not None:
        write_text(Path(data_dir) / VERDICT_FILE, dumps_json(record))
