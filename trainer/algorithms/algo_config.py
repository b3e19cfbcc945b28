"""The validated algorithm configuration and the configurations that must be refused.

Seed 001 ("支持的模式") lists what the first implementation supports (synchronous colocated
training, data-parallel normalisation, context_parallel_size = 1, response-mean reduction) and what
it refuses. Every refusal below is raised when the config object is built, i.e. at config time,
before any compute, with a message that names the rule and the fix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from facts.algorithms import KL_AS_LOSS, KL_IN_REWARD, KL_LOSS_TYPES, LOSS_REDUCTIONS, RECORDS, algorithm
from trainer.trainer_errors import TrainerError


class AlgoConfigError(TrainerError, ValueError):
    """A refused algorithm configuration; the message names the rule and how to fix it."""


@dataclass(frozen=True)
class AlgoConfig:
    estimator: str
    n_samples_per_prompt: int
    loss_reduction: str = "response_mean"
    gamma: float = 1.0
    kl_coef: float = 0.0  # beta of the k1 term inside the reward (REINFORCE++ only)
    use_kl_loss: bool = False
    kl_loss_type: str = "k2"
    kl_loss_coef: float = 0.0
    clip_low: float = 0.2
    clip_high: float = 0.2
    grpo_std_normalize: bool = True
    reward_postprocess: str | None = None  # name of a custom reward post-processing hook
    custom_advantage_hook: str | None = None  # agentic custom advantage hook
    fully_async: bool = False
    hybrid: bool = False
    context_parallel_size: int = 1
    # Algorithm-specific settings (a record lists the ones it reads; others must keep these defaults).
    tau_pos: float = 1.0  # sapo: gate temperature where A > 0
    tau_neg: float = 1.05  # sapo: gate temperature where A <= 0
    is_cap: float | None = None  # is_pg: truncate the importance ratio at this value (None: no cap)
    aux_samples: int = 8  # score_centering: K auxiliary draws per position
    aux_top_k: int = 20  # score_centering: draw from the sampler renormalised over its top-k
    aux_source: str = "top_k"  # score_centering: top_k | full (exact full-vocabulary draws)
    sc_kl_coeff: float = 0.0  # score_centering: analytic KL term kl_coeff * (logp_sampler - logp)
    dynamic_sampling: bool = False  # dapo: refill zero-variance prompt groups from further prompts
    dynamic_sampling_max_attempts: int = 4  # dapo: prompts tried per slot before keeping the last group
    overlong_cache: int = 0  # dapo: soft overlong penalty over the last `cache` tokens (0: off)
    overlong_penalty_factor: float = 1.0  # dapo: penalty at the response cap
    # Training–inference mismatch corrections, any algorithm (trainer.algorithms.correction): null is off.
    tis_cap: float | None = None  # truncated importance sampling: each token's loss x min(pi_trainer/pi_engine, cap)
    mis_bound: float | None = None  # masked importance sampling: a ratio outside [1/bound, bound] leaves the loss
    mis_level: str = "token"  # token | sequence: what mis_bound masks (a token, or the response whole)

    def __post_init__(self) -> None:
        est = algorithm(self.estimator)  # raises on an unknown name
        object.__setattr__(self, "estimator", est.name)  # canonical full name
        for rule, message in _violations(self):
            raise AlgoConfigError(f"algo config refused [{rule}]: {message}")

    @property
    def short_name(self) -> str:
        return algorithm(self.estimator).short

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> AlgoConfig:
        """Build from a plain mapping (e.g. a Hydra node), refusing unknown keys (typos)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise AlgoConfigError(
                f"algo config refused [unknown-key]: {', '.join(unknown)} is not an algorithm setting; "
                f"known settings: {', '.join(sorted(known))}"
            )
        return cls(**values)


