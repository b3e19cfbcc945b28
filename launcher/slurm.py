"""Slurm submission through submitit: the whole grid is ONE job array (several only above the
cluster's MaxArraySize), not N sbatch calls.

The cluster profile (``conf/cluster/*.yaml``) maps one to one onto sbatch options; it is checked
in ``slurm_options``. Scheduler states come from ``sacct`` and ``squeue`` as ``slurm_states``
confirms them (accounting is required: without it a cancelled job's state is unknowable); what
runs inside a task when Slurm warns it is in ``slurm_requeue``.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import DictConfig

from launcher.preflight import PreflightError
from launcher.progress import progress_table
from launcher.records import read_job_record, update_job_record
from launcher.runtime import run_job
from launcher.slurm_options import explain_refusal, extra_sbatch_options, max_array_size, setup_lines
from launcher.slurm_states import TERMINAL_STATES, SchedulerUnavailable, confirmed_states, recorded_exit_code
from launcher.sweep import SWEEP_RECORD


def time_to_minutes(value) -> int:
    """Slurm ``--time`` -> whole minutes (seconds round up). Slurm's accepted forms: ``M``,
    ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``."""
    text = str(value).strip()
    days, sep, rest = text.partition("-")
    if not sep:
        days, rest = "0", text
    parts = [int(p) for p in rest.split(":")]
    if sep:  # D-H, D-H:M, D-H:M:S
        h, m, sec = (parts + [0, 0])[:3]
    elif len(parts) == 1:
        h, m, sec = 0, parts[0], 0
    elif len(parts) == 2:
        h, m, sec = 0, parts[0], parts[1]
    else:
        h, m, sec = parts[:3]
    return int(days) * 1440 + h * 60 + m + (1 if sec else 0)


def sbatch_options(cluster: DictConfig, n_jobs: int) -> dict[str, str]:
    """sbatch long options of the profile, in a fixed order (also what the dry run prints)."""
    parallel = int(cluster.get("array_parallelism") or n_jobs)
    # One task: submitit submits a plain job, not a one-task array.
    opts = {"array": f"0-{n_jobs - 1}%{parallel}" if n_jobs > 1 else None, "partition": cluster.get("partition")}
    for key, option in (("account", "account"), ("qos", "qos"), ("gres", "gres"),
                        ("cpus_per_task", "cpus-per-task"), ("mem", "mem"), ("time", "time"),
                        ("constraint", "constraint")):
        if cluster.get(key) not in (None, ""):
            opts[option] = str(cluster.get(key))
    if cluster.get("requeue", True):
        opts["requeue"] = ""
    opts["signal"] = f"USR2@{signal_delay_s(cluster)}"
    for option, value in extra_sbatch_options(cluster).items():
        opts[option] = "" if value is True else value
    return {k: v for k, v in opts.items() if v is not None}


def signal_delay_s(cluster: DictConfig) -> int:
    """Seconds before the time limit at which Slurm sends USR2 (checkpoint, then requeue)."""
    return int(cluster.get("signal_delay_s") or 90)


def sbatch_line(cluster: DictConfig, n_jobs: int, script: str) -> str:
    flags = " ".join(f"--{k}" if v == "" else f"--{k}={v}" for k, v in sbatch_options(cluster, n_jobs).items())
    return f"sbatch {flags} {script}"


def sbatch_lines(cluster: DictConfig, n_jobs: int, script: str) -> list[str]:
    """The dry run's sbatch line(s): one per array, saying so when the grid is split."""
    chunks = array_chunks(n_jobs, max_array_size(cluster))
    if len(chunks) == 1:
        return [sbatch_line(cluster, n_jobs, script)]
    return [f"{sbatch_line(cluster, len(c), script)}  # array {k + 1} of {len(chunks)} (MaxArraySize "
            f"{max_array_size(cluster)}): jobs [{c.start}]-[{c.stop - 1}]" for k, c in enumerate(chunks)]


