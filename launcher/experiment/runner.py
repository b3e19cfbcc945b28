"""One run of ``launch.py experiment=<name>``: the study, the user's overrides, where it runs, and each stage's jobs.

A stage's job is a cell of overrides, later layers winning: the spec's shared settings, the arm's own,
the stage's (the probe's few steps, a tuning value, a selected value), the command line's; then the
seed and the launcher's settings.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from facts.certify import CERTIFY_FIELD
from facts.files import CONFIRM_STAGE, TUNING_STAGE
from launcher.experiment.budget import wall_cap
from launcher.experiment.experiment_errors import ExperimentError
from launcher.experiment.registration import check_registration, overrides_for_record
from launcher.experiment.study import check_arm_labels, check_arm_settings, check_user_overrides, load_study
from launcher.grid import LAUNCHER_KEYS
from launcher.planning import plan_cells
from study.spec import DEFAULT_PROBE_STEPS, Study

DEFAULT_DIR = "outputs/experiments"
DIGEST_CHARS = 8  # of the overrides' SHA256 in a default experiment directory's name
# The probe's own run settings: a few steps and a small evaluation (its eval is not evidence). Small,
# not minimal: the evidence rejects a run whose eval reward is all zero, and one response of a model
# that solves a third of the prompts is all zero two times in three; sixteen are, 0.3 % of the time.
PROBE_SETTINGS = {"workload.eval.n_prompts": "16", "workload.eval.k": "1"}


def _cell(*layers: dict[str, str], seed: int, launcher: list[str]) -> list[str]:
    """One job's overrides: later layers win, then the seed and the launcher settings."""
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer)
    return [*(f"{k}={v}" for k, v in merged.items()), f"seed={seed}", *launcher]


@dataclass
class Runner:
    """One run of ``launch.py experiment=<name>``: the spec, the user's overrides and where it runs."""

    study: Study
    exp_dir: Path
    user: dict[str, str]  # trainer overrides from the command line: every stage, every arm
    launcher: list[str]  # launcher overrides (dry_run, cluster, ...) and the budget's wall cap
    dry_run: bool
    wait: bool = True  # wait=false on Slurm: the stages run as a chain of Slurm jobs (``launcher.experiment.chain``)
    cache: dict = field(default_factory=dict, repr=False)  # what one process plans once (``stages._later``)

    def stage_dir(self, stage: str) -> Path:
        return self.exp_dir / stage

    def plan(self, stage: str, cells: list[list[str]]):
        """A stage's sweep, planned and checked (a spec arm named like another arm's label is refused), bound to
        the spec's SHA256: its ``sweep.json`` and every job's records (grid, certificate, a sized design's second
        look) carry the pre-registration digest from before the job runs (``Sweep.registered``)."""
        sweep = plan_cells(cells, self.stage_dir(stage))
        check_arm_labels(self.study, sweep)
        return sweep.registered(self.study.sha256, stage)

    def probe_steps(self) -> int:
        return self.study.probe.get("steps", DEFAULT_PROBE_STEPS)

    def probe_cells(self) -> list[list[str]]:
        s, probe = self.study, self.study.probe
        seed = s.experiment.seeds[0]
        run = {**self.user, "workload.n_updates": str(self.probe_steps()), **PROBE_SETTINGS}
        cells = [_cell(s.settings, arm, run, seed=seed, launcher=self.launcher) for arm in s.experiment.arms.values()]
        stale = probe.get("staleness_check")
        if stale:
            fresh = {**s.experiment.arms[stale["arm"]], **stale["settings"]}
            cells.append(_cell(s.settings, fresh, run, seed=seed, launcher=self.launcher))
        return cells

    def tuning_grids(self) -> dict[str, list[str]]:
        t = self.study.experiment.tuning
        return {arm: list(values) for arm, values in t.values.items()}

    def stage_launcher(self, stage: str) -> list[str]:
        """The launcher settings of a stage's jobs: the command line's, and ``certify=true`` for a stage the spec's
        ``certify`` block names (its certificate jobs are planned, and counted in the budget, with the stage)."""
        return [*self.launcher, f"{CERTIFY_FIELD}=true"] if stage in self.study.certify else list(self.launcher)

    def tuning_cells(self, grids: dict[str, list[str]]) -> list[list[str]]:
        s, setting = self.study, self.study.experiment.tuning.setting
        launcher = self.stage_launcher(TUNING_STAGE)
        return [_cell(s.settings, s.experiment.arms[arm], {setting: value}, self.user, seed=seed, launcher=launcher)
                for arm, values in grids.items() for value in values for seed in s.tuning_seeds]

    def confirm_cells(self, selected: dict[str, dict[str, str]], seeds: int | None = None) -> list[list[str]]:
        """Every arm at its selected setting over the spec's seeds (its first ``seeds`` of them: a sized design's look)."""
        s = self.study
        launcher = self.stage_launcher(CONFIRM_STAGE)
        return [_cell(s.settings, overrides, selected.get(arm, {}), self.user, seed=seed, launcher=launcher)
                for arm, overrides in s.experiment.arms.items() for seed in s.experiment.seeds[:seeds]]


