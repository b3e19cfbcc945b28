"""A sweep: the Hydra grid expanded into isolated jobs, checked, then run locally or on Slurm.

``plan_sweep`` turns the composed config of every grid cell into a ``JobSpec`` and runs every
preflight check (nothing is started). ``expanded_commands`` is the deterministic, path-free dry-run
output. ``run_sweep`` submits the jobs that still need to run (never an accepted one), waits when
asked to, refreshes the job records and seals the evidence bundle.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from evidence.bundle import IN_FLIGHT_STATES
from launcher.isolation import JobRoots, isolated_env
from launcher.ports import NAMED_PORTS
from launcher.preflight import PreflightError, check_inputs, check_job_config, check_resources, check_source
from launcher.records import path_free_sanitizer, public_copy, read_job_record
from launcher.spec import JobSpec
from trainer.inputs import REPO_ROOT

# Settings of the launcher itself: never passed on to the trainer.
LAUNCHER_KEYS = ("dry_run", "wait", "formal", "cluster")
SWEEP_RECORD = "sweep.json"
COMMANDS_FILE = "commands.txt"
ATTEMPT_RUN_FILES = ("metrics.jsonl", "eval.json", "run.json")
ATTEMPT_RECORDS = ("job.json", "command.json", "command.public.json", "trainer.log", "runtime.log", "ray-start.log")


@dataclass
class Sweep:
    sweep_dir: Path
    cluster: DictConfig
    specs: list[JobSpec]
    dry_run: bool
    wait: bool
    formal: bool
    source_commit: str | None
    n_updates: int
    eval_responses: int
    workload: str

    def record(self) -> dict:
        return {
            "jobs": [s.name for s in self.specs],
            "algos": sorted({s.algo for s in self.specs}),
            "seeds": sorted({s.seed for s in self.specs}),
            "n_updates": self.n_updates,
            "eval_responses": self.eval_responses,
            "workload": self.workload,
            "source_commit": self.source_commit,
            "cluster": OmegaConf.to_container(self.cluster, resolve=True),
        }


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


def plan_sweep(root_cfg: DictConfig, job_cfgs: list[DictConfig], job_overrides: list[list[str]],
               sweep_dir: Path) -> Sweep:
    """Expand and check the grid; raises ``PreflightError`` before anything is submitted."""
    sweep_dir = Path(sweep_dir).resolve()
    formal = bool(root_cfg.formal)
    commit = check_source(formal)
    cluster = root_cfg.cluster
    if cluster.kind == "slurm":  # formats always; the cluster itself only when submitting
        from launcher.slurm_options import check_against_cluster, check_formats

        check_formats(cluster)
        if not bool(root_cfg.dry_run):
            check_against_cluster(cluster)
    specs: list[JobSpec] = []
    checked_workloads: set[str] = set()
    for cfg, overrides in zip(job_cfgs, job_overrides):
        name = f"{cfg.algo.short}-{cfg.seed}"
        check_job_config(cfg, name)
        w = cfg.workload
        if w.name not in checked_workloads:
            check_inputs(w)
            check_resources(w, cluster, int(cfg.dp_size))
            checked_workloads.add(w.name)
        specs.append(JobSpec(
            name=name, algo=str(cfg.algo.short), seed=int(cfg.seed), sweep_dir=str(sweep_dir),
            trainer_overrides=trainer_overrides(list(overrides)), cpus=int(w.cpus_per_job),
            ray_cpus=int(w.reward_workers) and int(w.cpus_per_job), n_updates=int(w.n_updates),
            source_commit=commit, gpu_model=cluster.get("gpu_model") or None,
        ))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise PreflightError(
            f"grid cells share the job name(s) {', '.join(dup)}: a sweep varies algo and seed only; "
            "run other settings as separate sweeps (hydra.sweep.dir=...)"
        )
    if cluster.kind == "local" and not bool(root_cfg.wait):
        raise PreflightError("wait=false needs cluster=slurm: local jobs live only as long as the launcher")
    shapes = {(str(c.workload.name), int(c.workload.n_updates), int(c.workload.eval.n_prompts) * int(c.workload.eval.k))
              for c in job_cfgs}
    if len(shapes) != 1:
        raise PreflightError(
            "the grid mixes workloads, run lengths or eval sizes; a sweep compares algos and seeds on one "
            "frozen workload: run the others as separate sweeps"
        )
    ((workload, n_updates, eval_responses),) = shapes
    return Sweep(sweep_dir, cluster, sorted(specs, key=lambda s: s.name), bool(root_cfg.dry_run),
                 bool(root_cfg.wait), formal, commit, n_updates, eval_responses, workload)


def expanded_command(spec: JobSpec) -> dict:
    """The job's full command as it will run, with symbolic ports (claimed only at run time)."""
    from launcher.runtime import trainer_argv

    roots = JobRoots(spec.job_dir)
    ports = {name: f"<PORT:{name}>" for name in NAMED_PORTS}
    # Only what the job itself sets (not a diff against this shell), so the output is the same
    # wherever the dry run runs: CI compares it with a committed golden file.
    env = isolated_env(roots, ports, {})
    env["PROOFGRID_SOURCE_COMMIT"] = "<SOURCE_COMMIT>"
    if spec.ray_cpus:
        env["RAY_ADDRESS"] = "127.0.0.1:<PORT:ray_gcs>"
    env["RAY_TMPDIR"] = "<RAY_ALIAS>"
    return {"argv": trainer_argv(spec, roots), "env": dict(sorted(env.items()))}


