"""Training–inference mismatch corrections: how much each token of the policy loss counts when the rollout
engine's log-probs differ from the trainer's (kernels, precision, batching; docs/engines.md).

Both read ``delta = logp_old - logp_sampler`` per token, the trainer's log-prob of the sampled token under the
policy before this batch's first update against the engine's own one at sampling time (both detached), so
``exp(delta)`` is the importance ratio ``pi_trainer / pi_engine`` the engine's samples need. With a stale sampler
(``sampler_refresh_every > 1``) ``delta`` also carries the policy's change since the sampler's refresh: the
decoupled correction, as verl's rollout correction and Tinker's importance sampling define it.

==========================  ===========================================================================
setting                     each valid token's weight in the policy loss
==========================  ===========================================================================
``tis_cap = C``             truncated importance sampling: ``w = min(exp(delta), C)`` (``C >= 1``), a
                            constant factor on the token's loss (no gradient flows through ``w``)
``mis_bound = C``,          masked importance sampling: ``w = 1`` where ``1/C <= exp(delta) <= C``, else
``mis_level = token``       0 (``C > 1``): the token leaves the policy loss, its value and its denominator
``mis_bound = C``,          the same on the sequence ratio ``exp(sum_t m delta)`` of each response: a
``mis_level = sequence``    response past the bound leaves the policy loss whole
==========================  ===========================================================================

Unset (``None``, the default) they change nothing. Both may be set: masked tokens stay out, kept ones are
truncated. The KL loss keeps the full mask (it regularises toward the reference, not toward the engine).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from trainer.algorithms.algo_config import MIS_LEVELS  # torch-free: the config checks read it too
from trainer.algorithms.masking import as_bool_mask

if TYPE_CHECKING:
    from trainer.algorithms.algo_config import AlgoConfig


def _delta(logp_old: torch.Tensor, logp_sampler: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``logp_old - logp_sampler`` on valid tokens, exactly 0 elsewhere (detached, float32 or wider)."""
    zero = torch.zeros((), dtype=logp_old.dtype, device=logp_old.device)
    return torch.where(valid, (logp_old - logp_sampler.to(logp_old.dtype)).detach(), zero)


def truncated_is_weights(logp_old: torch.Tensor, logp_sampler: torch.Tensor, mask: torch.Tensor,
                         cap: float) -> torch.Tensor:
    """Truncated importance sampling: ``w[i,t] = min(exp(logp_old - logp_sampler), cap)`` on valid tokens, 0
    elsewhere. ``cap >= 1``, so a token the engine and the trainer agree on keeps weight 1."""
    valid = as_bool_mask(mask)
    weights = _delta(logp_old, logp_sampler, valid).exp().clamp_(max=cap)
    return torch.where(valid, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))


def masked_is_keep(logp_old: torch.Tensor, logp_sampler: torch.Tensor, mask: torch.Tensor, bound: float,
                   level: str = "token") -> torch.Tensor:
    """Masked importance sampling: which valid tokens stay in the policy loss, a bool ``[B, T]``.

    ``token``: ``|logp_old - logp_sampler| <= log(bound)`` (the ratio within ``[1/bound, bound]``); ``sequence``:
    ``|sum_t m (logp_old - logp_sampler)| <= log(bound)`` for every token of the response. ``bound > 1``."""
    if level not in MIS_LEVELS:
        raise ValueError(f"unknown mis_level {level!r}; choose one of {', '.join(MIS_LEVELS)}")
    valid = as_bool_mask(mask)
    delta = _delta(logp_old, logp_sampler, valid)
    limit = math.log(bound)
    if level == "token":
        return valid & (delta.abs() <= limit)
    return valid & (delta.sum(dim=-1, keepdim=True).abs() <= limit)


def corrected_loss_inputs(token_loss: torch.Tensor, mask: torch.Tensor, logp_old: torch.Tensor,
                          logp_sampler: torch.Tensor, cfg: AlgoConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The policy loss's tokens and mask after the configured corrections: ``(token_loss * w, mask & keep)``;
    unchanged (the same tensors) when neither ``cfg.tis_cap`` nor ``cfg.mis_bound`` is set."""
    if cfg.mis_bound is not None:
        mask = masked_is_keep(logp_old, logp_sampler, mask, cfg.mis_bound, cfg.mis_level)
    if cfg.tis_cap is not None:
        token_loss = token_loss * truncated_is_weights(logp_old, logp_sampler, mask, cfg.tis_cap).to(token_loss.dtype)
    return token_loss, mask
