"""Per-token estimators of the KL divergence to the reference policy.

Where each one goes is part of the algorithm record (``facts/algorithms.py``): REINFORCE++ puts
``k1`` inside the shaped token reward; REINFORCE++-baseline and GRPO add a separate ``k2`` loss.
Both take the response mask and select before any arithmetic, so a NaN/Inf stored outside the mask
reaches neither the value nor the gradient (``d(0.5 x^2)/dx`` at ``x = NaN`` is NaN even when the
product is later selected away).
"""

from __future__ import annotations

import torch

from facts.algorithms import KL_LOSS_TYPES
from trainer.algorithms.masking import as_bool_mask


def _masked_diff(logp: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    valid = as_bool_mask(mask)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    return torch.where(valid, logp, zero) - torch.where(valid, logp_ref.to(logp.dtype), zero)


def k1_kl(logp: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Signed k1 estimator: ``d = m * (log pi(a) - log pi_ref(a))`` (exactly 0 outside the mask)."""
    return _masked_diff(logp, logp_ref, mask)


def k2_kl(logp: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """k2 estimator: ``D = m * 1/2 * (log pi(a) - log pi_ref(a))^2`` (exactly 0 outside the mask)."""
    diff = _masked_diff(logp, logp_ref, mask)
    return 0.5 * diff * diff


KL_ESTIMATORS = dict(zip(KL_LOSS_TYPES, (k1_kl, k2_kl), strict=True))  # the names are facts.algorithms's
