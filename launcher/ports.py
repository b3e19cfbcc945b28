"""Per-job port sets: every port a job may open comes from a block no other live job on the node holds.

A bind check alone is racy (two jobs can probe the same free port at the same moment). A block is
therefore *claimed* with an exclusive ``flock`` on ``<lock dir>/block-<n>.lock``: the kernel makes
the claim atomic across processes, and releases it when the claiming process exits for any reason,
including SIGKILL, so a killed job can never leak its block. After the claim, every port of the
block is bind-checked; a block with a port taken by some other process is released and skipped.

Layout of a block of ``BLOCK_SIZE`` consecutive ports starting at ``base + n * BLOCK_SIZE``:
named service ports first (``NAMED_PORTS``), then the Ray worker port range.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

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
WORKER_PORTS = BLOCK_SIZE - len(NAMED_PORTS)


def default_lock_dir() -> Path:
    """Node-wide directory of block claims (shared by all jobs of all users of this node's /tmp)."""
    return Path(os.environ.get("PROOFGRID_PORT_LOCK_DIR", Path(tempfile.gettempdir()) / "proofgrid-port-blocks"))


@dataclass
class PortBlock:
    index: int
    start: int
    ports: dict[str, int]
    worker_range: tuple[int, int]
    _lock_fd: int | None = field(default=None, repr=False)

    def as_record(self) -> dict:
        return {"block": [self.start, self.start + BLOCK_SIZE - 1], **self.ports,
                "ray_worker_ports": list(self.worker_range)}

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

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


def claim_port_block(lock_dir: Path | None = None, base: int | None = None,
                     max_blocks: int = DEFAULT_MAX_BLOCKS) -> PortBlock:
    """Claim the first block that no live job holds and whose ports are all free to bind."""
    lock_dir = Path(lock_dir or default_lock_dir())
    if not lock_dir.is_dir():
        lock_dir.mkdir(parents=True, exist_ok=True)
        # Node-wide: every user's jobs claim from the same blocks (sticky, like /tmp).
        with contextlib.suppress(PermissionError):
            lock_dir.chmod(0o1777)
    base = int(os.environ.get("PROOFGRID_PORT_BASE", DEFAULT_BASE)) if base is None else base
    if base + max_blocks * BLOCK_SIZE > 65535:
        raise ValueError(f"port base {base} with {max_blocks} blocks of {BLOCK_SIZE} exceeds 65535")
    eph_low, eph_high = ephemeral_range()
    for index in range(max_blocks):
        start = base + index * BLOCK_SIZE
        if start <= eph_high and start + BLOCK_SIZE - 1 >= eph_low:
            continue  # overlaps the ephemeral range: never hand it out
        path = lock_dir / f"block-{index}.lock"
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
        except PermissionError:  # another user's lock file: a read-only descriptor can still flock it
            fd = os.open(path, os.O_RDONLY)
        else:
            with contextlib.suppress(PermissionError):
                os.fchmod(fd, 0o666)  # the umask must not lock other users out
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # a live job holds this block
        ports, workers = layout(index, base)
        if all(port_is_free(p) for p in range(base + index * BLOCK_SIZE, base + (index + 1) * BLOCK_SIZE)):
            with contextlib.suppress(OSError):  # informational only (read-only on others' files)
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            return PortBlock(index, base + index * BLOCK_SIZE, ports, workers, fd)
        os.close(fd)  # some other process uses a port of this block: skip it
    raise RuntimeError(
        f"no free port block among {max_blocks} blocks of {BLOCK_SIZE} from port {base} (outside the ephemeral "
        f"range {eph_low}-{eph_high}) in {lock_dir}; set PROOFGRID_PORT_BASE to another range"
    )
