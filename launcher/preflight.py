"""Checks that need no compute, run before anything is submitted (and in dry runs).

Each failure is a ``PreflightError`` with a one-line message naming the problem and the fix. What
only one back end knows (a Slurm profile's formats, this machine's cores, the scheduler's
commands) is that back end's own check, asked through ``launcher.backend``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from omegaconf import DictConfig

from facts.repo import REPO_ROOT
from launcher.backend import backend
from launcher.errors import PortLockError, PreflightError
from launcher.ports import port_base
from launcher.spec import allocation_shape
from trainer.algorithms import AlgoConfigError
from trainer.config import RunConfigError, validate
from trainer.inputs import InputDigestError, pinned_rows, resolve, verify_inputs


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
    try:
        digests = verify_inputs(workload.manifest, required=[workload.model_path, workload.train_path,
                                                             workload.test_path])
    except InputDigestError as exc:
        raise PreflightError(f"workload {workload.name}: {exc}") from None
    rows = pinned_rows(workload.manifest, workload.test_path)  # the digest above vouches for the bytes
    if rows is None:  # a manifest pinned before splits had their rows stated: read the split
        # The split reader (pyarrow, ~0.3 s) only for such a manifest: a shipped one states the rows.
        from trainer.data import load_split

        rows = len(load_split(resolve(workload.test_path)))
    if int(workload.eval.n_prompts) > rows:
        raise PreflightError(
            f"setting workload.eval.n_prompts={workload.eval.n_prompts} is refused: it must be <= {rows}, "
            f"the rows of the test split {workload.test_path}"
        )
    return digests


def check_resources(workload: DictConfig, cluster: DictConfig, dp_size: int = 1) -> None:
    """The CPUs given to a job must cover the trainer plus its reward workers (seed 000's smoke runs
    that could not schedule their actors), and the back end must be able to give them. A job of one
    task holds all ``dp_size`` ranks; a job of several tasks (``allocation_shape``) one rank per task."""
    nodes, tasks_per_node = allocation_shape(cluster)
    ranks = int(dp_size) if nodes * tasks_per_node == 1 else 1  # the back end checks dp_size against the tasks
    need = ranks * (1 + int(workload.reward_workers))  # every data-parallel rank has its own workers
    cpus = int(workload.cpus_per_job)
    if cpus < need:
        raise PreflightError(
            f"workload.cpus_per_job={cpus} cannot hold {ranks} trainer rank(s) plus {workload.reward_workers} "
            f"reward worker(s) each ({need} CPUs); set workload.cpus_per_job>={need}"
        )
    backend(cluster.kind).check_resources(workload, cluster, int(dp_size))


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


def remove_empty_dir(directory: Path) -> None:
    """Remove ``directory`` if it is empty, then each parent that this leaves empty, up to the current
    directory: an experiment (which runs in its own directory) or a command refused before anything ran
    leaves no empty ``outputs/runs/<time>/`` or sweep directory behind. Whatever a run wrote stays."""
    cwd, directory = Path.cwd().resolve(), Path(directory).resolve()
    while directory != cwd:
        try:
            directory.rmdir()  # refuses a directory that holds anything
        except OSError:
            return
        if cwd not in directory.parents:
            return
        directory = directory.parent


def check_port_base() -> int:
    try:
        return port_base()
    except PortLockError as exc:
        raise PreflightError(str(exc)) from None


def check_launch_environment(sweep_dir: Path, cluster: DictConfig, dry_run: bool) -> None:
    """Everything outside the config the launch needs, checked before anything is submitted."""
    check_port_base()
    backend(cluster.kind).check_environment(cluster, dry_run)
    check_sweep_dir(Path(sweep_dir))
