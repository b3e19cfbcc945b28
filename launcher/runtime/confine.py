"""What holds a job's processes to the job, by marks they cannot shed (``job.json``'s ``guard``).

Processes: the runtime is a child subreaper (``facts.processes.ProcessTree``), so every process the
trainer starts stays below it whatever it does: a double fork, ``setsid``, ``nohup``, ``env -i``, closed
descriptors. An orphan is re-parented to the runtime, not to init, and ``process.leftovers`` lists the
runtime's descendants after the trainer has ended (the environment marker is kept for what a subreaper
cannot see: a process another daemon started for the job). A process that forks and exits in a loop is never
seen alive by one look at the tree, but each of its generations is adopted and reaped by the subreaper: the
tree is ended only after several looks in a row find nothing alive and reap nothing. No cgroup is needed (none
is writable by a job's user on a cgroup v1 node). Under Slurm the runtime is the step's task,
so the same holds inside the step; with ``ProctrackType=proctrack/cgroup`` the step's cgroup also ends
whatever is left at the step's end, and with ``proctrack/linuxproc`` (the throwaway cluster's) the step
tracks the process tree, which the subreaper keeps whole.

Writes: the trainer (and all it starts: Landlock is inherited and cannot be dropped) runs under a Landlock
ruleset that lets it create, write, truncate, rename or remove files only below the job directory, the
sweep's shared initial evaluation (when the job shares it), the kernel's own files (``/dev/shm``, ``/proc``)
and the device nodes a job needs (``facts.processes.JOB_WRITABLE_DEVICES``); anything else fails at the source with
EACCES, however briefly the file would have been open (the 0.2 s samples of the external trainer's
``WriteWatch`` saw only what stayed open). Reading is not restricted. Landlock (Linux 5.13 or later,
unprivileged) is the mechanism because it needs no root, no namespace and no setuid helper, so it runs as
the job's own user on a login or compute node; where the kernel has it disabled or lacks it the job runs
without it and ``guard.writes`` says why (the ``WriteWatch`` samples still apply to external trainers).
Landlock does not cover what was open before it applied (the trainer's log and its run lock, opened by
the runtime), nor ``chmod``/``chown``/``utime`` of a file.

Network and signals (``guard.network``, ``guard.scopes``): with ABI 4 a TCP bind or connect reaches only the
job's port block and the kernel's ephemeral range (its own listeners: gloo's pairs, an in-process engine's
store), so a scheduler's daemon (``sbatch`` to ``slurmctld``), a server or another job's block is refused; with
ABI 6 a signal or an abstract unix socket reaches only processes of the job's own domain. UDP and pathname unix
sockets stay open (Landlock has no rule for them).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import os
import platform
from pathlib import Path

from facts.processes import JOB_WRITABLE_DEVICES, JOB_WRITABLE_SYSTEM_DIRS

PR_SET_NO_NEW_PRIVS = 38
# linux/landlock.h; the syscall numbers are the same on every architecture (added after the tables were unified)
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
# Every right that changes the file system (ABI 1), then REFER (ABI 2: a rename or link across directories)
# and TRUNCATE (ABI 3). Reading and executing are not handled: they stay allowed everywhere.
_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE, _MAKE_CHAR, _MAKE_DIR, _MAKE_REG = 1 << 1, 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
_MAKE_SOCK, _MAKE_FIFO, _MAKE_BLOCK, _MAKE_SYM, _REFER, _TRUNCATE = 1 << 9, 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14
_WRITES_ABI1 = (_WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG | _MAKE_SOCK | _MAKE_FIFO
                | _MAKE_BLOCK | _MAKE_SYM)
# ABI 4: TCP bind and connect, by port. ABI 6: scopes (a signal, or a connect to an abstract unix socket, reaches
# only processes of the same Landlock domain or one nested in it).
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
LANDLOCK_RULE_NET_PORT = 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
# The kernel picks a port of this range for a socket bound to port 0 and for an outgoing connection: a job's own
# listeners there (gloo's pairs, an in-process engine's store) are reached by connecting to it.
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
LANDLOCK = "landlock"


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in linux/landlock.h
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def ephemeral_ports() -> range:
    """The kernel's ephemeral port range (Linux's default 32768-60999 where it cannot be read)."""
    try:
        low, high = (int(v) for v in Path(EPHEMERAL_RANGE).read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> tuple[int, str | None]:
    """The kernel's Landlock ABI version, or 0 and why there is none."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return 0, f"no Landlock on {platform.system()} {platform.machine()}"
    abi = _libc().syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION)
    if abi > 0:
        return abi, None
    code = ctypes.get_errno()
    why = {errno.ENOSYS: "the kernel has no Landlock (Linux 5.13 or later, CONFIG_SECURITY_LANDLOCK)",
           errno.EOPNOTSUPP: "Landlock is built in but not enabled at boot (lsm=...,landlock)"}
    return 0, why.get(code, f"landlock_create_ruleset failed ({os.strerror(code)})")


