"""What a step's rollouts say about the engine: the training–inference mismatch of its log-probs and how many groups
had K identical responses (docs/engines.md; the keys are ``facts.metrics``'s).

Mismatch, per valid response token, with ``delta = logp_engine - logp_trainer`` (both of the sampled token under the
sampler's weights: the engine's own at sampling time, the trainer's teacher-forced forward):

    mismatch/logp_abs_diff_mean     mean |delta|
    mismatch/logp_abs_diff_max      max |delta|
    mismatch/kl_engine_trainer      mean (exp(-delta) - 1 + delta): the k3 estimate of KL(engine || trainer) on the
                                    engine's own samples (unbiased, >= 0 per token; Schulman's k3 with r = p_t / p_e)
    mismatch/tokens_over_threshold  share of tokens with |delta| > facts.engines.MISMATCH_THRESHOLD

Each is returned as what ``StepMetrics`` reduces across ranks: sums and a count, or a local maximum.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from facts.engines import MISMATCH_THRESHOLD


@dataclass(frozen=True)
class MismatchSums:
    """One rank's share of the mismatch metrics: sums over its valid tokens, their count and the local max."""

    abs_sum: float
    abs_max: float
    k3_sum: float
    over_threshold: float
    tokens: float


def mismatch_sums(logp_engine: torch.Tensor, logp_trainer: torch.Tensor, mask: torch.Tensor) -> MismatchSums:
    """The sums behind the mismatch metrics over the valid tokens of ``mask`` (values elsewhere never read)."""
    valid = mask.bool()
    zero = torch.zeros((), dtype=torch.float64, device=valid.device)
    delta = torch.where(valid, logp_engine.detach().double() - logp_trainer.detach().double(), zero)
    k3 = torch.where(valid, torch.exp(-delta) - 1.0 + delta, zero)
    magnitude = delta.abs()
    tokens = float(valid.sum())
    return MismatchSums(float(magnitude.sum()), float(magnitude.max()) if tokens else 0.0, float(k3.sum()),
                        float((magnitude > MISMATCH_THRESHOLD).logical_and(valid).sum()), tokens)


def identical_groups(responses: list[list[int]], group_size: int) -> tuple[int, int]:
    """``(groups whose K responses are all the same token sequence, groups)`` of responses listed group by group
    (K contiguous per prompt). A group of one is never counted identical: there is nothing to compare."""
    groups = [responses[i:i + group_size] for i in range(0, len(responses), group_size)]
    same = sum(1 for g in groups if len(g) > 1 and all(r == g[0] for r in g[1:]))
    return same, len(groups)
