"""The trainer's numerical core: the contract of seed 001, one short function per formula.

Shapes: responses are ``[B, T]`` right-padded; ``mask`` is a ``[B, T]`` bool (or 0/1) response loss
mask; ``reward`` is ``[B]``; the K responses of one prompt are contiguous (B = P * K).

An algorithm is one declarative record in ``facts/algorithms.py`` naming its formulas, which are
registered beside their functions (``named.py``'s decorators); ``registry.py`` resolves them. Names
load on first use (PEP 562), so config-time code (``AlgoConfig``, the records) imports no torch: the
launcher's planning and dry run never pay for the tensor modules.
"""

from __future__ import annotations

import importlib

# Exported name -> the submodule that defines it.
_EXPORTS = {
    "AlgoConfig": "algo_config", "AlgoConfigError": "algo_config",
    "KL_LOSS_TYPES": "facts", "LOSS_REDUCTIONS": "facts",
    "POLICY_LOSSES": "named", "RAW_ADVANTAGES": "named", "LossInputs": "named", "RolloutBatch": "named",
    "register_policy_loss": "named", "register_raw_advantage": "named",
    "group_baseline_advantages": "advantages", "grpo_advantages": "advantages", "kl_shaped_returns": "advantages",
    "overlong_penalty": "shaping", "zero_variance_groups": "shaping",
    "KL_ESTIMATORS": "kl", "k1_kl": "kl", "k2_kl": "kl",
    "masked_global_normalize": "normalization",
    "gspo_token_loss": "policy_loss", "is_pg_token_loss": "policy_loss", "ppo_clip_token_loss": "policy_loss",
    "reduce_loss": "policy_loss", "sapo_token_loss": "policy_loss", "score_centering_token_loss": "policy_loss",
    "ESTIMATORS": "registry", "Advantages": "registry", "Estimator": "registry",
    "compute_advantages": "registry", "get_estimator": "registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module("facts.algorithms" if module == "facts" else f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
