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
# Training–inference mismatch (docs/engines.md), every step of a run whose rollout engine is not the trainer's own
# (``workload.engine`` other than ``torch``; the evidence requires them there, declared or not): per valid response
# token, delta = logp_engine - logp_trainer, both under the sampler's weights; the mean and the max of |delta|, the
# k3 estimate of KL(engine || trainer) (mean of exp(-delta) - 1 + delta, unbiased on the engine's own samples, >= 0)
# and the share of tokens with |delta| > facts.engines.MISMATCH_THRESHOLD.
MISMATCH_KEYS = ("mismatch/logp_abs_diff_mean", "mismatch/logp_abs_diff_max", "mismatch/kl_engine_trainer",
                 "mismatch/tokens_over_threshold")
# Every step of every run: the share of the step's rollout groups whose K responses are all the same token sequence
# (zero advantage for each: nothing to learn from the group; facts.engines.IDENTICAL_GROUPS_BOUND).
IDENTICAL_GROUPS_KEY = "rollout/identical_groups"
# The run.json field that lists every key the run logs at every step (the evidence reads it).
METRIC_KEYS_FIELD = "metric_keys"

# TensorBoard-only tags: written to run/tensorboard/ beside every metrics.jsonl key, never to
# metrics.jsonl (its keys, values and the external-trainer contract stay as they are).
LEARNING_RATE_TAG = "train/lr"  # the optimizer's learning rate at the step
ENTROPY_TAG = "policy/entropy"  # mean per-token entropy of the policy's sampling distribution
REFERENCE_KL_TAG = "policy/ref_kl_k1"  # mean k1 reference KL, only where the record puts KL in the reward
TENSORBOARD_ONLY_TAGS = (LEARNING_RATE_TAG, ENTROPY_TAG, REFERENCE_KL_TAG)
# The evaluation on one set of tags for every checkpoint: the initial one at step 0, each evaluation
# during training (workload.eval.every) at its step, the final one at n_updates.
EVAL_TAG_PREFIX = "eval"
EVAL_TAG_KEYS = ("pass@1", "pass@2", "pass@4", "mean_reward", "mean_length", "truncation")
EVAL_SECONDS_TAG = "perf/eval_s"  # wall seconds of one evaluation during training
# run.json's record of the evaluations during training: every, each one's step, seconds and summary.
EVAL_DURING_TRAINING_FIELD = "eval_during_training"
# run.json: the Unix time (s, to the ms) at which each step's metrics.jsonl line was written, index = step; carried
# across resumes and rewritten at each checkpoint. The exports' wall time of a step (evidence.tools.export).
STEP_TIMES_FIELD = "step_ended_at"


def eval_tag(key: str) -> str:
    """The TensorBoard tag of one evaluation value: ``eval/pass@1``."""
    return f"{EVAL_TAG_PREFIX}/{key}"

# The one line the trainer logs (trainer.log) after its evaluations, stated once here:
#   eval final (<checkpoint>): pass@1=0.3750 pass@2=0.5833 pass@4=0.7500; initial control: pass@1=0.4375 ...
# each pass@k of EVAL_TAG_KEYS the summary has, to 4 decimals. The audit reads it back against eval.json.
EVAL_LINE_MARK = "eval final ("


def eval_line(initial: dict, final: dict) -> str:
    """The trainer's log line of its final and initial evaluation summaries (see EVAL_LINE_MARK)."""
    shown = {name: " ".join(f"{key}={entry[key]:.4f}" for key in EVAL_TAG_KEYS
                            if key.startswith("pass@") and isinstance(entry.get(key), (int, float)))
             for name, entry in (("final", final), ("initial", initial))}
    return f"{EVAL_LINE_MARK}{final.get('checkpoint', 'final')}): {shown['final']}; initial control: {shown['initial']}"


def parse_eval_line(line: str) -> tuple[str, dict[str, str], dict[str, str]] | None:
    """(checkpoint, {pass@k: "0.3750"} of the final, of the initial) of a log line holding the eval line."""
    at = line.find(EVAL_LINE_MARK)
    if at < 0:
        return None
    rest = line[at + len(EVAL_LINE_MARK):]
    checkpoint, sep, rest = rest.partition("): ")
    final, sep2, initial = rest.partition("; initial control: ")
    if not sep or not sep2:
        return None

    def values(text: str) -> dict[str, str]:
        return dict(item.split("=", 1) for item in text.split() if "=" in item)
    return checkpoint, values(final), values(initial.strip())
