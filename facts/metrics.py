"""Metric keys of ``metrics.jsonl`` (definitions in docs/run-directory.md)."""

from __future__ import annotations

# Logged at every step of every algorithm, in the contract's order (also steps.csv's column order).
REQUIRED_KEYS = (
    "rollout/raw_reward", "rollout/returns", "rollout/adv_raw_mean", "rollout/adv_raw_std",
    "rollout/adv_norm_mean", "rollout/adv_norm_std", "rollout/valid_tokens", "rollout/zero_variance",
    "rollout/all_zero_reward", "rollout/response_len", "rollout/truncated", "train/loss", "train/pg_loss",
    "train/ppo_kl", "train/clip_frac", "train/grad_norm", "perf/response_tok_per_s", "perf/step_s",
    "perf/peak_mem_gib",
)
KL_LOSS_KEY = "train/kl_loss"  # present exactly when the algorithm has a separate KL loss
# Off-policy diagnostics, every step of every algorithm.
OFF_POLICY_KEYS = ("train/staleness", "train/sampler_logp_gap", "train/is_ratio_mean", "train/is_ratio_max")
# DAPO's dynamic sampling counters, every step of a run that filters zero-variance groups.
DYNAMIC_SAMPLING_KEYS = ("rollout/dynamic_sampling_refilled", "rollout/dynamic_sampling_exhausted")
# The run.json field that lists every key the run logs at every step (the evidence reads it).
METRIC_KEYS_FIELD = "metric_keys"
