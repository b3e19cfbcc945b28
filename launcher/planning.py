"""Planning: the Hydra grid expanded into checked ``JobSpec``s, and the deterministic dry run.

``plan_sweep`` turns the composed config of every grid cell into a ``JobSpec`` and runs every
preflight check (nothing is started). ``expanded_commands`` is the deterministic, path-free dry-run
output: what the back end would hand its scheduler (``Backend.describe``), then each job's command;
``write_plan`` records it with ``sweep.json``. Nothing here starts, submits or waits.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import sys
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import hydra
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from facts import atomic_write_json, sweep_jobs_dir
from facts.certify import RERUN, RESUME, STOP_SETTING, certificate_job_name, stop_step
from facts.data_parallel_ranks import DEFAULT_RENDEZVOUS_TIMEOUT_S
from facts.extras import extra_problem
from facts.files import CERTIFY_DIR, COMMANDS_FILE, JOB_SPEC, SWEEP_RECORD
from facts.license import DEFAULT_LICENSE
from facts.ordering import natural_key
from facts.processes import DEFAULT_RESOURCE_SAMPLE_S
from facts.repo import CONF_DIR, REPO_ROOT, SOURCE_COMMIT_ENV
from facts.reward import is_user_reward
from facts.sweep_plan import EARLIER_PLANS_FIELD
from facts.trainers import PROOFGRID_TRAINER
from launcher.backend import backend
from launcher.container import Contained, container_literals, job_container, plan_container
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
    last_value_wins,
)
from launcher.isolation import JobRoots, isolated_env, rank_env
from launcher.job_records import config_dir_literals, public_copy, sweep_sanitizer
from launcher.job_spec import JobSpec, Sweep, allocation_shape
from launcher.live import live_tracking
from launcher.overrides import refuse_spec_file_only
from launcher.ports import NAMED_PORTS
from launcher.preflight import check_inputs, check_job_config, check_resources, check_size, check_source
from trainer.external.trainer_spec import (
    SpecError,
    TrainerSpec,
    expand_command,
    parse_spec,
    placeholder_values,
    run_plan_check,
    to_record,
)
from trainer.prompts import preview
from trainer.run_config import algo_config
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
        raise PreflightError(f"launcher settings ({', '.join(LAUNCHER_KEYS)}) cannot vary within a sweep; "
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


def label_algorithm(cfg: DictConfig) -> str:
    """The algorithm an arm's label starts with: the one its trainer spec declares it runs (``trainer.algorithm``,
    lower case: ``RLOO`` -> ``rloo``), else proofgrid's ``algo.short``."""
    declared = cfg.trainer.get("algorithm")
    return str(declared).lower() if declared else str(cfg.algo.short)


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
    nodes, tasks_per_node = allocation_shape(cfg.cluster)
    if nodes * tasks_per_node > 1:  # each task would start the whole trainer, and all but one fail on the run's lock
        raise PreflightError(f"job {label}: trainer {spec.name} runs as one process per job, but cluster.nodes="
                             f"{nodes} x cluster.tasks_per_node={tasks_per_node} gives the job {nodes * tasks_per_node} "
                             "tasks, each of which would start it; set cluster.nodes=1 cluster.tasks_per_node=1")
    trainer = ExternalTrainer(spec, config)
    try:
        argv = trainer.job(int(cfg.seed))["argv"]
    except SpecError as exc:
        raise PreflightError(f"job {label}: {exc}") from None
    try:
        run_plan_check(spec, argv)  # one of trainer.adapters.PLAN_CHECKS (parse_spec refuses any other function)
    except SpecError as exc:
        raise PreflightError(f"job {label}: {exc}") from None
    problem = spec.requires_extra and extra_problem(spec.requires_extra, f"job {label}: trainer {spec.name}")
    if problem:
        raise PreflightError(problem)
    return trainer



def job_ports(cluster: DictConfig) -> tuple[int, ...]:
    """``cluster.job_ports``: the TCP ports outside its block a job may reach, each a port number."""
    ports = list(cluster.get("job_ports") or [])
    bad = [p for p in ports if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535]
    if bad:
        raise PreflightError(f"cluster.job_ports={ports}: {bad[0]!r} is not a TCP port (1-65535); list the ports of the "
                             "servers a job must reach, e.g. cluster.job_ports=[5000]")
    return tuple(sorted(set(ports)))


