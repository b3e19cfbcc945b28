"""The data ledger: which training rows each step of a run consumed, written by the trainer as it runs and
checked by the evidence across every resume and requeue (the peers' resume bugs: verl#7401, a resume at an
epoch boundary that exits 0 having run nothing; verl#3457, a data order that changes after a resume;
NeMo-RL#2519, a changed dataset that silently skips samples).

``run/data_ledger.jsonl`` (``facts.files.DATA_LEDGER``), appended by rank 0 and never rewritten but for a
torn last line, holds:

- one start line per trainer process, ``{"start": {"process", "pid", "started_at", "job_nonce",
  "resumed_from", "n_steps", "rows_per_step", "train_sha256", "plan_sha256"}}``: who wrote what follows (a draw
  from the operating system's entropy made when the process started, its pid and start time, the launcher's
  per-job nonce when a launcher started it), the step it resumed at, and the plan of the whole run as that
  process computed it from its own training split: ``plan_sha256``, the last value of the chain below over
  every planned step;
- one line per step, ``{"step", "rows", "rows_sha256", "chain", "plan", "metrics"}``: the training rows the
  step consumed (their indices in the split, in order), the digest of their content, the chain value
  ``chain(previous, step, rows, rows_sha256)`` (the previous step's chain, ``genesis`` before step 0), the
  chain value the process's plan gives at that step, and ``facts.data_parallel_ranks.step_digest`` of the values the step
  logged to ``metrics.jsonl``.

A process that resumes at step ``r`` supersedes every line of the steps from ``r`` on. ``run.json``'s
``data_ledger`` (``LEDGER_FIELD``) declares the file and the plan; a run without it (another trainer's,
an older one) has no ledger to check.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

LEDGER_FIELD = "data_ledger"  # run.json: {"file", "plan_sha256", "n_steps", "rows_per_step", "train_sha256"}
START = "start"  # the key of a start line
PROCESS_DRAW_BYTES = 16  # the start line's ``process``: this many bytes of os.urandom, as hex


def _sha256(value) -> str:
    return hashlib.sha256(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def genesis(train_sha256: str | None) -> str:
    """The chain's value before step 0, bound to the training split's pinned SHA256 (None when unpinned)."""
    return _sha256(["proofgrid data ledger", train_sha256])


def rows_digest(rows: Iterable[tuple[int, str, str]]) -> str:
    """SHA256 of a step's rows as ``[[index, question, label], ...]`` (canonical JSON): their content, in order."""
    return _sha256([[int(i), str(q), str(a)] for i, q, a in rows])


def chain(previous: str, step: int, rows: list[int], rows_sha256: str) -> str:
    """The ledger's chain after ``step``: SHA256 of ``[previous, step, rows, rows_sha256]`` (canonical JSON)."""
    return _sha256([previous, int(step), [int(r) for r in rows], rows_sha256])


def planned_chain(train_sha256: str | None, steps: Iterable[tuple[list[int], str]]) -> list[str]:
    """The chain over a run's planned steps, ``(rows, rows_sha256)`` per step in order: one value per step (the
    last is the plan's ``plan_sha256``)."""
    values, value = [], genesis(train_sha256)
    for step, (rows, digest) in enumerate(steps):
        value = chain(value, step, rows, digest)
        values.append(value)
    return values
