"""The Slurm back end (``launcher.backend``), through submitit: the whole grid is ONE job array
(several only above the cluster's MaxArraySize), not N sbatch calls.

``submit`` hands the array to submitit (its script: ``launcher.slurm.script``; each task runs
``launcher.slurm.array_task.run_task``), then waits with a live table until Slurm confirms every task
ended, or leaves the tasks running (``wait=false``) with a seal job after them. Scheduler states
come from ``sacct`` and ``squeue`` as ``launcher.slurm.slurm_states`` confirms them (accounting is
required: without it a cancelled job's state is unknowable). Every Slurm command proofgrid runs
itself goes through ``launcher.slurm.commands.run_slurm``; the array's submission is submitit's.
"""

from __future__ import annotations

import itertools
import json
import shlex
import shutil
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from facts import atomic_write_json
from facts.backends import SLURM
from facts.failures import scheduler_reason
from facts.files import JOB_SPEC, SWEEP_RECORD, recorded_job_dirs
from facts.repo import REPO_ROOT
from facts.states import (
    COMPLETED,
    COMPLETING,
    CONFIGURING,
    PENDING,
    REQUEUED,
    RUNNING,
    TERMINAL_STATES,
    VIEW_DONE,
    VIEW_QUEUED,
)
from launcher.errors import PreflightError, SchedulerUnavailable
from launcher.job_records import read_job_record, update_job_record
from launcher.job_spec import JobSpec, Sweep
from launcher.progress import progress_table
from launcher.slurm.array_task import run_task
from launcher.slurm.commands import run_slurm
from launcher.slurm.script import (
    MAX_NAMED_TASKS,
    SUBMITIT_DIR,
    array_chunks,
    chunk_name,
    container_parameters,
    job_name,
    sbatch_options,
    submitit_parameters,
)
from launcher.slurm.slurm_profile import explain_refusal, max_array_size
from launcher.slurm.slurm_states import (
    DEFAULT_POLL_INTERVAL_S,
    confirmed_states,
    look_intervals,
    poll_interval_s,
    recorded_exit_code,
)


def _fresh_folder(sweep_dir: Path) -> Path:
    # A Slurm state wipe restarts job ids at 1; a fresh submitit folder per submission never mixes them.
    root = sweep_dir / SUBMITIT_DIR
    root.mkdir(parents=True, exist_ok=True)
    n = len([p for p in root.iterdir() if p.is_dir()])
    return root / f"run-{n}"


def name_tasks(sweep_dir: Path, specs: list[JobSpec], job_ids: list[str]) -> None:
    """Give every task its own name (sweep, arm and seed) so ``squeue`` tells them apart; an
    array's tasks share one name at submission. Best effort: a refused rename changes nothing else."""
    if len(job_ids) > MAX_NAMED_TASKS:
        return
    for spec, job_id in zip(specs, job_ids):
        run_slurm(["scontrol", "update", f"JobId={job_id}", f"JobName={job_name(sweep_dir, spec.name)}"])


def _forget_submission(folder: Path, todo: list[JobSpec], arrays: list[str]) -> None:
    """A refused submission leaves nothing behind: earlier arrays of it cancelled, no pickles,
    no job directory that holds only its spec."""
    if arrays:
        run_slurm(["scancel", *arrays])
    shutil.rmtree(folder, ignore_errors=True)
    for spec in todo:
        if spec.job_dir.is_dir() and {p.name for p in spec.job_dir.iterdir()} <= {JOB_SPEC}:
            shutil.rmtree(spec.job_dir, ignore_errors=True)


