"""Inside a Slurm task: requeue after a checkpoint-and-stop, and the task's own attempt history.

When Slurm warns a running task (submitit's ``USR2`` before the time limit, ``SIGTERM`` on
preemption, ``scancel --signal=...``), the trainer checkpoints at its current step and stops; the
runtime then asks ``scontrol requeue`` for the task unless the task is being cancelled (a plain
``scancel`` also sends ``SIGTERM``). When Slurm itself requeued the task (its node failed, it was
preempted, an admin ran ``scontrol requeue``), the runtime of the next run finds the earlier run in
accounting: on a dead node nothing of the task was left to record it. Every such event is appended
to ``job.json``'s ``history``, which the evidence turns into incidents that stay in the bundle.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from facts.files import RUNTIME_LOG
from facts.states import BOOT_FAIL, NODE_FAIL, PREEMPTED, REQUEUED, RUNNING
from launcher.errors import SchedulerUnavailable
from launcher.job_records import read_job_record, update_job_record
from launcher.slurm.commands import run_slurm
from launcher.slurm.slurm_states import sacct_runs

HISTORY_KEY = "history"
# A task that keeps being stopped is given up after this many requeues of its own.
MAX_SELF_REQUEUES = 10


def slurm_job_state(job_id: str) -> str | None:
    """The controller's state of ``job_id`` (``RUNNING``, ``CANCELLED``, ...), None if it cannot tell."""
    for field in (run_slurm(["scontrol", "show", "job", "-o", job_id], timeout_s=30).answer() or "").split():
        if field.startswith("JobState="):
            return field.partition("=")[2]
    return None


def requeue_refusal(job_id: str, restart_count: int) -> str | None:
    """Why the stopped task must not be requeued, or None when it should be."""
    state = slurm_job_state(job_id)
    if state != RUNNING:
        return f"Slurm reports the task {state or 'unknown'} (cancelled or ended), so it is not requeued"
    if restart_count >= MAX_SELF_REQUEUES:
        return f"already requeued {restart_count} times"
    return None


def requeue(job_id: str) -> str | None:
    """``scontrol requeue job_id``; returns the error line when Slurm refuses."""
    return run_slurm(["scontrol", "requeue", job_id]).error


def signal_event(signum: int) -> str:
    """What a stop signal means for the task (the incident's title)."""
    if signum == signal.SIGUSR2:
        return "time-limit or preemption warning (USR2)"
    return f"stop signal ({signal.Signals(signum).name.removeprefix('SIG')})"


def append_history(job_dir: Path, entry: dict) -> dict:
    """Add one attempt event to ``job.json``'s history (never rewriting earlier ones)."""
    history = list(read_job_record(job_dir).get(HISTORY_KEY) or [])
    return update_job_record(job_dir, {HISTORY_KEY: [*history, {**entry, "time": round(time.time(), 3)}]})




def keep_scheduler_output(job_dir: Path, job_id: str, restart_count: int, paths) -> None:
    """Append this run's Slurm output (submitit's stdout and stderr, ``paths``: the runtime's own
    messages, the profile's setup lines) to ``runtime.log`` in the job directory, where the bundle
    keeps it."""
    with open(Path(job_dir) / RUNTIME_LOG, "a", encoding="utf-8") as log:
        for label, path in (("stdout", paths.stdout), ("stderr", paths.stderr)):
            if Path(path).is_file():
                log.write(f"==> Slurm {label} of job {job_id}, restart {restart_count} <==\n")
                log.write(Path(path).read_text(encoding="utf-8", errors="replace"))


# How a run that Slurm (not the task) ended and requeued is named in the history: (kind, event).
SCHEDULER_REQUEUES = {
    NODE_FAIL: ("node-failure", "node failure"),
    BOOT_FAIL: ("node-failure", "node boot failure"),
    PREEMPTED: ("requeue", "preemption"),
    REQUEUED: ("requeue", "requeued by Slurm"),
}


def record_scheduler_requeues(job_dir: Path, job_id: str, restart_count: int,
                              down_nodes: Callable[[], list[str]] | None = None) -> list[dict]:
    """At the start of run ``restart_count`` of a task: append to the history each earlier run that
    Slurm ended and requeued and that no event of the task's own records yet (a run the task
    requeued itself after a warning already has one). Returns the events added. ``down_nodes``: for a
    job of several nodes, which of the previous run's nodes went down (its node failure names them)."""
    if restart_count < 1:
        return []
    try:
        earlier = sacct_runs(job_id)[:restart_count]
    except SchedulerUnavailable:
        return []
    recorded = {e.get("restart_count") for e in read_job_record(job_dir).get(HISTORY_KEY) or [] if isinstance(e, dict)}
    added = []
    for run_index, run in enumerate(earlier):
        if run_index in recorded or run["state"] not in SCHEDULER_REQUEUES:
            continue
        kind, what = SCHEDULER_REQUEUES[run["state"]]
        event = {"kind": kind, "event": f"{what} ({run['state']} on {run['node'] or 'an unknown node'})",
                 "job_id": job_id, "restart_count": run_index, "node": run["node"], "at_step": None,
                 "checkpointed": None, "action": "requeued by Slurm",
                 "elapsed_s": run["elapsed_s"]}
        # The node that went down, not every node the run had.
        if kind == "node-failure" and down_nodes is not None and run_index == restart_count - 1 \
                and (down := down_nodes()):
            event.update(node=",".join(down), down_nodes=down,
                             event=f"{what}: node {', '.join(down)} went down ({run['state']} of the job on "
                                   f"{run['node'] or 'its nodes'})")
        append_history(job_dir, event)
        added.append(event)
    return added
