"""Proof that an engine holds the trainer's weights after a sync (docs/engines.md "Weight sync").

At the engine's start and after every refresh (``workload.sampler_refresh_every``) the engine scores a fixed probe
batch, the first ``PROBE_PROMPTS`` evaluation prompts each followed by the engine's own greedy continuation of
``PROBE_TOKENS`` tokens at the start (teacher forcing, temperature 1), and the trainer computes the same log-probs
with the policy it just synced. The sync took when every token agrees within ``facts.engines.SYNC_TOLERANCE``;
otherwise the run fails naming the step (``EngineSyncError``). Each check is one line of
``run/engine_syncs.jsonl`` (``facts.engines.WEIGHT_SYNC_LOG``): the step that first samples with the weights (the
run's ``n_updates`` for the final evaluation's), the optimizer step whose weights went in, the largest |engine - trainer|, the tolerance, and how far the trainer's own probe log-probs moved since the
previous sync (a sync whose update moved them less than the tolerance could not be told from one that did not take;
the record says so rather than claim it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from facts.engines import SYNC_TOLERANCE, WEIGHT_SYNC_LOG
from trainer.policy import TokenBatch, build_token_batch, response_logprobs
from trainer.rollout import SamplingParams
from trainer.trainer_errors import TrainerError

PROBE_PROMPTS = 4
PROBE_TOKENS = 16


class EngineSyncError(TrainerError, RuntimeError):
    """The engine's log-probs after a weight sync are not the trainer's: the sync did not take."""


@dataclass
class SyncProbe:
    """The fixed probe batch and the trainer's log-probs of it at the previous check."""

    prompts: list[list[int]]
    responses: list[list[int]]
    batch: TokenBatch
    previous: torch.Tensor | None = None


def make_probe(engine, prompts: list[list[int]], device) -> SyncProbe:
    """The probe of a run: its first ``PROBE_PROMPTS`` prompts and the engine's greedy continuations of them
    (generated once, at the start; the same tokens are scored at every check)."""
    prompts = prompts[:PROBE_PROMPTS]
    out = engine.generate(prompts, list(range(len(prompts))), SamplingParams(temperature=0.0, max_new_tokens=PROBE_TOKENS))
    responses = [g.response_ids or [0] for g in out.generations]
    pad = getattr(engine, "pad_id", 0)
    return SyncProbe(prompts, responses, build_token_batch(prompts, responses, pad, device))


def check_sync(engine, policy: torch.nn.Module, probe: SyncProbe, step: int, optimizer_step: int,
               log_dir: Path | None) -> dict:
    """Compare the engine's probe log-probs with the policy's; append the record (rank 0: ``log_dir``); raise
    ``EngineSyncError`` naming ``step`` when a token differs by more than ``SYNC_TOLERANCE``."""
    with torch.no_grad():
        trainer = response_logprobs(policy, probe.batch, 1.0).double().cpu()
    mask = probe.batch.response_mask.cpu()
    scored = engine.score(probe.prompts, probe.responses)
    engine_lp = torch.zeros_like(trainer)
    for i, row in enumerate(scored):
        engine_lp[i, :len(row)] = torch.tensor(row, dtype=torch.float64)
    diff = float(torch.where(mask, (engine_lp - trainer).abs(), 0.0).max())
    moved = None if probe.previous is None else float(torch.where(mask, (trainer - probe.previous).abs(), 0.0).max())
    probe.previous = trainer
    record = {"step": step, "optimizer_step": optimizer_step, "max_abs_diff": diff, "tolerance": SYNC_TOLERANCE,
              "policy_moved": moved, "distinguishable": moved is None or moved > SYNC_TOLERANCE,
              "ok": diff <= SYNC_TOLERANCE}
    if log_dir is not None:
        with open(log_dir / WEIGHT_SYNC_LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    if not record["ok"]:
        raise EngineSyncError(
            f"the rollout engine's weight sync before step {step} did not take: on the probe batch its log-probs "
            f"differ from the trainer's by up to {diff:.3g} (tolerance {SYNC_TOLERANCE:g}); the engine samples from "
            "other weights than the policy's: the run is stopped (engine_syncs.jsonl has every check)")
    return record
