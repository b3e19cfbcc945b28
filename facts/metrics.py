"""Metric keys of ``metrics.jsonl`` (definitions in docs/run-directory.md)."""

from __future__ import annotations

# Each key, named once: the trainer computes a value under its name and every reader reads it by name.
# rollout/: the step's sampled responses, their rewards and advantages.
RAW_REWARD_KEY = "rollout/raw_reward"  # mean reward per response
RETURNS_KEY = "rollout/returns"  # mean first-token return (the shaped reward where KL is in the reward)
ADV_RAW_MEAN_KEY = "rollout/adv_raw_mean"
ADV_RAW_STD_KEY = "rollout/adv_raw_std"
ADV_NORM_MEAN_KEY = "rollout/adv_norm_mean"
ADV_NORM_STD_KEY = "rollout/adv_norm_std"
VALID_TOKENS_KEY = "rollout/valid_tokens"
ZERO_VARIANCE_KEY = "rollout/zero_variance"  # 1 when the raw advantages have (near) zero variance
ALL_ZERO_REWARD_KEY = "rollout/all_zero_reward"  # 1 when no response of the step earned a reward
RESPONSE_LEN_KEY = "rollout/response_len"  # mean response length (tokens)
TRUNCATED_KEY = "rollout/truncated"  # share of responses cut at the length cap
# train/: the update.
LOSS_KEY = "train/loss"
PG_LOSS_KEY = "train/pg_loss"
PPO_KL_KEY = "train/ppo_kl"
CLIP_FRAC_KEY = "train/clip_frac"
GRAD_NORM_KEY = "train/grad_norm"  # before clipping
# perf/: the step's cost.
RESPONSE_TOK_PER_S_KEY = "perf/response_tok_per_s"
STEP_S_KEY = "perf/step_s"
PEAK_MEM_GIB_KEY = "perf/peak_mem_gib"
# Not logged: the rollout's wall seconds, reduced (max over ranks) within a step to turn the response-token count
# into RESPONSE_TOK_PER_S_KEY, then dropped.
ROLLOUT_WALL_KEY = "perf/rollout_wall_s"

# Logged at every step of every algorithm, in the contract's order.
REQUIRED_KEYS = (
    RAW_REWARD_KEY, RETURNS_KEY, ADV_RAW_MEAN_KEY, ADV_RAW_STD_KEY, ADV_NORM_MEAN_KEY, ADV_NORM_STD_KEY,
    VALID_TOKENS_KEY, ZERO_VARIANCE_KEY, ALL_ZERO_REWARD_KEY, RESPONSE_LEN_KEY, TRUNCATED_KEY, LOSS_KEY, PG_LOSS_KEY,
    PPO_KL_KEY, CLIP_FRAC_KEY, GRAD_NORM_KEY, RESPONSE_TOK_PER_S_KEY, STEP_S_KEY, PEAK_MEM_GIB_KEY,
)
KL_LOSS_KEY = "train/kl_loss"  # present exactly when the algorithm has a separate KL loss
# REQUIRED_KEYS with KL_LOSS_KEY after PG_LOSS_KEY: the contract's order with the KL loss in it (what the evidence
# requires of a run that does not declare its keys, the KL loss where its algorithm logs one) and steps.csv's
# column order.
_AFTER_PG_LOSS = REQUIRED_KEYS.index(PG_LOSS_KEY) + 1
CONTRACT_KEYS = (*REQUIRED_KEYS[:_AFTER_PG_LOSS], KL_LOSS_KEY, *REQUIRED_KEYS[_AFTER_PG_LOSS:])
# Off-policy diagnostics, every step of every algorithm.
STALENESS_KEY = "train/staleness"  # optimizer steps since the sampler's weights were refreshed
SAMPLER_LOGP_GAP_KEY = "train/sampler_logp_gap"
IS_RATIO_MEAN_KEY = "train/is_ratio_mean"
IS_RATIO_MAX_KEY = "train/is_ratio_max"
OFF_POLICY_KEYS = (STALENESS_KEY, SAMPLER_LOGP_GAP_KEY, IS_RATIO_MEAN_KEY, IS_RATIO_MAX_KEY)
# DAPO's dynamic sampling counters, every step of a run that filters zero-variance groups.
DYNAMIC_SAMPLING_REFILLED_KEY = "rollout/dynamic_sampling_refilled"  # prompt groups replaced by a refill
DYNAMIC_SAMPLING_EXHAUSTED_KEY = "rollout/dynamic_sampling_exhausted"  # still zero-variance after every attempt
DYNAMIC_SAMPLING_KEYS = (DYNAMIC_SAMPLING_REFILLED_KEY, DYNAMIC_SAMPLING_EXHAUSTED_KEY)
# Training–inference mismatch (docs/engines.md), every step of a run whose rollout engine is not the trainer's own
# (``workload.engine`` other than ``torch``; the evidence requires them there, declared or not): per valid response
# token, delta = logp_engine - logp_trainer, both under the sampler's weights; the mean and the max of |delta|, the
# k3 estimate of KL(engine || trainer) (mean of exp(-delta) - 1 + delta, unbiased on the engine's own samples, >= 0)
# and the share of tokens with |delta| > facts.engines.MISMATCH_THRESHOLD.
LOGP_ABS_DIFF_MEAN_KEY = "mismatch/logp_abs_diff_mean"
LOGP_ABS_DIFF_MAX_KEY = "mismatch/logp_abs_diff_max"
KL_ENGINE_TRAINER_KEY = "mismatch/kl_engine_trainer"
TOKENS_OVER_THRESHOLD_KEY = "mismatch/tokens_over_threshold"
MISMATCH_KEYS = (LOGP_ABS_DIFF_MEAN_KEY, LOGP_ABS_DIFF_MAX_KEY, KL_ENGINE_TRAINER_KEY, TOKENS_OVER_THRESHOLD_KEY)
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
# TRL's own TensorBoard tag (trainer=trl, in the run's trainer output): the wall seconds of its train(), which
# ``make bench``'s trl_harness sets against the harness's time around it.
TRL_TRAIN_RUNTIME_TAG = "train/train_runtime"
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
