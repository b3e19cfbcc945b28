"""Planning: the Hydra grid expanded into checked ``JobSpec``s, and the deterministic dry run.

``plan_sweep`` turns the composed config of every grid cell into a ``JobSpec`` and runs every
preflight check (nothing is started). ``expanded_commands`` is the deterministic, path-free dry-run
output: what the back end would hand its scheduler (``Backend.describe``), then each job's command;
``write_plan`` records it with ``sweep.json``. Nothing here starts, submits or waits.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import re
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import hydra
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from facts import atomic_write_json, sweep_jobs_dir
from facts.certify import RERUN, RESUME, STOP_SETTING, certificate_job_name, stop_step
from facts.files import CERTIFY_DIR, COMMANDS_FILE, SWEEP_RECORD
from facts.ordering import natural_key
from facts.processes import DEFAULT_RESOURCE_SAMPLE_S
from facts.ranks import DEFAULT_RENDEZVOUS_TIMEOUT_S
from facts.repo import CONF_DIR, REPO_ROOT, SOURCE_COMMIT_ENV
from facts.trainers import PROOFGRID_TRAINER
from launcher.backend import backend
from launcher.errors import GridError, PreflightError
from launcher.grid import (
    LAUNCHER_KEYS,
    Cell,
    Composer,
    arm_bases,
    arm_labels,
    classify,
    compose_jobs,
    expand_grid,
    hydra_compose,
)
from launcher.isolation import JobRoots, isolated_env, rank_env
from launcher.ports import NAMED_PORTS
from launcher.preflight import check_inputs, check_job_config, check_resources, check_source
from launcher.records import public_copy, sweep_sanitizer
from launcher.spec import JobSpec, Sweep, allocation_shape
from trainer.config import algo_config
from trainer.external.spec import (
    SpecError,
    TrainerSpec,
    expand_command,
    parse_spec,
    placeholder_values,
    to_record,
)
from trainer.schema import structured_schema


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def trainer_overrides(overrides: list[str]) -> tuple[str, ...]:
    kept = []
    for o in overrides:
        key = _override_key(o)
        if key.startswith("hydra.") or key.split(".")[0] in LAUNCHER_KEYS:
            continue
        kept.append(o)
    return tuple(sorted(kept))


def _one_arm_per_setting(cells: list[Cell]) -> None:
    """Refuse launcher settings that vary, arms that differ only in how a value was written
    (``1e-4`` and ``0.0001``), and repeated cells."""
    if len({cell.launcher for cell in cells}) > 1:
        raise PreflightError("launcher settings (dry_run, wait, formal, certify, cluster) cannot vary within a sweep; "
                             "run one sweep per setting")
    written: dict[tuple, tuple] = {}
    for cell in cells:
        other = written.setdefault(cell.arm_key, cell.arm)
        if other != cell.arm:
            a, b = (" ".join(f"{k}={v}" for k, v in arm if (k, v) not in other_arm)
                    for arm, other_arm in ((other, cell.arm), (cell.arm, other)))
            raise PreflightError(f"two arms are the same setting ({a} and {b} are equal values); list each value once")
    seen: set[tuple] = set()
    for cell in cells:
        if (cell.arm_key, cell.seed) in seen:
            raise PreflightError(f"the grid repeats the cell {' '.join(cell.overrides)}; list each value once")
        seen.add((cell.arm_key, cell.seed))


@dataclasses.dataclass(frozen=True)
class ExternalTrainer:
    """An arm's trainer that is not proofgrid's: its spec, and the arm's config its command is filled from."""

    spec: TrainerSpec
    config: dict  # the arm's resolved config (a job replaces the seed)

    def job(self, seed: int) -> dict:
        """``JobSpec.external`` of the arm's job with ``seed``: its command filled, its spec, its config."""
        config = {**self.config, "seed": seed}
        return {"argv": expand_command(self.spec, _placeholder_values(config)), "spec": to_record(self.spec),
                "config": config}


def _placeholder_values(config: dict) -> dict:
    """The validated config with every default filled (the schema's, and ``AlgoConfig``'s for every
    algorithm setting its file leaves out), as a command's placeholders see it."""
    merged = OmegaConf.to_container(OmegaConf.merge(structured_schema(), config), resolve=True)
    cfg = OmegaConf.create(config)
    merged["algo"] = {**config["algo"], **dataclasses.asdict(algo_config(cfg))}
    return placeholder_values(merged, REPO_ROOT)


