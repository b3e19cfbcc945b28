"""The algorithm registry: each name maps to its advantage path, policy loss, KL placement and reductions.

==============================  ====================================  =====================  ==================  ===============
estimator (short)               raw advantage                         normalisation          reference KL        loss reduction
==============================  ====================================  =====================  ==================  ===============
``grpo`` (grpo)                 (R - mean_g R) / (std_g R + 1e-6)     per group (ddof=1)     separate k2 loss    any
``reinforce_plus_plus`` (rpp)   k1-shaped reward-to-go G[i,t]          global masked, ddof=0  k1 in the reward    response_mean
``reinforce_plus_plus_baseline``  R - inclusive group mean            global masked, ddof=0  separate k2 loss    response_mean
(rppb)
``gspo`` (gspo)                 GRPO group advantage                  per group (ddof=1)     separate k2 loss    any
``sapo`` (sapo)                 GRPO group advantage                  per group (ddof=1)     separate k2 loss    any
``dapo`` (dapo)                 GRPO group advantage + overlong       per group (ddof=1)     none by default     any (token_mean)
                                penalty, zero-variance groups refilled
``is_pg`` (is_pg)               R - mean_g R (group mean)             none                   none by default     any (sum)
``score_centering``             R - mean_g R (group mean)             none                   optional analytic   any (sum)
==============================  ====================================  =====================  ==================  ===============

Policy losses: rpp/rppb/grpo/dapo use ``ppo_clip_token_loss`` (dapo with clip-higher), gspo
``gspo_token_loss``, sapo ``sapo_token_loss``, is_pg ``is_pg_token_loss`` against the rollout
engine's log-probs, score_centering ``score_centering_token_loss`` on auxiliary sampler draws.

Adding an algorithm = its loss (or raw-advantage) function, one ``Estimator`` registered here, one
``conf/algo/<name>.yaml`` and its float64 reference tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from trainer.algorithms.advantages import group_baseline_advantages, grpo_advantages, kl_shaped_returns
from trainer.algorithms.normalization import masked_global_normalize
from trainer.algorithms.policy_loss import (
    gspo_token_loss,
    is_pg_token_loss,
    ppo_clip_token_loss,
    sapo_token_loss,
    score_centering_token_loss,
)
from trainer.algorithms.traits import ESTIMATOR_TRAITS, EstimatorTraits, get_traits, trait_values

if TYPE_CHECKING:
    from trainer.algorithms.config import AlgoConfig

@dataclass(frozen=True)
class RolloutBatch:
    """What an advantage path may read; all ``[B, T]`` except ``reward`` ``[B]``."""

    reward: torch.Tensor
    mask: torch.Tensor
    logp_old: torch.Tensor
    logp_ref: torch.Tensor
    group_size: int


@dataclass(frozen=True)
class Advantages:
    """Output of an advantage path. ``returns`` is ``None`` where the path has no token return."""

    raw: torch.Tensor
    normalized: torch.Tensor
    returns: torch.Tensor | None
    raw_mean: torch.Tensor  # population moments of `raw` over valid tokens (all ranks when normalised)
    raw_var: torch.Tensor
    valid_tokens: torch.Tensor


@dataclass(frozen=True)
class LossInputs:
    """What a policy loss may read; all ``[B, T]`` except ``logp_aux`` ``[B, T, K]``.

    ``logp`` carries the gradient; ``logp_old`` is the policy before this batch's first update,
    ``logp_sampler`` the rollout engine's own log-probs (both detached).
    """

    logp: torch.Tensor
    logp_old: torch.Tensor
    logp_sampler: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    logp_aux: torch.Tensor | None = None


PolicyLoss = Callable[[LossInputs, "AlgoConfig"], tuple[torch.Tensor, torch.Tensor | None]]


def _ppo_loss(x: LossInputs, cfg: AlgoConfig):
    return ppo_clip_token_loss(x.logp, x.logp_old, x.advantages, x.mask, cfg.clip_low, cfg.clip_high)


def _gspo_loss(x: LossInputs, cfg: AlgoConfig):
    return gspo_token_loss(x.logp, x.logp_old, x.advantages, x.mask, cfg.clip_low, cfg.clip_high)


def _sapo_loss(x: LossInputs, cfg: AlgoConfig):
    return sapo_token_loss(x.logp, x.logp_old, x.advantages, x.mask, cfg.tau_pos, cfg.tau_neg), None


def _is_pg_loss(x: LossInputs, cfg: AlgoConfig):
    return is_pg_token_loss(x.logp, x.logp_sampler, x.advantages, x.mask, cfg.is_cap), None


def _score_centering_loss(x: LossInputs, cfg: AlgoConfig):
    loss = score_centering_token_loss(x.logp, x.logp_aux, x.advantages, x.mask,
                                      logp_sampler=x.logp_sampler, kl_coeff=cfg.sc_kl_coeff)
    return loss, None


@dataclass(frozen=True)
class Estimator(EstimatorTraits):
    """One algorithm: its declarative record (``traits.py``), advantage path and policy loss."""

    raw_advantage: Callable[[RolloutBatch, AlgoConfig], tuple[torch.Tensor, torch.Tensor | None]] | None = None
    policy_loss: PolicyLoss = _ppo_loss


def _rpp_raw(batch: RolloutBatch, cfg: AlgoConfig):
    _, returns = kl_shaped_returns(batch.reward, batch.logp_old, batch.logp_ref, batch.mask, cfg.kl_coef, cfg.gamma)
    return returns, returns


def _rppb_raw(batch: RolloutBatch, cfg: AlgoConfig):
    return group_baseline_advantages(batch.reward, batch.mask, batch.group_size), None


def _grpo_raw(batch: RolloutBatch, cfg: AlgoConfig):
    adv = grpo_advantages(batch.reward, batch.mask, batch.group_size, std_normalize=cfg.grpo_std_normalize)
    return adv, None


# Each record of traits.py with its (raw advantage, policy loss); a record without one fails at import.
TENSOR_PATHS = {
    "grpo": (_grpo_raw, _ppo_loss),
    "reinforce_plus_plus": (_rpp_raw, _ppo_loss),
    "reinforce_plus_plus_baseline": (_rppb_raw, _ppo_loss),
    "gspo": (_grpo_raw, _gspo_loss),
    "sapo": (_grpo_raw, _sapo_loss),
    "dapo": (_grpo_raw, _ppo_loss),
    "is_pg": (_grpo_raw, _is_pg_loss),
    "score_centering": (_grpo_raw, _score_centering_loss),
}
ESTIMATORS: dict[str, Estimator] = {}
for _traits in dict.fromkeys(ESTIMATOR_TRAITS.values()):
    _raw, _loss = TENSOR_PATHS[_traits.name]
    _est = Estimator(**trait_values(_traits), raw_advantage=_raw, policy_loss=_loss)
    ESTIMATORS[_est.name] = ESTIMATORS[_est.short] = _est


def get_estimator(name: str) -> Estimator:
    """Look an estimator up by its full or short name."""
    return ESTIMATORS[get_traits(name).name]


def compute_advantages(batch: RolloutBatch, cfg: AlgoConfig, group=None) -> Advantages:
    """Run the configured estimator's advantage path, then its normalisation.

    Globally normalised estimators use ``masked_global_normalize`` over every rank of ``group``;
    GRPO's per-group scaling is its own normalisation, and its moments are reported locally.
    """
    est = get_estimator(cfg.estimator)
    raw, returns = est.raw_advantage(batch, cfg)
    if est.global_normalization:
        normalized, mean, var, count = masked_global_normalize(raw, batch.mask, group=group)
    else:
        normalized = raw
        _, mean, var, count = masked_global_normalize(raw, batch.mask, group=group)
    return Advantages(raw=raw, normalized=normalized, returns=returns, raw_mean=mean, raw_var=var, valid_tokens=count)
