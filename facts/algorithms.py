"""Every algorithm as one declarative record: its names, contract, traits, settings and shipped defaults.

A record is plain data (standard library only), read by all three layers: the config-time checks
(``trainer.algorithms.algo_config``, in the launcher's torch-free planning and dry run), the trainer
(which resolves the record's ``raw_advantage`` and ``policy_loss`` in the decorator registries of
``trainer/algorithms/`` and writes the record's contract into each run's ``run.json``) and the
evidence (display names and report order; the contract rows it reads from the runs).
``conf/algo/<short>.yaml``, Hydra's config group, is written from the records
(``python -m trainer.algorithms.config_group``; a test fails when a file drifts).

Adding an algorithm: its formula function(s), each registered beside the formula
(``@register_policy_loss("<name>")`` in ``trainer/algorithms/policy_loss.py``,
``@register_raw_advantage("<name>")`` in ``advantages.py``); one ``_record(Algorithm(...))``
below naming them; its float64 reference tests; then regenerate its yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

KL_IN_REWARD = "k1_in_reward"
KL_AS_LOSS = "k2_loss"
# How a token loss becomes a scalar (``trainer.algorithms.policy_loss.reduce_loss``).
LOSS_REDUCTIONS = ("response_mean", "token_mean", "sum")
# The per-token KL estimators by name (``trainer.algorithms.kl.KL_ESTIMATORS`` maps each to its function).
KL_LOSS_TYPES = ("k1", "k2")
NO_SAMPLE_STD = "a group of one has no sample standard deviation"
# The field of run.json in which a run declares what it ran (``Algorithm.declaration``).
ALGORITHM_FIELD = "algorithm"


@dataclass(frozen=True)
class Contract:
    """What an algorithm computes, in words: the report's contract row (written into ``run.json``)."""

    advantage: str
    normalization: str
    kl_regularization: str
    loss: str


@dataclass(frozen=True)
class Algorithm:
    """One algorithm. ``raw_advantage`` and ``policy_loss`` are names in the trainer's registries."""

    name: str  # full name: AlgoConfig.estimator, run.json's algo_name
    short: str  # short name: conf/algo/<short>.yaml, job and arm names, the report's key
    display_name: str
    summary: str  # what it is, with its formula: the header comment of conf/algo/<short>.yaml
    contract: Contract
    raw_advantage: str
    policy_loss: str
    global_normalization: bool  # masked_global_normalize over every valid token of every rank
    kl_placement: str  # KL_IN_REWARD (k1 inside the shaped reward) or KL_AS_LOSS (a separate loss)
    config: MappingProxyType = field(compare=False)  # the shipped config node's values, in file order
    allowed_reductions: tuple[str, ...] = LOSS_REDUCTIONS
    kl_loss_types: tuple[str, ...] = KL_LOSS_TYPES  # the KL-loss estimators it accepts (use_kl_loss)
    min_group_size: int = 2
    min_group_reason: str = NO_SAMPLE_STD  # why a smaller group is refused
    settings: tuple[str, ...] = ()  # algorithm-specific AlgoConfig fields it reads (others keep their defaults)
    aux_tokens: bool = False  # the rollout engine draws auxiliary tokens per position

    def declaration(self) -> dict:
        """What a run of this algorithm declares in its ``run.json`` (the evidence reads it from there)."""
        return {"short": self.short, "name": self.name, "display_name": self.display_name,
                "kl_placement": self.kl_placement, "global_normalization": self.global_normalization,
                "contract": {"advantage": self.contract.advantage, "normalization": self.contract.normalization,
                             "kl_regularization": self.contract.kl_regularization, "loss": self.contract.loss}}


ALGORITHMS: dict[str, Algorithm] = {}  # by full and by short name, in registration (= report) order


def _record(algorithm: Algorithm) -> None:
    for key in dict.fromkeys((algorithm.name, algorithm.short)):
        if key in ALGORITHMS:
            raise ValueError(f"algorithm name {key!r} is already registered")
        ALGORITHMS[key] = algorithm


def node(**values) -> MappingProxyType:
    """A shipped config node's values (read-only), in the order ``conf/algo/<short>.yaml`` lists them."""
    return MappingProxyType(values)


PPO_CLIP_LOSS = "token PPO clipped surrogate"
GROUP_STD = "same-prompt group centering and group-std scaling"
PER_GROUP = "per-group normalization"
SEPARATE_K2 = "separate k2 KL loss"

