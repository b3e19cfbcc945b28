"""The trainer's numerical core: the contract of seed 001, one short function per formula.

Shapes: responses are ``[B, T]`` right-padded; ``mask`` is a ``[B, T]`` bool (or 0/1) response loss
mask; ``reward`` is ``[B]``; the K responses of one prompt are contiguous (B = P * K).

Names load on first use (PEP 562), so config-time code (``AlgoConfig``, ``traits``) imports no
torch: the launcher's planning and dry run never pay for the tensor modules.
"""

from __future__ import annotations

import importlib

# Exported name -> the submodule that defines it.
_EXPORTS = {
    "AlgoConfig": "config", "AlgoConfigError": "config",
    "ESTIMATOR_TRAITS": "traits", "EstimatorTraits": "traits", "KL_LOSS_TYPES": "traits",
    "LOSS_REDUCTIONS": "traits", "get_traits": "traits",
    "group_baseline_advantages": "advantages", "grpo_advantages": "advantages", "kl_shaped_returns": "advantages",
    "overlong_penalty": "dapo", "zero_variance_groups": "dapo",
    "KL_ESTIMATORS": "kl", "k1_kl": "kl", "k2_kl": "kl",
    "masked_global_normalize": "normalization",
    "gspo_token_loss": "policy_loss", "is_pg_token_loss": "policy_loss", "ppo_clip_token_loss": "policy_loss",
    "reduce_loss": "policy_loss", "sapo_token_loss": "policy_loss", "score_centering_token_loss": "policy_loss",
    "ESTIMATORS": "registry", "Advantages": "registry", "Estimator": "registry", "LossInputs": "registry",
    "RolloutBatch": "registry", "compute_advantages": "registry", "get_estimator": "registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
