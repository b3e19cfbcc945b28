"""The training–inference mismatch metrics and the identical-groups count (``trainer.mismatch``) against float64
references written here from their definitions (docs/engines.md)."""

from __future__ import annotations

import math

import torch

from facts.engines import MISMATCH_THRESHOLD
from trainer.mismatch import identical_groups, mismatch_sums

ENGINE = [[-0.5, -1.2, -0.2, 9.0], [-2.0, -0.1, 7.0, 7.0], [-0.3, -0.3, -0.9, -1.2]]
TRAINER = [[-0.5, -1.0, -0.21, -9.0], [-1.7, -0.1, 0.0, 0.0], [-0.31, -0.28, -0.95, -1.1]]
MASK = [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]


def test_the_mismatch_sums_are_the_definitions_over_valid_tokens_only():
    deltas = [e - t for re, rt, rm in zip(ENGINE, TRAINER, MASK) for e, t, m in zip(re, rt, rm) if m]
    got = mismatch_sums(torch.tensor(ENGINE), torch.tensor(TRAINER), torch.tensor(MASK))
    assert got.tokens == len(deltas) == 9
    assert math.isclose(got.abs_sum, sum(abs(d) for d in deltas), abs_tol=1e-6)
    assert math.isclose(got.abs_max, max(abs(d) for d in deltas), abs_tol=1e-6)  # 0.3, not the padding's 18
    assert math.isclose(got.k3_sum, sum(math.exp(-d) - 1 + d for d in deltas), abs_tol=1e-6)
    assert got.over_threshold == sum(abs(d) > MISMATCH_THRESHOLD for d in deltas) == 2


def test_the_k3_estimate_is_an_unbiased_kl_of_the_engine_from_the_trainer_on_the_engine_s_samples():
    """Samples from p (the engine); q the trainer: mean of exp(-(log p - log q)) - 1 + (log p - log q) -> KL(p||q)."""
    p, q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)
    exact = float((p * (p / q).log()).sum())
    draws = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    got = mismatch_sums(p.log()[draws][None], q.log()[draws][None], torch.ones(1, len(draws)))
    assert abs(got.k3_sum / got.tokens - exact) < 3e-3 and exact > 0.02


def test_a_group_is_identical_only_when_all_its_k_responses_are_the_same_tokens():
    responses = [[1, 2, 3], [1, 2, 3], [1, 2, 3],  # identical
                 [1, 2, 3], [1, 2], [1, 2, 3],  # one differs
                 [4], [4], [4]]  # identical
    assert identical_groups(responses, 3) == (2, 3)
    assert identical_groups([[1], [1]], 1) == (0, 2)  # a group of one has nothing to compare
