"""Exclusive ownership by ``flock``: one launcher per sweep directory, one trainer per run directory.

A lock is an exclusive, non-blocking ``flock`` on a file of ours, opened with ``O_NOFOLLOW``. The
kernel drops it when the last descriptor of the holder closes, for any reason including SIGKILL,
so a dead holder never blocks a re-run, and a live one always does. The run-directory lock is
taken by the job runtime and inherited by the trainer it starts: while either is alive (an orphaned
trainer whose runtime was killed included) no second trainer can start in that run directory.
The run-directory lock itself is the trainer's (``trainer.run_lock``); this module applies it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from facts import run_dir_of_job
from facts.files import SWEEP_LOCK
from facts.locks import LAUNCHER, refusal
from facts.locks import sweep_lock as writer_lock
from trainer.run_lock import (
    INHERITED_FD_ENV,
    RUN_LOCK,
    LockHeld,
    lock_run_dir,
    record_holder,
)

__all__ = ["INHERITED_FD_ENV", "RUN_LOCK", "SWEEP_LOCK", "LockHeld", "lock_job_run_dir", "record_holder",
           "sweep_lock"]


def _refused(sweep_dir: Path, pid: str, holder: str | None) -> str:
    if holder in (LAUNCHER, None):  # another launcher (or one that predates naming itself)
        return (f"another launcher (pid {pid}) is running in {sweep_dir}; wait for it to end "
                f"(python -m launcher status {sweep_dir}) or use another hydra.sweep.dir")
    return refusal(sweep_dir, LAUNCHER, pid, holder)


@contextlib.contextmanager
def sweep_lock(sweep_dir: Path) -> Iterator[None]:
    """Hold the sweep directory for one launcher (its jobs and its seal); a second one, or a build or
    signing of its evidence, is refused at once (``facts.locks``)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with writer_lock(sweep_dir, LAUNCHER, _refused):
        yield


def lock_job_run_dir(job_dir: Path) -> int:
    """Take the job's run-directory lock; the descriptor is passed on to the trainer."""
    return lock_run_dir(run_dir_of_job(job_dir))
