"""Is the process a local job's record names still that same process? (pid, start time, boot id)

A local job's ``job.json`` names its runtime by pid, process start time (clock ticks since boot, so
a reused pid is not mistaken for it), boot id and host. The launcher uses this to mark a dead job
FAILED; the evidence uses it so that ``evidence build`` never waits for a job nobody runs.
"""

from __future__ import annotations

import socket
from pathlib import Path

DEFAULT_RESOURCE_SAMPLE_S = 5.0  # cluster.resource_sample_s: how often a job's runtime samples its resources


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
