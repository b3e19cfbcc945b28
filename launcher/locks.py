"""Exclusive ownership by ``flock``: one launcher per sweep directory, one trainer per run directory.

A lock is an exclusive, non-blocking ``flock`` on a file of ours, opened with ``O_NOFOLLOW``. The
kernel drops it when the last descriptor of the holder closes, for any reason including SIGKILL,
so a dead holder never blocks a re-run, and a live one always does. The run-directory lock is
taken by the job runtime and inherited by the trainer it starts: while either is alive (an orphaned
trainer whose runtime was killed included) no second trainer can start in that run directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

SWEEP_LOCK = ".launcher.lock"  # in the sweep directory
RUN_LOCK = "run.lock"  # in the job directory; held by the job's runtime and its trainer
UNSUPPORTED = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


class LockHeld(RuntimeError):
    """Somebody else holds the lock (the message names the holder and what to do)."""


def try_lock(path: Path) -> int | None:
    """A descriptor holding an exclusive lock on ``path`` (created 0600), or None when it is held.
    The holder's pid is written into the file (informational: it names the holder in errors)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        raise LockHeld(f"{path} is not a regular file of yours; remove it")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as exc:
        if exc.errno not in UNSUPPORTED:
            os.close(fd)
            raise
        # Some parallel file systems are mounted without flock: say so, and go on unguarded
        # rather than refusing every job (the scheduler-state checks still apply).
        print(f"note: {path.name}: this file system does not support flock ({exc.strerror}); "
              "concurrent launchers or trainers are not excluded here", file=sys.stderr)
    record_holder(fd, os.getpid())  # ours, locked, regular: safe to rewrite
    return fd


def record_holder(fd: int, pid: int) -> None:
    """Name ``pid`` as the holder (the trainer that inherited the lock)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{pid}\n".encode(), 0)


def holder_pid(path: Path) -> str:
    """The pid the current holder wrote, or ``?``."""
    try:
        text = path.read_text().strip()
    except OSError:
        return "?"
    return text if text.isdigit() else "?"


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


def lock_run_dir(job_dir: Path) -> int:
    """Take the job's run-directory lock; the descriptor is passed on to the trainer."""
    path = Path(job_dir) / RUN_LOCK
    fd = try_lock(path)
    if fd is None:
        raise LockHeld(
            f"a trainer (pid {holder_pid(path)}) may still be alive in {Path(job_dir).name}/run (it holds "
            f"{RUN_LOCK}); wait for it to end or kill it, then re-run the sweep"
        )
    return fd