def runner_for(cfg, overrides: list[str], exp_dir: Path, name: str, check_arms: bool = True) -> tuple[Runner, list[str]]:
    """The run of ``cfg`` (``launch.py``'s composed config, or a decision job's composed again from the same
    ``overrides``) in ``exp_dir``, checked against the spec and the registration (a changed spec or other overrides
    in a directory that ran are refused), and the overrides it registers. ``check_arms``: compose every arm to check
    its settings (the launcher's check before anything starts; a decision job's spec is the registered one)."""
    study = load_study(cfg.experiment, name)
    user, launcher = split_overrides(overrides)
    check_user_overrides(study, user)
    if check_arms:
        check_arm_settings(study, user)
    recorded = overrides_for_record(overrides)
    check_registration(exp_dir, study, recorded)
    runner = Runner(study, exp_dir, user, [*launcher, *wall_cap(study, cfg.cluster)], bool(cfg.dry_run), bool(cfg.wait))
    return runner, recorded


def stage_header(stage: str, text: str) -> None:
    print(f"== {stage}: {text}")


def split_overrides(overrides: list[str]) -> tuple[dict[str, str], list[str]]:
    """Command-line overrides -> (trainer settings for every stage, launcher settings); drops experiment=."""
    trainer, launcher = {}, []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key == "experiment" or key.startswith("experiment.") or key.startswith("hydra"):
            continue
        if key == CERTIFY_FIELD:
            raise ExperimentError(f"{o}: an experiment certifies through its spec, inside its budget: "
                                  "certify: {stages: [confirm]}; drop it from the command line")
        if key.split(".")[0] in LAUNCHER_KEYS:
            launcher.append(o)
        else:
            trainer[o.split("=", 1)[0]] = o.split("=", 1)[1] if "=" in o else ""
    return trainer, launcher


def experiment_dir(name: str, run_dir: str, hydra_overrides: list[str], overrides: list[str] = ()) -> Path:
    """``hydra.run.dir`` when given on the command line, else ``outputs/experiments/<name>`` for the spec
    as written, and ``outputs/experiments/<name>-<digest>`` when the command line changes what runs (a
    smoke run's fewer steps): the same command resumes the same experiment, and a smoke run never
    collides with the full run. The digest covers the overrides that define the runs (trainer settings
    and ``experiment.*``; not the launcher's, so a dry run and a run on Slurm share the directory)."""
    if any(o.split("=", 1)[0] == "hydra.run.dir" for o in hydra_overrides):
        return Path(run_dir).resolve()
    return (Path.cwd() / DEFAULT_DIR / f"{name}{overrides_suffix(overrides)}").resolve()


def overrides_suffix(overrides: list[str]) -> str:
    """``-<first 8 hex digits of the SHA256 of the defining overrides, sorted>``, or "" with none."""
    defining = sorted(o for o in overrides if not _launcher_or_name(o))
    return f"-{hashlib.sha256(chr(10).join(defining).encode()).hexdigest()[:DIGEST_CHARS]}" if defining else ""


def _launcher_or_name(override: str) -> bool:
    key = override.split("=", 1)[0].lstrip("+~")
    return key == "experiment" or key.startswith("hydra") or key.split(".")[0] in LAUNCHER_KEYS
