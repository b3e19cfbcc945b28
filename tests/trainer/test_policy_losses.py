"""Issue 9's losses (GSPO, SAPO, IS-PG, score centering, DAPO's shaping) against float64 references
written from their formulas (``reference_math``), values AND gradients, with NaN/Inf in masked slots."""

from __future__ import annotations

import math

import pytest
import torch

from tests import reference_math as ref
from trainer.algorithms import (
    gspo_token_loss,
    is_pg_token_loss,
    overlong_penalty,
    ppo_clip_token_loss,
    reduce_loss,
    sapo_token_loss,
    score_centering_token_loss,
    zero_variance_groups,
)

F64 = torch.float64
TOL = {"atol": 1e-10, "rtol": 1e-10}
SENTINELS = [0.0, float("nan"), float("inf"), -float("inf")]

# Lengths 1, 3, 5 and a length-5 row with a hole at t = 2; T = 6.
MASK = [[1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 0, 1, 1, 0]]
LOGP = [[-0.2, -1.0, -2.0, -0.1, -0.7, -0.3], [-1.0, -0.3, -0.9, -1.5, -0.2, -0.6],
        [-0.3, -0.5, -1.6, -0.2, -0.9, -1.3], [-0.9, -0.1, -1.4, -0.5, -1.3, -0.4]]
LOGP_OLD = [[-0.5, -1.1, -1.7, -0.4, -0.5, -0.2], [-1.2, -0.4, -1.0, -1.1, -0.4, -0.8],
            [-0.5, -0.7, -1.3, -0.6, -1.1, -1.0], [-0.7, -0.2, -1.0, -0.9, -0.6, -0.8]]
ADV = [[1.5] * 6, [-0.5] * 6, [0.75] * 6, [-1.25] * 6]


def t64(x):
    return torch.tensor(x, dtype=F64)


def mask_t():
    return torch.tensor(MASK, dtype=torch.bool)


def with_sentinel(values, sentinel, grad=False):
    out = t64(values).clone()
    out[~mask_t()] = sentinel
    return out.requires_grad_(grad)


def assert_close_to(actual, expected):
    torch.testing.assert_close(actual.detach().to(F64), t64(expected), **TOL)


def assert_gradient(grad, expected):
    assert torch.isfinite(grad).all(), grad
    assert torch.equal(grad[~mask_t()], torch.zeros_like(grad[~mask_t()]))
    assert_close_to(grad, expected)


# --------------------------------------------------------------------------- GSPO


@pytest.mark.parametrize("sentinel", SENTINELS)
@pytest.mark.parametrize(("clip_low", "clip_high"), [(0.2, 0.2), (0.05, 0.08), (0.0003, 0.0004)])
def test_gspo_matches_the_sequence_ratio_reference_in_value_and_gradient(sentinel, clip_low, clip_high):
    exp_loss, exp_frac, exp_grad = ref.gspo_token_loss(LOGP, LOGP_OLD, ADV, MASK, clip_low, clip_high)
    logp = with_sentinel(LOGP, sentinel, grad=True)
    loss, frac = gspo_token_loss(logp, with_sentinel(LOGP_OLD, sentinel), with_sentinel(ADV, sentinel), mask_t(),
                                 clip_low, clip_high)
    assert_close_to(loss, exp_loss)
    assert math.isclose(frac.item(), exp_frac, rel_tol=1e-12)
    (grad,) = torch.autograd.grad(reduce_loss(loss, mask_t(), "sum"), logp)
    assert_gradient(grad, exp_grad)


def test_gspo_case_exercises_clipped_and_unclipped_responses():
    _, frac, _ = ref.gspo_token_loss(LOGP, LOGP_OLD, ADV, MASK, 0.05, 0.08)
    assert 0 < frac < 1


def test_gspo_with_one_token_responses_is_grpo_token_ratio_ppo():
    # (c): with L_i = 1 the sequence ratio is the token ratio, so GSPO is the token PPO clip.
    mask = [[1], [1], [1], [1]]
    logp, logp_old = [[math.log(1.5)], [math.log(0.5)], [math.log(1.1)], [math.log(0.7)]], [[0.0]] * 4
    adv = [[1.0], [1.0], [-1.0], [-1.0]]
    exp_loss, exp_frac = ref.ppo_token_loss(logp, logp_old, adv, mask)
    # Token PPO gradient: -rho A where the unclipped branch is the max, else 0.
    exp_grad = [[-math.exp(lp[0]) * a[0] if -math.exp(lp[0]) * a[0] >= -min(max(math.exp(lp[0]), 0.8), 1.2) * a[0]
                 else 0.0] for lp, a in zip(logp, adv)]
    lp = t64(logp).requires_grad_(True)
    loss, frac = gspo_token_loss(lp, t64(logp_old), t64(adv), torch.ones(4, 1, dtype=torch.bool))
    (grad,) = torch.autograd.grad(loss.sum(), lp)
    torch.testing.assert_close(loss.detach(), t64(exp_loss), **TOL)
    torch.testing.assert_close(grad, t64(exp_grad), **TOL)
    assert math.isclose(frac.item(), exp_frac) and 0 < exp_frac < 1


