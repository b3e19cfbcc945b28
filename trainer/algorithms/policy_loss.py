"""The token PPO clipped surrogate and the named loss reductions (seed 001 "PPO 与 KL reduction").

A reduction is a *named, tested choice*, not an implementation detail: seed 002 measured a 13%
pass@1 change from switching between two of them. Gradient weighting of response ``i`` with
``L_i`` valid tokens, ``B`` responses and ``N = sum_i L_i`` tokens in the (global) batch:

===================  ==================================  ======================================
mode                 scalar                              weight of each token of response i
===================  ==================================  ======================================
``response_mean``    (1/B) sum_i (1/L_i) sum_t m x        1 / (B * L_i): every response counts
                                                          equally, short ones get more per token
``token_mean``       sum m x / N   (DAPO, "global")       1 / N: every token counts equally, so
                                                          long responses weigh more in total
``sum``              sum m x                              1: scale grows with batch and length
===================  ==================================  ======================================

Under AdamW a *constant* factor cancels out; what changes the optimisation is the relative weight
between responses, which is exactly what these modes differ in.

Clip fraction, for every clipped surrogate here (PPO's token ratio, GSPO's sequence ratio): the
fraction of the rank's valid tokens at which the clipped branch is strictly the smaller surrogate,
``clip(rho) A < rho A`` (where the loss passes no gradient); ties, such as ``rho`` inside the clip
range or ``A = 0``, count as unclipped. GSPO counts each valid token of a clipped response. Valid
tokens are counted by ``masking.valid_count`` throughout.

Distributed convention: with a process ``group``, the denominators (B or N) are global, and each
rank returns *its share* of the global value, so that summing over ranks gives the global
reduction. Gradients must then be summed across ranks (all_reduce SUM), not averaged.

Each loss is registered by name beside its formula (``@register_policy_loss``): the registered
function reads a ``LossInputs`` and the ``AlgoConfig`` and returns ``(token_loss, clip_frac or
None)``; an algorithm record names one of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from facts.algorithms import LOSS_REDUCTIONS
from trainer.algorithms.masking import as_bool_mask, valid_count
from trainer.algorithms.named import LossInputs, register_policy_loss

if TYPE_CHECKING:
    from trainer.algorithms.algo_config import AlgoConfig


def ppo_clip_token_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level PPO clipped surrogate.

    ``rho = exp(logp - logp_old)``;
    ``loss[i,t] = max(-rho * A, -clip(rho, 1 - clip_low, 1 + clip_high) * A)`` on valid tokens, 0 elsewhere.

    Returns ``(token_loss, clip_frac)``, ``clip_frac`` a 0-dim float64 tensor (the module's convention;
    0 if no token is valid). Gradients flow into ``logp`` and ``logp_old``; ``advantages`` are
    constants (as everywhere in the trainer), so none flows into them.
    """
    return _clipped_surrogate(logp, logp_old, advantages, as_bool_mask(mask), clip_low, clip_high)


@register_policy_loss("ppo_clip")
def _ppo_clip(x: LossInputs, cfg: AlgoConfig):
    """``ppo_clip_token_loss`` against ``logp_old`` with ``cfg.clip_low`` / ``cfg.clip_high`` (DAPO's clip-higher)."""
    return ppo_clip_token_loss(x.logp, x.logp_old, x.advantages, x.mask, cfg.clip_low, cfg.clip_high)


def _clipped_surrogate(logp, logp_old, advantages, valid, clip_low, clip_high) -> tuple[torch.Tensor, torch.Tensor]:
    """``-min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A)`` with ``rho = exp(logp - logp_old)`` on
    valid tokens, 0 elsewhere, and the clip fraction (the module's convention): the one clipped
    surrogate of every loss here."""
    token_loss, n_clipped = _PPOClip.apply(logp, logp_old, advantages.detach(), valid, clip_low, clip_high)
    return token_loss, n_clipped / valid_count(valid).to(torch.float64).clamp_min(1.0)


