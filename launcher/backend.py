"""The back-end protocol: how a planned sweep's jobs reach a scheduler and how their states come back.

A back end is a module of ``launcher`` named in ``BACKENDS`` (``cluster.kind`` chooses it) that
provides the three functions of ``Backend``; a new scheduler is a new file and one entry here.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from launcher.plan import Sweep
    from launcher.spec import JobSpec

# cluster.kind -> the module implementing ``Backend``.
BACKENDS = {"local": "launcher.local", "slurm": "launcher.slurm"}


class SchedulerUnavailable(RuntimeError):
    """The scheduler could not be asked (e.g. the Slurm controller or accounting is unreachable)."""


class Backend(Protocol):
    def submit(self, sweep: Sweep, todo: list[JobSpec]) -> bool:
        """Start ``todo`` (job directories prepared); True when every job has ended, False when
        they were left queued or running (``wait=false``)."""

    def refresh_job_records(self, job_dirs: list[Path]) -> dict[str, str]:
        """Copy the scheduler's view of each job into its ``job.json``; returns job name -> state.
        Raises ``SchedulerUnavailable`` (or ``OSError``) when the scheduler cannot be asked."""

    def in_flight(self, record: dict) -> bool:
        """Is the job of this ``job.json`` record (in a queued or running state) really still alive?"""


def backend(kind: str) -> Backend:
    """The back end of ``cluster.kind``; imported only when a sweep really runs on it."""
    if kind not in BACKENDS:
        raise ValueError(f"unknown cluster.kind {kind!r}; choose one of {', '.join(sorted(BACKENDS))}")
    return importlib.import_module(BACKENDS[kind])


def refresh_job_records(job_dirs: list[Path], records: dict[Path, dict]) -> None:
    """Ask each back end that ran one of these jobs for its current view (records decide otherwise)."""
    by_kind: dict[str, list[Path]] = {}
    for job_dir in job_dirs:
        kind = records.get(job_dir, {}).get("scheduler")
        if kind in BACKENDS:
            by_kind.setdefault(kind, []).append(job_dir)
    for kind, dirs in sorted(by_kind.items()):
        backend(kind).refresh_job_records(dirs)
