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
from launcher.job_sizing import NotEstimated, estimate, judge
from launcher.job_spec import allocation_shape
from launcher.ports import port_base
from trainer.algorithms import AlgoConfigError
from trainer.inputs import InputDigestError, TaskError, check_task, resolve, verify_inputs
from trainer.lora import LoraError, check_targets, lora_settings
from trainer.run_config import RunConfigError, validate


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


def check_inputs(workload: DictConfig) -> dict:
    """The pinned inputs are the committed bytes, the workload's task fits its data (``trainer.inputs.check_task``:
    fields, answers, prompt template, chat template, reward), the eval subset fits in the test split, and a LoRA
    policy's target modules are Linear layers of the model (``trainer.lora``). Returns the task check's findings
    (the dry run shows its first rendered prompts)."""
    try:
        verify_inputs(workload.manifest, required=[workload.model_path, workload.train_path, workload.test_path])
        task = check_task(workload)
    except (InputDigestError, TaskError) as exc:
        raise PreflightError(f"workload {workload.name}: {exc}") from None
    check_model(workload)
    rows = task["test_rows"]
    if int(workload.eval.n_prompts) > rows:
        raise PreflightError(
            f"setting workload.eval.n_prompts={workload.eval.n_prompts} is refused: it must be <= {rows}, "
            f"the rows of the test split {workload.test_path}"
        )
    lora = lora_settings(workload)
    if lora is not None:
        try:
            check_targets(lora, resolve(workload.model_path), str(workload.model_path))
        except LoraError as exc:
            raise PreflightError(f"workload {workload.name}: {exc}") from None
    return task


def check_model(workload: DictConfig) -> None:
    """The workload's model is a Hugging Face model directory (an empty or half-copied one passes the pins,
    which cover only the files it has), and each response cap leaves room for a prompt within the model's
    positions (``max_position_embeddings``, from its config.json)."""
    import json

    from trainer.external.final_model import model_dir_problem

    model = resolve(workload.model_path)
    problem = model_dir_problem(model)
    if problem:
        raise PreflightError(f"workload {workload.name}: the model {workload.model_path} {problem}; put the model "
                             "there and pin it")
    try:
        positions = json.loads((model / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return  # the trainer's loader says what is wrong with it
    if isinstance(positions, bool) or not isinstance(positions, int):
        return
    for key, value in (("workload.max_response_len", workload.max_response_len),
                       ("workload.eval.max_response_len", workload.eval.max_response_len)):
        if int(value) >= positions:
            raise PreflightError(f"setting {key}={value} is refused: it must be < {positions}, the model's "
                                 f"max_position_embeddings ({workload.model_path}), which the prompt and the "
                                 "response share")


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


def check_size(job_cfg: DictConfig, cluster: DictConfig, dry_run: bool) -> tuple[list[str], list[str]]:
    """What a job of this config needs against what the back end gives it (``launcher.job_sizing``): the dry run's
    ``# estimate |`` lines and ``# limits |`` line, and the judge's warnings; a shortfall that cannot fit is a ``PreflightError``."""
    w = job_cfg.workload
    limits = backend(cluster.kind).job_limits(cluster, w, dry_run)
    nodes, tasks_per_node = allocation_shape(cluster)
    ranks = int(job_cfg.dp_size) if nodes * tasks_per_node == 1 else 1
    try:
        est = estimate(w, int(job_cfg.dp_size), ranks, limits.gpu_model, cluster.get("response_tok_per_s"))
    except NotEstimated as exc:
        return [f"# estimate | workload {w.name}: not estimated ({w.model_path}: {exc})", limits.line()], []
    findings = judge(est, limits, w)
    if findings and findings[0].refuse:
        raise PreflightError(findings[0].text)
    return [*(f"# estimate | {line}" for line in est.lines()), limits.line()], [f.text for f in findings]


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
