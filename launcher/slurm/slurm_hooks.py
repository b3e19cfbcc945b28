"""Slurm's hooks of the job runtime: what Slurm adds to each phase of one task's run.

``SlurmHooks``: the task's identity from Slurm's environment, the earlier runs Slurm ended and
requeued (found in accounting as the run begins), the time-limit or preemption warning turned into a
checkpoint-and-stop (a plain ``scancel`` into a quick cleanup), the stopped task's own requeue and
its history event, and the task's submitit output kept in the job directory. A rank of a job of
several tasks adds its place among the ranks (``launcher.slurm.rank_task``).
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

from facts.backends import SLURM
from facts.states import RUNNING, TERMINATED
from launcher.job_records import update_job_record
from launcher.progress import completed_steps
from launcher.runtime import JobHooks, Reaction, RunEnd
from launcher.slurm.requeue import (
    append_history,
    keep_scheduler_output,
    record_scheduler_requeues,
    requeue,
    requeue_refusal,
    signal_event,
    slurm_job_state,
)


def submitit_paths():
    """The running submitit job's files (its submission script, stdout, stderr), None outside one."""
    try:
        import submitit  # only inside a task: the launcher side imports this module without running it

        return submitit.JobEnvironment().paths
    except Exception:  # noqa: BLE001 - not inside a submitit job
        return None


class SlurmHooks(JobHooks):
    """One Slurm task as Slurm's environment names it (``SLURM_ARRAY_*``, ``SLURM_RESTART_COUNT``)."""

    def __init__(self) -> None:
        env = os.environ
        array_job, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
        self.job_id = f"{array_job}_{task}" if array_job and task else env["SLURM_JOB_ID"]
        self.array_index = int(task) if task else None
        self.restart_count = int(env.get("SLURM_RESTART_COUNT", "0"))

    def identity(self) -> dict:
        return {"scheduler": SLURM, "job_id": self.job_id, "array_index": self.array_index,
                "restart_count": self.restart_count}

    def begin(self, job_dir: Path) -> None:
        # Slurm requeued an earlier run (node failure, preemption)? Nothing of it may have been left to say so.
        record_scheduler_requeues(job_dir, self.job_id, self.restart_count)

    def submission_script(self) -> str | None:
        paths = submitit_paths()
        try:
            return Path(paths.submission_file).read_text() if paths is not None else None
        except OSError:
            return None

    def on_stop_signal(self, signum: int) -> Reaction:
        if signum == signal.SIGTERM and slurm_job_state(self.job_id) != RUNNING:
            # scancel, a hard time limit: Slurm kills the task within KillWait, so there is time
            # for the cleanup only, not for a checkpoint (sacct tells how it ended).
            return Reaction.KILL
        # Slurm's warning (time limit, preemption, scancel --signal): checkpoint at the current step.
        return Reaction.CHECKPOINT

    def requeue_refusal(self) -> str | None:
        return requeue_refusal(self.job_id, self.restart_count)

    def ended(self, job_dir: Path, end: RunEnd, record: dict) -> dict:
        if end.stop_signal is not None and not end.killed_by_scheduler:  # a warning, not a cancel
            record = self._record_stop(job_dir, end)
        if (paths := submitit_paths()) is not None:
            keep_scheduler_output(job_dir, self.job_id, self.restart_count, paths)
        return record

    def _record_stop(self, job_dir: Path, end: RunEnd) -> dict:
        """The warning in the task's history, and the requeue it asked for (refused: TERMINATED)."""
        event = {"event": signal_event(end.stop_signal), "job_id": self.job_id, "restart_count": self.restart_count,
                 "node": socket.gethostname(), "at_step": completed_steps(job_dir), "checkpointed": end.checkpointed,
                 "action": "requeued" if end.requeued else "finished its run before stopping" if end.finished_anyway
                 else (end.requeue_refusal or "stopped")}
        if end.unsaved:  # the trainer has no checkpoint-and-stop: the requeued run starts it from scratch
            event.update(restart="from scratch", action=f"{event['action']}; the trainer saved nothing at the stop, "
                                                        "so its run restarts from scratch")
        if end.requeued and (refused := requeue(self.job_id)):
            event["action"] = f"requeue refused by Slurm: {refused}"
            update_job_record(job_dir, {"state": TERMINATED, "runtime_state": TERMINATED,
                                        "failure": f"stopped by signal {end.stop_signal}; {event['action']}"})
        return append_history(job_dir, event)
