"""The algorithm registry: every record of ``facts.algorithms`` with its formulas resolved by name.

An algorithm is one declarative record (``facts/algorithms.py``: names, contract, normalisation,
KL placement, reductions, settings, shipped defaults) that names a raw advantage and a policy loss;
each formula is registered beside its function, in the style of verl's ``core_algos.py``:

- ``@register_raw_advantage("group_relative" | "kl_shaped_return" | "group_baseline")`` in
  ``advantages.py``;
- ``@register_policy_loss("ppo_clip" | "sequence_ratio_clip" | "sigmoid_gate" | "importance_sampled"
  | "centred_score")`` in ``policy_loss.py``.

``Estimator`` is a record with those two names resolved; a record naming a function nobody
registered fails here, at import. Adding an algorithm = its formula function(s) with the decorator,
one record in ``facts/algorithms.py``, its float64 reference tests, and its regenerated
``conf/algo/<short>.yaml`` (``python -m trainer.algorithms.config_group``); nothing else names it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import torch

from facts.algorithms import RECORDS, Algorithm, algorithm

# Importing the formula modules registers their functions.
from trainer.algorithms import advantages as _advantages  # noqa: F401
from trainer.algorithms import policy_loss as _policy_loss  # noqa: F401
from trainer.algorithms.named import (
    POLICY_LOSSES,
    RAW_ADVANTAGES,
    LossInputs,
    PolicyLoss,
    RawAdvantage,
    RolloutBatch,
)
from trainer.algorithms.normalization import masked_global_normalize

if TYPE_CHECKING:
    from trainer.algorithms.algo_config import AlgoConfig

__all__ = ["ESTIMATORS", "Advantages", "Estimator", "LossInputs", "RolloutBatch", "compute_advantages",
           "get_estimator"]


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
class Estimator(Algorithm):
    """One algorithm: its record, with the two registered formulas the record names resolved."""

    raw_advantage_fn: RawAdvantage | None = None
    policy_loss_fn: PolicyLoss | None = None


def _resolve(record: Algorithm) -> Estimator:
    missing = [f"{kind} {name!r}" for kind, name, table in (("raw advantage", record.raw_advantage, RAW_ADVANTAGES),
                                                           ("policy loss", record.policy_loss, POLICY_LOSSES))
               if name not in table]
    if missing:
        raise LookupError(f"algorithm {record.name}: {' and '.join(missing)} is not registered; register it beside "
                          "its formula (@register_raw_advantage / @register_policy_loss in trainer/algorithms/)")
    return Estimator(**{f.name: getattr(record, f.name) for f in fields(Algorithm)},
                     raw_advantage_fn=RAW_ADVANTAGES[record.raw_advantage],
                     policy_loss_fn=POLICY_LOSSES[record.policy_loss])


ESTIMATORS: dict[str, Estimator] = {}  # by full and by short name
for _record in RECORDS:
    ESTIMATORS[_record.name] = ESTIMATORS[_record.short] = _resolve(_record)


def get_estimator(name: str) -> Estimator:
    """Look an estimator up by its full or short name (an unknown name raises ``ValueError``)."""
    return ESTIMATORS[algorithm(name).name]


def compute_advantages(batch: RolloutBatch, cfg: AlgoConfig, group=None) -> Advantages:
    """Run the configured estimator's advantage path, then its normalisation.

    Globally normalised estimators use ``masked_global_normalize`` over every rank of ``group``;
    GRPO's per-group scaling is its own normalisation, and its moments are reported locally.
    """
    est = get_estimator(cfg.estimator)
    raw, returns = est.raw_advantage_fn(batch, cfg)
    if est.global_normalization:
        normalized, mean, var, count = masked_global_normalize(raw, batch.mask, group=group)
    else:
        normalized = raw
        _, mean, var, count = masked_global_normalize(raw, batch.mask, group=group)
    return Advantages(raw=raw, normalized=normalized, returns=returns, raw_mean=mean, raw_var=var, valid_tokens=count)