def submit(sweep: Sweep, todo: list[JobSpec]) -> bool:
    """Submit ``todo`` as one array (several above MaxArraySize); wait if ``sweep.wait``.
    Returns True when all jobs ended."""
    # submitit only when a sweep is submitted: planning, `launcher status` and `cancel` never load it.
    import submitit
    from submitit.core.utils import FailedJobError

    if not todo:
        return True
    folder = _fresh_folder(sweep.sweep_dir)
    container = container_parameters(sweep)  # Pyxis: each step in the image, submitit's command its interpreter's
    executor = submitit.SlurmExecutor(folder=str(folder), **({"python": container["python"]} if container else {}))
    arrays: list[str] = []
    record_path = sweep.sweep_dir / SWEEP_RECORD
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    for chunk in array_chunks(len(todo), max_array_size(sweep.cluster)):
        specs = [todo[i] for i in chunk]
        params = submitit_parameters(sweep.cluster, len(specs), chunk_name(sweep.sweep_dir, specs))
        executor.update_parameters(**params, **{k: v for k, v in container.items() if k != "python"})
        try:
            jobs = executor.map_array(run_task, specs)
        except FailedJobError as exc:  # sbatch refused: one line, and nothing left behind
            _forget_submission(folder, todo, arrays)
            raise PreflightError(explain_refusal(str(exc))) from None
        array_id = str(jobs[0].job_id).split("_")[0]
        arrays.append(array_id)
        name_tasks(sweep.sweep_dir, specs, [str(j.job_id) for j in jobs])
        for i, (spec, job) in enumerate(zip(specs, jobs)):
            update_job_record(spec.job_dir, {"scheduler": SLURM, "job_id": str(job.job_id), "array_index": i},
                              defaults={**spec.identity(), "state": PENDING, "exit_code": None,
                                        "source_commit": spec.source_commit})
        record.setdefault("submissions", []).append({"array_job_id": array_id, "jobs": [s.name for s in specs]})
    atomic_write_json(record_path, record)  # `launcher status` and tests read it while the array runs
    what = f"array job {arrays[0]}" if len(arrays) == 1 else f"{len(arrays)} array jobs ({', '.join(arrays)})"
    print(f"submitted Slurm {what} with {len(todo)} task(s); sweep directory: {sweep.sweep_dir}")
    if not sweep.wait and sweep.stage is not None:  # an experiment's stage: its decision job follows (its chain says)
        return False
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
                  poll_interval_s=poll_interval_s(sweep.cluster),
                  timeout_s=float(sweep.cluster.get("wait_timeout_s") or 0) or None)
    return True


SEAL_LOG = "seal.log"
# A job of proofgrid's own code (a seal, an experiment's decision): one CPU, reading and writing files.
HELPER_RESOURCES = ("--cpus-per-task=1", "--mem=2G", "--time=00:30:00")
# What a helper job that computes like one of the sweep's jobs asks for: the profile's own request.
JOB_RESOURCES = ("cpus-per-task", "mem", "time", "gres", "constraint")


def job_resources(cluster) -> tuple[str, ...]:
    """The profile's request for one job (CPUs, memory, time, GPUs, features) as sbatch options: a helper job that
    computes as the sweep's jobs do (an experiment's probe decision running its gradient check) asks for as much."""
    return tuple(f"--{k}={v}" for k, v in sbatch_options(cluster, 1).items() if k in JOB_RESOURCES)


def submit_seal_job(sweep: Sweep, arrays: list[str]) -> str:
    """A one-CPU job that runs after every array has ended (``afterany``) and seals the bundle
    (``python -m launcher seal``), so ``wait=false`` still ends with a sealed, audited bundle."""
    command = ["-m", "launcher", "seal", str(sweep.sweep_dir)]
    return submit_helper_job(sweep.cluster, job_name(sweep.sweep_dir, "seal"), "the seal job", command,
                             sweep.sweep_dir / SEAL_LOG, arrays, f"array(s) {', '.join(arrays)} were submitted",
                             f"seal their evidence once they end with `python -m launcher seal "
                             f"{shlex.quote(str(sweep.sweep_dir))}`")


def submit_helper_job(cluster, name: str, what: str, command: list[str], log: Path, after: list[str],
                      submitted: str, fix: str, resources: tuple[str, ...] = HELPER_RESOURCES) -> str:
    """``python <command>`` (proofgrid's own code, from the checkout) as a one-CPU job of the profile's partition,
    account and QOS, logging to ``log``; it starts once every job of ``after`` has ended, however it ended
    (``afterany``: its code reads what they left), or at once when ``after`` is empty; one CPU, 2G and 30 min unless
    ``resources`` says (``job_resources``). Returns its job id; a
    refusal is one line naming it (``what``), saying what was submitted before it (``submitted``) and how to go on (``fix``)."""
    after_them = [f"--dependency=afterany:{':'.join(after)}", "--kill-on-invalid-dep=no"] if after else []
    argv = ["sbatch", "--parsable", *after_them, f"--job-name={name}", f"--partition={cluster.partition}",
            *resources, f"--output={log}", *(f"--{k}={cluster.get(k)}" for k in ("account", "qos") if cluster.get(k)),
            f"--chdir={REPO_ROOT}", "--wrap", shlex.join([sys.executable, *command])]
    reply = run_slurm(argv)
    if not reply.ok and reply.stderr:  # sbatch answered: a refusal, explained with its fix
        raise PreflightError(explain_refusal(reply.stderr).replace("nothing was submitted", submitted))
    if not reply.ok:  # no answer (or no sbatch): the job may or may not exist, what came before does
        raise PreflightError(f"could not submit {what} ({reply.error}); {submitted}: {fix}")
    return reply.stdout.strip().split(";")[0]


