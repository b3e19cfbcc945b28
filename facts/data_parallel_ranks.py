"""The ranks of a data-parallel run: how a trainer learns it is one rank among processes a scheduler
started, what each rank records per step, and where the records of a job's ranks live.

A trainer given torch.distributed's ``env://`` variables (``RANK_ENV``: the names torchrun and
torch's own launchers set) is one rank of a job whose scheduler started one process per rank (one
per Slurm task); without them it starts its ``dp_size`` ranks itself. Every rank of a run with more
than one writes ``run/ranks/rank<r>.jsonl``: per step, ``step_digest`` of the step's metrics as every
rank holds them after the global reductions; the evidence checks that each rank wrote every step
and that all agree with the metrics log. A job of several tasks keeps each task's runtime record
in ``jobs/<job>/ranks/rank<r>/`` (rank 0's is the job's own ``job.json``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

# torch.distributed's env:// rendezvous and rank variables, as torchrun sets them.
MASTER_ADDR_ENV, MASTER_PORT_ENV = "MASTER_ADDR", "MASTER_PORT"
RANK_VAR, WORLD_SIZE_VAR, LOCAL_RANK_VAR, LOCAL_WORLD_SIZE_VAR = "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"
RANK_ENV = (RANK_VAR, WORLD_SIZE_VAR, LOCAL_RANK_VAR, LOCAL_WORLD_SIZE_VAR)
# How long the ranks of a job wait for each other before the job fails (seconds), set by the launcher.
RENDEZVOUS_TIMEOUT_ENV = "PROOFGRID_RENDEZVOUS_TIMEOUT_S"
DEFAULT_RENDEZVOUS_TIMEOUT_S = 300

# run.json: how many ranks wrote a step record (present when the run had more than one).
RANK_LOGS_FIELD = "rank_logs"
RANKS_DIR = "ranks"  # run/ranks/ (the trainer's step records), jobs/<job>/ranks/ (the runtimes' records)
RENDEZVOUS_RECORD = "rendezvous.json"  # jobs/<job>/ranks/rendezvous.json: what rank 0 published
# Keys of a metrics record that are not the step's reduced values: the step index, and the timings and
# memory each rank measures for itself.
PERF_PREFIX = "perf/"


def rank_name(rank: int) -> str:
    """``rank3``: a rank's file or directory name."""
    return f"rank{int(rank)}"


def rank_log(run_dir: str | Path, rank: int) -> Path:
    """Where rank ``rank`` of a run records its steps: ``<run>/ranks/rank<r>.jsonl``."""
    return Path(run_dir) / RANKS_DIR / f"{rank_name(rank)}.jsonl"


def rank_record_dir(job_dir: str | Path, rank: int) -> Path:
    """Where the runtime of rank ``rank`` of a job of several tasks keeps its record, log and roots:
    the job directory itself for rank 0, ``<job>/ranks/rank<r>/`` for the others."""
    return Path(job_dir) if int(rank) == 0 else Path(job_dir) / RANKS_DIR / rank_name(rank)


def step_digest(metrics: dict) -> str:
    """SHA256 of a step's reduced values: every key of its metrics record but ``step`` and ``perf/*``,
    as sorted JSON (floats as ``repr``, which round-trips, so a value read back from ``metrics.jsonl``
    gives the same digest as the value a rank held)."""
    values = {k: v for k, v in metrics.items() if k != "step" and not k.startswith(PERF_PREFIX)}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()