class WriteGuard:
    """A Landlock ruleset built in the runtime (``ruleset_fd``); ``restrict`` applies it to the child between fork
    and exec. Writes only below ``roots``, the kernel's own directories and the devices a job needs; where the ABI
    has them (4), TCP bind and connect only to ``ports`` (the job's port block), the kernel's ephemeral range and
    ``extra_ports``; (6) signals and abstract unix sockets only within the job. ``ports`` None: no network rules."""

    def __init__(self, roots: list[Path], ports: range | None = None, extra_ports: tuple[int, ...] = (),
                 ports_are: str = "the job's port block") -> None:
        self.ruleset_fd: int | None = None
        self.ports_are = ports_are  # what ``ports`` is, for the record
        self.abi = 0  # the ABI the ruleset was built for; 0: none was
        self.roots = sorted({str(Path(r)) for r in roots})
        self.ports, self.extra_ports = ports, tuple(sorted(set(extra_ports)))
        self.ephemeral = ephemeral_ports()
        abi, self.unavailable = landlock_abi()
        if abi:
            self.unavailable = self._build(abi)

    def _build(self, abi: int) -> str | None:
        handled = _WRITES_ABI1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
        net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 and self.ports is not None else 0
        scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
        libc = _libc()
        attr = _RulesetAttr(handled, net, scoped)
        size = 8 if abi < 4 else 16 if abi < 6 else ctypes.sizeof(attr)  # what the kernel's ABI knows of the struct
        fd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
        if fd < 0:
            return f"landlock_create_ruleset failed ({os.strerror(ctypes.get_errno())})"
        problem = self._add_paths(libc, fd, handled) or (self._add_ports(libc, fd, net) if net else None)
        if problem:
            os.close(fd)
            return problem
        self.ruleset_fd, self.abi = fd, abi
        return None

    def _add_paths(self, libc, fd: int, handled: int) -> str | None:
        file_rights = handled & (_WRITE_FILE | _TRUNCATE)  # all a rule on a file (a device node) may allow
        devices = sorted({d for pattern in JOB_WRITABLE_DEVICES for d in glob.glob(pattern)})
        for root in (*self.roots, *JOB_WRITABLE_SYSTEM_DIRS, *devices):
            try:
                parent = os.open(root, os.O_PATH | os.O_CLOEXEC)
            except OSError as exc:
                if root not in self.roots:
                    continue  # a machine without /proc or /dev/shm mounted: nothing to allow there
                return f"cannot open {root} for its rule ({exc.strerror})"
            try:
                rights = handled if os.path.isdir(root) else file_rights
                rule = _PathBeneathAttr(rights, parent)
                if libc.syscall(SYS_LANDLOCK_ADD_RULE, fd, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    return f"landlock_add_rule for {root} failed ({os.strerror(ctypes.get_errno())})"
            finally:
                os.close(parent)
        return None

    def _add_ports(self, libc, fd: int, net: int) -> str | None:
        # Port 0: a bind the kernel gives an ephemeral port (a listener of the job's own, reached in that range).
        for port in sorted({0, *self.ports, *self.ephemeral, *self.extra_ports}):
            rule = _NetPortAttr(net, port)
            if libc.syscall(SYS_LANDLOCK_ADD_RULE, fd, LANDLOCK_RULE_NET_PORT, ctypes.byref(rule), 0) != 0:
                return f"landlock_add_rule for TCP port {port} failed ({os.strerror(ctypes.get_errno())})"
        return None

    def restrict(self) -> None:
        """In the child, before exec: no new privileges (Landlock's condition), then the ruleset; a child that
        cannot apply it exits 126 rather than run unguarded under a record that says it was guarded."""
        if self.ruleset_fd is None:
            return
        libc = _libc()
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
                libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, self.ruleset_fd, 0) != 0:
            os._exit(126)
        os.close(self.ruleset_fd)

    def close(self) -> None:
        if self.ruleset_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.ruleset_fd)
            self.ruleset_fd = None

    def describe(self, job_dir: Path) -> str:
        """What ``guard.writes`` records: the mechanism and where writes are allowed (path-free), or why none."""
        if not self.abi:
            return f"unguarded: {self.unavailable}"
        shown = []
        for root in self.roots:
            rel = os.path.relpath(root, job_dir)
            shown.append("<JOB_DIR>" if rel == "." else f"<JOB_DIR>/{rel}" if not rel.startswith("..")
                         else f"<SWEEP_DIR>/{Path(root).name}")
        return (f"{LANDLOCK} ABI {self.abi}: writes only below {', '.join([*shown, *JOB_WRITABLE_SYSTEM_DIRS])} "
                f"and to the devices {', '.join(JOB_WRITABLE_DEVICES)}")

    def describe_network(self) -> str:
        """What ``guard.network`` records: which TCP ports the job may bind and connect to, or why any."""
        if not self.abi:
            return f"unrestricted: {self.unavailable}"
        if self.abi < 4:
            return f"unrestricted: Landlock ABI {self.abi} has no network rules (ABI 4, Linux 6.7)"
        if self.ports is None:
            return "unrestricted: the job has no port block"
        extra = f", the declared ports {', '.join(map(str, self.extra_ports))}" if self.extra_ports else ""
        return (f"{LANDLOCK} ABI {self.abi}: TCP bind and connect only to {self.ports_are} ({len(self.ports)} "
                f"ports), the kernel's ephemeral range {self.ephemeral.start}-{self.ephemeral.stop - 1}{extra}")

    def describe_scopes(self) -> str:
        """What ``guard.scopes`` records: whom the job's processes may signal, or why anyone."""
        if not self.abi:
            return f"unscoped: {self.unavailable}"
        if self.abi < 6:
            return f"unscoped: Landlock ABI {self.abi} has no scopes (ABI 6, Linux 6.12)"
        return f"{LANDLOCK} ABI {self.abi}: signals and abstract unix sockets only within the job"

    def record(self, job_dir: Path) -> dict:
        """``job.json``'s ``guard`` entries this guard answers for."""
        return {"writes": self.describe(job_dir), "network": self.describe_network(), "scopes": self.describe_scopes()}
