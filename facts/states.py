"""The vocabularies of states, stated once: what ``job.json``'s ``state`` says, Slurm's states as
sacct and squeue spell them, and which of them are final, transient or still in flight; and, apart from
them, what ``run.json``'s ``status`` says.

A local job's runtime writes PENDING/RUNNING/REQUEUED/COMPLETED/FAILED/CANCELLED itself; a Slurm job's
record takes the scheduler's final state (TIMEOUT, NODE_FAIL, ...) from accounting.

A run's status (``RUN_*``, lower case) is a different vocabulary: the trainer's own account of its run in the
run directory, written by the trainer, not the job's state that the launcher or the scheduler records. A job
can be COMPLETED with a run that is not ``completed`` (the launcher refuses that), and a run ``stopped`` at a
signal belongs to a job that may be requeued.
"""

from __future__ import annotations

PENDING = "PENDING"
RUNNING = "RUNNING"
REQUEUED = "REQUEUED"
COMPLETING = "COMPLETING"
CONFIGURING = "CONFIGURING"
SUSPENDED = "SUSPENDED"
RESIZING = "RESIZING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
TERMINATED = "TERMINATED"  # a local job stopped by a signal before it finished (its runtime says so)
CANCELLED = "CANCELLED"
TIMEOUT = "TIMEOUT"
PREEMPTED = "PREEMPTED"
NODE_FAIL = "NODE_FAIL"
OUT_OF_MEMORY = "OUT_OF_MEMORY"
BOOT_FAIL = "BOOT_FAIL"
DEADLINE = "DEADLINE"
REQUEUE_FED = "REQUEUE_FED"
REQUEUE_HOLD = "REQUEUE_HOLD"
RESV_DEL_HOLD = "RESV_DEL_HOLD"
# Recorded when Slurm, asked twice, reports nothing at all about a task we submitted.
VANISHED = "VANISHED"

# States after which a task never runs again (unless listed in TRANSIENT_STATES as well).
TERMINAL_STATES = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL, OUT_OF_MEMORY,
                             BOOT_FAIL, DEADLINE, VANISHED})
# States that a requeue (``--requeue``, preemption, ``scontrol requeue``) can follow within seconds.
TRANSIENT_STATES = frozenset({NODE_FAIL, PREEMPTED, REQUEUED, REQUEUE_FED, REQUEUE_HOLD, RESV_DEL_HOLD, BOOT_FAIL})
# A job in one of these may still complete: a bundle refuses to seal it, the progress view counts it running.
IN_FLIGHT_STATES = frozenset({PENDING, RUNNING, REQUEUED, CONFIGURING, COMPLETING, SUSPENDED, RESIZING})
# A pre-registered experiment's verdict (FAILED spelled as the job state is).
VALIDATED = "VALIDATED"
INCONCLUSIVE = "INCONCLUSIVE"
# What the launcher's live view shows per job (QUEUED before the scheduler has it, DONE once COMPLETED).
VIEW_QUEUED, VIEW_DONE = "QUEUED", "DONE"

# run.json's status (the trainer's account of its run; see the module's docstring), and the TensorBoard session's
# end status (completed or failed).
RUN_RUNNING = "running"  # the trainer is at work (written at its start, rewritten at checkpoints and evaluations)
RUN_COMPLETED = "completed"  # the trainer finished every step and its final evaluation
RUN_FAILED = "failed"  # the trainer stopped on an error
RUN_STOPPED = "stopped"  # an external trainer (or TRL's adapter) stopped at a signal; the job may run it again
RUN_STATUSES = (RUN_RUNNING, RUN_COMPLETED, RUN_FAILED, RUN_STOPPED)