def test_ppo_and_gspo_share_one_clip_fraction_convention_ties_unclipped():
    """One-token responses make GSPO's sequence ratio the token ratio, so both losses must agree bit for
    bit, ties included: a valid token with A = 0 (rho far outside the range) and one with rho inside the
    range count as unclipped; the count is over valid tokens only (a NaN-padded second slot)."""
    rho = [1.5, 0.5, 1.5, 1.1, 3.0]  # clipped (A > 0), clipped (A < 0), unclipped, inside, A = 0
    adv = [1.0, -1.0, -1.0, 1.0, 0.0]
    logp = t64([[math.log(r), float("nan")] for r in rho])
    logp_old, advantages = t64([[0.0, float("nan")]] * 5), t64([[a, float("inf")] for a in adv])
    mask = torch.tensor([[True, False]] * 5)
    ppo_loss, ppo_frac = ppo_clip_token_loss(logp, logp_old, advantages, mask)
    gspo_loss, gspo_frac = gspo_token_loss(logp, logp_old, advantages, mask)
    assert torch.equal(ppo_loss, gspo_loss) and torch.isfinite(ppo_loss).all()
    # By hand: -min(rho A, clip(rho, 0.8, 1.2) A) = -1.2, 0.8 * 1 = 0.8 (clipped), 1.5, -1.1, -0.0.
    expected = [-1.2, 0.8, 1.5, -1.1, 0.0]
    assert all(math.isclose(ppo_loss[i, 0].item(), e, rel_tol=1e-12, abs_tol=1e-15) for i, e in enumerate(expected))
    assert ppo_frac.dtype == gspo_frac.dtype == F64 and ppo_frac.item() == gspo_frac.item() == 2 / 5


# --------------------------------------------------------------------------- SAPO


@pytest.mark.parametrize("sentinel", SENTINELS)
@pytest.mark.parametrize(("tau_pos", "tau_neg"), [(1.0, 1.05), (0.5, 2.0)])
def test_sapo_matches_the_sigmoid_gate_reference_in_value_and_gradient(sentinel, tau_pos, tau_neg):
    exp_loss, exp_grad = ref.sapo_token_loss(LOGP, LOGP_OLD, ADV, MASK, tau_pos, tau_neg)
    logp = with_sentinel(LOGP, sentinel, grad=True)
    loss = sapo_token_loss(logp, with_sentinel(LOGP_OLD, sentinel), with_sentinel(ADV, sentinel), mask_t(),
                           tau_pos, tau_neg)
    assert_close_to(loss, exp_loss)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    assert_gradient(grad, exp_grad)


def test_sapo_uses_tau_neg_for_non_positive_advantages():
    one = torch.ones(1, 1, dtype=torch.bool)
    for a, tau in ((1.0, 0.5), (0.0, 3.0), (-1.0, 3.0)):
        loss = sapo_token_loss(t64([[math.log(1.5)]]), t64([[0.0]]), t64([[a]]), one, tau_pos=0.5, tau_neg=3.0)
        assert math.isclose(loss.item(), -4 * ref._sigmoid(tau * 0.5) / tau * a, abs_tol=1e-15)


def test_sapo_gradient_at_ratio_one_is_the_plain_policy_gradient():
    # (d): f'(1) = 4 sigma'(0) = 1, so d loss / d logp = -A whatever tau.
    logp = with_sentinel(LOGP_OLD, float("nan"), grad=True)
    loss = sapo_token_loss(logp, with_sentinel(LOGP_OLD, float("nan")), t64(ADV), mask_t(), 0.3, 7.0)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    assert_gradient(grad, [[-a if m else 0.0 for a, m in zip(ar, mr)] for ar, mr in zip(ADV, MASK)])


# --------------------------------------------------------------------------- IS-PG


@pytest.mark.parametrize("sentinel", SENTINELS)
@pytest.mark.parametrize("cap", [None, 1.2, 2.0])
def test_is_pg_matches_the_importance_weighted_reference_in_value_and_gradient(sentinel, cap):
    exp_loss, exp_grad = ref.is_pg_token_loss(LOGP, LOGP_OLD, ADV, MASK, cap)
    logp = with_sentinel(LOGP, sentinel, grad=True)
    loss = is_pg_token_loss(logp, with_sentinel(LOGP_OLD, sentinel), with_sentinel(ADV, sentinel), mask_t(), cap)
    assert_close_to(loss, exp_loss)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    assert_gradient(grad, exp_grad)


