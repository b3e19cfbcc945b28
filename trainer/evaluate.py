"""Fixed-subset evaluation with the unbiased pass@k estimator.

The same frozen subset (first ``n_prompts`` test rows), the same ``k`` and the same per-sample
sampling keys (derived from the eval seed, the row index and the sample index) are used for every
checkpoint, so the final checkpoint and the initial-checkpoint control are a paired comparison.
"""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

from trainer.data import Example, mix_seed, subset_digest
from trainer.reward import math_reward
from trainer.rollout import RolloutEngine, SamplingParams


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt with n samples, c correct: ``1 - C(n-c, k) / C(n, k)``."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def evaluate(engine: RolloutEngine, tokenizer, examples: list[Example], k: int, eval_seed: int,
             sampling: SamplingParams, checkpoint: str, responses_path: Path) -> dict:
    prompts, keys, owners = [], [], []
    for ex in examples:
        ids = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
        for j in range(k):
            prompts.append(ids)
            keys.append(mix_seed(eval_seed, ex.index, j))
            owners.append((ex, j))
    batch = engine.generate(prompts, keys, sampling)
    correct_per_prompt: dict[int, int] = {}
    rewards, lengths, truncated = [], [], 0
    responses_path.parent.mkdir(parents=True, exist_ok=True)
    with open(responses_path, "w", encoding="utf-8") as f:
        for (ex, j), gen in zip(owners, batch.generations):
            text = tokenizer.decode(gen.response_ids, skip_special_tokens=True)
            r = math_reward(text, ex.label)
            rewards.append(r)
            lengths.append(len(gen.response_ids))
            truncated += not gen.finished
            correct_per_prompt[ex.index] = correct_per_prompt.get(ex.index, 0) + int(r > 0)
            f.write(json.dumps({"index": ex.index, "sample": j, "response": text, "label": ex.label,
                                "reward": r, "length": len(gen.response_ids), "finished": gen.finished}) + "\n")
    n = len(rewards)
    summary = {
        "checkpoint": checkpoint,
        "n_prompts": len(examples),
        "k": k,
        "n_responses": n,
        "eval_seed": eval_seed,
        "subset_sha256": subset_digest(examples),
        "truncation": truncated / n,
        "mean_length": sum(lengths) / n,
        "mean_reward": sum(rewards) / n,
        "all_zero_reward": not any(rewards),
    }
    for kk in (1, 2, 4):
        if kk <= k:
            summary[f"pass@{kk}"] = sum(pass_at_k(k, c, kk) for c in correct_per_prompt.values()) / len(examples)
    return summary
