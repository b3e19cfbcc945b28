"""The run's data ledger, ``run/data_ledger.jsonl`` (the format and the chain: ``facts.ledger_format``), written by rank 0.

A process plans the whole run from the split it loaded (every step's rows from the prompt stream), records a
start line, then one line per step it ran: the rows the step's prompt slots took, their content digest, the chain
value and the digest of the values it logged. A resumed process keeps every earlier line (the evidence reads a
start line at step ``r`` as superseding the lines of steps ``r`` on) and continues the chain from the last line of
step ``r - 1``; a run that starts at step 0 starts a new ledger.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from facts.data_parallel_ranks import step_digest
from facts.files import DATA_LEDGER
from facts.ledger_format import (
    LEDGER_FIELD,
    PROCESS_DRAW_BYTES,
    START,
    chain,
    genesis,
    planned_chain,
    rows_digest,
)
from facts.sweep_plan import JOB_NONCE_ENV
from trainer.data import PromptStream


def _step_rows(stream: PromptStream, step: int, rows_per_step: int) -> tuple[list[int], str]:
    """A step's rows as its prompt slots take them: their indices in the split and their content digest."""
    examples = [example for _, example in stream.step_prompts(step, rows_per_step)]
    return [e.index for e in examples], rows_digest((e.index, e.question, e.label) for e in examples)


class DataLedger:
    """Rank 0's ledger of one trainer process: ``open`` plans and records the start, ``write`` each step."""

    def __init__(self, run_dir: Path, stream: PromptStream, rows_per_step: int, n_steps: int, start_step: int,
                 train_sha256: str | None) -> None:
        self.path, self.stream, self.rows_per_step = Path(run_dir) / DATA_LEDGER, stream, rows_per_step
        self.plan = planned_chain(train_sha256, (_step_rows(stream, s, rows_per_step) for s in range(n_steps)))
        self.declaration = {"file": DATA_LEDGER, "plan_sha256": self.plan[-1] if self.plan else genesis(train_sha256),
                            "n_steps": n_steps, "rows_per_step": rows_per_step, "train_sha256": train_sha256}
        self.previous = genesis(train_sha256)
        kept: list[str] = []
        if start_step > 0 and self.path.exists():
            kept = self._resume_from(start_step)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, self.path)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run
        self._append({START: {
            "process": os.urandom(PROCESS_DRAW_BYTES).hex(), "pid": os.getpid(), "started_at": time.time(),
            "job_nonce": os.environ.get(JOB_NONCE_ENV) or None, "resumed_from": start_step,
            **{k: self.declaration[k] for k in ("n_steps", "rows_per_step", "train_sha256", "plan_sha256")}}})

    def _resume_from(self, start_step: int) -> list[str]:
        """The lines an earlier process left (all of them, a torn last line dropped); the chain continues from the
        last line of step ``start_step - 1`` (left at the genesis when there is none: the evidence names the gap)."""
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                break  # a torn last line from a killed process
            kept.append(line)
            if isinstance(record, dict) and record.get("step") == start_step - 1 and isinstance(record.get("chain"), str):
                self.previous = record["chain"]
        return kept

    def _append(self, record: dict) -> None:
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def record(self) -> dict:
        """run.json's ``data_ledger``: the file and the plan it holds the run to."""
        return {LEDGER_FIELD: dict(self.declaration)}

    def write(self, step: int, metrics: dict) -> None:
        """Step ``step``'s line: the rows its slots took, the chain, the plan's value there, the logged values' digest."""
        rows, digest = _step_rows(self.stream, step, self.rows_per_step)
        self.previous = chain(self.previous, step, rows, digest)
        self._append({"step": step, "rows": rows, "rows_sha256": digest, "chain": self.previous,
                      "plan": self.plan[step] if step < len(self.plan) else None, "metrics": step_digest(metrics)})

    def close(self) -> None:
        self._file.close()