_record(Algorithm(
    name="grpo", short="grpo", display_name="GRPO",
    summary="GRPO: same-prompt group centring and group sample-std scaling (ddof=1); separate k2 KL loss.",
    contract=Contract(GROUP_STD, PER_GROUP, SEPARATE_K2, PPO_CLIP_LOSS),
    raw_advantage="group_relative", policy_loss="ppo_clip", global_normalization=False, kl_placement=KL_AS_LOSS,
    config=node(grpo_std_normalize=True, kl_coef=0.0, use_kl_loss=True, kl_loss_type="k2", kl_loss_coef=0.01,
                loss_reduction="response_mean", clip_low=0.2, clip_high=0.2),
))
_record(Algorithm(
    name="reinforce_plus_plus", short="rpp", display_name="REINFORCE++",
    summary="REINFORCE++ (seed 001): k1 KL inside the shaped reward (kl_coef), reverse return with gamma=1, "
            "global masked normalisation; no separate KL loss.",
    contract=Contract("terminal reward plus token k1 KL shaping, followed by the reverse return",
                      "global population moments over all valid response tokens and data-parallel ranks",
                      "k1 inside the shaped reward; no independent KL loss", PPO_CLIP_LOSS),
    raw_advantage="kl_shaped_return", policy_loss="ppo_clip", global_normalization=True, kl_placement=KL_IN_REWARD,
    allowed_reductions=("response_mean",), min_group_size=1,
    config=node(gamma=1.0, kl_coef=0.01, use_kl_loss=False, loss_reduction="response_mean", clip_low=0.2, clip_high=0.2),
))
_record(Algorithm(
    name="reinforce_plus_plus_baseline", short="rppb", display_name="REINFORCE++-baseline",
    summary="REINFORCE++-baseline (seed 001): reward minus the inclusive group mean, global masked "
            "normalisation; kl_coef=0 (no KL in the reward) and a separate k2 KL loss.",
    contract=Contract("reward minus the inclusive same-prompt group mean; no group-std division",
                      "the same global valid-token population normalization", SEPARATE_K2, PPO_CLIP_LOSS),
    raw_advantage="group_baseline", policy_loss="ppo_clip", global_normalization=True, kl_placement=KL_AS_LOSS,
    allowed_reductions=("response_mean",), kl_loss_types=("k2",),
    min_group_reason="the inclusive group mean makes every advantage exactly zero",
    config=node(kl_coef=0.0, use_kl_loss=True, kl_loss_type="k2", kl_loss_coef=0.01, loss_reduction="response_mean",
                clip_low=0.2, clip_high=0.2),
))
_record(Algorithm(
    name="gspo", short="gspo", display_name="GSPO",
    summary="GSPO (seed 001, GSPO row): GRPO's group advantage; the clipped surrogate on the length-normalised "
            "sequence ratio rho_i = exp(mean_t (logp - logp_old)), broadcast to the response's tokens.",
    contract=Contract(GROUP_STD, PER_GROUP, SEPARATE_K2,
                      "PPO clipped surrogate on the length-normalised sequence ratio"),
    raw_advantage="group_relative", policy_loss="sequence_ratio_clip", global_normalization=False, kl_placement=KL_AS_LOSS,
    config=node(grpo_std_normalize=True, kl_coef=0.0, use_kl_loss=True, kl_loss_type="k2", kl_loss_coef=0.01,
                loss_reduction="response_mean", clip_low=0.0003, clip_high=0.0004),
))
_record(Algorithm(
    name="sapo", short="sapo", display_name="SAPO",
    summary="SAPO (seed 001, SAPO row): GRPO's group advantage; loss -f_tau(rho) A with the token ratio rho and "
            "f_tau(rho) = 4 sigmoid(tau (rho - 1)) / tau, tau_pos where A > 0 and tau_neg where A <= 0.",
    contract=Contract(GROUP_STD, PER_GROUP, SEPARATE_K2,
                      "sigmoid-gated token ratio, temperature tau_pos where A > 0 and tau_neg where A <= 0"),
    raw_advantage="group_relative", policy_loss="sigmoid_gate", global_normalization=False, kl_placement=KL_AS_LOSS,
    settings=("tau_pos", "tau_neg"),
    config=node(grpo_std_normalize=True, kl_coef=0.0, use_kl_loss=True, kl_loss_type="k2", kl_loss_coef=0.01,
                loss_reduction="response_mean", tau_pos=1.0, tau_neg=1.05),
))
_record(Algorithm(
    name="dapo", short="dapo", display_name="DAPO",
    summary="DAPO (seed 002; Yu et al. 2025): clip-higher (0.2 / 0.28), global token-mean over every DP rank, "
            "dynamic sampling (zero-variance prompt groups refilled from further prompts, bounded attempts) and "
            "the soft overlong penalty over the last `overlong_cache` tokens before the response cap. No KL term.",
    contract=Contract(GROUP_STD + ", after the soft overlong penalty; zero-variance groups refilled", PER_GROUP,
                      "none by default (a separate KL loss with use_kl_loss=true)",
                      "token PPO clipped surrogate with clip-higher, global token mean"),
    raw_advantage="group_relative", policy_loss="ppo_clip", global_normalization=False, kl_placement=KL_AS_LOSS,
    settings=("dynamic_sampling", "dynamic_sampling_max_attempts", "overlong_cache", "overlong_penalty_factor"),
    config=node(grpo_std_normalize=True, kl_coef=0.0, use_kl_loss=False, loss_reduction="token_mean", clip_low=0.2,
                clip_high=0.28, dynamic_sampling=True, dynamic_sampling_max_attempts=4, overlong_cache=8,
                overlong_penalty_factor=1.0),
))
_record(Algorithm(
    name="is_pg", short="is_pg", display_name="IS-PG",
    summary="IS-PG (seed 003's baseline; Tinker's importance_sampling loss): -rho A with "
            "rho = exp(logp - logp_sampler), logp_sampler from the rollout engine; group-mean advantage "
            "(no std division), summed loss.",
    contract=Contract("reward minus the same-prompt group mean; no group-std division", "none",
                      "none by default (a separate KL loss with use_kl_loss=true)",
                      "importance-sampled policy gradient against the rollout engine's log-probs"),
    raw_advantage="group_relative", policy_loss="importance_sampled", global_normalization=False, kl_placement=KL_AS_LOSS,
    settings=("is_cap",),
    config=node(grpo_std_normalize=False, kl_coef=0.0, use_kl_loss=False, loss_reduction="sum", is_cap=None),
))
_record(Algorithm(
    name="score_centering", short="score_centering", display_name="Score centering",
    summary="Score centering (seed 003's candidate): -A logp + A (mean_k logp_aux - stopgrad), K = 8 auxiliary "
            "draws per position from the sampler renormalised over its top-20 (aux_source: full = exact draws); "
            "group-mean advantage, summed loss, optional analytic KL sc_kl_coeff * (logp_sampler - logp).",
    contract=Contract("reward minus the same-prompt group mean; no group-std division", "none",
                      "none by default (optional analytic KL sc_kl_coeff * (logp_sampler - logp))",
                      "CE-valued forward, backward centred on K auxiliary sampler draws"),
    raw_advantage="group_relative", policy_loss="centred_score", global_normalization=False,
    kl_placement=KL_AS_LOSS, settings=("aux_samples", "aux_top_k", "aux_source", "sc_kl_coeff"), aux_tokens=True,
    config=node(grpo_std_normalize=False, kl_coef=0.0, use_kl_loss=False, loss_reduction="sum", aux_samples=8, aux_top_k=20,
                aux_source="top_k", sc_kl_coeff=0.0),
))

