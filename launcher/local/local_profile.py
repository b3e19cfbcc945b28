"""The local back end's checks of a sweep before anything runs: the profile, and that a job's CPUs and
GPUs exist on this machine."""

from __future__ import annotations

import os

from omegaconf import DictConfig

from launcher.errors import PreflightError
from launcher.job_sizing import GIB, Limits, gpu_name
from launcher.job_spec import MULTINODE_NEEDS_SLURM, allocation_shape


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
    nodes, tasks_per_node = allocation_shape(cluster)
    if nodes > 1 or tasks_per_node > 1:
        raise PreflightError(MULTINODE_NEEDS_SLURM.format(setting=f"cluster.nodes={nodes}" if nodes > 1
                                                          else f"cluster.tasks_per_node={tasks_per_node}"))


def check_resources(workload: DictConfig, cluster: DictConfig, dp_size: int = 1) -> None:
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


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def job_limits(cluster: DictConfig, workload: DictConfig, dry_run: bool) -> Limits:
    """This machine's memory, shared by the jobs that run at once (``local_concurrency``), and its first GPU's
    memory for a GPU workload; no time limit."""
    memory = machine_memory()
    concurrent = local_concurrency(int(workload.cpus_per_job), cluster.get("max_parallel"))
    gpu_memory, gpu_from, gpu_model = None, "", None
    if int(workload.gpus_per_job) > 0:
        import torch  # a GPU workload's plan imports it already (check_resources)

        if torch.cuda.device_count():
            props = torch.cuda.get_device_properties(0)
            gpu_memory, gpu_from = float(props.total_memory), f"this machine's GPU 0, {props.name}"
            gpu_model = gpu_name(props.name)
    return Limits(node_memory=float(memory) if memory else None,
                  node_memory_from=f"this machine's memory ({memory / GIB:.1f} GiB)" if memory else "",
                  concurrent=concurrent, gpu_model=gpu_model, gpu_memory=gpu_memory, gpu_memory_from=gpu_from,
                  time_from="local processes run until they end")


def check_environment(cluster: DictConfig, dry_run: bool) -> None:
    """Nothing beyond this Python: the jobs are its own processes."""
