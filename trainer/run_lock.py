"""One trainer per run directory: an exclusive ``flock`` on ``<output_dir>/.trainer.lock`` (``facts.locks``).

The kernel drops the lock when the last descriptor of its holder closes, for any reason including
SIGKILL. Under the launcher, the job runtime takes the lock before it starts the trainer and the
trainer inherits the descriptor (named by ``PROOFGRID_RUN_LOCK_FD``): the lock stays held while
either lives. A trainer started by hand takes it itself.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from facts.locks import UNSUPPORTED, LockHeld, holder_pid, record_holder, try_lock

RUN_LOCK = ".trainer.lock"  # in the run directory (output_dir)
INHERITED_FD_ENV = "PROOFGRID_RUN_LOCK_FD"  # set by the job runtime for the trainer it starts
__all__ = ["INHERITED_FD_ENV", "RUN_LOCK", "UNSUPPORTED", "LockHeld", "holder_pid", "lock_run_dir", "own_run_dir",
           "record_holder", "try_lock"]


def lock_run_dir(run_dir: Path) -> int:
    """Take the run directory's lock, or raise ``LockHeld`` naming the trainer that holds it."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = try_lock(run_dir / RUN_LOCK)
    if fd is None:
        raise LockHeld(
            f"a trainer (pid {holder_pid(run_dir / RUN_LOCK)}) may still be alive in {run_dir.parent.name}/"
            f"{run_dir.name} (it holds {RUN_LOCK}); wait for it to end or kill it, then run again"
        )
    return fd


def _inherited(run_dir: Path) -> bool:
    """Whether this process already holds the run directory's lock through an inherited descriptor."""
    value = os.environ.get(INHERITED_FD_ENV, "")
    if not value.isdigit():
        return False
    try:
        held, lock = os.fstat(int(value)), os.stat(run_dir / RUN_LOCK, follow_symlinks=False)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (lock.st_dev, lock.st_ino)


@contextlib.contextmanager
def own_run_dir(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir`` for the duration (a no-op when the job runtime already holds it for us)."""
    if _inherited(Path(run_dir)):
        yield
        return
    fd = lock_run_dir(Path(run_dir))
    try:
        yield
    finally:
        os.close(fd)
