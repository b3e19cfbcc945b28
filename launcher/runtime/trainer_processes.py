"""The trainer's processes: tied to the runtime's life, given time to exit, and what a job leaves behind.

The trainer runs in a process group of its own; the kernel kills it when its runtime dies (even by
SIGKILL), the runtime waits for the group's helpers on their way out, and ``leftovers`` lists
anything of the job still alive or held afterwards, which the job record keeps as an incident. The
runtime is the child subreaper of all it starts (``facts.processes.ProcessTree``): a process that left the
trainer's group and session, or its environment, is still below the runtime, so it is listed, then ended
(``JobProcesses.end``: scans, kills and reaps until several scans in a row find nothing, so a process that forks
and exits in a loop is caught as its generations pass through the subreaper) before the job's record is written;
a marked process outside the tree (started through a daemon with the job's environment) is ended too. Nothing
of the job writes after its end.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

from facts.processes import END_LIMIT_S, ProcessTree, command_line, marked_processes, stop_being_subreaper
from launcher.isolation import JobRoots
from launcher.ports import BLOCK_SIZE, PortBlock, listening_ports

PR_SET_PDEATHSIG = 1  # linux/prctl.h
GROUP_EXIT_GRACE_S = 15.0  # helpers of a finished trainer (torch's resource tracker) still exiting
# A killed process's /proc environ goes unreadable (its memory is released) before its sockets are
# closed, so a Ray raylet that ``leftover_processes`` no longer sees may still hold its listeners for
# a moment on a loaded node; a listener that closes within this grace was on its way out.
LISTENER_CLOSE_GRACE_S = 10.0


def die_with_parent(parent: int):
    """``preexec_fn`` of the trainer: the kernel SIGKILLs it when the runtime dies, even by SIGKILL
    (torch's spawned ranks in turn get SIGINT from their parent's death), so no trainer outlives
    its runtime. Checks the parent afterwards: it may have died before the prctl."""
    def tie() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return tie


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


def wait_for_group_exit(pgid: int, grace_s: float = GROUP_EXIT_GRACE_S) -> None:
    """Give what the trainer started (its ranks, torch's multiprocessing resource tracker) time to
    finish exiting: a helper still on its way out is not a leftover."""
    deadline = time.monotonic() + grace_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)


class JobProcesses(ProcessTree):
    """The job's processes, by descent from the runtime (made their child subreaper for the job): every process
    below it but those it had before the job began (a test's runtime runs in pytest's process)."""

    def settle(self, own: set[int], grace_s: float = GROUP_EXIT_GRACE_S) -> None:
        """Give the job's processes still on their way out ``grace_s`` to exit, reaping them as they do: what the
        trainer started outside its group (a container's monitor, podman's conmon, tidying up after its container
        exited; slow on a loaded node) is not a leftover for exiting a moment after the trainer. One still alive
        after it is (``leftovers``)."""
        deadline = time.monotonic() + grace_s
        while True:
            self.reap(own)
            if not self.alive() or time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    def end(self, own: set[int], limit_s: float = END_LIMIT_S) -> dict:
        """End them all however they fork (``ProcessTree.end``); then the runtime adopts no more."""
        try:
            return super().end(own, limit_s)
        finally:
            stop_being_subreaper()


def leftovers(roots: JobRoots, block: PortBlock, processes: JobProcesses | None = None) -> list[dict]:
    """Everything the job left behind: its processes (below the runtime, or carrying the job's environment
    marker), listeners on its ports, its Ray alias. Must be empty; a non-empty list is an incident."""
    found = marked_processes(roots.job_dir)
    if processes is not None:
        marked = {item["pid"] for item in found}
        found += [{"kind": "process", "pid": pid, "cmd": command_line(pid)} for pid in processes.alive() if pid not in marked]
    # Only listeners count: a port of the block that someone still *serves* on after the job.
    found += [{"kind": "port", "port": p} for p in still_listening(range(block.start, block.start + BLOCK_SIZE))]
    if roots.ray_alias.is_symlink() or roots.ray_alias.exists():
        found.append({"kind": "directory", "path": "<RAY_ALIAS>"})
    return found


def still_listening(ports: range, grace_s: float = LISTENER_CLOSE_GRACE_S) -> list[int]:
    """The ports of ``ports`` someone still listens on after ``grace_s`` (at once when none does)."""
    deadline = time.monotonic() + grace_s
    while (found := listening_ports(ports)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found
