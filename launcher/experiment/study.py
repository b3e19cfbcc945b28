"""The study as the launcher checks it: the composed spec parsed by ``evidence.verdict.spec``, then
against the config (every setting real, the criterion's metric logged) and the command line's overrides."""

from __future__ import annotations

from hydra import compose as hydra_compose
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from evidence.verdict.spec import Study, VerdictError, parse_study
from launcher.experiment.errors import ExperimentError
from launcher.overrides import check_overrides
from trainer.config import algo_config
from trainer.config import compose as trainer_compose
from trainer.metrics import metric_keys


def load_study(node: DictConfig, name: str) -> Study:
    """Check a composed spec (``cfg.experiment``); every problem is one ``ExperimentError`` line."""
    try:
        return parse_study(OmegaConf.to_container(node, resolve=True), name)
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
    """Every arm and shared setting names a real setting, and the criterion's metric is one every arm
    logs (with the command line's ``user`` overrides)."""
    extra = [study.settings, *(b.get("settings", {}) for b in (study.probe.get("gradient_check") or {},
                                                              study.probe.get("staleness_check") or {}))]
    for where, overrides in [*((f"arm {a}", o) for a, o in study.experiment.arms.items()),
                             *(("settings", o) for o in extra)]:
        problem = check_overrides([f"{k}={v}" for k, v in overrides.items()], compose)
        if problem is not None:
            raise ExperimentError(f"experiment {study.name}: {where}: {problem}")
    measure = study.experiment.criterion.measure
    for arm, overrides in study.experiment.arms.items():
        cfg = compose([f"{k}={v}" for k, v in {**study.settings, **overrides, **(user or {})}.items()])
        if measure.is_eval:
            k = int(cfg.workload.eval.k)
            logged = {"eval/mean_reward", "eval/truncation", *(f"eval/pass@{j}" for j in range(1, k + 1))}
        else:
            logged = set(metric_keys(algo_config(cfg)))
        if measure.metric not in logged:
            raise ExperimentError(f"experiment {study.name}: criterion metric {measure.metric} is logged by no run of "
                                  f"arm {arm}; choose one of {', '.join(sorted(logged))}")


def compose(overrides: list[str]) -> DictConfig:
    """``conf/config.yaml`` composed with ``overrides`` (inside ``launch.py``'s Hydra app or outside it)."""
    if GlobalHydra.instance().is_initialized():
        return hydra_compose(config_name="config", overrides=list(overrides))
    return trainer_compose(overrides)
