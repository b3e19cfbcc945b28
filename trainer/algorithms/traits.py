"""What each algorithm is, as plain records: names, normalisation, KL placement, reductions, settings.

Torch-free, so config-time checks (``AlgoConfig``, the launcher's planning and dry run) read these
facts without importing the tensor code. ``registry.py`` pairs every record here with its advantage
path and policy loss; the table of what each estimator computes lives there.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

KL_IN_REWARD = "k1_in_reward"
KL_AS_LOSS = "k2_loss"
# How a token loss becomes a scalar (``policy_loss.reduce_loss``).
LOSS_REDUCTIONS = ("response_mean", "token_mean", "sum")
# The per-token KL estimators by name (``kl.KL_ESTIMATORS`` maps each to its function).
KL_LOSS_TYPES = ("k1", "k2")


@dataclass(frozen=True)
class EstimatorTraits:
    """One algorithm's declarative record: everything but its tensor functions."""

    name: str
    short: str
    global_normalization: bool
    kl_placement: str
    allowed_reductions: tuple[str, ...]
    min_group_size: int
    description: str
    settings: tuple[str, ...] = ()  # algorithm-specific AlgoConfig fields (others must stay at their defaults)
    aux_tokens: bool = False  # the rollout engine draws auxiliary tokens per position


def trait_values(traits: EstimatorTraits) -> dict:
    """The record's fields as keyword arguments (to build a richer record from it)."""
    return {f.name: getattr(traits, f.name) for f in fields(EstimatorTraits)}


ESTIMATOR_TRAITS: dict[str, EstimatorTraits] = {}  # by full and by short name


def _record(traits: EstimatorTraits) -> None:
    for key in (traits.name, traits.short):
        if key in ESTIMATOR_TRAITS:
            raise ValueError(f"estimator name {key!r} is already registered")
    ESTIMATOR_TRAITS[traits.name] = ESTIMATOR_TRAITS[traits.short] = traits


_record(EstimatorTraits(
    name="grpo", short="grpo", global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="GRPO: group centring and group sample-std scaling; separate k2 KL loss",
))
_record(EstimatorTraits(
    name="reinforce_plus_plus", short="rpp", global_normalization=True,
    kl_placement=KL_IN_REWARD, allowed_reductions=("response_mean",), min_group_size=1,
    description="REINFORCE++: k1-shaped reward-to-go, global masked normalisation; no KL loss",
))
_record(EstimatorTraits(
    name="reinforce_plus_plus_baseline", short="rppb", global_normalization=True,
    kl_placement=KL_AS_LOSS, allowed_reductions=("response_mean",), min_group_size=2,
    description="REINFORCE++-baseline: reward minus inclusive group mean, global masked normalisation; k2 loss",
))
_record(EstimatorTraits(
    name="gspo", short="gspo", global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="GSPO: GRPO advantage, clipped surrogate on the length-normalised sequence ratio",
))
_record(EstimatorTraits(
    name="sapo", short="sapo", global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="SAPO: GRPO advantage, sigmoid-gated token ratio with separate temperatures for A > 0 and A <= 0",
    settings=("tau_pos", "tau_neg"),
))
_record(EstimatorTraits(
    name="dapo", short="dapo", global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="DAPO: clip-higher, global token mean, dynamic sampling of zero-variance groups, overlong penalty",
    settings=("dynamic_sampling", "dynamic_sampling_max_attempts", "overlong_cache", "overlong_penalty_factor"),
))
_record(EstimatorTraits(
    name="is_pg", short="is_pg", global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="IS-PG: importance-sampled policy gradient against the rollout engine's log-probs (Tinker)",
    settings=("is_cap",),
))
_record(EstimatorTraits(
    name="score_centering", short="score_centering", global_normalization=False,
    kl_placement=KL_AS_LOSS, allowed_reductions=LOSS_REDUCTIONS, min_group_size=2,
    description="Score centering: -A logp + A (mean aux logp - stopgrad), K auxiliary sampler draws (seed 003)",
    settings=("aux_samples", "aux_top_k", "aux_source", "sc_kl_coeff"), aux_tokens=True,
))


def get_traits(name: str) -> EstimatorTraits:
    """Look an estimator's record up by its full or short name."""
    try:
        return ESTIMATOR_TRAITS[name]
    except KeyError:
        known = ", ".join(sorted({t.name if t.name == t.short else f"{t.name} ({t.short})"
                                  for t in ESTIMATOR_TRAITS.values()}))
        raise ValueError(f"unknown advantage estimator {name!r}; known: {known}") from None
