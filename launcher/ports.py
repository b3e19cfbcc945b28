"""Per-job port sets: every port a job may open comes from a block no other live job on the node holds.

A bind check alone is racy (two jobs can probe the same free port at the same moment). A block is
therefore *claimed* with exclusive ``flock``s on lock files named by ABSOLUTE port range (one file
per aligned ``BLOCK_SIZE``-port chunk the block overlaps), in ONE per-host, per-user directory that
does not depend on ``$TMPDIR`` or ``PROOFGRID_PORT_BASE``: jobs with different bases or per-job temp
dirs (usual on Slurm) still exclude each other. The kernel makes a claim atomic across processes and
releases it when the claiming process exits for any reason, including SIGKILL, so a killed job can
never leak its block. After the claim, every port of the block is bind-checked; a block with a port
taken by some other process (another user's job included) is released and skipped.

The lock directory is this user's own (0700, verified, never chmod-ed); lock files are opened with
``O_NOFOLLOW`` and never truncated or chmod-ed, so a planted symlink or foreign file is refused.

Layout of a block of ``BLOCK_SIZE`` consecutive ports starting at ``base + n * BLOCK_SIZE``:
named service ports first (``NAMED_PORTS``), then the Ray worker port range.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

from launcher.errors import PortLockError

# Below Linux's default ephemeral range (32768-60999): an outgoing connection of any process on
# the node may take an ephemeral port, so a block there could be occupied at any moment.
DEFAULT_BASE = 20000
BLOCK_SIZE = 64
DEFAULT_MAX_BLOCKS = 256
# Every listening port a job may open, in block order. Worker ports take the rest of the block.
NAMED_PORTS = (
    "ray_gcs",
    "ray_client_server",
    "ray_dashboard",
    "ray_dashboard_agent_grpc",
    "ray_dashboard_agent_listen",
    "ray_metrics_export",
    "ray_node_manager",
    "ray_object_manager",
    "ray_runtime_env_agent",
    "sglang_server",
    "sglang_nccl",
    "master_port",
)


# Candidate parents of the lock directory, first usable wins. Host-wide tmpfs first: Slurm sites
# often give each job a private /tmp, which would make claims invisible to the other jobs of a node.
LOCK_PARENTS = ("/dev/shm", "/tmp")
MIN_BASE = 1024  # below: privileged ports


def port_base(environ: dict[str, str] | None = None, max_blocks: int = DEFAULT_MAX_BLOCKS) -> int:
    """``PROOFGRID_PORT_BASE`` (default ``DEFAULT_BASE``): an integer with every block inside
    ``MIN_BASE``..65535."""
    raw = (os.environ if environ is None else environ).get("PROOFGRID_PORT_BASE")
    if raw is None:
        return DEFAULT_BASE
    highest = 65536 - max_blocks * BLOCK_SIZE
    text = raw.strip()
    if not text.isdigit() or not text.isascii() or (len(text) > 1 and text[0] == "0") \
            or not MIN_BASE <= int(text) <= highest:
        raise PortLockError(
            f"PROOFGRID_PORT_BASE={raw!r} is not a port base: use an integer in {MIN_BASE}..{highest} "
            f"({max_blocks} blocks of {BLOCK_SIZE} ports must fit below 65536), e.g. {DEFAULT_BASE}"
        )
    return int(text)


def default_lock_dir() -> Path:
    """This user's per-host directory of port claims (independent of ``$TMPDIR``)."""
    name = f"proofgrid-ports-{os.getuid()}"
    for parent in LOCK_PARENTS:
        if os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK):
            return Path(parent) / name
    raise PortLockError(f"none of {', '.join(LOCK_PARENTS)} is a writable directory for the port claims")


