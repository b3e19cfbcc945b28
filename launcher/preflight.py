"""Checks that need no compute, run before anything is submitted (and in dry runs).

Each failure is a ``PreflightError`` with a one-line message naming the problem and the fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from omegaconf import DictConfig

from launcher.ports import PortLockError, port_base
from launcher.slurm_commands import not_on_path
from trainer.algorithms import AlgoConfigError
from trainer.config import RunConfigError, validate
from trainer.inputs import REPO_ROOT, InputDigestError, resolve, verify_inputs


class PreflightError(RuntimeError):
    """A check failed before submission; nothing was started."""


def source_state(repo: Path = REPO_ROOT) -> tuple[str | None, bool]:
    """``(commit, dirty)`` of the checkout; ``(None, False)`` outside a git work tree."""
    if shutil.which("git") is None:
        return None, False
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    if head.returncode != 0:
        return None, False
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                            capture_output=True, text=True)
    return head.stdout.strip(), bool(status.stdout.strip())


def check_source(formal: bool, repo: Path = REPO_ROOT) -> str | None:
    commit, dirty = source_state(repo)
    if formal and commit is None:
        raise PreflightError("formal=true needs a git checkout to record the source commit; run from a clone")
    if formal and dirty:
        raise PreflightError("formal=true refuses a dirty work tree (uncommitted tracked changes); commit or stash them")
    return commit


def check_job_config(job_cfg: DictConfig, name: str) -> None:
    try:
        validate(job_cfg)
    except (AlgoConfigError, RunConfigError) as exc:
        raise PreflightError(f"job {name}: {exc}") from None


def check_inputs(workload: DictConfig) -> dict[str, str]:
    """The pinned inputs are the committed bytes, and the eval subset fits in the test split."""
    from trainer.data import load_split

    try:
        digests = verify_inputs(workload.manifest, required=[workload.model_path, workload.train_path,
                                                             workload.test_path])
    except InputDigestError as exc:
        raise PreflightError(f"workload {workload.name}: {exc}") from None
    rows = len(load_split(resolve(workload.test_path)))
    if int(workload.eval.n_prompts) > rows:
        raise PreflightError(
            f"setting workload.eval.n_prompts={workload.eval.n_prompts} is refused: it must be <= {rows}, "
            f"the rows of the test split {workload.test_path}"
        )
    return digests


def check_resources(workload: DictConfig, cluster: DictConfig, dp_size: int = 1) -> None:
    """The CPUs given to a job must cover the trainer plus its reward workers (seed 000's smoke runs
    that could not schedule their actors), and the cluster must be able to give them."""
    ranks = int(dp_size)
    need = ranks * (1 + int(workload.reward_workers))  # every data-parallel rank has its own workers
    cpus = int(workload.cpus_per_job)
    if cpus < need:
        raise PreflightError(
            f"workload.cpus_per_job={cpus} cannot hold {ranks} trainer rank(s) plus {workload.reward_workers} "
            f"reward worker(s) each ({need} CPUs); set workload.cpus_per_job>={need}"
        )
    if cluster.kind == "local":
        from launcher.local import usable_cores

        available = usable_cores()
        if cpus > available:
            raise PreflightError(
                f"a job needs {cpus} CPUs (workload.cpus_per_job) but this machine has {available}; "
                "lower workload.cpus_per_job or use cluster=slurm"
            )
        if int(workload.gpus_per_job) > 0:
            import torch

            if torch.cuda.device_count() < int(workload.gpus_per_job):
                raise PreflightError(
                    f"workload {workload.name} needs {workload.gpus_per_job} GPU(s) per job and "
                    f"{torch.cuda.device_count()} are visible; run on a GPU node or cluster=slurm"
                )
    else:
        if int(cluster.cpus_per_task) < cpus:
            raise PreflightError(
                f"cluster.cpus_per_task={cluster.cpus_per_task} is less than the {cpus} CPUs a job of "
                f"workload {workload.name} needs; set cluster.cpus_per_task>={cpus}"
            )
        if int(workload.gpus_per_job) > 0 and not cluster.get("gres"):
            raise PreflightError(
                f"workload {workload.name} needs a GPU per job but cluster.gres is empty; "
                "set cluster.gres=gpu:<model>:1 (see conf/cluster/)"
            )


def check_visible_gpu(model: str | None) -> None:
    """Inside the allocation: the GPU the profile asked for is the one we got."""
    if not model:
        return
    try:
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        raise PreflightError(f"the job asked for a {model} GPU but nvidia-smi sees no GPU") from None
    if not any(model.lower() in n.lower() for n in names):
        raise PreflightError(f"the job asked for a {model} GPU but the visible devices are: {', '.join(names)}")


# What the Slurm back end runs: submission, accounting (states), cancellation.
SLURM_COMMANDS = ("sbatch", "sacct", "scancel")


def check_sweep_dir(sweep_dir: Path, setting: str = "hydra.sweep.dir") -> None:
    """The sweep directory is (or can become) a directory this user can write into."""
    for parent in (sweep_dir, *sweep_dir.parents):
        if parent.exists() and not parent.is_dir():
            raise PreflightError(f"{setting}: {parent} is a file, not a directory; choose another {setting}")
        if parent.exists():
            break
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        probe = sweep_dir / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"probe\n")
        probe.unlink()
    except OSError as exc:
        raise PreflightError(
            f"{setting}={sweep_dir} is not writable ({exc.strerror}); choose a writable {setting} "
            "or fix its permissions"
        ) from None


def check_scheduler_commands(cluster: DictConfig, dry_run: bool) -> None:
    """``cluster=slurm`` needs Slurm's commands here (a dry run submits nothing and needs none)."""
    if cluster.kind != "slurm" or dry_run:
        return
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if missing:
        raise PreflightError(f"cluster=slurm needs {not_on_path(missing)}, or use cluster=local")


def check_port_base() -> int:
    try:
        return port_base()
    except PortLockError as exc:
        raise PreflightError(str(exc)) from None


def check_launch_environment(sweep_dir: Path, cluster: DictConfig, dry_run: bool) -> None:
    """Everything outside the config the launch needs, checked before anything is submitted."""
    check_port_base()
    check_scheduler_commands(cluster, dry_run)
    check_sweep_dir(Path(sweep_dir))