class _PPOClip(torch.autograd.Function):
    """``_clipped_surrogate``'s value, clipped count and derivative in one pass, with a one-multiply backward.

    ``d loss / d logp = -rho A`` where the unclipped branch is the minimum (``rho A <= clip(rho) A``,
    ties included: both branches then have that slope), 0 where the clipped branch is active (its
    value does not depend on ``rho``) and 0 outside the mask. The forward works on fresh no-grad
    temporaries in place and keeps only that derivative for the backward, where autograd's graph
    would keep several batch-sized tensors and replay ``minimum``/``clamp``/``exp``/``where`` backwards.
    """

    @staticmethod
    def forward(ctx, logp, logp_old, advantages, valid, clip_low, clip_high):
        zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
        # Selection before arithmetic: NaN/Inf stored in padding reach neither value nor derivative.
        ratio = torch.sub(logp, logp_old.to(logp.dtype))
        torch.where(valid, ratio, zero, out=ratio).exp_()
        adv = torch.where(valid, advantages.to(logp.dtype), zero)
        surrogate = ratio * adv
        clipped_surrogate = ratio.clamp_(1.0 - clip_low, 1.0 + clip_high).mul_(adv)
        surrogate_min = torch.minimum(surrogate, clipped_surrogate, out=adv)  # adv is not read again
        # surrogate - min is 0 where the unclipped branch is the minimum (ties included) and > 0
        # where the clipped one is strictly smaller, so its sign is the clipped indicator (0 or 1)
        # without a bool tensor; outside the mask both are 0.
        clipped = torch.sub(surrogate, surrogate_min, out=clipped_surrogate).sign_()
        # Per-row float sums of 0/1 are exact (a row is far below 2**24 tokens); rows add in float64.
        n_clipped = clipped.sum(dim=-1).sum(dtype=torch.float64)
        # The slope of min(rho A, clip(rho) A) in logp: rho A where unclipped, exactly 0 where clipped.
        slope = surrogate.addcmul_(surrogate, clipped, value=-1.0)
        ctx.save_for_backward(slope)
        ctx.mark_non_differentiable(n_clipped)
        return surrogate_min.neg_(), n_clipped

    @staticmethod
    def backward(ctx, grad_loss, _grad_n_clipped):
        (slope,) = ctx.saved_tensors
        grad_logp = torch.mul(grad_loss, slope).neg_()
        grad_logp_old = grad_logp.neg() if ctx.needs_input_grad[1] else None
        return grad_logp, grad_logp_old, None, None, None, None