def plan_trainer(cfg: DictConfig, label: str) -> ExternalTrainer | None:
    """The arm's external trainer, its command filled (a placeholder naming no setting is refused) and
    checked by the spec's ``plan_check`` in this process (the TRL adapter's refusals, without TRL);
    None for proofgrid's own trainer."""
    config = OmegaConf.to_container(cfg, resolve=True)
    spec = parse_spec(config["trainer"])
    if not spec.external:
        return None
    if int(cfg.workload.eval.get("every", 0) or 0):  # proofgrid evaluates another trainer's final model only
        raise PreflightError(f"job {label}: workload.eval.every={cfg.workload.eval.every} evaluates during "
                             f"proofgrid's own training, and trainer {spec.name} trains on its own; set "
                             "workload.eval.every=0 (its initial and final evaluations are still made)")
    trainer = ExternalTrainer(spec, config)
    try:
        argv = trainer.job(int(cfg.seed))["argv"]
    except SpecError as exc:
        raise PreflightError(f"job {label}: {exc}") from None
    if spec.plan_check:
        module, _, function = spec.plan_check.partition(":")
        try:
            check = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError):
            raise PreflightError(f"job {label}: trainer {spec.name}'s plan_check {spec.plan_check} cannot be "
                                 "imported; fix the spec") from None
        try:
            check(argv)
        except ValueError as exc:
            raise PreflightError(f"job {label}: trainer {spec.name} refuses it: {exc}") from None
    return trainer


def plan_sweep(root_cfg: DictConfig, cells: list[list[str]], sweep_dir: Path, compose: Composer) -> Sweep:
    """Check the grid and turn every cell into a ``JobSpec``; raises ``PreflightError`` (or a
    Hydra/OmegaConf error for a setting that does not compose) before anything is submitted.

    ``cells`` are the grid's override lists (``expand_grid``); ``compose`` composes one of them.
    Each distinct arm is composed and checked once: a seed changes no check.
    """
    sweep_dir = Path(sweep_dir).resolve()
    formal = bool(root_cfg.formal)
    commit = check_source(formal)
    cluster = root_cfg.cluster
    backend(cluster.kind).check_profile(cluster, dry_run=bool(root_cfg.dry_run), wait=bool(root_cfg.wait))
    parsed = classify(cells)  # a GridError is a PreflightError: one line, nothing started
    _one_arm_per_setting(parsed)
    first: dict[tuple, Cell] = {}
    for cell in parsed:
        first.setdefault(cell.arm_key, cell)
    arm_cfgs = dict(zip(first, compose_jobs(compose, [list(c.overrides) for c in first.values()])))
    labels = arm_labels(arm_bases({key: (str(cfg.algo.short), str(cfg.trainer.name)) for key, cfg in arm_cfgs.items()},
                                  PROOFGRID_TRAINER))
    checked_inputs: set[tuple] = set()
    trainers: dict[tuple, ExternalTrainer | None] = {}
    for key, cfg in arm_cfgs.items():
        check_job_config(cfg, labels[key])
        trainers[key] = plan_trainer(cfg, labels[key])
        w = cfg.workload
        inputs = (str(w.manifest), str(w.model_path), str(w.train_path), str(w.test_path))
        if inputs not in checked_inputs:
            check_inputs(w)
            checked_inputs.add(inputs)
        check_resources(w, cluster, int(cfg.dp_size))
    shapes = {(str(c.workload.name), int(c.workload.n_updates), int(c.workload.eval.n_prompts) * int(c.workload.eval.k))
              for c in arm_cfgs.values()}
    if len(shapes) != 1:
        raise PreflightError(
            "the arms differ in workload, run length (workload.n_updates) or eval size; arms are compared "
            "step by step on one frozen workload: run the others as separate sweeps"
        )
    ((workload, n_updates, eval_responses),) = shapes
    specs = []
    nodes, tasks_per_node = allocation_shape(cluster)
    for cell in parsed:
        cfg = arm_cfgs[cell.arm_key]
        w = cfg.workload
        seed = int(cfg.seed) if cell.seed is None else cell.seed
        label = labels[cell.arm_key]
        specs.append(JobSpec(
            name=f"{label}-{seed}", algo=str(cfg.algo.short), seed=seed, sweep_dir=str(sweep_dir),
            trainer_overrides=trainer_overrides(list(cell.overrides)), cpus=int(w.cpus_per_job),
            ray_cpus=int(w.reward_workers) and int(w.cpus_per_job), n_updates=int(w.n_updates),
            source_commit=commit, gpu_model=cluster.get("gpu_model") or None,
            arm=label, arm_overrides=dict(cell.arm), nodes=nodes, tasks_per_node=tasks_per_node,
            rendezvous_timeout_s=int(cluster.get("rendezvous_timeout_s") or DEFAULT_RENDEZVOUS_TIMEOUT_S),
            resource_sample_s=float(cluster.get("resource_sample_s") or DEFAULT_RESOURCE_SAMPLE_S),
            external=trainers[cell.arm_key].job(seed) if trainers[cell.arm_key] is not None else None,
        ))
    specs = sorted(specs, key=lambda s: (natural_key(s.arm), s.seed))
    certify = plan_certificates(specs, n_updates) if bool(root_cfg.get("certify")) else []
    if len(specs) + len(certify) > 1:  # a one-job sweep has nobody to share its initial evaluation with
        specs = [dataclasses.replace(s, share_initial_eval=True) for s in specs]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):  # only a label that ends like another's seed could do this
        dup = sorted({n for n in names if names.count(n) > 1})
        raise PreflightError(f"grid cells share the job name(s) {', '.join(dup)}; rename a setting's value")
    return Sweep(sweep_dir, cluster, specs, bool(root_cfg.dry_run), bool(root_cfg.wait), formal, commit, n_updates,
                 eval_responses, workload, certify=certify)


