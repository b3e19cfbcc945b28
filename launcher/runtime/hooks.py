"""What a scheduler adds to one run of a job: the hooks the job runtime calls at each of its phases.

``JobHooks`` itself is a job with no scheduler around it, the local back end's: the launcher that
started it names it, a stop signal stops it, nothing is requeued and nothing more is kept. A back
end whose scheduler does more subclasses it and hands an instance to ``run_job`` from its own task
entry point (``launcher.slurm.task``: Slurm's warning becomes a checkpoint, the stopped task
requeues itself, Slurm's own requeues and output are recorded). Another shape of job plugs in the
same way, without a branch in the runtime: each rank of a multi-node task would be one runtime
whose hooks say which rank and node it is (``identity``) and publish or read the rendezvous when it
begins (``begin``).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

from facts.backends import LOCAL
from facts.states import REQUEUED
from trainer.preemption import EXIT_CHECKPOINTED


class Reaction(enum.Enum):
    """What the runtime does when the first stop signal arrives while the trainer runs."""

    STOP = "stop"  # tear the job down now: the trainer's group gets SIGTERM, then SIGKILL
    CHECKPOINT = "checkpoint"  # the trainer checkpoints at its current step and exits; keep waiting for it
    KILL = "kill"  # the scheduler is ending the task: kill the trainer, time for the cleanup only


@dataclass(frozen=True)
class RunEnd:
    """How one run of a job ended: what the runtime records in ``job.json``, and hooks read."""

    state: str  # COMPLETED | FAILED | TERMINATED | REQUEUED
    exit_code: int | None  # the trainer's; None when it never started
    failure: str | None
    stop_signal: int | None  # the first stop signal the runtime received, None if none came
    killed_by_scheduler: bool  # the signal was the scheduler ending the task (Reaction.KILL)
    finished_anyway: bool  # warned during its final evaluation, the trainer completed its run
    requeue_refusal: str | None  # why a run stopped at a checkpoint is not requeued

    @property
    def checkpointed(self) -> bool:
        return self.exit_code == EXIT_CHECKPOINTED

    @property
    def requeued(self) -> bool:
        return self.state == REQUEUED


class JobHooks:
    """A job without a scheduler (the local back end's); subclasses add what theirs does."""

    def identity(self) -> dict:
        """Which job this is to its scheduler: ``scheduler``, ``job_id``, ``array_index`` and
        ``restart_count`` (the run of the job this is, 0 for its first)."""
        env = os.environ
        return {"scheduler": LOCAL, "job_id": env.get("PROOFGRID_LOCAL_JOB_ID", f"local-{os.getpid()}"),
                "array_index": int(env["PROOFGRID_ARRAY_INDEX"]) if "PROOFGRID_ARRAY_INDEX" in env else None,
                "restart_count": 0}

    def begin(self, job_dir: Path) -> None:
        """The run has begun (its RUNNING record is written): what the scheduler knows of earlier ones."""

    def submission_script(self) -> str | None:
        """The script the scheduler ran this job from (``command.json``'s ``sbatch``), if any."""
        return None

    def on_stop_signal(self, signum: int) -> Reaction:
        """The first stop signal (SIGTERM, SIGUSR2) while the trainer runs."""
        return Reaction.STOP

    def requeue_refusal(self) -> str | None:
        """Why a run that stopped at a checkpoint (or before its trainer started) is not requeued;
        None when the scheduler runs it again."""
        return "no scheduler runs a local job again"

    def ended(self, job_dir: Path, end: RunEnd, record: dict) -> dict:
        """The terminal record is written: what the scheduler keeps of the run; returns the record."""
        return record