RECORDS: tuple[Algorithm, ...] = tuple(dict.fromkeys(ALGORITHMS.values()))  # each once, in report order
# Settings every algorithm reads, with their shipped values, listed after each record's own in conf/algo/<short>.yaml
# (so that `algo.tis_cap=2` needs no `+`): the training–inference mismatch corrections
# (trainer.algorithms.correction; null is off), AlgoConfig's defaults.
COMMON_CONFIG = node(tis_cap=None, mis_bound=None, mis_level="token")
# Short name -> display name, in report order.
DISPLAY_NAMES = {a.short: a.display_name for a in RECORDS}
ALGO_ORDER = tuple(DISPLAY_NAMES)
# Whether the shipped config of an algorithm logs a separate KL loss (True: required, False: absent).
# Used only for runs whose run.json predates its own metric_keys list.
KL_LOSS_BY_ALGO = {a.short: bool(a.config.get("use_kl_loss", False)) for a in RECORDS}


def algorithm(name: str) -> Algorithm:
    """Look an algorithm's record up by its full or short name."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        known = ", ".join(sorted(a.name if a.name == a.short else f"{a.name} ({a.short})" for a in RECORDS))
        raise ValueError(f"unknown advantage estimator {name!r}; known: {known}") from None


def display_name(algo: str) -> str:
    """``rpp`` -> ``REINFORCE++``; an unknown short name is shown as is."""
    return DISPLAY_NAMES.get(algo, algo)


def algo_sort_key(algo: str) -> tuple[int, str]:
    """Known algorithms in report order, then the rest alphabetically."""
    return (ALGO_ORDER.index(algo), "") if algo in ALGO_ORDER else (len(ALGO_ORDER), algo)
