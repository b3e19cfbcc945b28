"""Job records: ``job.json`` and the expanded command in a full and a path-free form.

``command.json`` is what exactly ran: the trainer argv, the environment variables the job changed
(an env diff, never the whole environment, so no unrelated secret is copied), the working
directory, and the sbatch script when Slurm ran it. ``command.public.json`` is the same with
machine paths, user and host names replaced by placeholders (``evidence.seal.sanitize``).
"""

from __future__ import annotations

import fcntl
import json
import sys
from pathlib import Path

from evidence.gates.ranks import RENDEZVOUS_ADDRESS_PLACEHOLDER
from evidence.seal.sanitize import SECRET_PLACEHOLDER, Sanitizer, command_line_secrets
from facts import atomic_write_json
from facts.data_parallel_ranks import MASTER_ADDR_ENV
from facts.files import COMMAND_PUBLIC_RECORD, COMMAND_RECORD, JOB_RECORD
from launcher.container import container_literals
from launcher.job_spec import JobSpec

_write_json = atomic_write_json


def read_job_record(job_dir: Path) -> dict:
    path = Path(job_dir) / JOB_RECORD
    return json.loads(path.read_text()) if path.is_file() else {}


def update_job_record(job_dir: Path, changes: dict, defaults: dict | None = None) -> dict:
    """Merge ``changes`` into ``job.json`` and return the new record.

    Two processes write it (the job runtime on the compute node, the launcher refreshing scheduler
    states), so the read-modify-write holds an exclusive lock on ``job.json.lock``; the write itself
    is an atomic replace, so readers never see a torn file. ``defaults`` only fill keys that are
    not there yet (the launcher's PENDING must not overwrite a fast job's RUNNING).
    """
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    with open(job_dir / (JOB_RECORD + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = {**(defaults or {}), **read_job_record(job_dir), **changes}
        _write_json(job_dir / JOB_RECORD, record)
    return record


def path_free_sanitizer(spec: JobSpec, repo_root: Path, literals: dict[str, str] | None = None) -> Sanitizer:
    return sweep_sanitizer(Path(spec.sweep_dir), repo_root, {str(spec.job_dir): "<JOB_DIR>",
                                                             **config_dir_literals(spec.config_dirs),
                                                             **container_literals(spec.container), **(literals or {})})


def config_dir_literals(config_dirs) -> dict[str, str]:
    """A job's extra config directories (``-cd``) as placeholders: ``<CONFIG_DIR>`` (``<CONFIG_DIR2>``, ...)."""
    return {str(d): f"<CONFIG_DIR{i + 1 if i else ''}>" for i, d in enumerate(config_dirs)}


def sweep_sanitizer(sweep_dir: Path, repo_root: Path, literals: dict[str, str] | None = None) -> Sanitizer:
    """Machine paths of a sweep's records as placeholders (plus the sanitiser's user, host, secrets)."""
    python_prefix = str(Path(sys.executable).parent)
    literals = {
        **(literals or {}),
        str(Path(sweep_dir)): "<SWEEP_DIR>",
        str(repo_root): "<REPO>",
        python_prefix: "<PYTHON_BIN>",
    }
    return Sanitizer.from_environment(literals=literals)


def public_copy(data, sanitizer: Sanitizer):
    """``data`` with every string sanitised (keys and values), structure unchanged; a list is also read as a
    command line (an argv): the value after a credential option (``--api-key``, ``--password``) is ``<SECRET>``
    (``evidence.seal.sanitize.command_line_secrets``, which the bundle's sanitiser and the leak scan ask too)."""
    if isinstance(data, dict):
        return {sanitizer.clean(str(k)): public_copy(v, sanitizer) for k, v in data.items()}
    if isinstance(data, list | tuple):
        secret = command_line_secrets(data)
        return [SECRET_PLACEHOLDER if i in secret else public_copy(v, sanitizer) for i, v in enumerate(data)]
    if isinstance(data, str):
        return sanitizer.clean(data)
    return data


def write_command_records(spec: JobSpec, argv: list[str], env_changes: dict, repo_root: Path,
                          sbatch: str | None = None) -> dict:
    """``command.json`` and its path-free copy; ``sbatch``: the scheduler's script that ran the job."""
    full = {"argv": list(argv), "env": env_changes, "cwd": str(repo_root), "sbatch": sbatch}
    _write_json(spec.job_dir / COMMAND_RECORD, full)
    address = env_changes.get(MASTER_ADDR_ENV)
    rendezvous = {address: RENDEZVOUS_ADDRESS_PLACEHOLDER} if address and not address.startswith("127.") else {}
    public = public_copy(full, path_free_sanitizer(spec, repo_root, rendezvous))  # another node's address too
    _write_json(spec.job_dir / COMMAND_PUBLIC_RECORD, public)
    return public
