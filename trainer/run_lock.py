"""One trainer per run directory: an exclusive ``flock`` on ``<output_dir>/.trainer.lock``.

The kernel drops the lock when the last descriptor of its holder closes, for any reason including
SIGKILL. Under the launcher, the job runtime takes the lock before it starts the trainer and the
trainer inherits the descriptor (named by ``PROOFGRID_RUN_LOCK_FD``): the lock stays held while
either lives. A trainer started by hand takes it itself.
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

RUN_LOCK = ".trainer.lock"  # in the run directory (output_dir)
INHERITED_FD_ENV = "PROOFGRID_RUN_LOCK_FD"  # set by the job runtime for the trainer it starts
UNSUPPORTED = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


class LockHeld(RuntimeError):
    """Somebody else holds the lock (the message names the holder and what to do)."""


def record_holder(fd: int, pid: int) -> None:
    """Name ``pid`` as the holder (informational: it names the holder in errors)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{pid}\n".encode(), 0)


def holder_pid(path: Path) -> str:
    """The pid the current holder wrote, or ``?``."""
    try:
        text = path.read_text().strip()
    except OSError:
        return "?"
    return text if text.isdigit() else "?"


def try_lock(path: Path) -> int | None:
    """A descriptor holding an exclusive lock on ``path`` (a regular file of ours, created 0600,
    never followed through a symlink), or None when another process holds it."""
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
        # rather than refusing every run.
        print(f"note: {path.name}: this file system does not support flock ({exc.strerror}); "
              "concurrent writers are not excluded here", file=sys.stderr)
    record_holder(fd, os.getpid())  # ours, locked, regular: safe to rewrite
    return fd


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