def refresh_job_records(job_dirs: list[Path]) -> dict[str, str]:
    """Copy the scheduler's confirmed view (state, exit code, elapsed, pending reason) into each
    job.json; returns name -> state."""
    records = {d: read_job_record(d) for d in job_dirs}
    ids = [r["job_id"] for r in records.values() if r.get("scheduler") == SLURM and r.get("job_id")]
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
                if (reason := scheduler_reason(info["state"])) and reason not in str(record.get("failure")):
                    # the scheduler's reason first; what the runtime saw (a SIGTERM) stays after it
                    changes["failure"] = "; ".join(filter(None, [reason, record.get("failure")]))
            # A job of several nodes keeps its runtime's node and list (SLURM_JOB_NODELIST): sacct's
            # NodeList names only the batch host for seconds after such a job starts and ends.
            if info.get("node") and not record.get("nodes"):
                changes["node"] = info["node"]
            changes["scheduler_reason"] = info.get("reason") or None
            if any(record.get(k) != v for k, v in changes.items()):
                record = update_job_record(job_dir, changes)
        result[job_dir.name] = record.get("state", "UNKNOWN")
    return result


class WaitTimeout(Exception):
    """The profile's ``wait_timeout_s`` passed with jobs still queued or running."""


def wait_for_jobs(sweep_dir: Path, job_dirs: list[Path], n_updates: dict[str, int],
                  poll_interval_s: float = DEFAULT_POLL_INTERVAL_S, timeout_s: float | None = None,
                  poll_s: float | None = None) -> None:
    """Show the live table until Slurm confirms every job ended (then the caller seals), looking at
    Slurm ``look_intervals(poll_interval_s)`` apart (``poll_s``: every ``poll_s`` seconds instead); at
    ``timeout_s`` or on Ctrl-C, stop waiting, leave the jobs running and say how to go on."""
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
        else:
            table.caption = f"next look at Slurm in {next_look[0]:g} s (cluster.poll_interval_s={poll_interval_s:g})"
        return table

    # Until the first look, every job is as submitted; an interrupt from here on (even during that
    # first look) leaves the submitted jobs running and says so.
    states = {d.name: PENDING for d in job_dirs}
    deadline = time.monotonic() + timeout_s if timeout_s else None

    intervals = itertools.repeat(poll_s) if poll_s else look_intervals(poll_interval_s)
    next_look = [next(intervals)]

    def sleep():
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeout
        time.sleep(next_look[0])
        next_look[0] = next(intervals)

    try:
        states = refresh(states)
        # Terminal states are final when they arrive: ``confirmed_states`` gives the ones a requeue can
        # follow a second look, and a requeued task is back in squeue at once (tests/launcher/test_slurm.py).
        with Live(view(states), console=Console(stderr=True), refresh_per_second=1) as live:
            while not all(s in TERMINAL_STATES for s in states.values()):
                sleep()
                states = refresh(states)
                live.update(view(states))
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
    job_dirs = recorded_job_dirs(sweep_dir)  # the grid's and its certificate jobs (certify=true)
    try:
        states = refresh_job_records(job_dirs)
    except SchedulerUnavailable as exc:  # which jobs still run is unknown: cancel none rather than guess
        print(f"proofgrid: error: cannot ask Slurm which jobs are queued or running ({exc}); nothing was cancelled",
              file=sys.stderr)
        return 1
    live = {d.name: read_job_record(d)["job_id"] for d in job_dirs
            if states[d.name] not in TERMINAL_STATES and read_job_record(d).get("scheduler") == SLURM}
    if not live:
        print(f"nothing to cancel in {sweep_dir}: no job is queued or running")
        return 0
    if (refused := run_slurm(["scancel", *live.values()]).error) is not None:
        print(f"proofgrid: error: {refused}", file=sys.stderr)
        return 1
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = refresh_job_records([d for d in job_dirs if d.name in live])
        if all(s in TERMINAL_STATES for s in states.values()):
            break
        time.sleep(1)
    print(f"cancelled {len(live)} job(s): " + ", ".join(f"{n} ({live[n]}: {states[n]})" for n in live))
    return 0


def live_state(state: str) -> str:
    """The live view's word for a scheduler state: queued / running / done, else Slurm's own
    state (CANCELLED, TIMEOUT, NODE_FAIL, ... are different stories, never all "FAILED")."""
    if state == PENDING:
        return VIEW_QUEUED
    if state in (RUNNING, REQUEUED, COMPLETING, CONFIGURING):
        return RUNNING
    return VIEW_DONE if state == COMPLETED else state


def in_flight(record: dict) -> bool:
    """A Slurm job in a queued or running state is in flight (its record was refreshed from sacct
    and squeue, and confirmed, just before)."""
    return True
