"""The local back end's sweep: each job a separate process (``python -m launcher.runtime <job_dir>``), at
most as many at once as the machine's cores allow for the jobs' CPU needs, shown live, cancelled on an
interrupt."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from facts.failures import failure_cause
from facts.files import RUNTIME_LOG
from facts.processes import local_runtime_alive
from facts.repo import REPO_ROOT
from facts.states import CANCELLED, FAILED, RUNNING, VIEW_DONE
from launcher.interrupts import HANDLED, raise_interrupted
from launcher.job_records import read_job_record, update_job_record
from launcher.job_spec import JobSpec, Sweep
from launcher.liveness import mark_dead_local_jobs
from launcher.local.local_profile import local_concurrency
from launcher.progress import SweepProgress, natural_key

# How often the sweep's view is redrawn and its progress lines printed; a job's end is seen at once (wait_for_an_exit).
LOOK_EVERY_S = 0.5
# A job the user stopped (Ctrl-C, or a signal to the launcher) is not a crash: say so, not "signal 15".
STOPPED_WITH_THE_LAUNCHER = "stopped with the launcher (Ctrl-C or a signal to it); the next run resumes it"


def describe(sweep: Sweep) -> list[str]:
    """Nothing is handed to a scheduler: the jobs' own commands are the whole dry run."""
    return []


