"""Is the process a local job's record names still that same process? (pid, start time, boot id) And which
processes are below a process (``descendants``), and where a job's processes may write besides the job.

A local job's ``job.json`` names its runtime by pid, process start time (clock ticks since boot, so
a reused pid is not mistaken for it), boot id and host. The launcher uses this to mark a dead job
FAILED; the evidence uses it so that ``evidence build`` never waits for a job nobody runs.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

DEFAULT_RESOURCE_SAMPLE_S = 5.0  # cluster.resource_sample_s: how often a job's runtime samples its resources
# Where a job's processes may write besides the job's own directories: the kernel's files (shared memory, which
# torch, Ray and Python's semaphores create there; process settings), and the device nodes a job needs (a glob:
# every node it matches; a directory: every node below it). The runtime's write guard allows them and the external
# trainer's write samples do not count them as outside writes.
JOB_WRITABLE_SYSTEM_DIRS = ("/dev/shm", "/proc")
JOB_WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
                        "/dev/nvidia*", "/dev/infiniband")  # the GPU's nodes; RDMA's, for NCCL across nodes


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def process_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks after boot (field 22 of /proc/<pid>/stat), or None if
    there is no such (non-zombie) process."""
    try:
        text = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may contain spaces
    if fields[0] == "Z":
        return None
    return int(fields[19])


def runtime_identity(pid: int) -> dict:
    """What ``job.json`` records so that the runtime's liveness can be checked later."""
    return {"runtime_pid": pid, "runtime_start_ticks": process_start_ticks(pid), "boot_id": boot_id(),
            "node": socket.gethostname()}


def local_runtime_alive(record: dict) -> bool:
    """Whether the runtime process a local job's record names is still that same process."""
    pid = record.get("runtime_pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if record.get("node") != socket.gethostname():
        return False  # not this host's process (the launcher that ran it is gone)
    if record.get("boot_id") and record.get("boot_id") != boot_id():
        return False
    ticks = process_start_ticks(pid)
    if ticks is None:
        return False
    expected = record.get("runtime_start_ticks")
    return expected is None or ticks == expected


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (zombies too), from each thread's ``/proc/<pid>/task/<tid>/children``:
    an orphan adopted by a child subreaper is the child of one of its threads."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            with contextlib.suppress(OSError, ValueError):
                todo += [int(c) for c in Path(f"/proc/{current}/task/{tid}/children").read_text().split()]
    return found


# A process tree ended as a child subreaper ends it (the job runtime at the job's end, the external trainer when its
# command exits): every generation of a process that forks and exits in a loop passes through the subreaper (an
# orphan is adopted, then reaped), so the tree counts as ended only after QUIET_SCANS scans in a row found nothing
# alive below it and reaped nothing; it gives up (and says so) after END_LIMIT_S.
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
SUBREAPER = "subreaper"
QUIET_SCANS = 5
SCAN_PAUSE_S = 0.02
END_LIMIT_S = 60.0
JOB_MARKER_ENV = "PROOFGRID_JOB_DIR"  # every process a job starts inherits it (launcher.isolation)


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> str:
    """Make this process the child subreaper of everything it starts; what ``guard.processes`` records."""
    import ctypes
    import platform

    if platform.system() != "Linux":
        return f"process tree only: no child subreaper on {platform.system()}"
    if _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return f"process tree only: prctl(PR_SET_CHILD_SUBREAPER) failed ({os.strerror(ctypes.get_errno())})"
    return SUBREAPER


def stop_being_subreaper() -> None:
    """The tree has ended: orphans go to init again (a runtime in a longer-lived process, a test's)."""
    import platform

    if platform.system() == "Linux":
        _libc().prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _stat_fields(pid: int) -> list[str] | None:
    """State, ppid, pgrp, session, ... of ``pid`` (a zombie's too), or None when it is gone."""
    try:
        text = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    return text[text.rindex(")") + 2:].split()


def command_line(pid: int) -> str:
    """``pid``'s command line (its first 200 characters), or "" when it cannot be read."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return ""


def marked_processes(job_dir: Path | str, spare: set[int] = frozenset()) -> list[dict]:
    """Processes (other than this one and ``spare``) whose environment carries the job's marker,
    ``PROOFGRID_JOB_DIR=<job_dir>`` (``launcher.isolation`` sets it for everything a job starts)."""
    marker = f"{JOB_MARKER_ENV}={job_dir}".encode()
    found, skip = [], {os.getpid(), *spare}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
        except OSError:
            continue
        found.append({"kind": "process", "pid": int(entry.name), "cmd": command_line(int(entry.name))})
    return found



class ProcessTree:
    """The processes below this one (made their child subreaper) but those it had before: whatever session, group
    or environment each made itself, it stays below, and ``end`` ends it however it forks."""

    def __init__(self) -> None:
        self.root = os.getpid()
        self.before = {(pid, process_start_ticks(pid)) for pid in descendants(self.root)[1:]}
        self.mechanism = become_subreaper()

    def alive(self) -> list[int]:
        """The tree's live processes now."""
        return [pid for pid in descendants(self.root)[1:]
                if (ticks := process_start_ticks(pid)) is not None and (pid, ticks) not in self.before]

    def reap(self, own: set[int] = frozenset()) -> int:
        """Reap the exited orphans this process adopted (never ``own``: the children a ``Popen`` here waits for,
        nor one it had before); how many it reaped."""
        theirs, reaped = own | {pid for pid, _ in self.before}, 0
        for pid in descendants(self.root)[1:]:
            fields = _stat_fields(pid)
            if pid in theirs or fields is None or fields[0] != "Z" or int(fields[1]) != self.root:
                continue
            with contextlib.suppress(ChildProcessError):
                reaped += os.waitpid(pid, os.WNOHANG)[0] == pid
        return reaped

    def end(self, own: set[int] = frozenset(), limit_s: float = END_LIMIT_S) -> dict:
        """SIGKILL every live process of the tree, with its process group (a group's kill reaches a process
        that forks meanwhile), reap what exits, and repeat until ``QUIET_SCANS`` scans in a row find nothing
        alive and reap nothing. Returns what it took: ``rounds`` (scans that found or reaped something),
        ``ended`` (pid and command of each process killed), ``reaped``, ``quiet`` (False: still forking at the limit)."""
        import signal
        import time

        spared_groups = {os.getpgrp(), *(int(f[2]) for pid, _ in self.before if (f := _stat_fields(pid)))}
        ended: dict[int, str] = {}
        rounds = reaped = quiet = 0
        deadline = time.monotonic() + limit_s
        while quiet < QUIET_SCANS and time.monotonic() < deadline:
            alive = self.alive()
            groups = set()
            for pid in alive:
                cmd, fields = command_line(pid), _stat_fields(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    ended.setdefault(pid, cmd)
                if fields is not None:
                    groups.add(int(fields[2]))
            for pgid in groups - spared_groups:  # never this process's own group (a child that kept it)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
            time.sleep(SCAN_PAUSE_S)
            n = self.reap(own)
            reaped += n
            if alive or n:
                rounds, quiet = rounds + 1, 0
            else:
                quiet += 1
        return {"rounds": rounds, "ended": [{"pid": p, "cmd": c} for p, c in ended.items()], "reaped": reaped,
                "quiet": quiet >= QUIET_SCANS}
