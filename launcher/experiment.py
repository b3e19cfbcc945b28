"""Experiments: a pre-registered spec (``conf/experiment/<name>.yaml``) run as staged sweeps.

``python launch.py experiment=<name> [overrides]`` runs, in ``<experiment dir>/``::

    experiment.yaml     the spec as run; its SHA256 is the pre-registration
    registration.json   that SHA256 and the overrides, written when the first job starts
    probe/              a few steps of every arm: finite loss and gradients, seconds per step, peak
                        memory, the spec's gradient and staleness checks (probe/probe.json)
    tuning/             per arm, a grid over the declared setting (when the spec tunes)
    confirm/            every arm at its selected setting over the spec's seeds; its bundle is the
                        experiment's: the verdict, the spec and every earlier stage's data

Each stage is an ordinary sweep (its own jobs, evidence and bundle), so re-running the same command
resumes: accepted jobs are never re-run. The verdict logic is ``evidence.verdict``'s; this module
plans, checks and sequences. Every refusal is one line, before the stage it concerns starts.
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from evidence.verdict import Experiment, VerdictError, extend_grid, parse_experiment, select_from_bundle
from facts import atomic_write_json, sha256_file
from launcher.grid import LAUNCHER_KEYS
from launcher.preflight import PreflightError

SPEC_FILE = "experiment.yaml"
REGISTRATION = "registration.json"
PROBE_RECORD = "probe.json"
GRADIENT_RECORD = "gradient_check.json"
STAGES = ("probe", "tuning", "confirm")
DEFAULT_DIR = "outputs/experiments"
# Keys of the spec this module reads (evidence.verdict reads arms, seeds, exploratory, criterion, tuning).
LAUNCHER_SPEC_KEYS = {"name", "title", "hypothesis", "settings", "tuning_seeds", "budget", "probe"}
VERDICT_SPEC_KEYS = {"arms", "seeds", "exploratory", "criterion", "tuning"}
PROBE_KEYS = {"steps", "gradient_check", "staleness_check"}
BUDGET_KEYS = {"wall_minutes_per_run", "cpu_hours", "gpu_hours"}
# The probe's own run settings: a few steps and a small evaluation (its eval is not evidence). Small,
# not minimal: the evidence rejects a run whose eval reward is all zero, and one response of a model
# that solves a third of the prompts is all zero two times in three; sixteen are, 0.3 % of the time.
PROBE_SETTINGS = {"workload.eval.n_prompts": "16", "workload.eval.k": "1"}


class ExperimentError(PreflightError):
    """A spec, an experiment directory or a stage result that stops the experiment (one line)."""


class ExperimentFailed(RuntimeError):
    """A stage ran and its result stops the experiment (a failed probe, rejected jobs): one line."""


# ---- the spec ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Study:
    """An experiment spec, checked: the verdict's part (``Experiment``) and the launcher's."""

    name: str
    text: str  # the spec as run (YAML), whose SHA256 is pre-registered
    experiment: Experiment
    settings: dict[str, str]  # overrides every arm of every stage shares
    tuning_seeds: tuple[int, ...]
    probe: dict
    budget: dict

    @property
    def sha256(self) -> str:
        import hashlib

        return hashlib.sha256(self.text.encode()).hexdigest()


def _overrides(block, what: str) -> dict[str, str]:
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise ExperimentError(f"experiment: {what} must be a mapping of settings to values, e.g. {{workload.lr: 1e-4}}")
    return {str(k): _text(v) for k, v in block.items()}


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return str(value)


def load_study(node: DictConfig, name: str) -> Study:
    """Check a composed spec (``cfg.experiment``); every problem is one ``ExperimentError`` line."""
    spec = OmegaConf.to_container(node, resolve=True)
    text = yaml.safe_dump(spec, sort_keys=True)
    unknown = sorted(set(spec) - LAUNCHER_SPEC_KEYS - VERDICT_SPEC_KEYS)
    if unknown:
        raise ExperimentError(f"experiment {name}: unknown key {unknown[0]!r}; known: "
                              f"{', '.join(sorted(LAUNCHER_SPEC_KEYS | VERDICT_SPEC_KEYS))}")
    for key in ("title", "hypothesis"):
        if not isinstance(spec.get(key), str) or not spec[key].strip():
            raise ExperimentError(f"experiment {name}: '{key}' must state it in words (a pre-registration needs one)")
    try:
        experiment = parse_experiment(spec)
    except VerdictError as exc:
        raise ExperimentError(f"experiment {name}: {exc}") from None
    settings = _overrides(spec.get("settings"), "settings")
    for arm, overrides in experiment.arms.items():
        shared = sorted(set(overrides) & set(settings))
        if shared:
            raise ExperimentError(f"experiment {name}: arm {arm} and settings both set {shared[0]}; set it in one place")
    tuning_seeds = spec.get("tuning_seeds", list(experiment.seeds))
    if not isinstance(tuning_seeds, list) or not tuning_seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in tuning_seeds):
        raise ExperimentError(f"experiment {name}: tuning_seeds must be a list of integers")
    probe = spec.get("probe") or {}
    budget = spec.get("budget") or {}
    for block, keys, what in ((probe, PROBE_KEYS, "probe"), (budget, BUDGET_KEYS, "budget")):
        if not isinstance(block, dict) or set(block) - keys:
            raise ExperimentError(f"experiment {name}: {what} takes {', '.join(sorted(keys))}")
    steps = probe.get("steps", 2)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ExperimentError(f"experiment {name}: probe.steps must be an integer >= 1")
    for key, value in budget.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ExperimentError(f"experiment {name}: budget.{key} must be a positive number")
    for check, roles in (("gradient_check", ("baseline", "treatment")), ("staleness_check", ("arm",))):
        block = probe.get(check)
        if block is None:
            continue
        for role in roles:
            if block.get(role) not in experiment.arms:
                raise ExperimentError(f"experiment {name}: probe.{check}.{role} {block.get(role)!r} is not an arm "
                                      f"({', '.join(experiment.arms)})")
    return Study(name, text, experiment, settings, tuning_seeds=tuple(tuning_seeds), probe=probe, budget=budget)


def check_arm_settings(study: Study, user: dict[str, str] | None = None) -> None:
    """Every arm and shared setting names a real setting, and the criterion's metric is one every arm
    logs (with the command line's ``user`` overrides)."""
    from launcher.overrides import check_overrides
    from trainer.config import algo_config
    from trainer.metrics import metric_keys

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
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        from hydra import compose as hydra_compose

        return hydra_compose(config_name="config", overrides=list(overrides))
    from trainer.config import compose as trainer_compose

    return trainer_compose(overrides)


# ---- pre-registration --------------------------------------------------------------------------

def _flat(node, prefix: str = "") -> dict[str, object]:
    if isinstance(node, dict):
        out: dict[str, object] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: node}