def plan_certificates(specs: list[JobSpec], n_updates: int) -> list[JobSpec]:
    """``certify=true``: per arm (in job order), its first seed's job again from scratch (``rerun``) and its
    last seed's job stopped before ``facts.certify.stop_step`` and resumed by a fresh trainer process
    (``resume``); each is a job of its own in ``<sweep>/certify/<job>.<kind>/``, outside the grid."""
    if n_updates < 2:
        raise PreflightError(f"certify=true stops a run and resumes it, which needs workload.n_updates >= 2 "
                             f"(it is {n_updates}); raise workload.n_updates or drop certify=true")
    by_arm: dict[str, list[JobSpec]] = {}
    for spec in specs:
        by_arm.setdefault(spec.arm, []).append(spec)
    planned = []
    for arm, jobs in by_arm.items():
        if jobs[0].external is not None:
            raise PreflightError(f"certify=true: arm {arm} runs trainer {jobs[0].external['spec']['name']}, which has no "
                                 f"{STOP_SETTING} to stop and resume at; certify a sweep of proofgrid's trainer")
        for kind, job in ((RERUN, jobs[0]), (RESUME, jobs[-1])):
            record = {"of": job.name, "kind": kind}
            if kind == RESUME:
                record[STOP_SETTING] = stop_step(job.seed, n_updates)
            planned.append(dataclasses.replace(job, name=certificate_job_name(job.name, kind), certify=record,
                                               share_initial_eval=True))
    return planned


def plan_grid(grid: Sequence[str], sweep_dir: Path, config_name: str = "config") -> Sweep:
    """Plan a grid without a shell (an experiment runner's stage): ``grid`` is what follows
    ``launch.py -m`` (``["algo=grpo,rpp", "seed=1,2", "workload.lr=1e-4,3e-4", "dry_run=true"]``),
    composed with Hydra's compose API from ``conf/``. Run it with ``launcher.sweep.run_sweep``;
    its jobs are ``sweep.specs`` (each ``job_dir`` holds ``job.json``)."""
    try:
        cells = expand_grid(grid)
    except GridError as exc:
        raise PreflightError(f"bad grid: {exc}") from None
    return plan_cells(cells, sweep_dir, config_name)


def plan_cells(cells: Sequence[Sequence[str]], sweep_dir: Path, config_name: str = "config") -> Sweep:
    """``plan_grid`` for cells listed one by one (arms that are not a cartesian product): each cell is
    one job's full override list; launcher settings must be the same in every cell."""
    cells = [list(c) for c in cells]

    def plan() -> Sweep:
        root = hydra.compose(config_name, overrides=[o for o in cells[0] if _override_key(o).split(".")[0] in LAUNCHER_KEYS])
        return plan_sweep(root, cells, sweep_dir, hydra_compose(config_name))

    if GlobalHydra.instance().is_initialized():  # inside launch.py
        return plan()
    with hydra.initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return plan()