def plan_sweep(root_cfg: DictConfig, cells: list[list[str]], sweep_dir: Path, compose: Composer) -> Sweep:
    """Check the grid and turn every cell into a ``JobSpec``; raises ``PreflightError`` (or a
    Hydra/OmegaConf error for a setting that does not compose) before anything is submitted.

    ``cells`` are the grid's override lists (``expand_grid``); ``compose`` composes one of them.
    Each distinct arm is composed and checked once: a seed changes no check.
    """
    refuse_spec_file_only(cells)
    cells = [last_value_wins(cell) for cell in cells]
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
    labels = arm_labels(arm_bases({key: (label_algorithm(cfg), str(cfg.trainer.name)) for key, cfg in arm_cfgs.items()},
                                  PROOFGRID_TRAINER))
    checked_inputs: dict[str, dict] = {}
    trainers: dict[tuple, ExternalTrainer | None] = {}
    tasks: dict[tuple, dict] = {}
    sizes: dict[str, list[str]] = {}  # arm label -> the estimate's lines
    warnings: list[str] = []
    for key, cfg in arm_cfgs.items():
        check_job_config(cfg, labels[key])
        trainers[key] = plan_trainer(cfg, labels[key])
        w = cfg.workload
        inputs = json.dumps([OmegaConf.to_container(w.get(k), resolve=True) if OmegaConf.is_config(w.get(k)) else w.get(k)
                             for k in ("manifest", "model_path", "train_path", "test_path", "data", "prompt", "reward")],
                            default=str)
        if inputs not in checked_inputs:
            checked_inputs[inputs] = {**check_inputs(w), "workload": str(w.name)}
        tasks[key] = checked_inputs[inputs]
        check_resources(w, cluster, int(cfg.dp_size))
        if trainers[key] is None:  # the estimate is of proofgrid's own trainer
            sizes[labels[key]], warned = check_size(cfg, cluster, bool(root_cfg.dry_run))
            warnings += [line for line in warned if line not in warnings]
    for line in warnings:
        print(f"proofgrid: warning: {line}", file=sys.stderr)
    # Arms may run different workloads (workload=toy,toy_math; or two prompt templates): each is its own task,
    # and the report says so. What makes one comparable grid is the run length and the evaluation's size.
    shapes = {(int(c.workload.n_updates), int(c.workload.eval.n_prompts) * int(c.workload.eval.k))
              for c in arm_cfgs.values()}
    if len(shapes) != 1:
        raise PreflightError(
            "the arms differ in run length (workload.n_updates) or eval size (eval.n_prompts x eval.k); arms are "
            "compared step by step and on evaluations of one size: run the others as separate sweeps"
        )
    ((n_updates, eval_responses),) = shapes
    container = plan_container(cluster, str(cluster.kind), bool(root_cfg.dry_run))  # after the schema's checks
    workload = ", ".join(sorted({str(c.workload.name) for c in arm_cfgs.values()}))
    specs = []
    nodes, tasks_per_node = allocation_shape(cluster)
    config_dirs = extra_config_dirs(root_cfg)
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
            job_ports=job_ports(cluster),
            external=trainers[cell.arm_key].job(seed) if trainers[cell.arm_key] is not None else None,
            config_dirs=config_dirs, container=job_container(container, w),
        ))
    specs = sorted(specs, key=lambda s: (natural_key(s.arm), s.seed))
    certify = plan_certificates(specs, n_updates) if bool(root_cfg.get("certify")) else []
    if len(specs) + len(certify) > 1:  # a one-job sweep has nobody to share its initial evaluation with
        specs = [dataclasses.replace(s, share_initial_eval=True) for s in specs]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):  # only a label that ends like another's seed could do this
        dup = sorted({n for n in names if names.count(n) > 1})
        raise PreflightError(f"grid cells share the job name(s) {', '.join(dup)}; rename a setting's value")
    tracking = live_tracking(root_cfg, sweep_dir)
    if tracking is not None:
        specs = [dataclasses.replace(s, tracking=tracking) for s in specs]
        certify = [dataclasses.replace(s, tracking=tracking) for s in certify]
    return Sweep(sweep_dir, cluster, specs, bool(root_cfg.dry_run), bool(root_cfg.wait), formal, commit, n_updates,
                 eval_responses, workload, certify=certify, prompts=prompt_previews(tasks, labels),
                 user_rewards=tuple(sorted({t["reward"] for t in tasks.values() if is_user_reward(t["reward"])})),
                 license=str(root_cfg.get("license") or DEFAULT_LICENSE), estimates=estimate_lines(sizes),
                 figures=bool(root_cfg.get("figures", True)))