def submitit_parameters(cluster: DictConfig, n_jobs: int) -> dict:
    opts = sbatch_options(cluster, n_jobs)
    params = {
        "slurm_job_name": "proofgrid",
        "slurm_partition": opts.get("partition"),
        "cpus_per_task": int(cluster.cpus_per_task),
        "timeout_min": time_to_minutes(cluster.time),
        "slurm_array_parallelism": int(cluster.get("array_parallelism") or n_jobs),
        "slurm_additional_parameters": {},
        "slurm_signal_delay_s": signal_delay_s(cluster),
    }
    if "mem" in opts:
        params["slurm_mem"] = opts["mem"]
    for key in ("account", "qos", "gres", "constraint"):
        if key in opts:
            params[f"slurm_{key}"] = opts[key]
    if "requeue" in opts:
        params["slurm_additional_parameters"]["requeue"] = True
    params["slurm_additional_parameters"].update(extra_sbatch_options(cluster))
    if setup_lines(cluster):
        params["slurm_setup"] = setup_lines(cluster)
    return params


def _fresh_folder(sweep_dir: Path) -> Path:
    # A Slurm state wipe restarts job ids at 1; a fresh submitit folder per submission never mixes them.
    root = sweep_dir / ".submitit"
    root.mkdir(parents=True, exist_ok=True)
    n = len([p for p in root.iterdir() if p.is_dir()])
    return root / f"run-{n}"


def array_chunks(n_jobs: int, max_array_size: int) -> list[range]:
    """Task positions of each array: Slurm refuses an array index >= MaxArraySize, so a grid
    larger than that becomes several arrays of at most ``max_array_size`` tasks each."""
    return [range(start, min(start + max_array_size, n_jobs)) for start in range(0, n_jobs, max_array_size)]


# Tasks renamed one by one after submission (one scontrol call each); larger arrays keep the array's name.
MAX_NAMED_TASKS = 256


def job_name(sweep_dir: Path, job: str | None = None) -> str:
    """Slurm job name: ``pg-<sweep>`` for an array, ``pg-<sweep>-<arm>-<seed>`` for one task."""
    name = f"pg-{sweep_dir.name}" + (f"-{job}" if job else "")
    return re.sub(r"[^\w.+-]", "_", name)


def name_tasks(sweep_dir: Path, specs, job_ids: list[str]) -> None:
    """Give every task its own name (sweep, arm and seed) so ``squeue`` tells them apart; an
    array's tasks share one name at submission. Best effort: a refused rename changes nothing else."""
    if len(job_ids) > MAX_NAMED_TASKS:
        return
    for spec, job_id in zip(specs, job_ids):
        subprocess.run(["scontrol", "update", f"JobId={job_id}", f"JobName={job_name(sweep_dir, spec.name)}"],
                       capture_output=True)


def _forget_submission(folder: Path, todo, arrays: list[str]) -> None:
    """A refused submission leaves nothing behind: earlier arrays of it cancelled, no pickles,
    no job directory that holds only its spec."""
    if arrays:
        subprocess.run(["scancel", *arrays], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)
    for spec in todo:
        if spec.job_dir.is_dir() and {p.name for p in spec.job_dir.iterdir()} <= {"spec.json"}:
            shutil.rmtree(spec.job_dir, ignore_errors=True)


