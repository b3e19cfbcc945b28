"""The study as the launcher checks it: the composed spec parsed by ``study.spec``, then
against the config (every setting real, the criterion's metric logged) and the command line's overrides."""

from __future__ import annotations

import json

from hydra import compose as hydra_compose
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from evidence.statistics.descriptive import CI_LEVEL
from evidence.verdict.sizing import check_design
from facts.metrics import eval_tag
from launcher.experiment.experiment_errors import ExperimentError
from launcher.overrides import check_overrides
from study.spec import Study, VerdictError, arm_owner, parse_study
from trainer.metrics_writer import metric_keys
from trainer.run_config import algo_config
from trainer.run_config import compose as trainer_compose


def load_study(node: DictConfig, name: str) -> Study:
    """Check a composed spec (``cfg.experiment``); every problem is one ``ExperimentError`` line."""
    try:
        study = parse_study(OmegaConf.to_container(node, resolve=True), name)
        if study.experiment.sizing is not None:  # the design the registration records, refused as it would be there
            check_design(study.experiment.sizing, 1 - CI_LEVEL)
        return study
    except VerdictError as exc:
        raise ExperimentError(f"experiment {name}: {exc}") from None


def check_user_overrides(study: Study, user: dict[str, str]) -> None:
    """The command line's trainer overrides may change what every arm shares, never an arm's own
    setting, the pre-registered seeds or the tuned setting."""
    for arm, own in study.experiment.arms.items():
        clash = sorted(set(own) & set(user))
        if clash:
            raise ExperimentError(f"the override {clash[0]}={user[clash[0]]} would change arm {arm}'s own setting; "
                                  f"edit the spec (a new experiment) instead")
    if "seed" in user:
        raise ExperimentError("the spec's seeds are pre-registered; drop the seed override")
    tuned = study.experiment.tuning.setting if study.experiment.tuning is not None else None
    if tuned in user:
        raise ExperimentError(f"the override {tuned}={user[tuned]} sets the tuned setting {tuned}; drop it "
                              f"(the tuning stage chooses it per arm)")


def check_arm_settings(study: Study, user: dict[str, str] | None = None) -> None:
    """Every arm and shared setting names a real setting, the criterion's metric is one every arm logs (with the
    command line's ``user`` overrides), and a collapse criterion on an evaluation can see a collapse."""
    extra = [study.settings, *(b.get("settings", {}) for b in (study.probe.get("gradient_check") or {},
                                                              study.probe.get("staleness_check") or {}))]
    for where, overrides in [*((f"arm {a}", o) for a, o in study.experiment.arms.items()),
                             *(("settings", o) for o in extra)]:
        problem = check_overrides([f"{k}={v}" for k, v in overrides.items()], compose)
        if problem is not None:
            raise ExperimentError(f"experiment {study.name}: {where}: {problem}")
    measure = study.experiment.criterion.measure
    cfgs = {arm: compose([f"{k}={v}" for k, v in {**study.settings, **overrides, **(user or {})}.items()])
            for arm, overrides in study.experiment.arms.items()}
    check_arms_differ(study, cfgs)
    check_collapse_observable(study, cfgs)
    for arm, cfg in cfgs.items():
        if measure.is_eval:
            k = int(cfg.workload.eval.k)
            logged = {eval_tag("mean_reward"), eval_tag("truncation"), *(eval_tag(f"pass@{j}") for j in range(1, k + 1))}
        else:
            logged = set(metric_keys(algo_config(cfg), str(cfg.workload.engine)))
        if measure.metric not in logged:
            raise ExperimentError(f"experiment {study.name}: criterion metric {measure.metric} is logged by no run of "
                                  f"arm {arm}; choose one of {', '.join(sorted(logged))}")


def check_collapse_observable(study: Study, cfgs: dict[str, DictConfig]) -> None:
    """A collapse criterion (``criterion.collapse``: the baseline drops more than X from its own peak) on an
    evaluation metric needs evaluations during training: with ``workload.eval.every`` 0 (or not below
    ``workload.n_updates``) a run is evaluated at its initial and final checkpoints only, its "peak" is one of the
    two and a rise-then-collapse between them is never seen, so the criterion could never fire. Refused in one
    line naming the arm and the fix. (A training metric's curve is every step's: always observable.)"""
    criterion = study.experiment.criterion
    if criterion.collapse_drop is None or not criterion.measure.is_eval:
        return
    for arm, cfg in cfgs.items():
        every, steps = int(cfg.workload.eval.get("every", 0) or 0), int(cfg.workload.n_updates)
        if not 0 < every < steps:
            raise ExperimentError(
                f"experiment {study.name}: criterion.collapse needs evaluations during training, but arm {arm} "
                f"has workload.eval.every={every} with workload.n_updates={steps}, so {criterion.measure.metric}'s "
                f"peak is its initial or final value and a collapse between them is never seen; set "
                f"workload.eval.every below n_updates (e.g. {max(steps // 4, 1)}) in settings, or drop criterion.collapse")


def compose(overrides: list[str]) -> DictConfig:
    """``conf/config.yaml`` composed with ``overrides`` (inside ``launch.py``'s Hydra app or outside it)."""
    if GlobalHydra.instance().is_initialized():
        return hydra_compose(config_name="config", overrides=list(overrides))
    return trainer_compose(overrides)


def _resolved(cfg: DictConfig) -> str:
    """A composed config's every setting as text (Hydra's own node aside): what a run of it is given."""
    values = OmegaConf.to_container(cfg, resolve=False)
    values.pop("hydra", None)
    return json.dumps(values, sort_keys=True, default=str)


def check_arms_differ(study: Study, cfgs: dict[str, DictConfig]) -> None:
    """Two arms whose composed settings are equal (they differ only by a value that is the default,
    ``{algo: dapo}`` vs ``{algo: dapo, algo.loss_reduction: token_mean}``) would run the same jobs twice
    under two labels: refused, naming the overrides that change nothing."""
    seen: dict[str, str] = {}
    arms = study.experiment.arms
    for arm, cfg in cfgs.items():
        key = _resolved(cfg)
        if key in seen:
            first = seen[key]
            idle = sorted(set(arms[first].items()) ^ set(arms[arm].items()))
            shown = ", ".join(f"{k}={v}" for k, v in idle) or "nothing"
            raise ExperimentError(f"experiment {study.name}: arms {first} and {arm} resolve to the same settings "
                                  f"({shown} is what the config already sets); make the arms differ in a setting")
        seen[key] = arm


def check_arm_labels(study: Study, sweep) -> None:
    """A spec arm named like the label the sweep gives another arm's runs (``grpo: {algo: rpp}`` beside
    ``rpp: {algo: grpo}``) reads as the other arm in every table and job name: refused before the stage runs.
    The verdict finds each arm by its overrides (``arm_owner``), never by label."""
    arms = study.experiment.arms
    for spec in sweep.specs:
        owner = arm_owner(arms, spec.arm_overrides)
        if spec.arm in arms and owner != spec.arm:
            shown = " ".join(f"{k}={v}" for k, v in arms[spec.arm].items())
            runs = f"arm {owner}'s" if owner is not None else "another arm's"
            raise ExperimentError(f"experiment {study.name}: spec arm {spec.arm} ({shown}) is named like the label of "
                                  f"{runs} runs ({spec.name}); rename the spec arm")
