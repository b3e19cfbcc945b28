"""A workload's prompt data: its splits read with the workload's field map (``facts.splits``: Parquet, JSON Lines or
a saved Hugging Face dataset), each row's prompt rendered as the workload says (``trainer.prompts``) and its
answer made the reward's label (``facts.reward``). The embedded default is GSM8K-shaped Parquet with
``question`` and ``answer`` columns and the prompt ``"Question: {question}\nAnswer:"``.

The order in which training prompts are consumed is a pure function of ``(seed, position)``: epoch
``e`` is a permutation drawn from a generator seeded with ``(seed, e)``, and step ``s`` takes the
global positions ``[s * P, (s + 1) * P)``. The data cursor of a checkpoint is therefore just the
number of prompts consumed, and any data-parallel split of a step sees the same prompts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from facts.evaluation import subset_bytes
from facts.reward import Reward, reward
from facts.splits import split_rows
from facts.task import DEFAULT_TEMPLATE, Task
from trainer.prompts import PromptRenderer

PROMPT_TEMPLATE = DEFAULT_TEMPLATE


@dataclass(frozen=True)
class Example:
    index: int  # row index in its split
    question: str  # the prompt field's text (chat data: its messages as JSON)
    label: str  # the reward's target (normalised)
    prompt: str  # the rendered prompt the policy sees
    row: dict | None = None  # the row's fields, kept where the reward is a user's function of them


def workload_task(workload) -> Task:
    """The task of a workload's settings (``workload.data``, ``.prompt``, ``.reward``; a mapping or a DictConfig)."""
    return Task.of(workload)


def workload_reward(workload) -> Reward:
    """The reward a workload's settings name (``workload.reward``: a built-in, or the user's function imported)."""
    return reward(workload_task(workload).reward)


def task_record(workload) -> dict:
    """run.json's ``task`` (and a non-default evaluation identity's): the workload's field map, prompt (and its
    SHA256) and reward (``facts.task``; a user's function with its source's SHA256)."""
    task = workload_task(workload)
    return task.record(reward(task.reward).record())


def load_split(path: str | Path, task: Task | None = None, tokenizer=None, scorer: Reward | None = None
               ) -> list[Example]:
    """The split at ``path`` as the workload's ``task`` reads it (default: the embedded default's), each row's
    prompt rendered (a chat prompt with ``tokenizer``); ``facts.splits.SplitError`` when it does not fit."""
    task = task or Task()
    scorer = scorer or reward(task.reward)
    rows = split_rows(path, task.fields, scorer.normalize)
    prompts = PromptRenderer(task, tokenizer).render_rows(rows, path)
    return [Example(r.index, r.question, r.label, prompt, r.row if scorer.takes_row else None)
            for r, prompt in zip(rows, prompts)]


def subset_digest(examples: list[Example]) -> str:
    """SHA256 of the canonical JSON of a (frozen) subset (``facts.evaluation.subset_bytes``): its rows, order and
    scalar labels."""
    return hashlib.sha256(subset_rows_bytes(examples)).hexdigest()


def subset_rows_bytes(examples: list[Example]) -> bytes:
    """The subset file's bytes (``facts.files.EVAL_SUBSET``): what ``subset_digest`` hashes."""
    return subset_bytes([e.index, e.question, e.label] + ([e.row] if e.row is not None else []) for e in examples)


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