AUX_SOURCES = ("top_k", "full")
# Upper bounds of the counts (as trainer.schema bounds the workload's): tokens or draws per position, a vocabulary
# at most; prompts tried per slot.
AUX_MAX = 2**20
ATTEMPTS_MAX = 1024
MIS_LEVELS = ("token", "sequence")  # trainer.algorithms.correction's (that module imports torch)
# Every algorithm-specific setting: the union of what the records read.
ALGORITHM_SETTINGS = tuple(dict.fromkeys(key for record in RECORDS for key in record.settings))
# Each check: (rule, predicate that is True when the config is refused, message).
_SETTING_CHECKS = (
    ("sapo-tau", lambda c: c.tau_pos <= 0 or c.tau_neg <= 0,
     lambda c: f"tau_pos={c.tau_pos} and tau_neg={c.tau_neg}: f_tau divides by tau; set tau_pos > 0 and tau_neg > 0"),
    ("is-cap", lambda c: c.is_cap is not None and c.is_cap < 1.0,
     lambda c: f"is_cap={c.is_cap} truncates even on-policy ratios (rho = 1); set is_cap >= 1 or null"),
    ("aux-tokens", lambda c: not (1 <= c.aux_samples <= AUX_MAX and 1 <= c.aux_top_k <= AUX_MAX)
     or c.aux_source not in AUX_SOURCES,
     lambda c: f"aux_samples={c.aux_samples}, aux_top_k={c.aux_top_k}, aux_source={c.aux_source!r}: set "
               f"aux_samples and aux_top_k in 1..{AUX_MAX} and aux_source one of {', '.join(AUX_SOURCES)}"),
    ("sc-kl", lambda c: c.sc_kl_coeff < 0 or (c.sc_kl_coeff != 0 and c.use_kl_loss),
     lambda c: f"sc_kl_coeff={c.sc_kl_coeff} must be >= 0 and not combined with use_kl_loss=true (it would "
               "regularise twice); keep one"),
    ("tis-cap", lambda c: c.tis_cap is not None and c.tis_cap < 1.0,
     lambda c: f"tis_cap={c.tis_cap} truncates even tokens the engine and the trainer agree on (ratio 1); "
               "set tis_cap >= 1 or null"),
    ("mis-bound", lambda c: (c.mis_bound is not None and c.mis_bound <= 1.0) or c.mis_level not in MIS_LEVELS,
     lambda c: f"mis_bound={c.mis_bound}, mis_level={c.mis_level!r}: set mis_bound > 1 (a ratio outside "
               f"[1/bound, bound] is masked) or null, and mis_level one of {', '.join(MIS_LEVELS)}"),
    ("mis-level", lambda c: c.mis_bound is None and c.mis_level != "token",
     lambda c: f"mis_level={c.mis_level!r} without mis_bound would be silently ignored; set mis_bound, or "
               "remove mis_level"),
    ("dynamic-sampling", lambda c: not 1 <= c.dynamic_sampling_max_attempts <= ATTEMPTS_MAX,
     lambda c: f"dynamic_sampling_max_attempts={c.dynamic_sampling_max_attempts}: set dynamic_sampling_max_attempts "
               f"in 1..{ATTEMPTS_MAX}"),
    ("overlong", lambda c: not 0 <= c.overlong_cache <= AUX_MAX or c.overlong_penalty_factor < 0,
     lambda c: f"overlong_cache={c.overlong_cache} and overlong_penalty_factor={c.overlong_penalty_factor}: set "
               f"overlong_cache in 0..{AUX_MAX} (tokens) and overlong_penalty_factor >= 0"),
)


