"""Rollout engines (``workload.engine``), stated once: their names, the run.json field of an engine's determinism
profile, the per-refresh weight-sync record and its tolerance, the training–inference mismatch threshold and the
bound on identical rollout groups. The trainer (``trainer.engine_registry``) and the evidence read them here.
"""

from __future__ import annotations

import math

TORCH_ENGINE = "torch"  # the trainer's own decoding loop (trainer.rollout.TorchEngine): nothing to compare against
VLLM_ENGINE = "vllm"  # vLLM in the trainer's process (trainer.vllm_engine)
# run.json: the rollout engine's determinism profile (engine and version, attention backend, seed handling,
# batch invariance, dtype, threads); the bundle carries run.json.
ENGINE_FIELD = "engine"
# run/engine_syncs.jsonl: one line per weight sync of an engine other than torch (the step, the optimizer step whose
# weights went in, the probe's max |logp_engine - logp_trainer|, the tolerance, ok).
WEIGHT_SYNC_LOG = "engine_syncs.jsonl"
# A sync took when, on the fixed probe batch, every token's engine log-prob is within this of the trainer's (nats,
# float32 both sides: vLLM 0.32.0's CPU build and the trainer's forward agreed to 1e-6 on head-dim-32 Qwen3 models,
# before and after a sync), docs/engines.md.
SYNC_TOLERANCE = 1e-4
# |logp_engine - logp_trainer| past this counts in mismatch/tokens_over_threshold: a ratio outside [1/1.2, 1.2],
# PPO's default clip range, i.e. a token the engine alone would already put outside the trust region.
MISMATCH_THRESHOLD = math.log(1.2)
# A step whose share of identical rollout groups (IDENTICAL_GROUPS_KEY) exceeds this is an incident naming the
# cause; with K > 1 a run whose every group of every step is identical is rejected (it learned nothing).
IDENTICAL_GROUPS_BOUND = 0.5
