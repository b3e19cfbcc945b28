"""Composing and validating a training run's configuration (Hydra config groups under ``conf/``).

``conf/config.yaml`` selects one option of each group: ``algo`` (one per record of
``facts/algorithms.py``, its file written from the record), ``workload``
(toy | toy_math | gsm8k_qwen3_0p6b), ``cluster``. Everything that can be refused without compute is refused
here, before a run starts, with a one-line message naming the setting and the fix.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from facts.repo import CONF_DIR
from trainer.algorithms import AlgoConfig, AlgoConfigError
from trainer.engine_registry import EngineUnavailable, plan_check
from trainer.inputs import resolve
from trainer.trainer_errors import TrainerError

DESCRIPTIVE_ALGO_KEYS = ("short", "display_name")
# The most tokens one batch may hold (responses x the response cap): 2,000x seed 000's rollout (32 x 1,024) and
# 64x its evaluation (256 x 4 x 1,024); a geometry past them cannot fit in one device's memory.
STEP_TOKENS_MAX = 2**26
EVAL_TOKENS_MAX = 2**26


class RunConfigError(TrainerError, ValueError):
    """A refused run configuration (one line: the setting and the fix)."""


def compose(overrides: list[str] | None = None, config_name: str = "config") -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` with Hydra override syntax, outside any Hydra app."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides or []))


def algo_config(cfg: DictConfig) -> AlgoConfig:
    """The validated algorithm config (seed 001's refusals raise ``AlgoConfigError``)."""
    values = OmegaConf.to_container(cfg.algo, resolve=True)
    for key in DESCRIPTIVE_ALGO_KEYS:
        values.pop(key, None)
    values["n_samples_per_prompt"] = int(cfg.workload.n_samples_per_prompt)
    return AlgoConfig.from_mapping(values)


def check_schema(cfg: DictConfig) -> None:
    """Every setting's type and range (``trainer.schema``), one line naming the setting on refusal."""
    from omegaconf.errors import OmegaConfBaseException

    from trainer.schema import SettingError, check_settings

    try:
        values = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        raise RunConfigError(f"setting {getattr(exc, 'full_key', '?')} cannot be resolved: "
                             f"{str(exc).splitlines()[0]}") from None
    try:
        check_settings(values)
    except SettingError as exc:
        raise RunConfigError(str(exc)) from None


def validate(cfg: DictConfig) -> AlgoConfig:
    """Every config-time check of one run; returns the validated algorithm config."""
    check_schema(cfg)
    algo = algo_config(cfg)
    w = cfg.workload
    batch = int(w.prompts_per_step) * int(w.n_samples_per_prompt)
    if int(w.global_batch_size) != batch:
        raise RunConfigError(
            f"workload.global_batch_size={w.global_batch_size} must equal prompts_per_step x "
            f"n_samples_per_prompt = {batch} (one actor update per rollout batch); fix one of them"
        )
    dp = int(cfg.dp_size)
    if int(w.prompts_per_step) % dp != 0:
        raise RunConfigError(
            f"dp_size={dp} must divide workload.prompts_per_step={w.prompts_per_step} "
            "(each rank owns whole prompt groups); choose a divisor"
        )
    if int(w.sampling.top_k) != 0 or float(w.sampling.top_p) != 1.0:
        raise RunConfigError(
            "workload.sampling.top_k/top_p filter the rollout policy, but the PPO ratio and the KL terms use "
            "the unfiltered policy's log-probs; keep top_k=0 top_p=1.0 for training (eval may filter)"
        )
    stop = int(cfg.get("stop_at_step") or 0)
    if stop and stop >= int(w.n_updates):
        raise RunConfigError(f"stop_at_step={stop} must be below workload.n_updates={w.n_updates} (it stops before "
                             "that step; the resumed run does the rest); lower it, or 0 for no stop")
    if int(w.num_threads) > int(w.cpus_per_job):
        raise RunConfigError(f"workload.num_threads={w.num_threads} exceeds the job's workload.cpus_per_job="
                             f"{w.cpus_per_job} (each thread wants a CPU of its own); lower num_threads or raise "
                             "cpus_per_job")
    for what, responses, cap, limit in (
            ("a training step's rollout", int(w.global_batch_size), int(w.max_response_len), STEP_TOKENS_MAX),
            ("an evaluation", int(w.eval.n_prompts) * int(w.eval.k), int(w.eval.max_response_len), EVAL_TOKENS_MAX)):
        if responses * cap > limit:
            raise RunConfigError(f"{what} of {responses} responses x {cap} tokens ({responses * cap:,} tokens) is over "
                                 f"the {limit:,} a batch may hold; lower the responses or the response cap")
    if str(w.device).startswith("cuda") and int(w.gpus_per_job) < 1:
        raise RunConfigError(f"workload.device={w.device} needs workload.gpus_per_job>=1 (the GPUs a job asks for)")
    try:  # what the rollout engine cannot honour (not installed, a head size it refuses, ...)
        plan_check(w, algo, resolve(w.model_path), dp_size=dp)
    except EngineUnavailable as exc:
        raise RunConfigError(str(exc)) from None
    return algo


__all__ = ["AlgoConfigError", "RunConfigError", "algo_config", "compose", "validate"]
