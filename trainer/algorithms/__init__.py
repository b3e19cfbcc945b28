"""The trainer's numerical core: the contract of seed 001, one short function per formula.

Shapes: responses are ``[B, T]`` right-padded; ``mask`` is a ``[B, T]`` bool (or 0/1) response loss
mask; ``reward`` is ``[B]``; the K responses of one prompt are contiguous (B = P * K).
"""

from trainer.algorithms.advantages import group_baseline_advantages, grpo_advantages, kl_shaped_returns
from trainer.algorithms.config import AlgoConfig, AlgoConfigError
from trainer.algorithms.dapo import overlong_penalty, zero_variance_groups
from trainer.algorithms.kl import KL_ESTIMATORS, k1_kl, k2_kl
from trainer.algorithms.normalization import masked_global_normalize
from trainer.algorithms.policy_loss import (
    LOSS_REDUCTIONS,
    gspo_token_loss,
    is_pg_token_loss,
    ppo_clip_token_loss,
    reduce_loss,
    sapo_token_loss,
    score_centering_token_loss,
)
from trainer.algorithms.registry import (
    ESTIMATORS,
    Advantages,
    Estimator,
    LossInputs,
    RolloutBatch,
    compute_advantages,
    get_estimator,
)

__all__ = [
    "ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_REDUCTIONS",
    "AlgoConfig",
    "AlgoConfigError",
    "Advantages",
    "Estimator",
    "LossInputs",
    "RolloutBatch",
    "compute_advantages",
    "get_estimator",
    "group_baseline_advantages",
    "grpo_advantages",
    "gspo_token_loss",
    "is_pg_token_loss",
    "k1_kl",
    "k2_kl",
    "kl_shaped_returns",
    "masked_global_normalize",
    "overlong_penalty",
    "ppo_clip_token_loss",
    "reduce_loss",
    "sapo_token_loss",
    "score_centering_token_loss",
    "zero_variance_groups",
]
