"""Formulas by name: the raw-advantage and policy-loss registries an algorithm record names.

Each formula module registers its functions beside their formulas, as verl's ``core_algos.py``
does: ``@register_raw_advantage("group_relative")`` in ``advantages.py``,
``@register_policy_loss("ppo_clip")`` in ``policy_loss.py``. A registered function takes one input
record and the ``AlgoConfig``:

- raw advantage: ``(RolloutBatch, AlgoConfig) -> (raw [B, T], returns [B, T] or None)``;
- policy loss: ``(LossInputs, AlgoConfig) -> (token loss [B, T], clip fraction or None)``.

The records (``facts.algorithms``) name these functions; ``registry.py`` resolves every name at
import and refuses a record whose name is not registered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from trainer.algorithms.algo_config import AlgoConfig


@dataclass(frozen=True)
class RolloutBatch:
    """What a raw-advantage function may read; all ``[B, T]`` except ``reward`` ``[B]``."""

    reward: torch.Tensor
    mask: torch.Tensor
    logp_old: torch.Tensor
    logp_ref: torch.Tensor
    group_size: int


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


RawAdvantage = Callable[[RolloutBatch, "AlgoConfig"], tuple[torch.Tensor, torch.Tensor | None]]
PolicyLoss = Callable[[LossInputs, "AlgoConfig"], tuple[torch.Tensor, torch.Tensor | None]]
RAW_ADVANTAGES: dict[str, RawAdvantage] = {}
POLICY_LOSSES: dict[str, PolicyLoss] = {}


def _register(table: dict, kind: str, name: str):
    def decorate(fn):
        if name in table:
            raise ValueError(f"{kind} {name!r} is already registered (by {table[name].__qualname__})")
        table[name] = fn
        return fn
    return decorate


def register_raw_advantage(name: str):
    """Register a raw-advantage function under ``name`` (what a record's ``raw_advantage`` says)."""
    return _register(RAW_ADVANTAGES, "raw advantage", name)


def register_policy_loss(name: str):
    """Register a policy loss under ``name`` (what a record's ``policy_loss`` says)."""
    return _register(POLICY_LOSSES, "policy loss", name)