def estimate_lines(sizes: dict[str, list[str]]) -> list[str]:
    """The dry run's estimate: once when every arm's is the same, else each arm's under its label."""
    distinct = {tuple(lines) for lines in sizes.values()}
    if len(distinct) <= 1:
        return list(next(iter(distinct), ()))
    return [line.replace(" | ", f" | arm {label}: ", 1) for label, lines in sizes.items() for line in lines]


def prompt_previews(tasks: dict[tuple, dict], labels: dict[tuple, str]) -> list[str]:
    """What the dry run shows of each distinct task (``trainer.inputs.check_task``): its workload, prompt SHA256,
    reward and arms, then the rendered prompts of its train split's first rows, one line each (``repr``)."""
    arms: dict[str, list[str]] = {}
    by_digest = {}
    for key, task in tasks.items():
        ident = json.dumps([task["workload"], task["prompt_sha256"], task["reward"]])
        arms.setdefault(ident, []).append(labels[key])
        by_digest[ident] = task
    lines = []
    for ident, task in by_digest.items():
        lines.append(f"prompt of workload {task['workload']} (prompt sha256 {task['prompt_sha256'][:12]}…, reward "
                     f"{task['reward']}; arm(s) {', '.join(sorted(arms[ident], key=natural_key))}), first train rows:")
        lines += [f"  row {i}: {preview(prompt)}" for i, prompt in enumerate(task["prompts"])]
    return lines


def extra_config_dirs(root_cfg: DictConfig) -> tuple[str, ...]:
    """The config directories the Hydra app composes from beyond ``conf/`` (``-cd DIR``, ``hydra.searchpath``),
    absolute: from the sweep's master config (``-m``) or the running app's; () outside an app."""
    from hydra.core.hydra_config import HydraConfig

    hydra_node = root_cfg.get("hydra") if "hydra" in root_cfg else None
    if hydra_node is not None:
        sources = hydra_node.runtime.config_sources
    elif HydraConfig.initialized():
        sources = HydraConfig.get().runtime.config_sources
    else:
        return ()
    return tuple(dict.fromkeys(str(Path(s.path).resolve()) for s in sources if s.schema == "file"
                               and Path(s.path).resolve() != CONF_DIR.resolve()))


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
    composed with Hydra's compose API from ``conf/``. Run it with ``launcher.sweep_runner.run_sweep``;
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
    argv = spec.trainer_argv(roots.output)
    if spec.container is not None:  # the runtime's command around it (its binds, the variables passed in by name)
        contained = Contained.of(spec, spec.job_dir, sorted(env), ray_alias=None)
        argv = contained.wrap(argv, preflight=True, lock=True)  # rank 0's command: it holds the run lock
    return {"argv": argv, "env": dict(sorted(env.items()))}


class _JobCleaner:
    """``path_free_sanitizer`` for every job of one sweep at the price of one: the job directory
    becomes ``<JOB_DIR>`` first (as a whole path, like the sanitiser's literals), so the jobs'
    strings repeat and each distinct one is sanitised once."""

    def __init__(self, sweep: Sweep) -> None:
        dirs = {**config_dir_literals(sweep.specs[0].config_dirs if sweep.specs else ()),
                **container_literals(sweep.specs[0].container if sweep.specs else None)}
        self.clean_once = functools.lru_cache(maxsize=None)(sweep_sanitizer(sweep.sweep_dir, REPO_ROOT, dirs).clean)
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


@dataclasses.dataclass(frozen=True)
class JobCommand:
    """One job's command as the dry run and ``commands.txt`` show it (path-free): its environment and argv."""

    index: int
    name: str
    note: str  # "(certificate: ..., outside the grid) " for a certificate job, else ""
    unset: tuple[str, ...]  # variables the job's environment removes (RAY_ADDRESS when it runs no Ray)
    env: dict[str, str]
    argv: list[str]

    def line(self, common: dict[str, str] | None = None, unset: tuple[str, ...] = ()) -> str:
        """``[i] name: env [-u X] K=V ... argv``; with ``common`` (and ``unset``), only what this job adds to
        them, since the dry run has shown those once (``dry_run_lines``)."""
        env = {k: v for k, v in self.env.items() if common is None or common.get(k) != v}
        drop = tuple(u for u in self.unset if u not in unset)
        words = [*(f"-u {u}" for u in drop), *(f"{k}={v}" for k, v in env.items())]
        prefix = f"env {' '.join(words)} " if words or common is None else ""
        return f"[{self.index}] {self.name}: {self.note}{prefix}{' '.join(self.argv)}"