def submit_slurm(sweep, todo) -> bool:
    """Submit ``todo`` as one array (several above MaxArraySize); wait if ``sweep.wait``.
    Returns True when all jobs ended."""
    import submitit
    from submitit.core.utils import FailedJobError

    if not todo:
        return True
    folder = _fresh_folder(sweep.sweep_dir)
    executor = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
    arrays: list[str] = []
    record_path = sweep.sweep_dir / SWEEP_RECORD
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    for chunk in array_chunks(len(todo), max_array_size(sweep.cluster)):
        specs = [todo[i] for i in chunk]
        params = submitit_parameters(sweep.cluster, len(specs))
        params["slurm_job_name"] = job_name(sweep.sweep_dir, specs[0].name if len(specs) == 1 else None)
        executor.update_parameters(**params)
        try:
            jobs = executor.map_array(run_job, specs)
        except FailedJobError as exc:  # sbatch refused: one line, and nothing left behind
            _forget_submission(folder, todo, arrays)
            raise PreflightError(explain_refusal(str(exc))) from None
        array_id = str(jobs[0].job_id).split("_")[0]
        arrays.append(array_id)
        name_tasks(sweep.sweep_dir, specs, [str(j.job_id) for j in jobs])
        for i, (spec, job) in enumerate(zip(specs, jobs)):
            update_job_record(spec.job_dir, {"scheduler": "slurm", "job_id": str(job.job_id), "array_index": i},
                              defaults={"algo": spec.algo, "seed": spec.seed, "state": "PENDING", "exit_code": None,
                                        "source_commit": spec.source_commit})
        record.setdefault("submissions", []).append({"array_job_id": array_id, "jobs": [s.name for s in specs]})
    record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    what = f"array job {arrays[0]}" if len(arrays) == 1 else f"{len(arrays)} array jobs ({', '.join(arrays)})"
    print(f"submitted Slurm {what} with {len(todo)} task(s); sweep directory: {sweep.sweep_dir}")
    if not sweep.wait:
        if sweep.cluster.get("seal_job"):
            seal_id = submit_seal_job(sweep, arrays)
            print(f"follow it with `python -m launcher status {sweep.sweep_dir}`; job {seal_id} seals the evidence "
                  f"when the array has ended (log: {sweep.sweep_dir / SEAL_LOG})")
        else:
            print(f"follow it with `python -m launcher status {sweep.sweep_dir}`; when it has ended, seal the "
                  f"evidence with `python -m evidence build {sweep.sweep_dir}`")
        return False
    wait_for_jobs(sweep.sweep_dir, [s.job_dir for s in todo], {s.name: s.n_updates for s in todo},
                  timeout_s=float(sweep.cluster.get("wait_timeout_s") or 0) or None)
    return True


SEAL_LOG = "seal.log"


