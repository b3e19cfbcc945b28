"""The estimator registry: each name maps to its advantage path, its KL placement and its reductions.

==============================  ====================================  =====================  ==================  ===============
estimator (short)               raw advantage                         normalisation          reference KL        loss reduction
==============================  ====================================  =====================  ==================  ===============
``grpo`` (grpo)                 (R - mean_g R) / (std_g R + 1e-6)     per group (ddof=1)     separate k2 loss    any
``reinforce_plus_plus`` (rpp)   k1-shaped reward-to-go G[i,t]          global masked, ddof=0  k1 in the reward    response_mean
``reinforce_plus_plus_baseline``  R - inclusive group mean            global masked, ddof=0  separate k2 loss    response_mean
(rppb)
==============================  ====================================  =====================  ==================  ===============

Adding an estimator = writing its raw-advantage function and registering an ``Estimator`` here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from trainer.algorithms.advantages import group_baseline_advantages, grpo_advantages, kl_shaped_returns
from trainer.algorithms.normalization import masked_global_normalize
from trainer.algorithms.policy_loss import LOSS_REDUCTIONS

if TYPE_CHECKING:
    from trainer.algorithms.config import AlgoConfig

KL_IN_REWARD = "k1_in_reward"
KL_AS_LOSS = "k2_loss"


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
class Estimator:
    name: str
    short: str
    raw_advantage: Callable[[RolloutBatch, AlgoConfig], tuple[torch.Tensor, torch.Tensor | None]]
    global_normalization: bool
    kl_placement: str
    allowed_reductions: tuple[str, ...]
    min_group_size: int
    description: str


def _rpp_raw(batch: RolloutBatch, cfg: AlgoConfig):
    _, returns = kl_shaped_returns(batch.reward, batch.logp_old, batch.logp_ref, batch.mask, cfg.kl_coef, cfg.gamma)
    return returns, returns


def _rppb_raw(batch: RolloutBatch, cfg: AlgoConfig):
    return group_baseline_advantages(batch.reward, batch.mask, batch.group_size), None


def _grpo_raw(batch: RolloutBatch, cfg: AlgoConfig):
    adv = grpo_advantages(batch.reward, batch.mask, batch.group_size, std_normalize=cfg.grpo_std_normalize)
    return adv, None


ESTIMATORS: dict[str, Estimator] = {}


def register(est: Estimator) -> Estimator:
    for key in (est.name, est.short):
        if key in ESTIMATORS:
            raise ValueError(f"estimator name {key!r} is already registered")
    ESTIMATORS[est.name] = est
    ESTIMATORS[est.short] = est
    return est


register(Estimator(
    name="grpo", short="grpo", raw_advantage=_grpo_raw, global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="GRPO: group centring and group sample-std scaling; separate k2 KL loss",
))
register(Estimator(
    name="reinforce_plus_plus", short="rpp", raw_advantage=_rpp_raw, global_normalization=True,
    kl_placement=KL_IN_REWARD, allowed_reductions=("response_mean",), min_group_size=1,
    description="REINFORCE++: k1-shaped reward-to-go, global masked normalisation; no KL loss",
))
register(Estimator(
    name="reinforce_plus_plus_baseline", short="rppb", raw_advantage=_rppb_raw, global_normalization=True,
    kl_placement=KL_AS_LOSS, allowed_reductions=("response_mean",), min_group_size=2,
    description="REINFORCE++-baseline: reward minus inclusive group mean, global masked normalisation; k2 loss",
))


def get_estimator(name: str) -> Estimator:
    """Look an estimator up by its full or short name."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        known = ", ".join(sorted({f"{e.name} ({e.short})" for e in ESTIMATORS.values()}))
        raise ValueError(f"unknown advantage estimator {name!r}; known: {known}") from None


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
