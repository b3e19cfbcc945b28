"""The local back end's checks of a sweep before anything runs: the profile, and that a job's CPUs and
GPUs exist on this machine."""

from __future__ import annotations

import os

from omegaconf import DictConfig

from launcher.errors import PreflightError


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask: a Slurm allocation, taskset, a container)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def local_concurrency(cpus_per_job: int, max_parallel: int | None) -> int:
    cores = usable_cores()
    slots = max(1, cores // max(1, cpus_per_job))
    return max(1, min(slots, max_parallel)) if max_parallel else slots


def check_profile(cluster: DictConfig, dry_run: bool, wait: bool) -> None:
    if not wait:
        raise PreflightError("wait=false needs cluster=slurm: local jobs live only as long as the launcher")


def check_resources(workload: DictConfig, cluster: DictConfig) -> None:
    """A job's CPUs (and GPUs) must exist on this machine."""
    cpus, available = int(workload.cpus_per_job), usable_cores()
    if cpus > available:
        raise PreflightError(
            f"a job needs {cpus} CPUs (workload.cpus_per_job) but this machine has {available}; "
            "lower workload.cpus_per_job or use cluster=slurm"
        )
    if int(workload.gpus_per_job) > 0:
        # torch (seconds to import) only for a GPU workload: a CPU sweep's plan and dry run stay torch-free.
        import torch

        if torch.cuda.device_count() < int(workload.gpus_per_job):
            raise PreflightError(
                f"workload {workload.name} needs {workload.gpus_per_job} GPU(s) per job and "
                f"{torch.cuda.device_count()} are visible; run on a GPU node or cluster=slurm"
            )


def check_environment(cluster: DictConfig, dry_run: bool) -> None:
    """Nothing beyond this Python: the jobs are its own processes."""
