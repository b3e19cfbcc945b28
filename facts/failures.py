"""Why a job did not complete, in one line with a pointer to its log: what the launcher's summary,
``python -m launcher status`` and the evidence (index reason, incident table) all print.

The cause is the ``failure`` field of ``job.json``: written by the job runtime (the trainer's last
exception line, a dead runtime, a port or input failure) or, for Slurm, from the scheduler's final
state. A record without one falls back to its state and exit code.
"""

from __future__ import annotations

from facts.files import JOBS_DIR, TRAINER_LOG
from facts.states import (
    BOOT_FAIL,
    CANCELLED,
    COMPLETED,
    DEADLINE,
    FAILED,
    NODE_FAIL,
    OUT_OF_MEMORY,
    PREEMPTED,
    TERMINATED,
    TIMEOUT,
)

# Final scheduler states that are not success, as a person would say them, with the fix.
SCHEDULER_REASONS = {
    CANCELLED: "cancelled by the scheduler (scancel, or an administrator)",
    TIMEOUT: "stopped by the scheduler at its time limit (raise cluster.time)",
    OUT_OF_MEMORY: "killed by the scheduler for running out of memory (raise cluster.mem)",
    NODE_FAIL: "lost with its node (the scheduler reported NODE_FAIL); re-run to resume",
    PREEMPTED: "preempted by the scheduler; re-run to resume",
    BOOT_FAIL: "its node failed to boot (the scheduler reported BOOT_FAIL); re-run to resume",
    DEADLINE: "stopped by the scheduler at its deadline",
}


def log_pointer(job: str, log: str = TRAINER_LOG) -> str:
    """Where a job's log lies, relative to the sweep directory."""
    return f"{JOBS_DIR}/{job}/{log}"


def scheduler_reason(state: str) -> str | None:
    """The scheduler's final ``state`` in words, or None for a state that is not a failure."""
    if not state or state == COMPLETED:
        return None
    return SCHEDULER_REASONS.get(state.split()[0])


def failure_cause(record: dict, job: str) -> str | None:
    """One line: the recorded cause of a job that did not complete, ending with where to read more;
    None for a completed (or still running) job that recorded none."""
    cause = record.get("failure")
    state = str(record.get("state") or "")
    if not isinstance(cause, str) or not cause:
        reason = scheduler_reason(state)
        code = record.get("exit_code")
        if reason is None and state not in (FAILED, TERMINATED):
            return None
        cause = reason or f"{state} with exit code {code}"
    if ".log" not in cause:
        cause += f"; see {log_pointer(job)}"
    return cause