def expanded_commands(sweep: Sweep) -> list[str]:
    """One deterministic, path-free line per job (the dry-run output and ``commands.txt``)."""
    from launcher.slurm import sbatch_lines

    lines = []
    if sweep.cluster.kind == "slurm":
        lines += ["# " + line for line in sbatch_lines(sweep.cluster, len(sweep.specs), "<SWEEP_DIR>/.submitit/<RUN>")]
    for i, spec in enumerate(sweep.specs):
        cmd = public_copy(expanded_command(spec), path_free_sanitizer(spec, REPO_ROOT))
        argv = " ".join(cmd["argv"])
        env = " ".join(f"{k}={v}" for k, v in cmd["env"].items())
        lines.append(f"[{i}] {spec.name}: env -u RAY_ADDRESS {env} {argv}" if not spec.ray_cpus
                     else f"[{i}] {spec.name}: env {env} {argv}")
    return lines


def write_plan(sweep: Sweep) -> None:
    """Write commands.txt and sweep.json. A re-run keeps the sweep's creation date and submission
    history, so the sealed bundle of an unchanged sweep stays byte-identical."""
    sweep.sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep.sweep_dir / COMMANDS_FILE).write_text("\n".join(expanded_commands(sweep)) + "\n")
    path = sweep.sweep_dir / SWEEP_RECORD
    previous = json.loads(path.read_text()) if path.is_file() else {}
    record = {**sweep.record(), "created": previous.get("created", date.today().isoformat())}
    if "submissions" in previous:
        record["submissions"] = previous["submissions"]
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def is_accepted(job_dir: Path) -> bool:
    """The evidence's verdict on an existing job directory (the scheduler state is not enough)."""
    from evidence.index import evaluate_job

    return bool(job_dir.is_dir() and evaluate_job(job_dir).accepted)


def _in_flight(record: dict) -> bool:
    """Is the job of this record still queued or running somewhere?"""
    state = record.get("state")
    if state not in IN_FLIGHT_STATES:
        return False
    if record.get("scheduler") == "slurm":
        return True  # refreshed from sacct just before
    # A local job is alive only while its runtime process is (a killed launcher leaves RUNNING behind).
    pid = record.get("runtime_pid")
    if not pid or record.get("node") != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_rerun(spec: JobSpec) -> None:
    """Refuse to re-run into a job directory made with other settings, or one still in flight."""
    previous = spec.job_dir / "spec.json"
    if previous.is_file():
        old = JobSpec.from_json(previous.read_text())
        if (old.trainer_overrides, old.n_updates) != (spec.trainer_overrides, spec.n_updates):
            raise PreflightError(
                f"{spec.job_dir} holds job {spec.name} run with other settings "
                f"({' '.join(old.trainer_overrides)}); a sweep directory holds one frozen grid: "
                "use a new hydra.sweep.dir"
            )
    record = read_job_record(spec.job_dir)
    if _in_flight(record):
        raise PreflightError(
            f"job {spec.name} is still {record.get('state')} (id {record.get('job_id')}); wait for it "
            f"(python -m launcher status {spec.sweep_dir}) or cancel it before re-running this sweep"
        )


