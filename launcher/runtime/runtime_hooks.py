"""What a scheduler adds to one run of a job: the hooks the job runtime calls at each of its phases.

``JobHooks`` itself is a job with no scheduler around it, the local back end's: the launcher that
started it names it, a stop signal stops it, nothing is requeued and nothing more is kept. A back
end whose scheduler does more subclasses it and hands an instance to ``run_job`` from its own task
entry point (``launcher.slurm.array_task``: Slurm's warning becomes a checkpoint, the stopped task
requeues itself, Slurm's own requeues and output are recorded). Another shape of job plugs in the
same way, without a branch in the runtime: each task of a job of several tasks (a multi-node job)
is one runtime whose hooks say which rank it is (``placement``), start or join what spans the
allocation and meet the other ranks (``start_services``: rank 0 publishes its node's address, its
port block's ``master_port`` and its Ray head, the others read them), and keep each rank's record
(``ended``): ``launcher.slurm.rank_task``.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from facts.backends import LOCAL
from facts.states import REQUEUED
from launcher.isolation import JobRoots
from launcher.ports import PortBlock
from launcher.ray_runtime import JobRay
from trainer.preemption import EXIT_CHECKPOINTED, EXIT_STOPPED_UNSAVED


class Reaction(enum.Enum):
    """What the runtime does when the first stop signal arrives while the trainer runs."""

    STOP = "stop"  # tear the job down now: the trainer's group gets SIGTERM, then SIGKILL
    CHECKPOINT = "checkpoint"  # the trainer checkpoints at its current step and exits; keep waiting for it
    KILL = "kill"  # the scheduler is ending the task: kill the trainer, time for the cleanup only


@dataclass(frozen=True)
class Placement:
    """Which of its job's runtimes this one is. A job of one task has one runtime, rank 0 of 1, whose
    trainer starts the job's ``dp_size`` ranks itself; a job of several tasks has one runtime per task,
    each running one trainer rank (``local_rank``: its place among its node's tasks)."""

    rank: int = 0
    tasks: int = 1
    local_rank: int = 0

    @property
    def leads(self) -> bool:
        """Rank 0 speaks for the job: its ``job.json``, run lock, command records, history and requeue."""
        return self.rank == 0


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
    def unsaved(self) -> bool:
        """The trainer stopped without saving anything to resume from: a rerun starts it from scratch."""
        return self.exit_code == EXIT_STOPPED_UNSAVED

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

    def placement(self) -> Placement:
        """Which of the job's runtimes this is (a job of one task: its only one)."""
        return Placement()

    def begin(self, job_dir: Path) -> None:
        """The run has begun (its RUNNING record is written): what the scheduler knows of earlier ones."""

    def start_services(self, roots: JobRoots, block: PortBlock, env: dict[str, str], ray_cpus: int,
                       confine: Callable[[], None] | None = None,
                       contain: Callable[[list[str]], list[str]] | None = None) -> tuple[dict[str, str], JobRay | None]:
        """What this runtime starts beside its trainer, on its own roots and ports, and the variables that
        adds to the trainer's environment: the job-scoped Ray head on this machine when the workload
        uses Ray (``ray_cpus > 0``), held to the job's write guard (``confine``, its ``preexec_fn``), in the
        job's container image when it has one (``contain``: the command as the container runtime's)."""
        if ray_cpus <= 0:
            return {}, None
        ray = JobRay(roots, block, ray_cpus, env, confine=confine, contain=contain)
        try:
            return {"RAY_ADDRESS": ray.start()}, ray
        except BaseException:
            ray.stop()
            raise

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
