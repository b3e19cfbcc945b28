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
import os
from collections.abc import Iterator
from pathlib import Path

from facts import run_dir_of_job
from trainer.run_lock import (
    INHERITED_FD_ENV,
    RUN_LOCK,
    LockHeld,
    holder_pid,
    lock_run_dir,
    record_holder,
    try_lock,
)

SWEEP_LOCK = ".launcher.lock"  # in the sweep directory
__all__ = ["INHERITED_FD_ENV", "RUN_LOCK", "SWEEP_LOCK", "LockHeld", "lock_job_run_dir", "record_holder",
           "sweep_lock"]


@contextlib.contextmanager
def sweep_lock(sweep_dir: Path) -> Iterator[None]:
    """Hold the sweep directory for one launcher; a second one is refused at once."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / SWEEP_LOCK
    fd = try_lock(path)
    if fd is None:
        raise LockHeld(
            f"another launcher (pid {holder_pid(path)}) is running in {sweep_dir}; wait for it to end "
            f"(python -m launcher status {sweep_dir}) or use another hydra.sweep.dir"
        )
    try:
        yield
    finally:
        os.close(fd)


def lock_job_run_dir(job_dir: Path) -> int:
    """Take the job's run-directory lock; the descriptor is passed on to the trainer."""
    return lock_run_dir(run_dir_of_job(job_dir))