def spec_changes(old_text: str, new_text: str) -> list[str]:
    """``key: old -> new`` for every setting of the spec that differs."""
    old, new = _flat(yaml.safe_load(old_text) or {}), _flat(yaml.safe_load(new_text) or {})
    return [f"{k}: {old.get(k, '(absent)')} -> {new.get(k, '(absent)')}"
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def check_registration(exp_dir: Path, study: Study, overrides: list[str]) -> None:
    """Refuse a changed spec (or other run settings) in an experiment directory that already ran."""
    path = exp_dir / REGISTRATION
    if not path.is_file():
        return
    record = json.loads(path.read_text())
    if record["spec_sha256"] != study.sha256:
        old = (exp_dir / SPEC_FILE).read_text() if (exp_dir / SPEC_FILE).is_file() else ""
        changed = spec_changes(old, study.text) or ["the text"]
        more = f" (+{len(changed) - 2} more)" if len(changed) > 2 else ""
        raise ExperimentError(f"{exp_dir.name} was pre-registered with another spec ({'; '.join(changed[:2])}{more}); "
                              f"a pre-registered spec cannot change: restore it, or run it in a new hydra.run.dir")
    if record["overrides"] != overrides:
        raise ExperimentError(f"{exp_dir.name} ran with overrides [{' '.join(record['overrides'])}], not "
                              f"[{' '.join(overrides)}]; repeat them to resume, or use a new hydra.run.dir")


def register(exp_dir: Path, study: Study, overrides: list[str]) -> None:
    """Record the spec's SHA256 as the first job starts (never rewritten once there)."""
    if (exp_dir / REGISTRATION).is_file():
        return
    exp_dir.mkdir(parents=True, exist_ok=True)
    (exp_dir / SPEC_FILE).write_text(study.text)
    atomic_write_json(exp_dir / REGISTRATION, {
        "experiment": study.name, "spec_sha256": sha256_file(exp_dir / SPEC_FILE), "overrides": overrides,
        "registered": datetime.now(timezone.utc).isoformat(timespec="seconds")})


# ---- stage plans ---------------------------------------------------------------------------------

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

    def stage_dir(self, stage: str) -> Path:
        return self.exp_dir / stage

    def plan(self, stage: str, cells: list[list[str]]):
        from launcher.plan import plan_cells

        return plan_cells(cells, self.stage_dir(stage))

    def probe_cells(self) -> list[list[str]]:
        s, probe = self.study, self.study.probe
        seed = s.experiment.seeds[0]
        run = {**self.user, "workload.n_updates": str(probe.get("steps", 2)), **PROBE_SETTINGS}
        cells = [_cell(s.settings, arm, run, seed=seed, launcher=self.launcher) for arm in s.experiment.arms.values()]
        stale = probe.get("staleness_check")
        if stale:
            fresh = {**s.experiment.arms[stale["arm"]], **_overrides(stale.get("settings"), "staleness_check.settings")}
            cells.append(_cell(s.settings, fresh, run, seed=seed, launcher=self.launcher))
        return cells

    def tuning_grids(self) -> dict[str, list[str]]:
        t = self.study.experiment.tuning
        return {arm: list(values) for arm, values in t.values.items()}

    def tuning_cells(self, grids: dict[str, list[str]]) -> list[list[str]]:
        s, setting = self.study, self.study.experiment.tuning.setting
        return [_cell(s.settings, s.experiment.arms[arm], {setting: value}, self.user, seed=seed, launcher=self.launcher)
                for arm, values in grids.items() for value in values for seed in s.tuning_seeds]

    def confirm_cells(self, selected: dict[str, dict[str, str]]) -> list[list[str]]:
        s = self.study
        return [_cell(s.settings, overrides, selected.get(arm, {}), self.user, seed=seed, launcher=self.launcher)
                for arm, overrides in s.experiment.arms.items() for seed in s.experiment.seeds]


# ---- the probe's checks --------------------------------------------------------------------------

def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def probe_checks(runner: Runner, data) -> dict:
    """Finite loss and gradients, seconds per step and peak memory per arm, and the declared checks."""
    from evidence.verdict import same_overrides

    study, probe = runner.study, runner.study.probe
    arms: dict[str, dict] = {}
    for label, (_, overrides) in data.arms.items():
        steps = [row for (arm, _), rows in data.steps.items() if arm == label for row in rows]
        if (label, study.experiment.seeds[0]) not in data.accepted or not steps:
            raise ExperimentFailed(f"probe failed: arm {label} has no accepted probe run (see "
                                  f"{runner.stage_dir('probe').name}/bundle/report.md)")
        for key in ("train/loss", "train/grad_norm"):
            if not all(isinstance(r.get(key), float) and math.isfinite(r[key]) for r in steps):
                raise ExperimentFailed(f"probe failed: arm {label} logged a non-finite {key}")
        timed = [r["perf/step_s"] for r in steps[1:] or steps]  # the first step also warms up
        arms[label] = {"overrides": overrides, "step_s": _mean(timed),
                       "peak_mem_gib": max(r.get("perf/peak_mem_gib") or 0.0 for r in steps)}
    record: dict = {"arms": arms, "checks": {}}
    stale = probe.get("staleness_check")
    if stale:
        own = study.experiment.arms[stale["arm"]]
        fresh = {**own, **_overrides(stale.get("settings"), "staleness_check.settings")}
        metric = stale.get("metric", "train/sampler_logp_gap")

        def level(fresh_arm: bool) -> float:
            """The metric's mean over the probe steps of the baseline's fresh (or stale) probe arm."""
            (label,) = [lb for lb, a in arms.items() if same_overrides(own, a["overrides"])
                        and same_overrides(fresh, a["overrides"]) == fresh_arm]
            return _mean([r[metric] for (arm, _), rows in data.steps.items() if arm == label for r in rows])

        stale_value, fresh_value = level(False), level(True)
        ratio = float(stale.get("min_ratio", 2.0))
        passed = stale_value > 0 and stale_value >= ratio * fresh_value
        record["checks"]["staleness"] = {"metric": metric, "stale": stale_value, "fresh": fresh_value,
                                         "min_ratio": ratio, "passed": passed}
        if not passed:
            raise ExperimentFailed(f"probe failed: staleness has no effect on {metric} (stale {stale_value:.4g} vs "
                                  f"fresh {fresh_value:.4g}, needs {ratio:g}x); raise the staleness or fix the sampler")
    grad = probe.get("gradient_check")
    if grad:
        out = gradient_check(runner, grad)
        floor = float(grad.get("min_cosine", 0.9))
        passed = out["finite"] and out["cosine"] >= floor
        record["checks"]["gradient"] = {**out, "min_cosine": floor, "passed": passed}
        if not passed:
            raise ExperimentFailed(f"probe failed: {grad['treatment']} and {grad['baseline']} gradients disagree at "
                                  f"staleness 0 (cosine {out['cosine']:.4f} < {floor:g}); check the treatment's loss")
    return record


def gradient_check(runner: Runner, grad: dict) -> dict:
    """Both arms' gradients on one staleness-0 batch, by ``python -m trainer.probe`` (a process of its own)."""
    study = runner.study
    shared = {**study.settings, **runner.user, **_overrides(grad.get("settings"), "gradient_check.settings")}
    out = runner.stage_dir("probe") / GRADIENT_RECORD
    argv = [sys.executable, "-m", "trainer.probe", "--out", str(out)]
    for role in ("baseline", "treatment"):
        argv += [f"--{role}", " ".join(shlex.quote(f"{k}={v}") for k, v in study.experiment.arms[grad[role]].items())]
    argv += [*(f"{k}={v}" for k, v in shared.items()), f"seed={study.experiment.seeds[0]}"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ExperimentFailed(f"probe failed: the gradient check did not run ({last})")
    return json.loads(out.read_text())


def check_budget(study: Study, record: dict, planned: list) -> dict:
    """Planned hours = the probe's slowest step cost x every planned step, times each job's CPUs
    (``cpu_hours``) or one device per job (``gpu_hours``); refused when above the spec's budget, or
    when one run would exceed the wall cap. Evaluation time is not in the step cost."""
    step_s = max(a["step_s"] for a in record["arms"].values())
    budget = study.budget
    runs = [(spec.n_updates, spec.cpus) for sweep in planned for spec in sweep.specs]
    longest_min = max((n for n, _ in runs), default=0) * step_s / 60
    cpu_h = sum(n * step_s * cpus for n, cpus in runs) / 3600
    gpu_h = sum(n * step_s for n, _ in runs) / 3600
    out = {"step_s": step_s, "runs": len(runs), "steps": sum(n for n, _ in runs), "cpu_hours": cpu_h,
           "gpu_hours": gpu_h, "longest_run_minutes": longest_min, "budget": dict(budget)}
    cap = budget.get("wall_minutes_per_run")
    if cap is not None and longest_min > cap:
        raise ExperimentError(f"budget: a run needs about {longest_min:.1f} min at the probe's {step_s:.2f} s/step, over "
                              f"the wall cap of {cap:g} min; raise budget.wall_minutes_per_run or shorten the runs")
    for unit, need in (("cpu_hours", cpu_h), ("gpu_hours", gpu_h)):
        if budget.get(unit) is not None and need > budget[unit]:
            raise ExperimentError(f"budget: the plan needs about {need:.3g} {unit.replace('_', '-')} ({len(runs)} runs, "
                                  f"{out['steps']} steps at the probe's {step_s:.2f} s/step), over the budget of "
                                  f"{budget[unit]:g}; raise budget.{unit} or plan fewer runs")
    return out


# ---- the runner ----------------------------------------------------------------------------------

def _wall_cap(study: Study, cluster: DictConfig) -> list[str]:
    """The budget's wall cap per run as the Slurm time limit (local runs have no scheduler limit)."""
    cap = study.budget.get("wall_minutes_per_run")
    if cap is None or str(cluster.kind) != "slurm":
        return []
    minutes = math.ceil(cap)
    return [f"cluster.time={minutes // 60:02d}:{minutes % 60:02d}:00"]


def split_overrides(overrides: list[str]) -> tuple[dict[str, str], list[str]]:
    """Command-line overrides -> (trainer settings for every stage, launcher settings); drops experiment=."""
    trainer, launcher = {}, []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key == "experiment" or key.startswith("experiment.") or key.startswith("hydra"):
            continue
        if key.split(".")[0] in LAUNCHER_KEYS:
            launcher.append(o)
        else:
            trainer[o.split("=", 1)[0]] = o.split("=", 1)[1] if "=" in o else ""
    return trainer, launcher


def run_experiment(cfg: DictConfig, overrides: list[str], exp_dir: Path, name: str) -> int:
    """Check the spec and the directory, then run (or dry-run) every stage in order; an exit code."""
    try:
        study = load_study(cfg.experiment, name)
        user, launcher = split_overrides(overrides)
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
        check_arm_settings(study, user)
        check_registration(exp_dir, study, sorted(overrides_for_record(overrides)))
        runner = Runner(study, exp_dir, user, [*launcher, *_wall_cap(study, cfg.cluster)], bool(cfg.dry_run))
        return dry_run(runner) if runner.dry_run else run_stages(runner, sorted(overrides_for_record(overrides)))
    except PreflightError as exc:
        print(f"proofgrid: error: {exc}", file=sys.stderr)
        return 2
    except ExperimentFailed as exc:
        print(f"proofgrid: experiment stopped: {exc}", file=sys.stderr)
        return 1


def overrides_for_record(overrides: list[str]) -> list[str]:
    """What defines the runs besides the spec (whose SHA256 covers experiment.*): the trainer overrides."""
    return [o for o in overrides
            if o.split("=", 1)[0].lstrip("+~").split(".")[0] not in (*LAUNCHER_KEYS, "hydra", "experiment")]


def _stage_header(stage: str, text: str) -> None:
    print(f"== {stage}: {text}")


def dry_run(runner: Runner) -> int:
    """Print every stage's plan and commands; a stage that depends on an earlier one's result says so."""
    from launcher.sweep import run_sweep

    study = runner.study
    print(f"experiment {study.name}: {study.experiment.criterion.treatment} vs {study.experiment.criterion.baseline}, "
          f"spec sha256 {study.sha256}")
    _stage_header("probe", f"{study.probe.get('steps', 2)} step(s) of every arm, seed {study.experiment.seeds[0]}")
    run_sweep(runner.plan("probe", runner.probe_cells()))
    grad = study.probe.get("gradient_check")
    if grad:
        print(f"   gradient check: python -m trainer.probe ({grad['treatment']} vs {grad['baseline']}, staleness 0, "
              f"cosine >= {float(grad.get('min_cosine', 0.9)):g})")
    if study.budget:
        print(f"   budget: {', '.join(f'{k}={v}' for k, v in sorted(study.budget.items()))}; checked against the "
              f"probe's measured step cost before the next stage")
    selected: dict[str, dict[str, str]] = {}
    if study.experiment.tuning is not None:
        t = study.experiment.tuning
        _stage_header("tuning", f"{t.setting} per arm, selected on {t.measure.label()} ({t.goal}); "
                                f"edge of grid: {t.on_edge}")
        run_sweep(runner.plan("tuning", runner.tuning_cells(runner.tuning_grids())))
        selected = {arm: {t.setting: values[len(values) // 2]} for arm, values in runner.tuning_grids().items()}
        print(f"   confirm runs at each arm's tuning winner; shown here at "
              f"{', '.join(f'{a}: {t.setting}={v[t.setting]}' for a, v in selected.items())}")
    _stage_header("confirm", f"every arm over seeds {', '.join(map(str, study.experiment.seeds))}")
    confirm = runner.plan("confirm", runner.confirm_cells(selected))
    if selected:  # illustrative settings: print the commands, record no plan a real run would contradict
        from launcher.plan import expanded_commands

        print("\n".join(expanded_commands(confirm)))
    else:
        run_sweep(confirm)
    c = study.experiment.criterion
    _stage_header("verdict", f"{c.measure.label()}: {c.treatment} - {c.baseline} >= {c.threshold:g} {c.units}")
    return 0


def run_stages(runner: Runner, recorded: list[str]) -> int:
    """probe -> (budget) -> tuning -> confirm -> verdict; each stage resumes from its own sweep."""
    from evidence.dataset import load_bundle_data
    from launcher.sweep import run_sweep

    study, exp = runner.study, runner.exp_dir
    probe = runner.plan("probe", runner.probe_cells())
    register(exp, study, recorded)  # the first job is about to start
    _stage_header("probe", f"{len(probe.specs)} job(s)")
    code = run_sweep(probe)
    probe_data = runner.stage_dir("probe") / "bundle" / "data"
    if code != 0 and not (probe_data / "index.csv").is_file():
        raise ExperimentFailed("probe failed: its sweep did not complete; see the messages above")
    record = probe_checks(runner, load_bundle_data(probe_data))
    grids = runner.tuning_grids() if study.experiment.tuning is not None else {}
    first = study.experiment.tuning.values if grids else {}
    planned = [runner.plan("tuning", runner.tuning_cells(grids))] if grids else []
    planned.append(runner.plan("confirm", runner.confirm_cells(
        {a: {study.experiment.tuning.setting: v[0]} for a, v in first.items()} if grids else {})))
    atomic_write_json(runner.stage_dir("probe") / PROBE_RECORD, record)  # kept when the budget refuses
    record["budget"] = check_budget(study, record, planned)
    atomic_write_json(runner.stage_dir("probe") / PROBE_RECORD, record)
    speeds = ", ".join(f"{arm} {v['step_s']:.2f} s/step" for arm, v in record["arms"].items())
    print(f"probe passed: {speeds}; plan {record['budget']['cpu_hours']:.3g} CPU-h")
    selected: dict[str, dict[str, str]] = {}
    if grids:
        selected = run_tuning(runner, grids)
    confirm = runner.plan("confirm", runner.confirm_cells(selected))
    confirm.experiment_sha256 = study.sha256
    runner.stage_dir("confirm").mkdir(parents=True, exist_ok=True)
    (runner.stage_dir("confirm") / SPEC_FILE).write_text(study.text)
    _stage_header("confirm", f"{len(confirm.specs)} job(s)")
    code = run_sweep(confirm)
    verdict = runner.stage_dir("confirm") / "bundle" / "data" / "verdict.json"
    if not verdict.is_file():
        raise ExperimentFailed("no verdict: the confirm stage's bundle was not built; see the messages above")
    v = json.loads(verdict.read_text())
    ci = v["difference_ci95"]
    print(f"verdict: {v['verdict']}{' (provisional)' if v['provisional'] else ''} by rule {v['rule']}: "
          f"{v['metric']['name']} difference {v['difference_mean']:+.3g}"
          + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "") + f" {v['metric']['units']}; bundle "
          f"{runner.stage_dir('confirm').name}/bundle.tar.gz")
    return code


def run_tuning(runner: Runner, grids: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    """Run the grid, select per arm; an edge winner extends its grid once when the spec says so."""
    from launcher.sweep import run_sweep

    tuning = runner.study.experiment.tuning
    bundle = runner.stage_dir("tuning") / "bundle"
    _stage_header("tuning", f"{sum(map(len, grids.values())) * len(runner.study.tuning_seeds)} job(s)")
    run_sweep(runner.plan("tuning", runner.tuning_cells(grids)))
    chosen = _select(runner, bundle)
    if tuning.on_edge == "extend":
        edges = {arm: s.edge for arm, s in chosen.items() if s.edge}
        if edges:
            for arm, side in edges.items():
                value = extend_grid(grids[arm], side)
                grids[arm] = [value, *grids[arm]] if side == "low" else [*grids[arm], value]
                print(f"tuning: {arm}'s best {tuning.setting}={chosen[arm].value} is on the {side} edge; "
                      f"extending its grid once with {value}")
            run_sweep(runner.plan("tuning", runner.tuning_cells(grids)))
            chosen = _select(runner, bundle)
    print("tuning selected: " + "; ".join(
        f"{arm} {s.setting}={s.value}" + (f" (on the {s.edge} edge)" if s.edge else "") for arm, s in chosen.items()))
    return {arm: {s.setting: s.value} for arm, s in chosen.items()}


def _select(runner: Runner, bundle: Path):
    try:
        return select_from_bundle(runner.study.experiment, bundle)
    except VerdictError as exc:
        raise ExperimentFailed(f"tuning: {exc}") from None


def experiment_dir(name: str, run_dir: str, hydra_overrides: list[str]) -> Path:
    """``hydra.run.dir`` when given on the command line, else ``outputs/experiments/<name>`` (so the
    same command resumes the same experiment)."""
    if any(o.split("=", 1)[0] == "hydra.run.dir" for o in hydra_overrides):
        return Path(run_dir).resolve()
    return (Path.cwd() / DEFAULT_DIR / name).resolve()


__all__ = ["ExperimentError", "Study", "experiment_dir", "load_study", "run_experiment", "spec_changes"]
