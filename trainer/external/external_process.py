"""The external trainer's process: started in its own output directory, its output copied into the job's
``trainer.log`` (its last error line kept for the job's failure cause), the job's stop signal passed on
or turned into a teardown, and the files it holds open for writing watched for any outside the job.

Outside writes: every ``WATCH_INTERVAL_S`` the descriptors of the trainer and its descendants are read
from ``/proc``; a regular file open for writing (``fdinfo`` flags ``O_WRONLY``/``O_RDWR``) whose path is
not inside the job directory (nor ``/dev``, ``/proc``: ``facts.processes.JOB_WRITABLE_SYSTEM_DIRS``) is
recorded. This sees what a trainer keeps open (a log, an event file, a checkpoint being written); a file opened
and closed between two samples is the job runtime's write guard's (Landlock: such a write fails at the source,
``launcher.runtime.confine``), and processes it leaves behind are the runtime's finding (``leftovers``), whatever
they are.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from facts.processes import (
    JOB_WRITABLE_SYSTEM_DIRS,
    ProcessTree,
    descendants,
    marked_processes,
    stop_being_subreaper,
)
from trainer.preemption import CHECKPOINT_SIGNALS
from trainer.trainer_errors import TrainerError

WATCH_INTERVAL_S = 0.2
STOP_GRACE_S = 10.0
COMMAND_EXIT_GRACE_S = 5.0  # what the command started (a logger's service process) may finish exiting meanwhile  # a trainer without a stop handler: SIGTERM, then SIGKILL after this
ALLOWED_PREFIXES = tuple(f"{d}/" for d in JOB_WRITABLE_SYSTEM_DIRS)
MAX_OUTSIDE = 5  # distinct outside paths recorded
TAIL_LINES = 200
# The last line of a traceback, or a program's one-line error.
_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b.*|.*\b(?:error|refused|failed)\b.*"
                         r"|Killed.*)$", re.IGNORECASE)


class CommandError(TrainerError, RuntimeError):
    """The trainer's command could not be started (one line: the program and why)."""


@dataclass(frozen=True)
class OutsideWrite:
    path: str
    pid: int
    cmd: str

    def as_record(self) -> dict:
        return {"path": self.path, "pid": self.pid, "cmd": self.cmd}


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


class WriteWatch:
    """Regular files outside ``job_dir`` that the trainer's processes hold open for writing."""

    def __init__(self, job_dir: Path) -> None:
        self.inside = os.path.realpath(job_dir) + os.sep
        self.found: dict[str, OutsideWrite] = {}

    def _outside(self, target: str) -> bool:
        # Python's bytecode cache (a module compiled on its first import, written beside its source) is the
        # interpreter's, not the trainer's output.
        return target.startswith("/") and not target.startswith(self.inside) and \
            not target.startswith(ALLOWED_PREFIXES) and "/__pycache__/" not in target

    def sample(self, root: int) -> None:
        if len(self.found) >= MAX_OUTSIDE:
            return
        for pid in descendants(root):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if not self._outside(target) or target in self.found:
                        continue
                    flags = next(int(line.split()[1], 8) for line in _read(f"/proc/{pid}/fdinfo/{fd}").splitlines()
                                 if line.startswith("flags:"))
                    if flags & os.O_ACCMODE not in (os.O_WRONLY, os.O_RDWR):
                        continue
                    shown = target.removesuffix(" (deleted)")
                    if not os.path.isfile(shown) and not target.endswith(" (deleted)"):
                        continue
                    cmd = _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()[:160]
                except (OSError, StopIteration, ValueError):
                    continue
                self.found[target] = OutsideWrite(shown, pid, cmd)


class TrainerProcess:
    """The command running, its output copied to ``log`` line by line (its tail kept)."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log, hold_stop_signals: bool) -> None:
        self.argv, self.cwd, self.env, self.log = argv, cwd, env, log
        self.hold_stop_signals = hold_stop_signals
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        # A trainer that handles the stop signal starts with it blocked (held until its handler is set, as
        # the job runtime starts its trainer); one that does not keeps the default, so a stop ends it.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, CHECKPOINT_SIGNALS) if self.hold_stop_signals else None
        try:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise CommandError(f"the trainer's command {self.argv[0]!r} was not found (not on PATH, not a file); "
                               "fix trainer.command (its first element) or install the trainer") from None
        except PermissionError:
            raise CommandError(f"the trainer's command {self.argv[0]!r} is not executable") from None
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        self._reader = threading.Thread(target=self._copy_output, daemon=True)
        self._reader.start()

    def _copy_output(self) -> None:
        for raw in iter(self.proc.stdout.readline, b""):
            self.log.write(raw)
            self.log.flush()
            line = raw.decode(errors="replace").strip()
            if line:
                self.tail.append(line)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def send(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signum)

    def terminate(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to the trainer and its descendants, SIGKILL to whatever is left after ``grace_s``."""
        tree = descendants(self.proc.pid)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)
        for pid in [*descendants(self.proc.pid), *tree]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()

    def finish(self) -> int:
        """The exit code, once its output is copied to the end."""
        code = self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        return code

    def last_error_line(self) -> str | None:
        """The last error-looking line the trainer printed (a traceback's last line, ``error: ...``), else
        its last line; None when it printed nothing."""
        for line in reversed(self.tail):
            if _ERROR_LINE.match(line):
                return line[:300]
        return self.tail[-1][:300] if self.tail else None


def exit_words(code: int) -> str:
    """``exited with 1``, or ``was killed by SIGKILL`` for a negative (signal) status."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with {code}"


def wait_watching(process: TrainerProcess, watch: WriteWatch, on_tick) -> int:
    """Wait for the trainer, sampling its open files and calling ``on_tick()`` (the stop check) between."""
    while process.poll() is None:
        watch.sample(process.pid)
        on_tick()
        time.sleep(WATCH_INTERVAL_S)
    return process.finish()


def end_command_tree(tree: ProcessTree, job_dir: Path, grace_s: float = COMMAND_EXIT_GRACE_S) -> list[dict]:
    """After the command exited: nothing of it may run while proofgrid evaluates its model. What is still alive
    below this run (its subreaper) after ``grace_s``, however it forks, and any process outside the job's tree that
    carries the job's marker (started through a daemon with the job's environment) is ended; returns those
    (pid, cmd), each a reason to reject the run."""
    deadline = time.monotonic() + grace_s
    while tree.alive() and time.monotonic() < deadline:
        tree.reap()
        time.sleep(0.1)
    try:
        ending = tree.end()
    finally:
        stop_being_subreaper()
    left = ending["ended"]
    # The runtime's own children (its Ray, the live-tracking follower) carry the marker too: spared.
    runtime_tree = set(descendants(os.getppid()))
    for item in marked_processes(job_dir, spare=runtime_tree):
        with contextlib.suppress(ProcessLookupError):
            os.kill(item["pid"], signal.SIGKILL)
        left.append({"pid": item["pid"], "cmd": item["cmd"]})
    if not ending["quiet"]:
        left.append({"pid": None, "cmd": f"processes still forking after {ending['rounds']} rounds of ending them"})
    return left