def test_is_pg_at_staleness_zero_has_the_on_policy_gradient():
    # (a): logp_sampler = logp (fresh sampler): the gradient is -A grad logp.
    logp = with_sentinel(LOGP, float("inf"), grad=True)
    loss = is_pg_token_loss(logp, logp.detach(), with_sentinel(ADV, float("nan")), mask_t())
    (grad,) = torch.autograd.grad(reduce_loss(loss, mask_t(), "sum"), logp)
    assert_gradient(grad, [[-a if m else 0.0 for a, m in zip(ar, mr)] for ar, mr in zip(ADV, MASK)])


# --------------------------------------------------------------------------- score centering


@pytest.mark.parametrize("sentinel", SENTINELS)
@pytest.mark.parametrize("kl_coeff", [0.0, 0.1])
def test_score_centering_has_a_ce_valued_forward_and_a_centred_backward(sentinel, kl_coeff):
    K = 3
    gen = torch.Generator().manual_seed(1)
    aux = -torch.rand(4, 6, K, generator=gen, dtype=F64)
    aux[~mask_t()] = sentinel
    aux.requires_grad_(True)
    target = with_sentinel(LOGP, sentinel, grad=True)
    sampler = with_sentinel(LOGP_OLD, sentinel)
    exp_loss, exp_grad_target = ref.score_centering_token_loss(LOGP, ADV, MASK, LOGP_OLD, kl_coeff)
    loss = score_centering_token_loss(target, aux, with_sentinel(ADV, sentinel), mask_t(),
                                      logp_sampler=sampler, kl_coeff=kl_coeff)
    assert_close_to(loss, exp_loss)
    g_target, g_aux = torch.autograd.grad(reduce_loss(loss, mask_t(), "sum"), (target, aux))
    assert_gradient(g_target, exp_grad_target)
    expected_aux = torch.tensor([[[a / K if m else 0.0] * K for a, m in zip(ar, mr)] for ar, mr in zip(ADV, MASK)],
                                dtype=F64)
    assert torch.isfinite(g_aux).all()
    torch.testing.assert_close(g_aux, expected_aux, **TOL)


def _policy_case(seed: int, B: int = 3, T: int = 4, V: int = 7):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=gen, dtype=F64).requires_grad_(True)
    probs = torch.softmax(logits.detach(), -1)
    targets = torch.multinomial(probs.reshape(-1, V), 1, generator=gen).reshape(B, T)
    adv = torch.randn(B, 1, generator=gen, dtype=F64).expand(B, T)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 2:] = False
    return logits, probs, targets, adv, mask, gen


def _plain_pg_grad(logits, targets, adv, mask):
    # The on-policy policy gradient -sum_t A_t grad log pi(a_t), written directly.
    logp = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    (grad,) = torch.autograd.grad(-(adv * logp)[mask].sum(), logits)
    return grad


def test_score_centering_with_the_exact_expectation_is_exactly_the_plain_policy_gradient():
    # (b): a_bar = sum_v pi(v) log pi(v) with stop-gradient weights; sum_v pi grad log pi = 0.
    logits, probs, targets, adv, mask, _ = _policy_case(0)
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    loss = score_centering_token_loss(logp, logp_all, adv, mask, aux_weights=probs)
    (grad,) = torch.autograd.grad(reduce_loss(loss, mask, "sum"), logits)
    torch.testing.assert_close(grad, _plain_pg_grad(logits, targets, adv, mask), atol=1e-12, rtol=0)


def test_score_centering_with_k_samples_converges_to_the_plain_policy_gradient():
    errors = {}
    for K in (4, 64, 1024):
        total = 0.0
        for seed in range(4):
            logits, probs, targets, adv, mask, gen = _policy_case(seed)
            draws = torch.multinomial(probs.reshape(-1, probs.shape[-1]), K, replacement=True, generator=gen)
            logp_all = torch.log_softmax(logits, -1)
            logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            aux = logp_all.gather(-1, draws.reshape(*targets.shape, K))
            loss = score_centering_token_loss(logp, aux, adv, mask)
            (grad,) = torch.autograd.grad(reduce_loss(loss, mask, "sum"), logits)
            total += (grad - _plain_pg_grad(logits, targets, adv, mask)).norm().item()
        errors[K] = total / 4
    # The centring term's error shrinks like 1/sqrt(K): 16x fewer error from 4 to 1024 draws.
    assert errors[1024] < errors[64] < errors[4]
    assert errors[1024] < errors[4] / 6, errors


# --------------------------------------------------------------------------- DAPO


@pytest.mark.parametrize("length", [0, 1, 30, 40, 41, 44, 47, 48, 49, 60])
@pytest.mark.parametrize(("cache", "factor"), [(8, 1.0), (0, 1.0), (4, 0.5), (48, 1.0)])
def test_overlong_penalty_matches_the_dapo_reference(length, cache, factor):
    got = overlong_penalty(torch.tensor([length]), 48, cache, factor)
    assert math.isclose(got.item(), ref.overlong_penalty(length, 48, cache, factor), abs_tol=1e-15)


def test_zero_variance_groups_flags_exactly_the_groups_with_equal_rewards():
    reward = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5])
    assert zero_variance_groups(reward, 4).tolist() == [False, True, True]