def submit_seal_job(sweep, arrays: list[str]) -> str:
    """A one-CPU job that runs after every array has ended (``afterany``) and seals the bundle
    (``python -m launcher seal``), so ``wait=false`` still ends with a sealed, audited bundle."""
    from trainer.inputs import REPO_ROOT

    cluster = sweep.cluster
    argv = ["sbatch", "--parsable", f"--dependency=afterany:{':'.join(arrays)}", "--kill-on-invalid-dep=no",
            f"--job-name={job_name(sweep.sweep_dir, 'seal')}", f"--partition={cluster.partition}",
            "--cpus-per-task=1", "--mem=2G", "--time=00:30:00", f"--output={sweep.sweep_dir / SEAL_LOG}",
            *(f"--{k}={cluster.get(k)}" for k in ("account", "qos") if cluster.get(k)),
            f"--chdir={REPO_ROOT}", "--wrap",
            f"{shlex.quote(sys.executable)} -m launcher seal {shlex.quote(str(sweep.sweep_dir))}"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PreflightError(explain_refusal(proc.stderr).replace("nothing was submitted",
                                                                  f"array(s) {', '.join(arrays)} were submitted"))
    return proc.stdout.strip().split(";")[0]


def refresh_job_records(job_dirs: list[Path]) -> dict[str, str]:
    """Copy the scheduler's confirmed view (state, exit code, elapsed, pending reason) into each
    job.json; returns name -> state."""
    records = {d: read_job_record(d) for d in job_dirs}
    ids = [r["job_id"] for r in records.values() if r.get("scheduler") == "slurm" and r.get("job_id")]
    seen = confirmed_states(ids)
    result = {}
    for job_dir, record in records.items():
        info = seen.get(record.get("job_id", ""))
        # A record already in the final state Slurm confirms is left as it is (its runtime's
        # precise elapsed time included): an accepted job's job.json never changes on a re-run.
        if info is not None and not (info["state"] == record.get("state") and info["state"] in TERMINAL_STATES):
            changes = {"state": info["state"], "elapsed_s": float(info["elapsed_s"])}
            if info["state"] in TERMINAL_STATES:
                changes["exit_code"] = recorded_exit_code(info)
                changes["exit_signal"] = info["signal"]
            if info.get("node"):
                changes["node"] = info["node"]
            changes["scheduler_reason"] = info.get("reason") or None
            if any(record.get(k) != v for k, v in changes.items()):
                record = update_job_record(job_dir, changes)
        result[job_dir.name] = record.get("state", "UNKNOWN")
    return result


class WaitTimeout(Exception):
    """The profile's ``wait_timeout_s`` passed with jobs still queued or running."""


def wait_for_jobs(sweep_dir: Path, job_dirs: list[Path], n_updates: dict[str, int], poll_s: float = 2.0,
                  timeout_s: float | None = None) -> None:
    from rich.console import Console
    from rich.live import Live

    title = f"proofgrid sweep on Slurm ({sweep_dir.name})"
    dirs = {d.name: d for d in job_dirs}

    outage: list[float] = []

    def refresh(previous):
        try:
            states = refresh_job_records(job_dirs)
        except SchedulerUnavailable:  # transient: keep waiting with what we knew, and say so
            outage[:] = outage or [time.monotonic()]
            return previous
        outage.clear()
        return states

    def view(states):
        shown = {n: live_state(s) for n, s in states.items()}
        table = progress_table(title, shown, dirs, n_updates)
        if outage:
            table.caption = (f"Slurm (sacct/squeue) not answering for {time.monotonic() - outage[0]:.0f} s; "
                             "showing the last known states, retrying")
        return table

    states = refresh({d.name: "PENDING" for d in job_dirs})
    deadline = time.monotonic() + timeout_s if timeout_s else None

    def sleep():
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeout
        time.sleep(poll_s)

    try:
        with Live(view(states), console=Console(stderr=True), refresh_per_second=1) as live:
            while True:
                while not all(s in TERMINAL_STATES for s in states.values()):
                    sleep()
                    states = refresh(states)
                    live.update(view(states))
                # Re-check before the caller seals: a requeue can follow a terminal-looking state.
                time.sleep(poll_s)
                states = refresh(states)
                live.update(view(states))
                if all(s in TERMINAL_STATES for s in states.values()):
                    return
    except (KeyboardInterrupt, WaitTimeout) as stop:
        running = sum(1 for s in states.values() if s not in TERMINAL_STATES)
        why = "interrupted" if isinstance(stop, KeyboardInterrupt) else f"cluster.wait_timeout_s={timeout_s:g} passed"
        print(f"{why}: stopped waiting; the {running} unfinished Slurm job(s) keep running. Re-attach with "
              f"`python -m launcher status {sweep_dir}`, cancel them with `python -m launcher cancel {sweep_dir}`, "
              f"and seal with `python -m evidence build {sweep_dir}` when they have ended", file=sys.stderr)
        raise SystemExit(130 if isinstance(stop, KeyboardInterrupt) else 3) from None


def cancel_sweep(sweep_dir: Path) -> int:
    """``python -m launcher cancel <sweep_dir>``: scancel every task of the sweep that Slurm still
    holds (never a finished one), then record the states Slurm confirms. Returns an exit code."""
    job_dirs = sorted(p for p in (sweep_dir / "jobs").iterdir() if (p / "job.json").is_file())
    states = refresh_job_records(job_dirs)
    live = {d.name: read_job_record(d)["job_id"] for d in job_dirs
            if states[d.name] not in TERMINAL_STATES and read_job_record(d).get("scheduler") == "slurm"}
    if not live:
        print(f"nothing to cancel in {sweep_dir}: no job is queued or running")
        return 0
    proc = subprocess.run(["scancel", *live.values()], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"proofgrid: error: scancel failed: {proc.stderr.strip()}", file=sys.stderr)
        return 1
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = refresh_job_records([sweep_dir / "jobs" / n for n in live])
        if all(s in TERMINAL_STATES for s in states.values()):
            break
        time.sleep(1)
    print(f"cancelled {len(live)} job(s): " + ", ".join(f"{n} ({live[n]}: {states[n]})" for n in live))
    return 0


def live_state(state: str) -> str:
    """The live view's word for a scheduler state: queued / running / done, else Slurm's own
    state (CANCELLED, TIMEOUT, NODE_FAIL, ... are different stories, never all "FAILED")."""
    if state == "PENDING":
        return "QUEUED"
    if state in ("RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING"):
        return "RUNNING"
    return "DONE" if state == "COMPLETED" else state
