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
    LOSS_REDUCTIONS,
    gspo_token_loss,
    is_pg_token_loss,
    ppo_clip_token_loss,
    sapo_token_loss,
    score_centering_token_loss,
)

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
class Estimator:
    """One algorithm: its advantage path, its policy loss and the settings only it reads."""

    name: str
    short: str
    raw_advantage: Callable[[RolloutBatch, AlgoConfig], tuple[torch.Tensor, torch.Tensor | None]]
    global_normalization: bool
    kl_placement: str
    allowed_reductions: tuple[str, ...]
    min_group_size: int
    description: str
    policy_loss: PolicyLoss = _ppo_loss
    settings: tuple[str, ...] = ()  # algorithm-specific AlgoConfig fields (others must stay at their defaults)
    aux_tokens: bool = False  # the rollout engine draws auxiliary tokens per position


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

register(Estimator(
    name="gspo", short="gspo", raw_advantage=_grpo_raw, global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="GSPO: GRPO advantage, clipped surrogate on the length-normalised sequence ratio",
    policy_loss=_gspo_loss,
))
register(Estimator(
    name="sapo", short="sapo", raw_advantage=_grpo_raw, global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="SAPO: GRPO advantage, sigmoid-gated token ratio with separate temperatures for A > 0 and A <= 0",
    policy_loss=_sapo_loss, settings=("tau_pos", "tau_neg"),
))
register(Estimator(
    name="dapo", short="dapo", raw_advantage=_grpo_raw, global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="DAPO: clip-higher, global token mean, dynamic sampling of zero-variance groups, overlong penalty",
    settings=("dynamic_sampling", "dynamic_sampling_max_attempts", "overlong_cache", "overlong_penalty_factor"),
))
register(Estimator(
    name="is_pg", short="is_pg", raw_advantage=_grpo_raw, global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="IS-PG: importance-sampled policy gradient against the rollout engine's log-probs (Tinker)",
    policy_loss=_is_pg_loss, settings=("is_cap",),
))
register(Estimator(
    name="score_centering", short="score_centering", raw_advantage=_grpo_raw, global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="Score centering: -A logp + A (mean aux logp - stopgrad), K auxiliary sampler draws (seed 003)",
    policy_loss=_score_centering_loss, settings=("aux_samples", "aux_top_k", "aux_source", "sc_kl_coeff"),
    aux_tokens=True,
))


def get_estimator(name: str) -> Estimator:
    """Look an estimator up by its full or short name."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        known = ", ".join(sorted({e.name if e.name == e.short else f"{e.name} ({e.short})" for e in ESTIMATORS.values()}))
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
