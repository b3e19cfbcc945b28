"""The global normaliser and reductions on a real two-process gloo group with real all_reduce.

Every scenario splits one global population over two ranks and compares the concatenated
per-rank outputs with the float64 reference computed on the unsplit population.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests import reference_math as ref
from tests.gloo import run_gloo

pytestmark = pytest.mark.distributed

F64 = torch.float64
TOL = {"atol": 1e-6, "rtol": 1e-6}

# Global population: 5 responses, T = 4; values are dyadic so sums are exact in any order.
VALUES = [[0.5, -1.25, 2.0, 99.0], [1.5, 99.0, 99.0, 99.0], [-0.75, 0.25, 3.5, 1.0],
          [2.25, -2.0, 99.0, 99.0], [0.0, 1.75, 0.5, 99.0]]
MASK = [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]]


def _scenarios():
    """name -> (values, mask, split row index): rank 0 gets rows [:split], rank 1 the rest."""
    one_token_mask = [[0] * 4 for _ in range(5)]
    one_token_mask[3][1] = 1
    g = torch.Generator().manual_seed(3)
    random_values = (torch.randn(5, 4, generator=g, dtype=F64) * 3 + 1).tolist()
    return {
        "random_1_4": (random_values, MASK, 1),
        "random_3_2": (random_values, MASK, 3),
        "unequal_1_4": (VALUES, MASK, 1),
        "unequal_4_1": (VALUES, MASK, 4),
        "even_ish_2_3": (VALUES, MASK, 2),
        "rank1_empty_rows": (VALUES, MASK, 5),    # rank 1 has no rows at all
        "rank0_all_masked": (VALUES, [[0, 0, 0, 0]] * 2 + MASK[2:], 2),
        "one_global_token": (VALUES, one_token_mask, 2),
        "zero_variance": ([[1.5] * 4] * 5, MASK, 3),
    }


def _normalize_on_rank(rank, world_size, group, scenarios):
    from trainer.algorithms import masked_global_normalize, reduce_loss

    results = {}
    for name, (values, mask, split) in scenarios.items():
        rows = slice(0, split) if rank == 0 else slice(split, None)
        v = torch.tensor(values, dtype=F64)[rows]
        m = torch.tensor(mask, dtype=torch.bool)[rows]
        v[~m] = float("nan")  # padding holds garbage on every rank
        out, mean, var, count = masked_global_normalize(v, m, group=group)
        reductions = {mode: reduce_loss(v, m, mode, group=group).item() for mode in ("token_mean", "response_mean", "sum")}
        results[name] = (out, mean.item(), var.item(), count.item(), reductions)
    # A globally empty mask must raise on *every* rank (and must not hang either of them).
    try:
        masked_global_normalize(torch.randn(2, 3, dtype=F64), torch.zeros(2, 3, dtype=torch.bool), group=group)
        results["empty_raised"] = False
    except RuntimeError as exc:
        results["empty_raised"] = "empty" in str(exc)
    return results


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory):
    return run_gloo(_normalize_on_rank, 2, tmp_path_factory.mktemp("gloo"), _scenarios())


@pytest.mark.parametrize("name", list(_scenarios()))
def test_two_rank_normalisation_equals_single_population_reference(rank_results, name):
    values, mask, _ = _scenarios()[name]
    expected, mu, var, n = ref.normalize(values, mask)
    out = torch.cat([rank_results[0][name][0], rank_results[1][name][0]])
    torch.testing.assert_close(out, torch.tensor(expected, dtype=F64), **TOL)
    assert torch.isfinite(out).all()
    assert torch.equal(out[~torch.tensor(mask, dtype=torch.bool)], torch.zeros(out.numel() - n, dtype=F64))
    for rank in (0, 1):  # every rank sees the same global moments
        _, mean_r, var_r, count_r, _ = rank_results[rank][name]
        assert math.isclose(mean_r, mu, rel_tol=1e-12, abs_tol=1e-15)
        assert math.isclose(var_r, var, rel_tol=1e-12, abs_tol=1e-15)
        assert count_r == n


def test_repartition_invariance_with_random_values(rank_results):
    a, b = (torch.cat([rank_results[0][s][0], rank_results[1][s][0]]) for s in ("random_1_4", "random_3_2"))
    torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)  # only the summation order differs


def test_repartition_invariance_is_exact(rank_results):
    splits = ["unequal_1_4", "unequal_4_1", "even_ish_2_3", "rank1_empty_rows"]
    outs = [torch.cat([rank_results[0][s][0], rank_results[1][s][0]]) for s in splits]
    for other in outs[1:]:
        assert torch.equal(outs[0], other)


@pytest.mark.parametrize("name", list(_scenarios()))
@pytest.mark.parametrize("mode", ["token_mean", "response_mean", "sum"])
def test_rank_shares_of_reductions_sum_to_the_global_reduction(rank_results, name, mode):
    values, mask, _ = _scenarios()[name]
    total = rank_results[0][name][4][mode] + rank_results[1][name][4][mode]
    assert math.isclose(total, ref.reduce(values, mask, mode), rel_tol=1e-12, abs_tol=1e-15)


def test_globally_empty_mask_raises_on_both_ranks(rank_results):
    assert rank_results[0]["empty_raised"] is True
    assert rank_results[1]["empty_raised"] is True


# DAPO's loss on two ranks: clip-higher (0.2 / 0.28) with the token mean over every rank's tokens.
DAPO_LOGP = [[0.3, -0.1, 0.05, 9.0], [-0.4, 9.0, 9.0, 9.0], [0.22, 0.1, -0.3, 0.0], [0.0, 0.2, 9.0, 9.0],
             [-0.25, 0.1, 0.3, 9.0]]
DAPO_ADV = [[1.0] * 4, [-1.0] * 4, [0.5] * 4, [-0.5] * 4, [2.0] * 4]


def _dapo_on_rank(rank, world_size, group, split):
    from trainer.algorithms import ppo_clip_token_loss, reduce_loss

    rows = slice(0, split) if rank == 0 else slice(split, None)
    mask = torch.tensor(MASK, dtype=torch.bool)[rows]
    logp = torch.tensor(DAPO_LOGP, dtype=F64)[rows]
    logp[~mask] = float("nan")
    logp.requires_grad_(True)
    old = torch.zeros_like(logp)
    token_loss, _ = ppo_clip_token_loss(logp, old, torch.tensor(DAPO_ADV, dtype=F64)[rows], mask, 0.2, 0.28)
    share = reduce_loss(token_loss, mask, "token_mean", group=group)
    (grad,) = torch.autograd.grad(share, logp)
    return share.item(), grad


@pytest.mark.parametrize("split", [1, 3])
def test_dapo_token_mean_on_two_ranks_weights_every_global_token_equally(tmp_path, split):
    shares = run_gloo(_dapo_on_rank, 2, tmp_path, split)
    n = sum(map(sum, MASK))
    exp_loss, _ = ref.ppo_token_loss(DAPO_LOGP, [[0.0] * 4] * 5, DAPO_ADV, MASK, 0.2, 0.28)
    assert math.isclose(shares[0][0] + shares[1][0], ref.reduce(exp_loss, MASK, "token_mean"), rel_tol=1e-12)
    # d/dlogp of the global token mean: -rho A / N where the unclipped branch is active, else 0.
    expected = []
    for lp_row, a_row, m_row in zip(DAPO_LOGP, DAPO_ADV, MASK):
        row = []
        for lp, a, m in zip(lp_row, a_row, m_row):
            rho = math.exp(lp)
            unclipped_active = -rho * a >= -min(max(rho, 0.8), 1.28) * a
            row.append(-rho * a / n if m and unclipped_active else 0.0)
        expected.append(row)
    grad = torch.cat([shares[0][1], shares[1][1]])
    torch.testing.assert_close(grad, torch.tensor(expected, dtype=F64), atol=1e-15, rtol=1e-12)
    # The case has tokens clipped above 1 + 0.28 and tokens between 1.2 and 1.28 that clip-higher keeps.
    assert any(1.2 < math.exp(lp) < 1.28 for lp in DAPO_LOGP[2][:1]) and math.exp(DAPO_LOGP[0][0]) > 1.28