def prepare_job_dirs(sweep: Sweep) -> list[JobSpec]:
    """Jobs that still need to run. An accepted job is never re-run; a job still queued or running
    refuses the re-run; a rejected one runs again (resuming from its checkpoint) after its records
    and its run's evidence files are copied to ``attempts/<n>/``: nothing is lost."""
    existing = [s.job_dir for s in sweep.specs if (s.job_dir / "job.json").is_file()]
    if existing:
        from launcher.slurm import SchedulerUnavailable, refresh_job_records

        with contextlib.suppress(OSError, SchedulerUnavailable):  # no scheduler here: records decide
            refresh_job_records(existing)
    for spec in sweep.specs:
        _check_rerun(spec)
    todo = []
    for spec in sweep.specs:
        job_dir = spec.job_dir
        if (job_dir / "job.json").is_file():
            if is_accepted(job_dir):
                continue
            attempts = job_dir / "attempts"
            attempt = attempts / str(len(list(attempts.iterdir())) if attempts.is_dir() else 0)
            (attempt / "run").mkdir(parents=True)
            for name in ATTEMPT_RECORDS:
                if (job_dir / name).exists():
                    shutil.move(str(job_dir / name), str(attempt / name))
            for name in ATTEMPT_RUN_FILES:  # the resumed run rewrites these: keep the rejected ones
                if (job_dir / "run" / name).exists():
                    shutil.copy2(job_dir / "run" / name, attempt / "run" / name)
        job_dir.mkdir(parents=True, exist_ok=True)
        (job_dir / "spec.json").write_text(spec.to_json() + "\n")
        todo.append(spec)
    return todo


def run_sweep(sweep: Sweep) -> int:
    """Dry-run or run the sweep; returns the process exit code."""
    write_plan(sweep)
    if sweep.dry_run:
        print("\n".join(expanded_commands(sweep)))
        print(f"dry run: {len(sweep.specs)} job(s) checked, nothing submitted; commands in "
              f"{sweep.sweep_dir / COMMANDS_FILE}")
        return 0
    todo = prepare_job_dirs(sweep)
    skipped = len(sweep.specs) - len(todo)
    if skipped:
        print(f"{skipped} job(s) already accepted in {sweep.sweep_dir}; not re-submitted")
    if sweep.cluster.kind == "slurm":
        from launcher.slurm import submit_slurm

        finished = submit_slurm(sweep, todo)
    else:
        from launcher.local import run_local

        finished = run_local(sweep, todo)
    if not finished:
        return 0  # wait=false: `python -m evidence build` (or `launcher status`) seals it later
    return seal(sweep.sweep_dir)


def seal(sweep_dir: Path) -> int:
    """Build, seal and audit the evidence bundle; 0 when every job was accepted and the audit is clean."""
    from evidence import audit, build_bundle

    result = build_bundle(sweep_dir)
    print_eval_summary(result.bundle_dir / "data" / "tables" / "eval_aggregate.csv", result.jobs)
    print(result.summary())
    findings = audit(result.archive)
    for finding in findings:
        print(f"audit: {finding}", file=sys.stderr)
    print(f"audit: {'clean' if not findings else f'{len(findings)} finding(s)'}")
    return 0 if not findings and result.accepted == len(result.jobs) else 1


def print_eval_summary(aggregate_csv: Path, jobs: list[dict]) -> None:
    """Per algorithm: final pass@1 against the initial-checkpoint control, and accepted jobs."""
    import csv

    from rich.console import Console
    from rich.table import Table

    if not aggregate_csv.is_file():
        return
    with open(aggregate_csv, newline="") as f:
        rows = {(r["algo"], r["checkpoint"]): r for r in csv.DictReader(f)}
    table = Table(title="final eval pass@1 (mean ± SD over seeds) vs the initial checkpoint", title_justify="left")
    for col in ("algorithm", "final", "initial control", "gain", "accepted"):
        table.add_column(col)

    def cell(row):
        if row is None or not row.get("pass@1_mean"):
            return "n/a"
        sd = f" ± {float(row['pass@1_sd']):.3f}" if row.get("pass@1_sd") else " (n<2)"
        return f"{float(row['pass@1_mean']):.3f}{sd}"

    for algo in dict.fromkeys(a for a, _ in rows):
        accepted = sum(1 for j in jobs if j["algo"] == algo and j["accepted"] == "yes")
        total = sum(1 for j in jobs if j["algo"] == algo)
        table.add_row(rows[(algo, "final")]["algorithm"], cell(rows.get((algo, "final"))),
                      cell(rows.get((algo, "initial"))), cell(rows.get((algo, "gain"))), f"{accepted}/{total}")
    Console().print(table)
