"""Job isolation: every job gets its own roots (Ray temp, caches, TMPDIR, output) under its job
directory and an environment that points every tool at them, so nothing is written to ``~/.ray``,
``/tmp/ray``, ``~/.cache`` or another job's files.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from facts import run_dir_of_job
from facts.data_parallel_ranks import MASTER_ADDR_ENV, MASTER_PORT_ENV, RANK_ENV, RENDEZVOUS_TIMEOUT_ENV
from facts.files import JOB_ROOTS_DIR
from facts.processes import JOB_MARKER_ENV

# Unix socket paths are limited to 107 bytes, and Ray puts its sockets several levels below its
# temp dir; a job directory deep in a sweep tree would overflow that. Ray therefore gets a short
# node-local alias (a symlink in the system temp dir) that points into the job directory, removed
# when the job ends.
RAY_ALIAS_PREFIX = "pgray-"


@dataclass(frozen=True)
class JobRoots:
    """A runtime's roots under ``job_dir`` (the job directory; for rank r > 0 of a job of several tasks,
    its own ``<job>/ranks/rank<r>/``, so that ranks sharing a machine never share a Ray alias or a
    process marker) and the trainer's output directory, ``run_dir`` (default ``<job_dir>/run``)."""

    job_dir: Path
    run_dir: Path | None = None

    @property
    def ray(self) -> Path:
        return self.job_dir / JOB_ROOTS_DIR / "ray"

    @property
    def cache(self) -> Path:
        return self.job_dir / JOB_ROOTS_DIR / "cache"

    @property
    def tmp(self) -> Path:
        return self.job_dir / JOB_ROOTS_DIR / "tmp"

    @property
    def output(self) -> Path:
        return self.run_dir if self.run_dir is not None else run_dir_of_job(self.job_dir)

    @property
    def ray_alias(self) -> Path:
        digest = hashlib.sha256(str(self.job_dir.resolve()).encode()).hexdigest()[:10]
        return Path(tempfile.gettempdir()) / f"{RAY_ALIAS_PREFIX}{digest}"

    def create(self) -> None:
        for d in (self.ray, self.cache, self.tmp, self.output):
            d.mkdir(parents=True, exist_ok=True)
        alias = self.ray_alias
        if alias.is_symlink() or alias.exists():
            if alias.resolve() != self.ray.resolve():
                raise RuntimeError(f"Ray alias {alias} already points elsewhere; remove it")
        else:
            alias.symlink_to(self.ray.resolve(), target_is_directory=True)

    def remove_alias(self) -> None:
        if self.ray_alias.is_symlink():
            self.ray_alias.unlink()

    def as_record(self) -> dict[str, str]:
        """Roots relative to the job directory (job.json is path-free by construction)."""
        return {name: os.path.relpath(getattr(self, name), self.job_dir)
                for name in ("ray", "cache", "tmp", "output")}


def isolated_env(roots: JobRoots, ports: dict[str, int] | None, base_env: dict[str, str]) -> dict[str, str]:
    """The job's environment: ``base_env`` with every cache, temp and port variable pointed at the job."""
    cache = roots.cache
    env = dict(base_env)
    env.update({
        "PYTHONNOUSERSITE": "1",
        "TMPDIR": str(roots.tmp),
        "TMP": str(roots.tmp),
        "TEMP": str(roots.tmp),
        "XDG_CACHE_HOME": str(cache / "xdg"),
        "HF_HOME": str(cache / "huggingface"),
        "HF_HUB_OFFLINE": "1",  # no model or data is ever downloaded at run time
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TORCH_HOME": str(cache / "torch"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor"),
        "CUDA_CACHE_PATH": str(cache / "nv"),
        "MPLCONFIGDIR": str(cache / "matplotlib"),
        "SGLANG_CACHE_DIR": str(cache / "sglang"),
        "FLASHINFER_WORKSPACE_BASE": str(cache / "flashinfer"),
        "RAY_TMPDIR": str(roots.ray_alias),
        "RAY_AUTH_MODE": "disabled",  # Ray 2.60 would otherwise write ~/.ray/auth_token
        "RAY_USAGE_STATS_ENABLED": "0",
        JOB_MARKER_ENV: str(roots.job_dir),
    })
    env.pop("RAY_ADDRESS", None)  # never attach to somebody else's cluster
    for name in RANK_ENV:  # a stray rank variable would make a job's one trainer a rank of somebody's job
        env.pop(name, None)
    if ports:
        env[MASTER_ADDR_ENV] = "127.0.0.1"
        env[MASTER_PORT_ENV] = str(ports["master_port"])
        env["PROOFGRID_SGLANG_NCCL_PORT"] = str(ports["sglang_nccl"])  # sglang --nccl-port
        env["PROOFGRID_SGLANG_PORT"] = str(ports["sglang_server"])
    return env


def rank_env(address: str, port: int | str, rank: int | str, world: int, local_rank: int | str, local_world: int,
             timeout_s: int) -> dict[str, str]:
    """What the trainer of one rank of a job of several tasks is given: torch.distributed's ``env://``
    variables (the rendezvous at rank 0's node, this rank's place) and how long to wait for the others."""
    values = dict(zip(RANK_ENV, (rank, world, local_rank, local_world)))
    return {MASTER_ADDR_ENV: str(address), MASTER_PORT_ENV: str(port), **{k: str(v) for k, v in values.items()},
            RENDEZVOUS_TIMEOUT_ENV: str(timeout_s)}


def ecosystem_env(roots: JobRoots) -> dict[str, str]:
    """What a trainer that is not proofgrid's may also write, pointed into the job (beside ``isolated_env``'s
    Hugging Face, Triton, TorchInductor and XDG caches): vLLM's cache, Weights & Biases offline with its
    run, cache and config directories, torch's extension builds (DeepSpeed, verl)."""
    cache = roots.cache
    return {
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
        "WANDB_MODE": "offline",  # nothing is sent anywhere from a job
        "WANDB_DIR": str(roots.job_dir / JOB_ROOTS_DIR / "wandb"),
        "WANDB_CACHE_DIR": str(cache / "wandb"),
        "WANDB_CONFIG_DIR": str(cache / "wandb-config"),
        "WANDB_DATA_DIR": str(cache / "wandb-data"),
    }


def env_diff(base: dict[str, str], env: dict[str, str]) -> dict[str, str | None]:
    """Variables the job changes relative to ``base`` (``None`` = removed), sorted by name."""
    keys = sorted(set(base) | set(env))
    return {k: env.get(k) for k in keys if base.get(k) != env.get(k)}
