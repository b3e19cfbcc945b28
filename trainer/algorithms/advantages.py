"""Returns and raw advantages (seed 001), each registered by name beside its formula.

All outputs are ``[B, T]`` and exactly zero outside the response mask. Responses of one prompt are
contiguous: ``B = P * K`` with ``K = group_size`` responses per prompt. The registered functions
(``@register_raw_advantage``) read a ``RolloutBatch`` and the ``AlgoConfig`` and return
``(raw, returns or None)``; an algorithm record names one of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trainer.algorithms.kl import k1_kl
from trainer.algorithms.masking import as_bool_mask, last_valid_index
from trainer.algorithms.named import RolloutBatch, register_raw_advantage

if TYPE_CHECKING:
    from trainer.algorithms.algo_config import AlgoConfig


def _check_groups(batch_size: int, group_size: int, min_group_size: int, who: str) -> None:
    # Shapes are host-side Python ints: checking them is not a device synchronisation.
    if group_size < min_group_size:
        raise ValueError(
            f"{who}: group_size={group_size} is refused; it needs at least {min_group_size} responses "
            f"per prompt (set n_samples_per_prompt >= {min_group_size})"
        )
    if batch_size % group_size != 0:
        raise ValueError(
            f"{who}: batch of {batch_size} responses is not divisible by group_size={group_size}; "
            "responses of one prompt must be contiguous groups of equal size"
        )


def kl_shaped_returns(
    reward: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
    gamma: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ k1-shaped token rewards and their reverse discounted returns.

    ``d[i,t] = logp_old[i,t] - logp_ref[i,t]`` (signed k1),
    ``r[i,t] = m[i,t] * (-kl_coef * d[i,t] + 1(t = T_i) * R_i)`` with ``T_i`` the last valid position,
    ``G[i,t] = m[i,t] * sum_{u=t..T_i} gamma^(u-t) * r[i,u]``.

    The k1 term is *not* clamped. OpenRLHF clamps k1 to [-10, 10]; the contract does not, so a
    large policy/reference gap shows up in the return instead of being silently capped.
    Positions inside an internal mask hole carry r = 0 but still count in the discount exponent.

    Returns ``(token_rewards, returns)``, both ``[B, T]`` in the dtype of ``logp_old``.
    """
    valid = as_bool_mask(mask)
    zero = torch.zeros((), dtype=logp_old.dtype, device=logp_old.device)
    kl = k1_kl(logp_old, logp_ref, valid)
    positions = torch.arange(valid.shape[-1], device=valid.device).expand_as(valid)
    is_terminal = valid & (positions == last_valid_index(valid).unsqueeze(-1))
    terminal_reward = torch.where(is_terminal, reward.to(logp_old.dtype).unsqueeze(-1), zero)
    token_rewards = torch.where(valid, -kl_coef * kl + terminal_reward, zero)

    if gamma == 1.0:
        # Undiscounted reverse cumulative sum: one vectorised pass.
        to_go = token_rewards.flip(-1).cumsum(-1).flip(-1)
    else:
        to_go = torch.zeros_like(token_rewards)
        running = torch.zeros_like(token_rewards[..., 0])
        for t in range(token_rewards.shape[-1] - 1, -1, -1):
            running = token_rewards[..., t] + gamma * running
            to_go[..., t] = running
    returns = torch.where(valid, to_go, zero)
    return token_rewards, returns


@register_raw_advantage("kl_shaped_return")
def _kl_shaped_return(batch: RolloutBatch, cfg: AlgoConfig):
    """REINFORCE++: the raw advantage is the k1-shaped return ``G`` (``kl_shaped_returns``), also logged."""
    _, returns = kl_shaped_returns(batch.reward, batch.logp_old, batch.logp_ref, batch.mask, cfg.kl_coef, cfg.gamma)
    return returns, returns


def group_baseline_advantages(reward: torch.Tensor, mask: torch.Tensor, group_size: int) -> torch.Tensor:
    """REINFORCE++-baseline raw advantage: ``A[i,t] = m[i,t] * (R_i - mean_{j in g(i)} R_j)``.

    The group mean is *inclusive* (it contains R_i itself; not leave-one-out) and there is no
    division by the group standard deviation. ``group_size < 2`` would make every advantage zero
    and raises ``ValueError``, as does a batch that is not a whole number of groups.
    """
    _check_groups(reward.shape[0], group_size, 2, "group_baseline_advantages")
    grouped = reward.reshape(-1, group_size)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)
    valid = as_bool_mask(mask)
    return torch.where(valid, centred.unsqueeze(-1).to(reward.dtype), reward.new_zeros(()))


@register_raw_advantage("group_baseline")
def _group_baseline(batch: RolloutBatch, cfg: AlgoConfig):
    """REINFORCE++-baseline: ``R_i - mean_g R`` (``group_baseline_advantages``); no token return."""
    return group_baseline_advantages(batch.reward, batch.mask, batch.group_size), None


def grpo_advantages(
    reward: torch.Tensor,
    mask: torch.Tensor,
    group_size: int,
    std_normalize: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO group-relative advantage, broadcast over the valid tokens of each response.

    ``A_i = (R_i - mean_g R) / (std_g R + eps)`` with torch's *sample* std (Bessel, ddof=1), or
    ``R_i - mean_g R`` when ``std_normalize`` is False. Zero outside the mask.
    A group of one has no sample std, so ``group_size < 2`` raises ``ValueError`` when normalising.
    """
    _check_groups(reward.shape[0], group_size, 2 if std_normalize else 1, "grpo_advantages")
    grouped = reward.reshape(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if std_normalize:
        centred = centred / (grouped.std(dim=1, unbiased=True, keepdim=True) + eps)
    valid = as_bool_mask(mask)
    return torch.where(valid, centred.reshape(-1, 1), reward.new_zeros(()))


@register_raw_advantage("group_relative")
def _group_relative(batch: RolloutBatch, cfg: AlgoConfig):
    """GRPO's group advantage (``grpo_advantages``), std-scaled when ``cfg.grpo_std_normalize``; no token return."""
    return grpo_advantages(batch.reward, batch.mask, batch.group_size, std_normalize=cfg.grpo_std_normalize), None