def job_commands(sweep: Sweep) -> list[JobCommand]:
    """Every job's command (the grid's, then the certificate jobs'), path-free."""
    cleaner = _JobCleaner(sweep)
    commands = []
    for i, spec in enumerate(sweep.all_specs):
        cmd = public_copy(expanded_command(spec), cleaner.for_job(spec))
        note = f"(certificate: {certificate_line(spec)}, outside the grid) " if spec.certify else ""
        commands.append(JobCommand(i, spec.name, note, () if spec.ray_cpus else ("RAY_ADDRESS",), cmd["env"],
                                   cmd["argv"]))
    return commands


def expanded_commands(sweep: Sweep) -> list[str]:
    """One deterministic, path-free line per job, each whole (``commands.txt``), after what the back end
    would hand its scheduler."""
    return [*backend(sweep.cluster.kind).describe(sweep), *(c.line() for c in job_commands(sweep))]


ENV_HEADER = ("# env | every job below runs with this environment, set by the launcher (<JOB_DIR> is the job's own "
              f"directory; a job line shows only what it adds; {COMMANDS_FILE} has each whole command line):")


def dry_run_lines(sweep: Sweep) -> list[str]:
    """What a dry run prints: the back end's submission (``# sbatch |``), the estimate of what a job needs
    (``# estimate |``) and what it gets (``# limits |``), the environment every job shares, once (``# env |``), then each job's command with
    only what it adds to that environment. ``commands.txt`` keeps each job's whole line."""
    commands = job_commands(sweep)
    common = dict(commands[0].env) if commands else {}
    for c in commands[1:]:
        common = {k: v for k, v in common.items() if c.env.get(k) == v}
    unset = tuple(u for u in (commands[0].unset if commands else ()) if all(u in c.unset for c in commands))
    lines = [*backend(sweep.cluster.kind).describe(sweep), *sweep.estimates]
    if commands:
        lines += [ENV_HEADER, *(f"# env | -u {u}" for u in unset), *(f"# env | {k}={v}" for k, v in common.items())]
    return lines + [c.line(common, unset) for c in commands]


def certificate_line(spec: JobSpec) -> str:
    """What a certificate job does, in words: ``grpo-42 again from scratch``, ``grpo-42 stopped before step 2 and resumed``."""
    of = spec.certify["of"]
    if spec.certify["kind"] == RESUME:
        return f"{of} stopped before step {spec.certify[STOP_SETTING]} and resumed by a new trainer process"
    return f"{of} again from scratch"


def planned_nonces(sweep: Sweep) -> dict[str, str]:
    """The nonce of every job planned before in this directory (its ``spec.json``): a job keeps its own across its
    attempts and every later plan, so its records and its trainer's ledger name one job."""
    nonces = {}
    for spec in sweep.all_specs:
        path = spec.job_dir / JOB_SPEC
        try:
            nonce = JobSpec.from_json(path.read_text()).job_nonce if path.is_file() else None
        except (OSError, ValueError, TypeError):
            nonce = None  # an unreadable spec: the job gets a new nonce (check_rerun refuses a foreign one)
        if nonce:
            nonces[spec.name] = nonce
    return nonces


def write_plan(sweep: Sweep) -> list[str]:
    """Write commands.txt and sweep.json; returns the commands. A re-run keeps the sweep's creation
    date and submission history, so the sealed bundle of an unchanged sweep stays byte-identical."""
    sweep.sweep_dir.mkdir(parents=True, exist_ok=True)
    commands = expanded_commands(sweep)
    (sweep.sweep_dir / COMMANDS_FILE).write_text("\n".join(commands) + "\n")
    path = sweep.sweep_dir / SWEEP_RECORD
    previous = json.loads(path.read_text()) if path.is_file() else {}
    sweep.bind_plan(planned_nonces(sweep))  # before any spec.json is written: every job carries its plan's digest
    record = {**sweep.record(), "created": previous.get("created", date.today().isoformat())}
    if earlier := sweep.plan_history(previous):
        record[EARLIER_PLANS_FIELD] = earlier
    if "submissions" in previous:
        record["submissions"] = previous["submissions"]
    atomic_write_json(path, record)  # read concurrently (launcher status, the submitting back end)
    return commands