def expanded_command(spec: JobSpec) -> dict:
    """The job's full command as it will run, with symbolic ports (claimed only at run time)."""
    roots = JobRoots(spec.job_dir)
    ports = {name: f"<PORT:{name}>" for name in NAMED_PORTS}
    # Only what the job itself sets (not a diff against this shell), so the output is the same
    # wherever the dry run runs: CI compares it with a committed golden file.
    env = isolated_env(roots, ports, {})
    env.update(spec.trainer_env(roots))
    env[SOURCE_COMMIT_ENV] = "<SOURCE_COMMIT>"
    head = "127.0.0.1"
    if spec.tasks > 1:  # one rank per task: the rendezvous is rank 0's node, each task's rank is Slurm's
        head = "<RANK0_NODE_ADDR>"
        env.update(rank_env(head, "<PORT:master_port>", "<SLURM_PROCID>", spec.tasks, "<SLURM_LOCALID>",
                            spec.tasks_per_node, spec.rendezvous_timeout_s))
    if spec.ray_cpus:
        env["RAY_ADDRESS"] = f"{head}:<PORT:ray_gcs>"
    env["RAY_TMPDIR"] = "<RAY_ALIAS>"
    return {"argv": spec.trainer_argv(roots.output), "env": dict(sorted(env.items()))}


class _JobCleaner:
    """``path_free_sanitizer`` for every job of one sweep at the price of one: the job directory
    becomes ``<JOB_DIR>`` first (as a whole path, like the sanitiser's literals), so the jobs'
    strings repeat and each distinct one is sanitised once."""

    def __init__(self, sweep: Sweep) -> None:
        self.clean_once = functools.lru_cache(maxsize=None)(sweep_sanitizer(sweep.sweep_dir, REPO_ROOT).clean)
        jobs_root = re.escape(str(sweep_jobs_dir(sweep.sweep_dir)))
        if sweep.certify:  # a certificate job's directory is <JOB_DIR> in its own line too
            jobs_root = f"(?:{jobs_root}|{re.escape(str(sweep.sweep_dir / CERTIFY_DIR))})"
        self.job_dirs = re.compile(r"(?<![\w.-])" + jobs_root + r"/([\w.-]+)(?![\w.-])")
        self.name = ""

    def for_job(self, spec: JobSpec) -> _JobCleaner:
        self.name = spec.job_dir.name
        return self

    def clean(self, text: str) -> str:
        text = self.job_dirs.sub(lambda m: "<JOB_DIR>" if m.group(1) == self.name else m.group(0), text)
        return self.clean_once(text)


def expanded_commands(sweep: Sweep) -> list[str]:
    """One deterministic, path-free line per job (the dry-run output and ``commands.txt``)."""
    lines = backend(sweep.cluster.kind).describe(sweep)
    cleaner = _JobCleaner(sweep)
    for i, spec in enumerate(sweep.specs):
        cmd = public_copy(expanded_command(spec), cleaner.for_job(spec))
        argv = " ".join(cmd["argv"])
        env = " ".join(f"{k}={v}" for k, v in cmd["env"].items())
        lines.append(f"[{i}] {spec.name}: env -u RAY_ADDRESS {env} {argv}" if not spec.ray_cpus
                     else f"[{i}] {spec.name}: env {env} {argv}")
    for i, spec in enumerate(sweep.certify, start=len(sweep.specs)):
        cmd = public_copy(expanded_command(spec), cleaner.for_job(spec))
        argv = " ".join(cmd["argv"])
        env = " ".join(f"{k}={v}" for k, v in cmd["env"].items())
        unset = "" if spec.ray_cpus else "-u RAY_ADDRESS "
        lines.append(f"[{i}] {spec.name}: (certificate: {certificate_line(spec)}, outside the grid) env {unset}{env} {argv}")
    return lines


def certificate_line(spec: JobSpec) -> str:
    """What a certificate job does, in words: ``grpo-42 again from scratch``, ``grpo-42 stopped before step 2 and resumed``."""
    of = spec.certify["of"]
    if spec.certify["kind"] == RESUME:
        return f"{of} stopped before step {spec.certify[STOP_SETTING]} and resumed by a new trainer process"
    return f"{of} again from scratch"


def write_plan(sweep: Sweep) -> list[str]:
    """Write commands.txt and sweep.json; returns the commands. A re-run keeps the sweep's creation
    date and submission history, so the sealed bundle of an unchanged sweep stays byte-identical."""
    sweep.sweep_dir.mkdir(parents=True, exist_ok=True)
    commands = expanded_commands(sweep)
    (sweep.sweep_dir / COMMANDS_FILE).write_text("\n".join(commands) + "\n")
    path = sweep.sweep_dir / SWEEP_RECORD
    previous = json.loads(path.read_text()) if path.is_file() else {}
    record = {**sweep.record(), "created": previous.get("created", date.today().isoformat())}
    if "submissions" in previous:
        record["submissions"] = previous["submissions"]
    atomic_write_json(path, record)  # read concurrently (launcher status, the submitting back end)
    return commands