def _token_ratio(logp: torch.Tensor, logp_other: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``exp(logp - logp_other)`` on valid tokens, exactly 1 elsewhere.

    Selection happens before ``exp``, so a NaN/Inf stored in padding reaches neither the value nor
    the gradient. ``exp_`` works in place on the fresh selection (``where``'s backward needs no
    output), which saves a batch-sized allocation.
    """
    return _selected(valid, logp - logp_other.to(logp.dtype), logp).exp_()


def _selected(valid: torch.Tensor, x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``x`` on valid tokens, exactly 0 elsewhere, in the dtype of ``like`` (selection before arithmetic)."""
    return torch.where(valid, x.to(like.dtype), torch.zeros((), dtype=like.dtype, device=like.device))


def gspo_token_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO (seed 001, GSPO row): the clipped surrogate on a *sequence* ratio broadcast to its tokens.

    ``rho_i = exp((1/L_i) sum_t m[i,t] (logp - logp_old)[i,t])`` with ``L_i`` the valid tokens of
    response ``i``; ``loss[i,t] = -min(rho_i A, clip(rho_i, 1 - clip_low, 1 + clip_high) A)`` on valid
    tokens, 0 elsewhere. Returns ``(token_loss, clip_frac)`` (the module's clip-fraction convention).
    """
    valid = as_bool_mask(mask)
    log_ratio = _selected(valid, logp - logp_old.to(logp.dtype), logp)
    lengths = valid_count(valid, dim=-1).to(logp.dtype).clamp_min(1.0)
    sequence_log_ratio = (log_ratio.sum(dim=-1) / lengths)[:, None].expand_as(logp)
    # The token surrogate with the response's mean log-ratio in every token's place (and 0 as the old one).
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    return _clipped_surrogate(sequence_log_ratio, zero, advantages, valid, clip_low, clip_high)


@register_policy_loss("sequence_ratio_clip")
def _gspo(x: LossInputs, cfg: AlgoConfig):
    """``gspo_token_loss`` against ``logp_old`` with ``cfg.clip_low`` / ``cfg.clip_high``."""
    return gspo_token_loss(x.logp, x.logp_old, x.advantages, x.mask, cfg.clip_low, cfg.clip_high)


def sapo_token_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> torch.Tensor:
    """SAPO (seed 001, SAPO row): a smooth sigmoid gate instead of a hard clip.

    ``rho = exp(logp - logp_old)`` per token, ``f_tau(rho) = 4 sigmoid(tau (rho - 1)) / tau`` and
    ``loss = -f_tau(rho) A`` with ``tau = tau_pos`` where ``A > 0`` and ``tau_neg`` where ``A <= 0``;
    0 outside the mask. At ``rho = 1`` the gradient is the plain policy gradient ``-A grad logp``.
    """
    valid = as_bool_mask(mask)
    ratio = _token_ratio(logp, logp_old, valid)
    adv = _selected(valid, advantages, logp)
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    gate = 4.0 * torch.sigmoid(tau * (ratio - 1.0)) / tau
    return _selected(valid, -gate * adv, logp)


@register_policy_loss("sigmoid_gate")
def _sapo(x: LossInputs, cfg: AlgoConfig):
    """``sapo_token_loss`` against ``logp_old`` with ``cfg.tau_pos`` / ``cfg.tau_neg``; nothing is clipped."""
    return sapo_token_loss(x.logp, x.logp_old, x.advantages, x.mask, cfg.tau_pos, cfg.tau_neg), None


def is_pg_token_loss(
    logp: torch.Tensor,
    logp_sampler: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cap: float | None = None,
) -> torch.Tensor:
    """Importance-sampled policy gradient (Tinker's ``importance_sampling`` loss; seed 003's baseline).

    ``rho = exp(logp - logp_sampler)`` with ``logp_sampler`` the rollout engine's own log-probs,
    truncated to ``min(rho, cap)`` when ``cap`` is given; ``loss = -rho A`` on valid tokens, 0 elsewhere.
    At staleness 0 (``logp = logp_sampler``) its gradient is the on-policy ``-A grad logp``.
    """
    valid = as_bool_mask(mask)
    ratio = _token_ratio(logp, logp_sampler, valid)
    if cap is not None:
        ratio = torch.clamp(ratio, max=cap)
    return _selected(valid, -ratio * _selected(valid, advantages, logp), logp)


@register_policy_loss("importance_sampled")
def _is_pg(x: LossInputs, cfg: AlgoConfig):
    """``is_pg_token_loss`` against the rollout engine's ``logp_sampler``, truncated at ``cfg.is_cap``."""
    return is_pg_token_loss(x.logp, x.logp_sampler, x.advantages, x.mask, cfg.is_cap), None


def score_centering_token_loss(
    logp_target: torch.Tensor,
    logp_aux: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    aux_weights: torch.Tensor | None = None,
    logp_sampler: torch.Tensor | None = None,
    kl_coeff: float = 0.0,
) -> torch.Tensor:
    """Score centering (seed 003's candidate): CE-valued forward, centred backward.

    ``a_bar[i,t] = mean_k logp_aux[i,t,k]`` (or ``sum_k w[i,t,k] logp_aux[i,t,k]`` with stop-gradient
    weights ``w`` summing to 1, e.g. the sampler's full-vocabulary probabilities for the exact
    expectation); ``loss = -A logp_target + A (a_bar - stopgrad(a_bar))
    [+ kl_coeff (logp_sampler - logp_target)]`` on valid tokens, 0 elsewhere. ``logp_aux`` is
    ``[B, T, K]``: the policy's log-probs of K auxiliary draws from the sampler at each position.
    """
    valid = as_bool_mask(mask)
    aux = torch.where(valid.unsqueeze(-1), logp_aux, torch.zeros((), dtype=logp_aux.dtype, device=logp_aux.device))
    if aux_weights is None:
        aux_mean = aux.mean(dim=-1)
    else:
        aux_mean = (aux * aux_weights.detach().to(aux.dtype)).sum(dim=-1)
    target = _selected(valid, logp_target, logp_target)
    adv = _selected(valid, advantages, logp_target)
    token_loss = -adv * target + adv * (aux_mean - aux_mean.detach())
    if kl_coeff != 0.0:
        if logp_sampler is None:
            raise ValueError("score_centering_token_loss: kl_coeff != 0 needs logp_sampler")
        token_loss = token_loss + kl_coeff * (_selected(valid, logp_sampler, logp_target) - target)
    return _selected(valid, token_loss, logp_target)


@register_policy_loss("centred_score")
def _score_centering(x: LossInputs, cfg: AlgoConfig):
    """``score_centering_token_loss`` on the auxiliary draws' ``logp_aux``, analytic KL ``cfg.sc_kl_coeff``."""
    loss = score_centering_token_loss(x.logp, x.logp_aux, x.advantages, x.mask,
                                      logp_sampler=x.logp_sampler, kl_coeff=cfg.sc_kl_coeff)
    return loss, None


def _global_sum(t: torch.Tensor, group) -> torch.Tensor:
    if group is not None:
        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    return t


def reduce_loss(token_values: torch.Tensor, mask: torch.Tensor, mode: str, group=None) -> torch.Tensor:
    """Reduce ``[B, T]`` token values to a scalar with a named reduction (see the module table).

    ``response_mean``: ``(1/B) sum_i (1/L_i) sum_t m[i,t] x[i,t]``; ``B`` counts every response and a
    response with ``L_i = 0`` contributes exactly 0. ``token_mean``: ``sum m x / sum m`` over the whole
    batch and all ranks (0 when there is no valid token). ``sum``: ``sum m x``.
    Values outside the mask are selected away, so NaN/Inf there never propagate.
    """
    valid = as_bool_mask(mask)
    zero = torch.zeros((), dtype=token_values.dtype, device=token_values.device)
    masked = torch.where(valid, token_values, zero)
    if mode == "sum":
        return masked.sum()
    if mode == "token_mean":
        n_tokens = _global_sum(valid_count(valid).to(token_values.dtype), group)
        return masked.sum() / n_tokens.clamp_min(1.0)
    if mode == "response_mean":
        lengths = valid_count(valid, dim=-1).to(token_values.dtype)
        per_response = torch.where(lengths > 0, masked.sum(dim=-1) / lengths.clamp_min(1.0), zero)
        # torch.full launches a fill kernel: no host-to-device copy of a Python scalar.
        n_responses = _global_sum(
            torch.full((), float(valid.shape[0]), dtype=token_values.dtype, device=token_values.device), group
        )
        return per_response.sum() / n_responses.clamp_min(1.0)
    raise ValueError(f"unknown loss reduction {mode!r}; choose one of {', '.join(LOSS_REDUCTIONS)}")
