"""GSM8K-shaped prompt data: parquet with ``question`` and ``answer`` columns.

The order in which training prompts are consumed is a pure function of ``(seed, position)``: epoch
``e`` is a permutation drawn from a generator seeded with ``(seed, e)``, and step ``s`` takes the
global positions ``[s * P, (s + 1) * P)``. The data cursor of a checkpoint is therefore just the
number of prompts consumed, and any data-parallel split of a step sees the same prompts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from facts.evaluation import subset_bytes
from trainer.reward import normalize_label

PROMPT_TEMPLATE = "Question: {question}\nAnswer:"


@dataclass(frozen=True)
class Example:
    index: int  # row index in its split
    question: str
    label: str  # scalar target (normalised)

    @property
    def prompt(self) -> str:
        return PROMPT_TEMPLATE.format(question=self.question)


def load_split(path: str | Path) -> list[Example]:
    table = pq.read_table(path, columns=["question", "answer"])
    questions = table.column("question").to_pylist()
    answers = table.column("answer").to_pylist()
    return [Example(i, q, normalize_label(a)) for i, (q, a) in enumerate(zip(questions, answers))]


def subset_digest(examples: list[Example]) -> str:
    """SHA256 of the canonical JSON of a (frozen) subset (``facts.evaluation.subset_bytes``): its rows, order and
    scalar labels."""
    return hashlib.sha256(subset_rows_bytes(examples)).hexdigest()


def subset_rows_bytes(examples: list[Example]) -> bytes:
    """The subset file's bytes (``facts.files.EVAL_SUBSET``): what ``subset_digest`` hashes."""
    return subset_bytes([e.index, e.question, e.label] for e in examples)


def mix_seed(*parts: int) -> int:
    """A 63-bit seed derived from integers, stable across processes and Python versions."""
    digest = hashlib.sha256(",".join(str(int(p)) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class PromptStream:
    """Deterministic endless stream of training prompts (see the module docstring)."""

    def __init__(self, examples: list[Example], seed: int):
        if not examples:
            raise ValueError("the training split is empty")
        self.examples = examples
        self.seed = seed
        self._epoch_cache: dict[int, list[int]] = {}

    def _epoch_order(self, epoch: int) -> list[int]:
        if epoch not in self._epoch_cache:
            import torch  # here, not at module level: planning reads splits without the tensor library

            g = torch.Generator().manual_seed(mix_seed(self.seed, epoch, 0xDA7A))
            self._epoch_cache = {epoch: torch.randperm(len(self.examples), generator=g).tolist()}
        return self._epoch_cache[epoch]

    def at(self, position: int) -> Example:
        epoch, offset = divmod(position, len(self.examples))
        return self.examples[self._epoch_order(epoch)[offset]]

    def step_prompts(self, step: int, prompts_per_step: int) -> list[tuple[int, Example]]:
        """The step's prompts as ``(global position, example)``, in global order."""
        start = step * prompts_per_step
        return [(pos, self.at(pos)) for pos in range(start, start + prompts_per_step)]