def _violations(cfg: AlgoConfig):
    """Yield ``(rule, message)`` for every refused combination, most fundamental first."""
    est = algorithm(cfg.estimator)
    name = est.name
    defaults = {f.name: f.default for f in dataclasses.fields(AlgoConfig)}
    unused = [k for k in ALGORITHM_SETTINGS if k not in est.settings and getattr(cfg, k) != defaults[k]]
    if unused:
        yield (
            "unused-setting",
            f"{name} does not read {', '.join(unused)}; a value set there would be silently ignored; "
            "remove it (or choose the algorithm that reads it)",
        )
    for rule, refused, message in _SETTING_CHECKS:
        if refused(cfg):
            yield rule, message(cfg)
    if cfg.n_samples_per_prompt < est.min_group_size:
        yield (
            "group-size",
            f"{name} with n_samples_per_prompt={cfg.n_samples_per_prompt}: {est.min_group_reason}; "
            f"set n_samples_per_prompt >= {est.min_group_size}",
        )
    if cfg.n_samples_per_prompt < 1:
        yield "group-size", f"n_samples_per_prompt={cfg.n_samples_per_prompt} must be >= 1"
    if cfg.loss_reduction not in LOSS_REDUCTIONS:
        yield "loss-reduction", f"unknown loss_reduction {cfg.loss_reduction!r}; choose one of {', '.join(LOSS_REDUCTIONS)}"
    elif cfg.loss_reduction not in est.allowed_reductions:
        yield (
            "loss-reduction",
            f"{name} allows only {', '.join(est.allowed_reductions)}; loss_reduction={cfg.loss_reduction!r} "
            "would silently change the objective's denominator (per-token global reduction is refused); "
            "set loss_reduction=response_mean",
        )
    # Global normalisation (seed 001's REINFORCE++ family) takes its moments over the closed
    # synchronous global batch: hooks, asynchronous or hybrid batches and context parallelism would
    # each change that population.
    if est.global_normalization:
        if cfg.reward_postprocess is not None:
            yield (
                "custom-reward-hook",
                f"{name} refuses reward_postprocess={cfg.reward_postprocess!r}: it would bypass the frozen "
                "reward/return semantics; remove the hook",
            )
        if cfg.custom_advantage_hook is not None:
            yield (
                "custom-advantage-hook",
                f"{name} refuses custom_advantage_hook={cfg.custom_advantage_hook!r}: it would bypass the "
                "inclusive group-mean and global-normalisation semantics; remove the hook",
            )
        if cfg.fully_async or cfg.hybrid:
            yield (
                "sync-only",
                f"{name} needs a closed synchronous global batch for its moments; fully_async and hybrid "
                "are refused; set fully_async=false hybrid=false",
            )
        if cfg.context_parallel_size != 1:
            yield (
                "context-parallel",
                f"{name} supports context_parallel_size=1 only (unique-token ownership under CP is not "
                f"validated); got {cfg.context_parallel_size}; set context_parallel_size=1",
            )
    if est.kl_placement == KL_IN_REWARD and cfg.use_kl_loss:
        yield (
            "kl-placement",
            f"{name} puts k1 KL inside the shaped reward; a separate KL loss (use_kl_loss=true) would "
            "regularise twice; set use_kl_loss=false",
        )
    if est.kl_placement == KL_AS_LOSS and cfg.kl_coef != 0.0:
        yield (
            "kl-placement",
            f"{name} uses a separate KL loss; KL in the reward (kl_coef={cfg.kl_coef}) is refused; "
            "set kl_coef=0 and use kl_loss_coef",
        )
    if cfg.use_kl_loss and est.kl_loss_types != KL_LOSS_TYPES and cfg.kl_loss_type not in est.kl_loss_types:
        yield (
            "kl-loss-type",
            f"{name} uses the {' or '.join(est.kl_loss_types)} KL loss; got kl_loss_type={cfg.kl_loss_type!r}; "
            f"set kl_loss_type={est.kl_loss_types[0]}",
        )
    if cfg.kl_loss_type not in KL_LOSS_TYPES:
        yield "kl-loss-type", f"unknown kl_loss_type {cfg.kl_loss_type!r}; choose one of {', '.join(KL_LOSS_TYPES)}"
    if not 0.0 < cfg.gamma <= 1.0:
        yield "gamma", f"gamma={cfg.gamma} must lie in (0, 1]"
    if cfg.kl_coef < 0 or cfg.kl_loss_coef < 0:
        yield "kl-coef", "kl_coef and kl_loss_coef must be >= 0"
    if not (0.0 <= cfg.clip_low < 1.0 and cfg.clip_high >= 0.0):
        yield "ppo-clip", f"clip_low={cfg.clip_low} must lie in [0, 1) and clip_high={cfg.clip_high} must be >= 0"
