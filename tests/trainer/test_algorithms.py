"""Seed 001 numerics against the independent float64 references in ``reference_math``.

Element-by-element comparisons at atol = rtol = 1e-6 on the seed's coverage list.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests import reference_math as ref
from trainer.algorithms import (
    group_baseline_advantages,
    grpo_advantages,
    k1_kl,
    k2_kl,
    kl_shaped_returns,
    masked_global_normalize,
    ppo_clip_token_loss,
    reduce_loss,
)

TOL = {"atol": 1e-6, "rtol": 1e-6}
F64 = torch.float64

# Response lengths [1, 3, 5] right-padded to T = 6, plus a length-5 response with an internal hole
# at t = 2 (four valid tokens). K = 2 responses per prompt.
MASK = [
    [1, 0, 0, 0, 0, 0],
    [1, 1, 1, 0, 0, 0],
    [1, 1, 1, 1, 1, 0],
    [1, 1, 0, 1, 1, 0],
]
REWARD = [1.0, 0.0, 1.0, 1.0]
LOGP_OLD = [[-0.5, -1.0, -2.0, -0.1, -0.7, -0.3],
            [-1.2, -0.4, -0.9, -1.5, -0.2, -0.6],
            [-0.3, -0.8, -1.1, -0.6, -0.9, -1.3],
            [-0.7, -0.2, -1.4, -0.5, -1.0, -0.4]]
LOGP_REF = [[-0.6, -1.1, -1.7, -0.4, -0.5, -0.2],
            [-1.0, -0.6, -1.0, -1.1, -0.4, -0.8],
            [-0.5, -0.7, -1.3, -0.2, -1.1, -1.0],
            [-0.4, -0.5, -1.0, -0.9, -0.6, -0.8]]


def t64(x):
    return torch.tensor(x, dtype=F64)


def mask_t(dtype=torch.bool):
    return torch.tensor(MASK).to(dtype)


def with_sentinel(values, sentinel):
    """Copy of ``values`` with ``sentinel`` stored at every position outside MASK."""
    out = t64(values).clone()
    out[~mask_t()] = sentinel
    return out


def assert_close_to(actual: torch.Tensor, expected) -> None:
    torch.testing.assert_close(actual.to(F64), t64(expected), **TOL)


def assert_exact_zero_outside_mask(x: torch.Tensor) -> None:
    outside = x[~mask_t()]
    assert torch.equal(outside, torch.zeros_like(outside)), outside


# --------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize("sentinel", [0.0, 123.0, float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int64, torch.float32])
def test_normalize_matches_reference_with_sentinels_outside_mask(sentinel, mask_dtype):
    values = [[0.5, 9, 9, 9, 9, 9], [1.0, -2.0, 0.25, 9, 9, 9], [3.0, 0.0, 1.5, -1.0, 2.0, 9], [0.1, 0.2, 9, 0.3, 0.4, 9]]
    expected, mu, var, n = ref.normalize(values, MASK)
    out, mean, v, count = masked_global_normalize(with_sentinel(values, sentinel), mask_t(mask_dtype))
    assert_close_to(out, expected)
    assert_exact_zero_outside_mask(out)
    assert torch.isfinite(out).all()
    assert math.isclose(mean.item(), mu, rel_tol=1e-12)
    assert math.isclose(v.item(), var, rel_tol=1e-12)
    assert count.item() == n == 13


def test_normalize_output_has_population_moments():
    torch.manual_seed(0)
    values = torch.randn(8, 16, dtype=F64) * 3 + 2
    mask = torch.rand(8, 16) < 0.6
    out, *_ = masked_global_normalize(values, mask)
    sel = out[mask]
    assert abs(sel.mean().item()) < 1e-12
    assert math.isclose(sel.var(unbiased=False).item(), 1.0, rel_tol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_normalize_random_shapes_against_reference(seed):
    g = torch.Generator().manual_seed(seed)
    B, T = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(1, 13, (1,), generator=g))
    values = torch.randn(B, T, generator=g, dtype=F64) * 5
    mask = torch.rand(B, T, generator=g) < 0.5
    mask[0, 0] = True
    expected, *_ = ref.normalize(values.tolist(), mask.tolist())
    out, *_ = masked_global_normalize(values, mask)
    assert_close_general(out, expected)


def assert_close_general(actual, expected):
    torch.testing.assert_close(actual.to(F64), t64(expected), **TOL)


def test_normalize_float32_input_keeps_dtype_and_accuracy():
    values = [[0.5, 9, 9, 9, 9, 9], [1.0, -2.0, 0.25, 9, 9, 9], [3.0, 0.0, 1.5, -1.0, 2.0, 9], [0.1, 0.2, 9, 0.3, 0.4, 9]]
    expected, *_ = ref.normalize(values, MASK)
    out, *_ = masked_global_normalize(torch.tensor(values, dtype=torch.float32), mask_t())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.to(F64), t64(expected), atol=1e-5, rtol=1e-5)


def test_normalize_float32_centres_in_float64_when_sigma_is_tiny_against_the_mean():
    # sigma << |mu|: a float32 mean subtracted in float32 was off by up to 7.5e-4 (the audit's case).
    gen = torch.Generator().manual_seed(3)
    values = (1000.0 + 1e-3 * torch.randn(64, 32, generator=gen, dtype=F64)).to(torch.float32)
    mask = torch.rand(64, 32, generator=gen) < 0.7
    expected, *_ = ref.normalize(values.to(F64).tolist(), mask.tolist())
    out, *_ = masked_global_normalize(values, mask)
    # Only the final cast to float32 may round: half an ulp of values of order 1.
    assert (out.to(F64) - t64(expected)).abs().max().item() < 1e-6


def test_normalize_zero_variance_gives_finite_zeros():
    # 0.7 is not dyadic, so the computed mean may differ from 0.7 by an ulp: the variance is
    # then ~1e-32, far below the floor, and the outputs are zeros to ~1e-12.
    values = with_sentinel([[0.7] * 6] * 4, float("nan"))
    out, _, var, _ = masked_global_normalize(values, mask_t())
    assert var.item() < 1e-30
    assert torch.isfinite(out).all() and out.abs().max().item() < 1e-9
    assert_exact_zero_outside_mask(out)
    exact, _, var, _ = masked_global_normalize(with_sentinel([[0.5] * 6] * 4, float("inf")), mask_t())
    assert var.item() == 0.0 and torch.equal(exact, torch.zeros_like(exact))


def test_normalize_single_valid_token_gives_finite_zero():
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[1, 2] = True
    values = torch.full((3, 4), float("inf"), dtype=F64)
    values[1, 2] = 42.0
    out, mean, var, count = masked_global_normalize(values, mask)
    assert torch.equal(out, torch.zeros_like(out))
    assert (mean.item(), var.item(), count.item()) == (42.0, 0.0, 1.0)


def test_normalize_variance_floor_is_a_floor_on_variance_not_std_plus_eps():
    values = t64([[0.0, 1e-5]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    out, _, var, _ = masked_global_normalize(values, mask, var_floor=1e-8)
    # var = 2.5e-11 < floor, so the scale is 1/sqrt(1e-8) = 1e4 exactly.
    assert_close_general(out, [[-0.5e-5 * 1e4, 0.5e-5 * 1e4]])


def test_normalize_empty_mask_raises_device_side_assertion():
    with pytest.raises(RuntimeError, match="empty"):
        masked_global_normalize(torch.randn(2, 3, dtype=F64), torch.zeros(2, 3, dtype=torch.bool))


# --------------------------------------------------------------------------- REINFORCE++ returns


@pytest.mark.parametrize("sentinel", [0.0, 55.0, float("nan"), float("inf")])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_kl_shaped_returns_match_reference(sentinel, gamma):
    beta = 0.01
    exp_r, exp_g = ref.shaped_returns(REWARD, LOGP_OLD, LOGP_REF, MASK, beta, gamma)
    r, g = kl_shaped_returns(
        t64(REWARD), with_sentinel(LOGP_OLD, sentinel), with_sentinel(LOGP_REF, sentinel), mask_t(), beta, gamma
    )
    assert_close_to(r, exp_r)
    assert_close_to(g, exp_g)
    assert_exact_zero_outside_mask(r)
    assert_exact_zero_outside_mask(g)


def test_terminal_reward_sits_on_the_last_valid_token_after_a_hole():
    r, _ = kl_shaped_returns(t64([0, 0, 0, 5.0]), t64(LOGP_OLD), t64(LOGP_OLD), mask_t(), kl_coef=0.01)
    assert r[3].tolist() == [0, 0, 0, 0, 5.0, 0]


def test_all_zero_reward_with_nonzero_kl_gives_finite_shaped_returns():
    beta = 0.05
    _, exp_g = ref.shaped_returns([0.0] * 4, LOGP_OLD, LOGP_REF, MASK, beta)
    _, g = kl_shaped_returns(torch.zeros(4, dtype=F64), t64(LOGP_OLD), t64(LOGP_REF), mask_t(), beta)
    assert_close_to(g, exp_g)
    assert g.abs().sum() > 0  # the KL term alone moves the return
    normalized, *_ = masked_global_normalize(g, mask_t())
    expected, *_ = ref.normalize(exp_g, MASK)
    assert_close_to(normalized, expected)


def test_k1_is_not_clamped():
    logp_old, logp_ref = t64([[0.0, 0.0]]), t64([[-50.0, 0.0]])
    r, _ = kl_shaped_returns(t64([0.0]), logp_old, logp_ref, torch.tensor([[1, 0]]), kl_coef=1.0)
    assert r[0, 0].item() == -50.0  # OpenRLHF would clamp the k1 term to -10


# --------------------------------------------------------------------------- group advantages


@pytest.mark.parametrize("reward", [REWARD, [0.0, 0.0, 0.0, 0.0], [0.3, 0.9, -1.0, 2.5]])
def test_group_baseline_advantages_match_reference(reward):
    out = group_baseline_advantages(t64(reward), mask_t(), group_size=2)
    assert_close_to(out, ref.baseline_advantages(reward, MASK, 2))
    assert_exact_zero_outside_mask(out)


def test_group_baseline_then_normalize_matches_reference():
    reward = [0.3, 0.9, -1.0, 2.5]
    raw = ref.baseline_advantages(reward, MASK, 2)
    expected, *_ = ref.normalize(raw, MASK)
    out, *_ = masked_global_normalize(group_baseline_advantages(t64(reward), mask_t(), 2), mask_t())
    assert_close_to(out, expected)


def test_all_zero_baseline_reward_gives_finite_zero_normalized_advantages():
    raw = group_baseline_advantages(torch.zeros(4, dtype=F64), mask_t(), 2)
    out, _, var, _ = masked_global_normalize(raw, mask_t())
    assert var.item() == 0.0 and torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("k", [0, 1])
def test_group_baseline_refuses_groups_smaller_than_two(k):
    with pytest.raises(ValueError, match="group_size"):
        group_baseline_advantages(t64(REWARD), mask_t(), group_size=k)


def test_group_baseline_refuses_ragged_groups():
    with pytest.raises(ValueError, match="not divisible"):
        group_baseline_advantages(t64(REWARD), mask_t(), group_size=3)


@pytest.mark.parametrize("std_normalize", [True, False])
@pytest.mark.parametrize("reward", [REWARD, [0.3, 0.9, -1.0, 2.5], [1.0, 1.0, 0.0, 0.0]])
def test_grpo_advantages_match_reference_sample_std(reward, std_normalize):
    out = grpo_advantages(t64(reward), mask_t(), group_size=2, std_normalize=std_normalize)
    assert_close_to(out, ref.grpo_advantages(reward, MASK, 2, std_normalize))
    assert_exact_zero_outside_mask(out)


def test_grpo_uses_bessel_corrected_std():
    # Group (0, 1): sample sd = 1/sqrt(2); population sd would be 1/2.
    out = grpo_advantages(t64([0.0, 1.0]), torch.ones(2, 1), group_size=2, eps=0.0)
    assert math.isclose(out[1, 0].item(), 0.5 * math.sqrt(2), rel_tol=1e-12)


# --------------------------------------------------------------------------- KL and PPO


def test_k1_and_k2_estimators():
    lp, lr = t64(LOGP_OLD), t64(LOGP_REF)
    k1_expected = [[a - b if m else 0.0 for a, b, m in zip(x, y, mr)] for x, y, mr in zip(LOGP_OLD, LOGP_REF, MASK)]
    assert_close_to(k1_kl(lp, lr, mask_t()), k1_expected)
    assert_close_to(k2_kl(lp, lr, mask_t()), ref.k2(LOGP_OLD, LOGP_REF, MASK))


@pytest.mark.parametrize("estimator", [k1_kl, k2_kl])
@pytest.mark.parametrize("sentinel", [float("nan"), float("inf"), -float("inf")])
def test_kl_estimators_give_finite_gradients_with_non_finite_masked_slots(estimator, sentinel):
    # The audit's defect: k2 computed before selection gave a finite loss but NaN gradients.
    lp = with_sentinel(LOGP_OLD, sentinel).requires_grad_(True)
    lr = with_sentinel(LOGP_REF, sentinel)
    value = reduce_loss(estimator(lp, lr, mask_t()), mask_t(), "token_mean")
    (grad,) = torch.autograd.grad(value, lp)
    assert torch.isfinite(value) and torch.isfinite(grad).all()
    assert_exact_zero_outside_mask(grad)
    # d/dlp of mean(d) is 1/N, of mean(0.5 d^2) is d/N on valid tokens.
    n = sum(map(sum, MASK))
    expected = [[(1.0 if estimator is k1_kl else a - b) / n if m else 0.0 for a, b, m in zip(x, y, mr)]
                for x, y, mr in zip(LOGP_OLD, LOGP_REF, MASK)]
    assert_close_to(grad, expected)


@pytest.mark.parametrize("mode", ["response_mean", "token_mean", "sum"])
def test_k2_response_reduced_loss(mode):
    expected = ref.reduce(ref.k2(LOGP_OLD, LOGP_REF, MASK), MASK, mode)
    tok = k2_kl(with_sentinel(LOGP_OLD, float("nan")), with_sentinel(LOGP_REF, float("nan")), mask_t())
    assert math.isclose(reduce_loss(tok, mask_t(), mode).item(), expected, rel_tol=1e-9, abs_tol=1e-12)


def ppo_case():
    """Ratios chosen to hit every branch: rho above 1+eps, below 1-eps and inside, with A > 0 and < 0."""
    logp_old = [[0.0] * 6 for _ in range(4)]
    logp = [[math.log(r) for r in row] for row in (
        [1.5, 1, 1, 1, 1, 1],              # rho > 1.2, A > 0: clipped (upper)
        [0.5, 1.1, 0.9, 1, 1, 1],          # rho < 0.8, A > 0: unclipped; inside
        [1.5, 0.5, 1.05, 0.7, 1.3, 1],     # A < 0: upper unclipped, lower clipped ...
        [0.6, 1.25, 0.95, 1.3, 0.7, 1],
    )]
    adv = [[1.0] * 6, [2.0] * 6, [-1.0] * 6, [-0.5, 0.5, -2.0, -0.5, 0.5, 0]]
    return logp, logp_old, adv


@pytest.mark.parametrize("sentinel", [0.0, float("nan"), float("inf")])
def test_ppo_clip_token_loss_matches_reference(sentinel):
    logp, logp_old, adv = ppo_case()
    exp_loss, exp_frac = ref.ppo_token_loss(logp, logp_old, adv, MASK)
    loss, frac = ppo_clip_token_loss(
        with_sentinel(logp, sentinel), with_sentinel(logp_old, sentinel), with_sentinel(adv, sentinel), mask_t()
    )
    assert_close_to(loss, exp_loss)
    assert_exact_zero_outside_mask(loss)
    assert math.isclose(frac.item(), exp_frac, rel_tol=1e-12)
    assert 0 < exp_frac < 1  # the case really exercises both branches


@pytest.mark.parametrize("sentinel", [0.0, float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize(("clip_low", "clip_high"), [(0.2, 0.2), (0.2, 0.28), (0.05, 0.5)])
def test_ppo_clip_gradient_matches_the_float64_reference_with_sentinels(sentinel, clip_low, clip_high):
    logp, logp_old, adv = ppo_case()
    adv[1][1] = 0.0  # a valid token with A = 0: both branches tie at 0, the slope is 0
    exp_grad = ref.ppo_token_loss_grad(logp, logp_old, adv, MASK, clip_low, clip_high)
    lp = with_sentinel(logp, sentinel).requires_grad_(True)
    lo = with_sentinel(logp_old, sentinel).requires_grad_(True)
    loss, _ = ppo_clip_token_loss(lp, lo, with_sentinel(adv, sentinel), mask_t(), clip_low, clip_high)
    grad_lp, grad_lo = torch.autograd.grad(loss.sum(), (lp, lo))
    for grad, sign in ((grad_lp, 1.0), (grad_lo, -1.0)):
        assert torch.isfinite(grad).all(), grad
        assert_exact_zero_outside_mask(grad)
        torch.testing.assert_close(grad, sign * t64(exp_grad), atol=1e-12, rtol=1e-12)
    assert any(g == 0.0 for row, mrow in zip(exp_grad, MASK) for g, m in zip(row, mrow) if m)  # clipped tokens
    assert any(g != 0.0 for row in exp_grad for g in row)  # and unclipped ones


@pytest.mark.parametrize("mode", ["response_mean", "token_mean", "sum"])
def test_ppo_clip_then_reduction_gradient_matches_the_float64_reference(mode):
    logp, logp_old, adv = ppo_case()
    token_grad = ref.ppo_token_loss_grad(logp, logp_old, adv, MASK)
    lengths = [sum(row) for row in MASK]
    weight = {"response_mean": lambda i: 1.0 / (len(MASK) * lengths[i]),
              "token_mean": lambda i: 1.0 / sum(lengths), "sum": lambda i: 1.0}[mode]
    expected = [[g * weight(i) for g in row] for i, row in enumerate(token_grad)]
    lp = with_sentinel(logp, float("nan")).requires_grad_(True)
    loss, _ = ppo_clip_token_loss(lp, with_sentinel(logp_old, float("inf")), with_sentinel(adv, -float("inf")),
                                  mask_t())
    (grad,) = torch.autograd.grad(reduce_loss(loss, mask_t(), mode), lp)
    assert_exact_zero_outside_mask(grad)
    torch.testing.assert_close(grad, t64(expected), atol=1e-12, rtol=1e-12)


def test_ppo_clip_float32_value_and_gradient_match_the_float64_reference():
    gen = torch.Generator().manual_seed(5)
    B, T = 16, 40
    mask = torch.rand(B, T, generator=gen) < 0.6
    logp = -torch.rand(B, T, generator=gen, dtype=F64)
    logp_old = logp + 0.3 * torch.randn(B, T, generator=gen, dtype=F64)  # ratios on both sides of the clip
    adv = torch.randn(B, T, generator=gen, dtype=F64)
    for t in (logp, logp_old, adv):
        t[~mask] = float("nan")
    lists = [x.tolist() for x in (logp, logp_old, adv)]
    exp_loss, exp_frac = ref.ppo_token_loss(*lists, mask.tolist())
    exp_grad = ref.ppo_token_loss_grad(*lists, mask.tolist())
    lp = logp.float().requires_grad_(True)
    loss, frac = ppo_clip_token_loss(lp, logp_old.float(), adv.float(), mask)
    (grad,) = torch.autograd.grad(loss.sum(), lp)
    assert loss.dtype == grad.dtype == torch.float32
    torch.testing.assert_close(loss.double(), t64(exp_loss), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad.double(), t64(exp_grad), atol=1e-5, rtol=1e-5)
    assert 0.05 < exp_frac < 0.95 and abs(frac.item() - exp_frac) <= 2 / mask.sum().item()


def test_ppo_clip_covers_upper_and_lower_clipping_for_both_signs():
    eps = 0.2
    cases = {  # (rho, A) -> expected token loss
        (1.5, 1.0): -(1 + eps) * 1.0,   # A > 0, ratio above the upper bound: clipped
        (0.5, 1.0): -0.5 * 1.0,         # A > 0, below the lower bound: unclipped (pessimistic)
        (1.5, -1.0): 1.5,               # A < 0, above the upper bound: unclipped
        (0.5, -1.0): (1 - eps) * 1.0,   # A < 0, below the lower bound: clipped
        (1.1, 1.0): -1.1,               # inside the trust region
    }
    for (rho, a), expected in cases.items():
        loss, _ = ppo_clip_token_loss(t64([[math.log(rho)]]), t64([[0.0]]), t64([[a]]), torch.ones(1, 1))
        assert math.isclose(loss.item(), expected, rel_tol=1e-12), (rho, a)


def test_ppo_asymmetric_clip_bounds():
    loss, frac = ppo_clip_token_loss(t64([[math.log(1.5)]]), t64([[0.0]]), t64([[1.0]]), torch.ones(1, 1),
                                     clip_low=0.2, clip_high=0.28)
    assert math.isclose(loss.item(), -1.28, rel_tol=1e-12) and frac.item() == 1.0


@pytest.mark.parametrize("mode", ["response_mean", "token_mean", "sum"])
def test_ppo_response_reduced_loss_matches_reference(mode):
    logp, logp_old, adv = ppo_case()
    exp_loss, _ = ref.ppo_token_loss(logp, logp_old, adv, MASK)
    loss, _ = ppo_clip_token_loss(t64(logp), t64(logp_old), t64(adv), mask_t())
    assert math.isclose(reduce_loss(loss, mask_t(), mode).item(), ref.reduce(exp_loss, MASK, mode), rel_tol=1e-9)


# --------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("mode", ["response_mean", "token_mean", "sum"])
@pytest.mark.parametrize("sentinel", [0.0, float("nan"), -float("inf")])
def test_reduce_loss_all_modes(mode, sentinel):
    values = [[0.5, 9, 9, 9, 9, 9], [1.0, -2.0, 0.25, 9, 9, 9], [3.0, 0.0, 1.5, -1.0, 2.0, 9], [0.1, 0.2, 9, 0.3, 0.4, 9]]
    got = reduce_loss(with_sentinel(values, sentinel), mask_t(), mode).item()
    assert math.isclose(got, ref.reduce(values, MASK, mode), rel_tol=1e-12)


def test_response_mean_counts_empty_responses_in_b_and_contributes_zero():
    values = t64([[2.0, 4.0], [float("nan"), float("nan")]])
    mask = torch.tensor([[1, 1], [0, 0]])
    assert reduce_loss(values, mask, "response_mean").item() == 1.5  # (3 + 0) / 2
    assert reduce_loss(values, mask, "token_mean").item() == 3.0
    assert reduce_loss(values, mask, "sum").item() == 6.0


def test_reductions_weight_responses_as_seed_002_describes():
    # Seed 002's example: response A of 100 tokens, B of 500; per-token gradient weight of each.
    mask = torch.zeros(2, 500, dtype=torch.bool)
    mask[0, :100] = True
    mask[1, :] = True
    x = torch.zeros(2, 500, dtype=F64, requires_grad=True)
    for mode, (wa, wb) in {"response_mean": (1 / (2 * 100), 1 / (2 * 500)),
                           "token_mean": (1 / 600, 1 / 600), "sum": (1.0, 1.0)}.items():
        (grad,) = torch.autograd.grad(reduce_loss(x, mask, mode), x)
        assert math.isclose(grad[0, 0].item(), wa, rel_tol=1e-12), mode
        assert math.isclose(grad[1, 0].item(), wb, rel_tol=1e-12), mode
        assert grad[0, 100:].abs().sum().item() == 0.0


def test_valid_count_counts_true_entries_per_row_and_in_total():
    from trainer.algorithms.masking import valid_count

    mask = torch.tensor(MASK + [[0] * 6], dtype=torch.bool)  # lengths 1, 3, 5, 4 (a hole) and an empty row
    assert valid_count(mask).dtype == valid_count(mask, dim=-1).dtype == torch.int64
    assert valid_count(mask).item() == 13
    assert valid_count(mask, dim=-1).tolist() == [1, 3, 5, 4, 0]
    assert valid_count(mask, dim=0).tolist() == [4, 3, 2, 2, 2, 0]
    big = torch.zeros(3, 70_000, dtype=torch.bool)
    big[1, ::2] = True
    assert valid_count(big).item() == 35_000 and valid_count(torch.zeros(0, 5, dtype=torch.bool)).item() == 0


def test_unknown_reduction_is_refused():
    with pytest.raises(ValueError, match="unknown loss reduction"):
        reduce_loss(torch.zeros(1, 1), torch.ones(1, 1), "seq_mean_token_sum")


def test_gradients_stay_finite_with_nan_padding():
    logp, logp_old, adv = ppo_case()
    lp = with_sentinel(logp, float("nan")).requires_grad_(True)
    loss, _ = ppo_clip_token_loss(lp, with_sentinel(logp_old, float("nan")), t64(adv), mask_t())
    (grad,) = torch.autograd.grad(reduce_loss(loss, mask_t(), "response_mean"), lp)
    assert torch.isfinite(grad).all()
    assert_exact_zero_outside_mask(grad)