def open_lock_dir(lock_dir: Path) -> int:
    """An ``O_DIRECTORY|O_NOFOLLOW`` descriptor of ``lock_dir``, created 0700 when missing; refuses a
    symlink, a non-directory, another owner or group/other access (never chmod-s what it finds)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(lock_dir, 0o700)
    try:
        fd = os.open(lock_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise PortLockError(f"port lock directory {lock_dir} is not a plain directory ({exc.strerror}); "
                            "remove it so that it is re-created") from None
    info = os.fstat(fd)
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        os.close(fd)
        raise PortLockError(
            f"port lock directory {lock_dir} is owned by uid {info.st_uid} with mode "
            f"{stat.S_IMODE(info.st_mode):04o}; it must be yours and 0700: remove it so that it is re-created"
        )
    return fd


def _open_lock_file(dir_fd: int, name: str, lock_dir: Path) -> int:
    """Open (creating 0600) a regular lock file of ours without following a symlink."""
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise PortLockError(f"cannot open port lock {lock_dir / name} ({exc.strerror}); remove it") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        raise PortLockError(f"port lock {lock_dir / name} is not a regular file of yours; remove it")
    return fd


def chunk_lock_names(start: int, size: int = BLOCK_SIZE) -> list[str]:
    """Lock files covering ports ``start..start+size-1``: one per aligned ``BLOCK_SIZE`` chunk of the
    absolute port space, so any two overlapping blocks, whatever their bases, share a lock."""
    first, last = start // BLOCK_SIZE, (start + size - 1) // BLOCK_SIZE
    return [f"ports-{c * BLOCK_SIZE}-{(c + 1) * BLOCK_SIZE - 1}.lock" for c in range(first, last + 1)]


@dataclass
class PortBlock:
    index: int
    start: int
    ports: dict[str, int]
    worker_range: tuple[int, int]
    _lock_fds: list[int] = field(default_factory=list, repr=False)

    def as_record(self) -> dict:
        return {"block": [self.start, self.start + BLOCK_SIZE - 1], **self.ports,
                "ray_worker_ports": list(self.worker_range)}

    def release(self) -> None:
        while self._lock_fds:
            os.close(self._lock_fds.pop())  # closing the descriptor drops the flock

    def __enter__(self) -> PortBlock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``port``. SO_REUSEADDR makes connections lingering in
    TIME_WAIT count as free (they do not stop a new listener); a live listener still fails."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def listening_ports(ports: range) -> list[int]:
    """Ports of ``ports`` with a socket in LISTEN state on this node (from /proc/net/tcp{,6})."""
    wanted, found = set(ports), set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if fields[3] == "0A" and port in wanted:  # 0A = TCP_LISTEN
                found.add(port)
    return sorted(found)


def layout(index: int, base: int = DEFAULT_BASE) -> tuple[dict[str, int], tuple[int, int]]:
    start = base + index * BLOCK_SIZE
    ports = {name: start + i for i, name in enumerate(NAMED_PORTS)}
    return ports, (start + len(NAMED_PORTS), start + BLOCK_SIZE - 1)


def _try_lock_all(dir_fd: int, names: list[str], lock_dir: Path) -> list[int] | None:
    """Exclusive, non-blocking flocks on every named file, or None (and nothing held) if one is taken."""
    fds: list[int] = []
    for name in names:
        fd = _open_lock_file(dir_fd, name, lock_dir)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            for held in fds:
                os.close(held)
            return None
        fds.append(fd)
    return fds


def claim_port_block(lock_dir: Path | None = None, base: int | None = None,
                     max_blocks: int = DEFAULT_MAX_BLOCKS) -> PortBlock:
    """Claim the first block that no live job holds and whose ports are all free to bind."""
    lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir()
    base = port_base(max_blocks=max_blocks) if base is None else base
    if base < MIN_BASE or base + max_blocks * BLOCK_SIZE > 65536:
        raise PortLockError(f"port base {base} with {max_blocks} blocks of {BLOCK_SIZE} leaves {MIN_BASE}..65535")
    eph_low, eph_high = ephemeral_range()
    dir_fd = open_lock_dir(lock_dir)
    try:
        for index in range(max_blocks):
            start = base + index * BLOCK_SIZE
            if start <= eph_high and start + BLOCK_SIZE - 1 >= eph_low:
                continue  # overlaps the ephemeral range: never hand it out
            fds = _try_lock_all(dir_fd, chunk_lock_names(start), lock_dir)
            if fds is None:
                continue  # a live job holds (part of) this range
            if all(port_is_free(p) for p in range(start, start + BLOCK_SIZE)):
                ports, workers = layout(index, base)
                return PortBlock(index, start, ports, workers, fds)
            for fd in fds:  # some other process uses a port of this block: skip it
                os.close(fd)
    finally:
        os.close(dir_fd)
    raise RuntimeError(
        f"no free port block among {max_blocks} blocks of {BLOCK_SIZE} from port {base} (outside the ephemeral "
        f"range {eph_low}-{eph_high}) in {lock_dir}; set PROOFGRID_PORT_BASE to another range"
    )
