"""Exclusive ownership by ``flock``, stated once: one trainer per run directory (``trainer.run_lock``) and one
writer of a sweep's evidence at a time (``sweep_lock``: the launcher for its whole run, ``python -m evidence
build``, the launcher's seal, ``python -m evidence sign`` of a sweep's archive).

A lock is an exclusive, non-blocking ``flock`` on a file of ours, opened with ``O_NOFOLLOW``. The kernel drops
it when the last descriptor of the holder closes, for any reason including SIGKILL, so a dead holder never
blocks, and a live one always does. The file names its holder: its pid and, for the sweep's lock, which writer
it is; a second writer is refused at once with one line naming both and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from facts.files import SWEEP_LOCK

UNSUPPORTED = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}
# The writers of a sweep's evidence, as the lock file names them and the refusal says them.
LAUNCHER, BUILD, SIGN = "launcher", "build", "sign"
WRITERS = {LAUNCHER: "a launcher", BUILD: "python -m evidence build", SIGN: "python -m evidence sign"}
# What the writer that is refused should do, by the writer that holds the lock.
_ADVICE = {
    LAUNCHER: "it runs the sweep's jobs and seals their evidence itself; wait for it to end "
              "(python -m launcher status {sweep}), then run again if you still need to",
    BUILD: "it is sealing the sweep's evidence; wait for it to end, then run again",
    SIGN: "it is signing the sweep's archive; wait for it to end, then run again",
}


class LockPathError(OSError):
    """The lock file cannot be opened as one (a symlink, a directory, no permission): an ``OSError`` whose
    ``line`` says so in one line with the fix."""

    @property
    def line(self) -> str:
        return f"{self.strerror} at {self.filename}; fix the path or its permissions, then re-run the same command"


class LockHeld(RuntimeError):
    """Somebody else holds the lock (the message names the holder and what to do)."""


def record_holder(fd: int, pid: int, writer: str | None = None) -> None:
    """Name ``pid`` (and which ``writer`` it is) as the holder: informational, it names the holder in errors."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, (f"{pid} {writer}\n" if writer else f"{pid}\n").encode(), 0)


def _holder_fields(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def holder_pid(path: Path) -> str:
    """The pid the current holder wrote, or ``?``."""
    fields = _holder_fields(path)
    return fields[0] if fields and fields[0].isdigit() else "?"


def holder_writer(path: Path) -> str | None:
    """Which writer of a sweep's evidence holds its lock (``LAUNCHER``, ``BUILD``, ...), when it said so."""
    fields = _holder_fields(path)
    return fields[1] if len(fields) > 1 and fields[1] in WRITERS else None


def try_lock(path: Path) -> int | None:
    """A descriptor holding an exclusive lock on ``path`` (a regular file of ours, created 0600,
    never followed through a symlink), or None when another process holds it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:  # a symlink (ELOOP), a directory (EISDIR), no permission: one line, never followed
        raise LockPathError(exc.errno, exc.strerror, str(path)) from None
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


def refusal(sweep_dir: Path, writer: str, pid: str, holder: str | None) -> str:
    """The one line refusing ``writer``: who holds the sweep's lock and what to do."""
    who = WRITERS.get(holder, "another writer of its evidence")
    advice = _ADVICE.get(holder, "wait for it to end, then run again").format(sweep=sweep_dir)
    return (f"{WRITERS[writer]} refused: {sweep_dir} is held by {who} (pid {pid}, its {SWEEP_LOCK}); "
            f"one writer of a sweep's evidence at a time: {advice}")


# The sweep locks this process holds (by lock file), with how many times each is entered: the launcher
# holds its sweep's lock while its seal runs the build, which takes the same lock.
_HELD: dict[str, int] = {}


@contextlib.contextmanager
def sweep_lock(sweep_dir: str | Path, writer: str,
               refused: Callable[[Path, str, str | None], str] | None = None) -> Iterator[None]:
    """Hold ``<sweep_dir>/.launcher.lock`` as ``writer`` for the duration; re-entered freely by the process
    that holds it. Another holder: ``LockHeld`` at once, its message ``refused(sweep_dir, pid, holder's writer)``
    (default ``refusal``)."""
    sweep_dir = Path(sweep_dir)
    path = sweep_dir / SWEEP_LOCK
    key = os.path.realpath(path)
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    fd = try_lock(path)
    if fd is None:
        pid, holder = holder_pid(path), holder_writer(path)
        raise LockHeld(refused(sweep_dir, pid, holder) if refused else refusal(sweep_dir, writer, pid, holder))
    record_holder(fd, os.getpid(), writer)
    _HELD[key] = 1
    try:
        yield
    finally:
        del _HELD[key]
        os.close(fd)
