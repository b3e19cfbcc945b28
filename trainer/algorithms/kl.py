"""Per-token estimators of the KL divergence to the reference policy.

Where each one goes is part of the algorithm contract (see ``registry.py``): REINFORCE++ puts
``k1`` inside the shaped token reward; REINFORCE++-baseline and GRPO add a separate ``k2`` loss.
"""

from __future__ import annotations

import torch


def k1_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Signed k1 estimator: ``d = log pi(a) - log pi_ref(a)``."""
    return logp - logp_ref


def k2_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """k2 estimator: ``D = 1/2 * (log pi(a) - log pi_ref(a))^2``."""
    diff = logp - logp_ref
    return 0.5 * diff * diff


KL_ESTIMATORS = {"k1": k1_kl, "k2": k2_kl}
