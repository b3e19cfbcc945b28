"""The back-end protocol: what the launcher asks of a scheduler, from the checks before a sweep is
planned to the states of its jobs after they ran.

A back end is a module (or package) of ``launcher`` named in ``BACKENDS`` (``cluster.kind``
chooses it) that provides the functions of ``Backend``: ``launcher.local`` runs jobs as processes
of this machine, ``launcher.slurm`` as one Slurm job array. A new scheduler is a new package
beside ``launcher/slurm/`` and one entry here; the planner, the job-state rules and the entry
points ask only this protocol. Inside each job, the runtime takes the back end's hooks
(``launcher.runtime.JobHooks``) from the back end's own task entry.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Protocol

from omegaconf import DictConfig

from facts.backends import LOCAL, SLURM
from launcher.errors import PreflightError
from launcher.job_sizing import Limits
from launcher.job_spec import JobSpec, Sweep

# cluster.kind -> the module implementing ``Backend``.
BACKENDS = {LOCAL: "launcher.local", SLURM: "launcher.slurm"}


class Backend(Protocol):
    def check_profile(self, cluster: DictConfig, dry_run: bool, wait: bool) -> None:
        """Refuse (``PreflightError``) a profile or launcher setting this back end cannot honour;
        when not ``dry_run`` it may also ask the scheduler itself."""

    def check_resources(self, workload: DictConfig, cluster: DictConfig, dp_size: int) -> None:
        """Refuse a job of ``workload`` with ``dp_size`` ranks whose CPUs, GPUs or allocation (nodes,
        tasks per node) this back end cannot give it."""

    def job_limits(self, cluster: DictConfig, workload: DictConfig, dry_run: bool) -> Limits:
        """What this back end gives one job of ``workload``: memory per node, GPU memory, time, each with
        where it came from; ``launcher.job_sizing.judge`` holds the job's estimate against it. When not
        ``dry_run`` it may also ask the scheduler (a whole node's memory, a partition's time limit)."""

    def check_environment(self, cluster: DictConfig, dry_run: bool) -> None:
        """Refuse a launch from a machine that lacks what this back end runs (its commands)."""

    def describe(self, sweep: Sweep) -> list[str]:
        """What the back end would hand its scheduler, as dry-run lines (path-free, deterministic);
        printed before the jobs' own commands."""

    def submit(self, sweep: Sweep, todo: list[JobSpec]) -> bool:
        """Start ``todo`` (job directories prepared); True when every job has ended, False when
        they were left queued or running (``wait=false``)."""

    def refresh_job_records(self, job_dirs: list[Path]) -> dict[str, str]:
        """Copy the scheduler's view of each job into its ``job.json``; returns job name -> state.
        Raises ``SchedulerUnavailable`` (or ``OSError``) when the scheduler cannot be asked."""

    def in_flight(self, record: dict) -> bool:
        """Is the job of this ``job.json`` record (in a queued or running state) really still alive?"""


def backend(kind: str) -> Backend:
    """The back end of ``cluster.kind``. Imported by name when first asked: planning imports no
    scheduler's code it does not use (submitit, the Slurm watcher), and a back end may import the
    planner's data types without a circle."""
    if kind not in BACKENDS:
        raise PreflightError(f"setting cluster.kind={kind!r} is refused: it must be one of {', '.join(BACKENDS)}")
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