def submit(sweep: Sweep, todo: list[JobSpec]) -> bool:
    """Run ``todo`` (JobSpecs) to completion with live progress; returns True (it always waits)."""
    if not todo:
        return True
    parallel = min(len(todo), local_concurrency(max(s.cpus for s in todo), sweep.cluster.get("max_parallel")))
    index = {s.name: i for i, s in enumerate(sweep.all_specs)}
    dirs = {s.name: s.job_dir for s in todo}
    view = SweepProgress.of(sweep.sweep_dir, dirs, {s.name: s.n_updates for s in todo})
    queue = sorted(todo, key=lambda s: natural_key(s.name))
    running: dict[str, subprocess.Popen] = {}
    # A terminal gets a table redrawn in place; a pipe, tee or nohup log one plain line per change.
    console = Console()
    live = Live(view.table(f"proofgrid sweep ({parallel} at a time)"), console=console, refresh_per_second=2,
                transient=False) if console.is_terminal else None
    say = (lambda line: None) if live else (lambda line: print(line, flush=True))
    say(f"sweep {sweep.sweep_dir}: {len(todo)} job(s), {parallel} at a time")

    # The jobs run in sessions of their own: a signal to the launcher must stop them, not orphan them.
    previous = {sig: signal.signal(sig, raise_interrupted) for sig in HANDLED}
    try:
        with live or contextlib.nullcontext():
            while queue or running:
                while queue and len(running) < parallel:
                    spec = queue.pop(0)
                    env = {**os.environ, "PROOFGRID_LOCAL_JOB_ID": f"local-{index[spec.name]}",
                           "PROOFGRID_ARRAY_INDEX": str(index[spec.name])}
                    with open(spec.job_dir / RUNTIME_LOG, "ab") as log:
                        running[spec.name] = subprocess.Popen(
                            [sys.executable, "-m", "launcher.runtime", str(spec.job_dir)], cwd=REPO_ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
                    view.set_state(spec.name, RUNNING)
                    say(f"{spec.name}: started")
                for line in view.events():
                    say(line)
                for name, proc in list(running.items()):
                    code = proc.poll()
                    if code is None:
                        continue
                    del running[name]
                    view.set_state(name, VIEW_DONE if code == 0 else FAILED)
                    # A runtime that died without its final record (SIGKILL, disk full, a crash in
                    # the runtime) is FAILED with the cause its logs give, never left RUNNING.
                    mark_dead_local_jobs([dirs[name]], exit_code=code)
                    say(_finished_line(view.jobs[name], read_job_record(dirs[name])))
                if live:
                    live.update(view.table(f"proofgrid sweep ({parallel} at a time)"))
                wait_for_an_exit(running.values(), LOOK_EVERY_S)
    except KeyboardInterrupt:
        if live:
            live.stop()  # the table stops redrawing: what follows must be read
        stop_jobs(running)
        for name in running:
            update_job_record(dirs[name], {"state": CANCELLED, "failure": STOPPED_WITH_THE_LAUNCHER})
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print()  # the next output (the summary) starts after a blank line, never glued to the table
    if live:  # off a terminal each failure was printed when it happened
        print_failures([dirs[n] for n, job in view.jobs.items() if job.state == FAILED])
    return True


def wait_for_an_exit(processes, timeout_s: float) -> None:
    """Wait ``timeout_s``, or less: until one of ``processes`` exits (its pidfd turns readable), so that a job's slot
    is refilled the moment it ends, not at the next look (half a second a job, on a sweep of short jobs). Where the
    kernel has no pidfd (Linux before 5.3, another system) it is the plain wait."""
    processes = list(processes)
    if not processes or not hasattr(os, "pidfd_open"):
        time.sleep(timeout_s)
        return
    fds = []
    try:
        for proc in processes:
            with contextlib.suppress(ProcessLookupError):  # exited and reaped already: no wait is needed
                fds.append(os.pidfd_open(proc.pid))
        if len(fds) == len(processes):
            select.select(fds, [], [], timeout_s)
    except OSError:  # no pidfd_open here
        time.sleep(timeout_s)
    finally:
        for fd in fds:
            os.close(fd)


def stop_jobs(running: dict[str, subprocess.Popen], grace_s: float = 30.0) -> None:
    """Stop the running jobs after a signal to the launcher, saying so at once: each gets SIGTERM (its
    trainer stops after the step it is in and keeps its checkpoint) and ``grace_s`` to exit; a second
    Ctrl-C (or SIGTERM, SIGHUP) kills them all at once with SIGKILL (they restart from their last checkpoint
    on the next run)."""
    kill_now = []
    for sig in HANDLED:
        signal.signal(sig, lambda *_: kill_now.append(True))
    if running:
        print(f"\nstopping {len(running)} running job(s) at their next step, up to {grace_s:.0f} s "
              "(Ctrl-C again to kill them now)", file=sys.stderr, flush=True)
    for proc in running.values():
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(proc.poll() is None for proc in running.values()):
        if kill_now or time.monotonic() > deadline:
            alive = [name for name, proc in running.items() if proc.poll() is None]
            why = "killing them now" if kill_now else f"{grace_s:.0f} s passed: killing the job(s) still running"
            print(f"{why} ({', '.join(alive)}; each restarts from its last checkpoint on the next run)",
                  file=sys.stderr, flush=True)
            for proc in running.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            for proc in running.values():
                proc.wait()
            break
        time.sleep(0.1)
    for sig in HANDLED:  # until the entry point has said how to resume, another signal changes nothing
        signal.signal(sig, signal.SIG_IGN)


def _finished_line(job, record: dict) -> str:
    """The plain line for a job that ended: how, after how long, and a failure's cause."""
    elapsed = record.get("elapsed_s")
    after = f" after {elapsed:.0f} s" if isinstance(elapsed, (int, float)) else ""
    if job.state == VIEW_DONE:
        reward = f", last reward {job.reward:.3f}" if job.reward is not None else ""
        return f"{job.name}: finished{after} ({job.step}/{job.n_updates} steps{reward})"
    return f"{job.name}: FAILED{after}: {failure_cause(record, job.name) or 'no cause recorded'}"


def in_flight(record: dict) -> bool:
    """A local job is alive only while its runtime process is (a killed launcher leaves RUNNING behind)."""
    return local_runtime_alive(record)


def refresh_job_records(job_dirs: list[Path]) -> dict[str, str]:
    """Local jobs write their own states: the records are the scheduler's view."""
    return {d.name: read_job_record(d).get("state", "UNKNOWN") for d in job_dirs}


def print_failures(job_dirs) -> None:
    """One line per failed job with its root cause (the trainer's exception, port exhaustion,
    an input digest mismatch, a dead runtime), as its ``job.json`` records it."""
    for job_dir in job_dirs:
        record = read_job_record(job_dir)
        cause = failure_cause(record, job_dir.name) or f"exit code {record.get('exit_code')}"
        print(f"job {job_dir.name} {record.get('state', FAILED)}: {cause}", file=sys.stderr)
