"""One training run: N steps of rollout -> score -> log-probs -> advantages -> update (epochs x
mini-batches) -> metrics, then the fixed-subset evaluation of the final checkpoint and of the
initial-checkpoint control.

A run reads top to bottom: ``plan_run`` (every config-time check, once, before any rank starts),
then on each rank ``set_up`` (inputs, models, ``resume_point``, rollout engine), ``train_steps``
(``train_step`` per step, checkpoints, the requeue stop) and ``finish`` (evaluation); rank 0's
``RunRecord`` writes ``run.json`` in each of its states.

Off-policy control: the rollout engine holds its own copy of the weights, refreshed every
``workload.sampler_refresh_every`` optimizer steps, and returns its own per-token log-probs.

Data parallelism: ``dp_size`` ranks run this same loop in separate processes joined by a
torch.distributed group (gloo on CPU, nccl on GPU). Each rank owns whole prompt groups; the
advantage normaliser and the loss denominators are global (``trainer.algorithms``); gradients are
summed across ranks because each rank's loss is its share of the global loss. The ranks are either
spawned here (``train``) or, when torch.distributed's ``env://`` variables say so (``RANK``,
``WORLD_SIZE``, ...: a scheduler started one process per rank, possibly on several nodes), this
process is one of them; the loop is the same either way. With more than one rank, each writes the
digest of every step's reduced values to ``run/ranks/rank<r>.jsonl`` (``facts.data_parallel_ranks``).
"""

from __future__ import annotations

import copy
import datetime
import functools
import json
import logging
import math
import os
import platform
import random
import resource
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from facts import (
    ALGORITHM_FIELD,
    CHECKPOINTS_DIR,
    EVAL_RECORD,
    METRIC_KEYS_FIELD,
    RUN_RECORD,
    algorithm,
    atomic_write_json,
)
from facts.algorithms import KL_IN_REWARD
from facts.containers import IMAGE_DIGEST_ENV, IMAGE_DIGEST_FIELD
from facts.data_parallel_ranks import (
    LOCAL_RANK_VAR,
    MASTER_ADDR_ENV,
    MASTER_PORT_ENV,
    RANK_LOGS_FIELD,
    RANK_VAR,
    RENDEZVOUS_TIMEOUT_ENV,
    WORLD_SIZE_VAR,
)
from facts.engines import ENGINE_FIELD, TORCH_ENGINE
from facts.evaluation import model_files
from facts.files import EVAL_RESPONSES_DIR, INITIAL_EVAL_COMPUTED, JOB_SPEC, RESUMED_FROM_FIELD
from facts.metrics import (
    ADV_NORM_MEAN_KEY,
    ADV_NORM_STD_KEY,
    ADV_RAW_MEAN_KEY,
    ADV_RAW_STD_KEY,
    ALL_ZERO_REWARD_KEY,
    CLIP_FRAC_KEY,
    DYNAMIC_SAMPLING_EXHAUSTED_KEY,
    DYNAMIC_SAMPLING_REFILLED_KEY,
    ENTROPY_TAG,
    EVAL_DURING_TRAINING_FIELD,
    GRAD_NORM_KEY,
    IDENTICAL_GROUPS_KEY,
    IS_RATIO_MAX_KEY,
    IS_RATIO_MEAN_KEY,
    KL_ENGINE_TRAINER_KEY,
    LEARNING_RATE_TAG,
    LOGP_ABS_DIFF_MAX_KEY,
    LOGP_ABS_DIFF_MEAN_KEY,
    LOSS_KEY,
    PEAK_MEM_GIB_KEY,
    PG_LOSS_KEY,
    PPO_KL_KEY,
    RAW_REWARD_KEY,
    REFERENCE_KL_TAG,
    RESPONSE_LEN_KEY,
    RESPONSE_TOK_PER_S_KEY,
    RETURNS_KEY,
    ROLLOUT_WALL_KEY,
    SAMPLER_LOGP_GAP_KEY,
    STALENESS_KEY,
    STEP_S_KEY,
    STEP_TIMES_FIELD,
    TOKENS_OVER_THRESHOLD_KEY,
    TRUNCATED_KEY,
    VALID_TOKENS_KEY,
    ZERO_VARIANCE_KEY,
)
from facts.repo import REPO_ROOT, SOURCE_COMMIT_ENV
from facts.states import RUN_COMPLETED, RUN_FAILED, RUN_RUNNING
from facts.sweep_plan import PLAN_DIGEST_ENV, PLAN_DIGEST_FIELD
from facts.task import TASK_FIELD
from trainer.algorithms import (
    KL_ESTIMATORS,
    Advantages,
    AlgoConfig,
    Estimator,
    LossInputs,
    RolloutBatch,
    compute_advantages,
    get_estimator,
    k1_kl,
    masked_global_normalize,
    overlong_penalty,
    reduce_loss,
    zero_variance_groups,
)
from trainer.algorithms.correction import corrected_loss_inputs
from trainer.checkpoint import (
    AdapterRecord,
    checkpoint_name,
    checkpoint_state,
    latest_checkpoint,
    load_checkpoint,
    load_sampler_weights,
    save_checkpoint,
)
from trainer.data import (
    Example,
    PromptStream,
    load_split,
    mix_seed,
    subset_digest,
    task_record,
    workload_reward,
    workload_task,
)
from trainer.engine_registry import engine_settings
from trainer.engine_sync import EngineSyncError, SyncProbe, check_sync, make_probe
from trainer.evaluate import evaluate, shared_initial_eval
from trainer.inputs import resolve, verify_inputs
from trainer.ledger_writer import DataLedger
from trainer.lora import LoraError, check_targets, lora_settings
from trainer.metrics_writer import (
    KL_LOSS_KEY,
    MetricsLog,
    RankLog,
    hparam_values,
    log_eval,
    metric_keys,
    split_board_only,
)
from trainer.mismatch import identical_groups, mismatch_sums
from trainer.policy import (
    TokenBatch,
    add_lora,
    build_token_batch,
    compute_context,
    load_policy,
    lora_layers,
    response_logprobs,
    sampler_weights,
)
from trainer.preemption import (
    EXIT_CHECKPOINTED,
    EXIT_STOPPED_UNSAVED,
    ForwardToRanks,
    StopRequest,
    deliver_held_signals,
)
from trainer.reward_workers import make_scorer
from trainer.rollout import AuxDraws, Generation, RolloutEngine, SamplingParams, make_engine, warn_if_greedy
from trainer.run_config import RunConfigError, validate
from trainer.trainer_errors import TrainerError

log = logging.getLogger("trainer")
VAR_FLOOR = 1e-8
# After one rank exits, how long the others get to exit on their own (they stop together after a
# warning) before torch terminates them.
RANK_EXIT_GRACE_S = 10.0


def sampling_params(node: DictConfig, max_new_tokens: int) -> SamplingParams:
    return SamplingParams(float(node.temperature), int(node.top_k), float(node.top_p), int(max_new_tokens))


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


@functools.cache  # a process constant: the run record and the initial-eval identity both ask
def source_commit() -> str | None:
    if commit := os.environ.get(SOURCE_COMMIT_ENV):
        return commit
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


class StepMetrics:
    """A step's metrics, each named where its value is produced, reduced across ranks in one go.

    ``total(key, local)``: a global sum; ``mean(key, local_sum, local_count)``: a global ratio;
    ``max(key, local)``: a global maximum; ``value(key, v)``: a value that is already global.
    ``finish()`` issues one all_reduce per kind (host-side monitoring, never the numerical hot path).
    """

    def __init__(self, group, device: torch.device):
        self.group = group
        self.device = device  # NCCL reduces device tensors only
        self._totals: dict[str, float] = {}
        self._means: dict[str, list[float]] = {}
        self._maxes: dict[str, float] = {}
        self._values: dict[str, float] = {}

    def total(self, key: str, local: float) -> None:
        self._totals[key] = self._totals.get(key, 0.0) + float(local)

    def mean(self, key: str, local_sum: float, local_count: float) -> None:
        acc = self._means.setdefault(key, [0.0, 0.0])
        acc[0] += float(local_sum)
        acc[1] += float(local_count)

    def max(self, key: str, local: float) -> None:
        self._maxes[key] = max(self._maxes.get(key, -float("inf")), float(local))

    def value(self, key: str, value: float) -> None:
        self._values[key] = float(value)

    def _reduce(self, values: list[float], op) -> list[float]:
        if self.group is None or not values:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=op, group=self.group)
        return t.tolist()

    def finish(self) -> dict[str, float]:
        sums = self._reduce([*self._totals.values(), *(x for pair in self._means.values() for x in pair)],
                            dist.ReduceOp.SUM)
        out = dict(zip(self._totals, sums[: len(self._totals)]))
        pairs = sums[len(self._totals):]
        out.update({key: pairs[2 * i] / pairs[2 * i + 1] if pairs[2 * i + 1] else 0.0
                    for i, key in enumerate(self._means)})
        out.update(zip(self._maxes, self._reduce(list(self._maxes.values()), dist.ReduceOp.MAX)))
        out.update(self._values)
        return out


class NonFiniteGradientError(TrainerError, RuntimeError):
    """The gradient norm of a step is NaN or Inf: stepping the optimizer would poison every weight."""


def check_finite_grad_norm(grad_norm: torch.Tensor, step: int) -> None:
    """Stop the run before ``optimizer.step`` when the gradient norm is not finite.

    Host sync: one scalar read per optimizer step (the norm is logged anyway).
    """
    value = float(grad_norm)
    if not math.isfinite(value):
        raise NonFiniteGradientError(
            f"non-finite gradient norm ({value}) at step {step}; the optimizer step was skipped and the run "
            "stopped (look for NaN/Inf in the inputs of the loss, or lower workload.lr)"
        )


@dataclass(frozen=True)
class UpdateSchedule:
    """How rollouts and updates interleave (workload keys, ints >= 1, default 1)."""

    sampler_refresh_every: int = 1  # optimizer steps between sampler weight refreshes
    ppo_epochs: int = 1  # passes over each rollout batch
    ppo_mini_batches: int = 1  # optimizer steps per pass

    @property
    def updates_per_step(self) -> int:
        return self.ppo_epochs * self.ppo_mini_batches


def update_schedule(cfg: DictConfig) -> UpdateSchedule:
    """The validated schedule; refuses a value that is not an int >= 1 or splits groups unevenly."""
    w = cfg.workload
    values = {}
    for key in ("sampler_refresh_every", "ppo_epochs", "ppo_mini_batches"):
        value = w.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RunConfigError(f"workload.{key}={value!r} must be an integer >= 1; set workload.{key}=1 for the default")
        values[key] = value
    per_rank = int(w.prompts_per_step) // max(int(cfg.dp_size), 1) * int(w.n_samples_per_prompt)
    if per_rank % values["ppo_mini_batches"] != 0:
        raise RunConfigError(
            f"workload.ppo_mini_batches={values['ppo_mini_batches']} must divide the {per_rank} responses of each "
            "rank's batch (prompts_per_step / dp_size x n_samples_per_prompt); choose a divisor"
        )
    return UpdateSchedule(**values)


@dataclass
class RunState:
    cfg: DictConfig
    algo: AlgoConfig
    rank: int
    world: int
    group: object
    policy: torch.nn.Module
    reference: torch.nn.Module
    tokenizer: object
    optimizer: torch.optim.Optimizer
    engine: RolloutEngine
    stream: PromptStream
    device: torch.device
    scorer: object
    schedule: UpdateSchedule = UpdateSchedule()
    optimizer_steps: int = 0  # optimizer steps taken so far
    sampler_step: int = 0  # the optimizer step whose weights the rollout engine holds
    probe: SyncProbe | None = None  # an engine other than torch: each weight sync is checked on it (engine_sync)

    @property
    def estimator(self) -> Estimator:
        return get_estimator(self.algo.estimator)


@dataclass
class Rollout:
    """Stage 1-2 output: this rank's responses (K per prompt slot, slot order) and their rewards."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    finished: list[bool]
    sampler_logp: list[torch.Tensor]  # per response, its tokens' sampler log-probs
    aux_ids: list[torch.Tensor] | None  # per response, [len, K] auxiliary draws
    reward: torch.Tensor  # [B]
    positions: list[int]  # the global stream position of each slot
    wall_s: float


@dataclass
class LogProbs:
    """Stage 3 output. ``logp`` keeps its graph when the batch is used for a single update."""

    batch: TokenBatch
    logp_old: torch.Tensor
    logp_ref: torch.Tensor
    logp_sampler: torch.Tensor
    logp: torch.Tensor | None = None
    logp_aux: torch.Tensor | None = None
    aux_ids: torch.Tensor | None = None


def refill_prompt(stream: PromptStream, seed: int, step: int, position: int, attempt: int) -> Example:
    """The prompt that dynamic sampling tries for a slot at ``attempt >= 1``: a pure function of
    (seed, step, slot, attempt), so refills never move the data cursor and any DP split agrees."""
    return stream.examples[mix_seed(seed, step, position, attempt, 0x2EF1) % len(stream.examples)]


@dataclass(frozen=True)
class Group:
    """The K responses of one prompt slot, their sampler log-probs (and auxiliary draws) and rewards."""

    prompt_ids: list[int]
    generations: list[Generation]
    sampler_logp: list[torch.Tensor]
    aux_ids: list[torch.Tensor] | None
    reward: torch.Tensor  # [K]


def sample_groups(s: RunState, step: int, slots: list[tuple[int, Example]], attempt: int,
                  aux: AuxDraws | None) -> tuple[list[Group], float]:
    """Generate and score K responses for each ``(position, example)`` slot; returns the groups and
    the rollout wall time. Response keys depend only on (seed, step, slot, j, attempt)."""
    w, seed, algo = s.cfg.workload, int(s.cfg.seed), s.algo
    K = int(w.n_samples_per_prompt)
    prompt_ids, keys, examples = [], [], []
    for position, example in slots:
        ids = s.tokenizer(example.prompt, add_special_tokens=False)["input_ids"]
        for j in range(K):
            prompt_ids.append(ids)
            keys.append(mix_seed(seed, step, position, j) if attempt == 0 else mix_seed(seed, step, position, j, attempt))
            examples.append(example)
    if s.cfg.debug.get("os_seeded_draw"):  # TEST/DIAGNOSTIC ONLY: breaks determinism on purpose (trainer.schema)
        drawn = int.from_bytes(os.urandom(8), "big") >> 1  # one draw from the OS seeds every response of the step
        keys = [mix_seed(drawn, i) for i in range(len(keys))]
    with compute_context(s.device, str(w.dtype)):
        out = s.engine.generate(prompt_ids, keys, sampling_params(w.sampling, w.max_response_len), aux)
    texts = [s.tokenizer.decode(g.response_ids, skip_special_tokens=True) for g in out.generations]
    reward = torch.tensor(s.scorer.score(texts, examples), dtype=torch.float32, device=s.device)
    if algo.overlong_cache > 0:
        lengths = torch.tensor([len(g.response_ids) for g in out.generations], device=s.device)
        reward = reward + overlong_penalty(lengths, int(w.max_response_len), algo.overlong_cache,
                                           algo.overlong_penalty_factor).to(reward.dtype)
    groups = []
    for n in range(len(slots)):
        rows = range(n * K, (n + 1) * K)
        lengths = [len(out.generations[r].response_ids) for r in rows]
        groups.append(Group(
            prompt_ids[n * K], [out.generations[r] for r in rows],
            [out.sampler_logp[r, :length] for r, length in zip(rows, lengths)],
            [out.aux_ids[r, :length] for r, length in zip(rows, lengths)] if aux else None,
            reward[n * K:(n + 1) * K],
        ))
    return groups, out.wall_s


def rollout_stage(s: RunState, step: int, m: StepMetrics) -> Rollout:
    """Stages 1-2: generate K responses per prompt slot and score them. With DAPO's dynamic sampling,
    a slot whose group rewards have zero variance is refilled from further prompts (at most
    ``dynamic_sampling_max_attempts`` tries; after the last the slot keeps its last group)."""
    w, algo = s.cfg.workload, s.algo
    K, per_rank = int(w.n_samples_per_prompt), int(w.prompts_per_step) // s.world
    slots = s.stream.step_prompts(step, int(w.prompts_per_step))[s.rank * per_rank:(s.rank + 1) * per_rank]
    aux = AuxDraws(algo.aux_samples, algo.aux_top_k if algo.aux_source == "top_k" else 0) \
        if s.estimator.aux_tokens else None
    groups: dict[int, Group] = {}
    pending, wall, refilled = list(range(len(slots))), 0.0, 0
    for attempt in range(algo.dynamic_sampling_max_attempts if algo.dynamic_sampling else 1):
        tried = [(slots[i][0], refill_prompt(s.stream, int(s.cfg.seed), step, slots[i][0], attempt)
                  if attempt else slots[i][1]) for i in pending]
        sampled, seconds = sample_groups(s, step, tried, attempt, aux)
        groups.update(zip(pending, sampled))
        wall += seconds
        if not algo.dynamic_sampling:
            break
        pending = [i for i in pending if bool(zero_variance_groups(groups[i].reward, K)[0])]
        if not pending or attempt == algo.dynamic_sampling_max_attempts - 1:
            break
        refilled += len(pending)
    if algo.dynamic_sampling:
        m.total(DYNAMIC_SAMPLING_REFILLED_KEY, refilled)  # prompt groups replaced by a refill
        m.total(DYNAMIC_SAMPLING_EXHAUSTED_KEY, len(pending))  # still zero-variance after every attempt
    ordered = [groups[i] for i in range(len(slots))]
    same, n_groups = identical_groups([gen.response_ids for g in ordered for gen in g.generations], K)
    m.mean(IDENTICAL_GROUPS_KEY, same, n_groups)  # K copies of one sample: zero advantages (facts.engines)
    return Rollout(
        prompt_ids=[g.prompt_ids for g in ordered for _ in range(K)],
        response_ids=[gen.response_ids for g in ordered for gen in g.generations],
        finished=[gen.finished for g in ordered for gen in g.generations],
        sampler_logp=[lp for g in ordered for lp in g.sampler_logp],
        aux_ids=[a for g in ordered for a in g.aux_ids] if aux else None,
        reward=torch.cat([g.reward for g in ordered]),
        positions=[pos for pos, _ in slots],
        wall_s=wall,
    )


def _pad_rows(rows: list[torch.Tensor], width: int, fill) -> torch.Tensor:
    """Right-pad 1-D (or [len, K]) tensors to ``width`` rows and stack them."""
    out = []
    for r in rows:
        pad = [0, 0] * (r.dim() - 1) + [0, width - r.shape[0]]
        out.append(torch.nn.functional.pad(r, pad, value=fill))
    return torch.stack(out)


def logprob_stage(s: RunState, rollout: Rollout, m: StepMetrics) -> LogProbs:
    """Reference and policy log-probs of the sampled tokens, and the sampler's own ones beside them.

    With one update per batch the grad-enabled forward's values ARE the old log-probs (nothing has
    changed the policy yet), so no separate no-grad policy forward is run.
    """
    w = s.cfg.workload
    batch = build_token_batch(rollout.prompt_ids, rollout.response_ids, s.tokenizer.pad_token_id, s.device)
    mask = batch.response_mask
    width = mask.shape[1]
    temperature = float(w.sampling.temperature) if float(w.sampling.temperature) > 0 else 1.0
    compute = compute_context(s.device, str(w.dtype))
    logp_sampler = _pad_rows(rollout.sampler_logp, width, 0.0).to(torch.float32)
    aux_ids = _pad_rows(rollout.aux_ids, width, s.tokenizer.pad_token_id) if rollout.aux_ids is not None else None
    with torch.no_grad(), compute:
        logp_ref = response_logprobs(s.reference, batch, temperature)
    lp = LogProbs(batch, logp_old=None, logp_ref=logp_ref, logp_sampler=logp_sampler, aux_ids=aux_ids)
    if s.schedule.updates_per_step == 1:
        (lp.logp, lp.logp_aux), entropy = policy_logprobs(s, batch, aux_ids, entropy=True)
        lp.logp_old = lp.logp.detach()
    else:
        with torch.no_grad():
            (lp.logp_old, _), entropy = policy_logprobs(s, batch, None, entropy=True)

    zero = torch.zeros((), dtype=torch.float32, device=s.device)
    n_valid = float(mask.sum())
    log_is = torch.where(mask, lp.logp_old - logp_sampler, zero)
    is_ratio = torch.where(mask, torch.exp(log_is), zero)
    m.mean(SAMPLER_LOGP_GAP_KEY, float(log_is.abs().sum()), n_valid)
    m.mean(IS_RATIO_MEAN_KEY, float(is_ratio.sum()), n_valid)
    m.max(IS_RATIO_MAX_KEY, float(is_ratio.max()) if n_valid else 0.0)
    # The policy's entropy before the update, from the forward above (TensorBoard only).
    m.mean(ENTROPY_TAG, float(torch.where(mask, entropy, zero).sum()), n_valid)
    if str(w.engine) != TORCH_ENGINE:
        mismatch_stage(s, lp, temperature, m)
    return lp


def mismatch_stage(s: RunState, lp: LogProbs, temperature: float, m: StepMetrics) -> None:
    """Training–inference mismatch (``trainer.mismatch``): the engine's log-probs against the trainer's under the
    same weights, the policy's own forward when the sampler is current, else one of the sampler's weights."""
    trainer_logp = lp.logp_old
    if s.sampler_step != s.optimizer_steps:
        with torch.no_grad(), compute_context(s.device, str(s.cfg.workload.dtype)):
            trainer_logp = response_logprobs(s.engine.model, lp.batch, temperature)
    sums = mismatch_sums(lp.logp_sampler, trainer_logp, lp.batch.response_mask)
    m.mean(LOGP_ABS_DIFF_MEAN_KEY, sums.abs_sum, sums.tokens)
    m.max(LOGP_ABS_DIFF_MAX_KEY, sums.abs_max)
    m.mean(KL_ENGINE_TRAINER_KEY, sums.k3_sum, sums.tokens)
    m.mean(TOKENS_OVER_THRESHOLD_KEY, sums.over_threshold, sums.tokens)


def policy_logprobs(s: RunState, batch: TokenBatch, aux_ids: torch.Tensor | None, entropy: bool = False):
    """The policy's (grad-enabled unless under no_grad) log-probs, plus auxiliary ones when asked;
    with ``entropy``, ``((logp, logp_aux), H)``: each position's entropy from the same forward."""
    w = s.cfg.workload
    temperature = float(w.sampling.temperature) if float(w.sampling.temperature) > 0 else 1.0
    with compute_context(s.device, str(w.dtype)):
        out = response_logprobs(s.policy, batch, temperature, aux_ids, entropy=entropy)
    if aux_ids is not None:
        return out
    return ((out[0], None), out[1]) if entropy else (out, None)


def advantage_stage(s: RunState, rollout: Rollout, lp: LogProbs, step: int, m: StepMetrics) -> Advantages:
    """The configured estimator's advantages (global normaliser over every rank) and their diagnostics."""
    mask = lp.batch.response_mask
    K = int(s.cfg.workload.n_samples_per_prompt)
    adv = compute_advantages(RolloutBatch(rollout.reward, mask, lp.logp_old, lp.logp_ref, K), s.algo, group=s.group)
    _, norm_mean, norm_var, _ = masked_global_normalize(adv.normalized, mask, group=s.group)
    if s.cfg.debug.dump_advantages:  # for the dp-invariance test: this rank's slice of the step
        dump = Path(s.cfg.output_dir) / "debug" / f"step{step:06d}-rank{s.rank}.pt"
        dump.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"positions": rollout.positions, "raw": adv.raw, "normalized": adv.normalized,
                    "mask": mask, "reward": rollout.reward}, dump)
    n = len(rollout.response_ids)
    first_return = adv.returns[:, 0] if adv.returns is not None else rollout.reward
    raw_var = adv.raw_var.item()
    m.mean(RAW_REWARD_KEY, float(rollout.reward.sum()), n)
    m.mean(RETURNS_KEY, float(first_return.sum()), n)
    m.value(ADV_RAW_MEAN_KEY, adv.raw_mean.item())
    m.value(ADV_RAW_STD_KEY, raw_var ** 0.5)
    m.value(ADV_NORM_MEAN_KEY, norm_mean.item())
    m.value(ADV_NORM_STD_KEY, max(norm_var.item(), 0.0) ** 0.5)
    m.value(VALID_TOKENS_KEY, adv.valid_tokens.item())
    m.value(ZERO_VARIANCE_KEY, float(raw_var < VAR_FLOOR))
    m.total(ALL_ZERO_REWARD_KEY, float((rollout.reward > 0).sum()))  # a count here; a flag in train_step
    m.mean(RESPONSE_LEN_KEY, float(mask.sum()), n)
    m.mean(TRUNCATED_KEY, float(sum(not f for f in rollout.finished)), n)
    if algorithm(s.algo.estimator).kl_placement == KL_IN_REWARD:  # the k1 term the shaped reward carries
        m.mean(REFERENCE_KL_TAG, float(k1_kl(lp.logp_old, lp.logp_ref, mask).sum()), float(mask.sum()))
    return adv


def update_stage(s: RunState, lp: LogProbs, adv: Advantages, step: int, m: StepMetrics) -> None:
    """``ppo_epochs`` passes over ``ppo_mini_batches`` row slices, one optimizer step each."""
    algo, est, sched = s.algo, s.estimator, s.schedule
    mask_all = lp.batch.response_mask
    size = mask_all.shape[0] // sched.ppo_mini_batches
    grad_norms: list[float] = []
    for _epoch in range(sched.ppo_epochs):
        for mb in range(sched.ppo_mini_batches):
            rows = slice(mb * size, (mb + 1) * size)
            mask = mask_all[rows]
            if sched.updates_per_step == 1:
                logp, logp_aux = lp.logp, lp.logp_aux
            else:
                logp, logp_aux = policy_logprobs(s, lp.batch.rows(rows),
                                                 lp.aux_ids[rows] if lp.aux_ids is not None else None)
            inputs = LossInputs(logp, lp.logp_old[rows], lp.logp_sampler[rows], adv.normalized[rows], mask, logp_aux)
            token_pg, clip_frac = est.policy_loss_fn(inputs, algo)
            # Truncated / masked importance sampling against the engine's log-probs, when set (off by default).
            token_pg, pg_mask = corrected_loss_inputs(token_pg, mask, lp.logp_old[rows], lp.logp_sampler[rows], algo)
            pg_loss = reduce_loss(token_pg, pg_mask, algo.loss_reduction, group=s.group)
            loss, kl_loss = pg_loss, None
            if algo.use_kl_loss:
                kl_loss = reduce_loss(KL_ESTIMATORS[algo.kl_loss_type](logp, lp.logp_ref[rows], mask), mask,
                                      algo.loss_reduction, group=s.group)
                loss = loss + algo.kl_loss_coef * kl_loss
            ppo_kl = reduce_loss((lp.logp_old[rows] - logp).detach(), mask, "response_mean", group=s.group)
            grad_norms.append(optimizer_step(s, loss, step))
            # Each rank's loss is its share of the global value: the global sum over ranks is the value.
            share = 1.0 / sched.updates_per_step
            m.total(LOSS_KEY, loss.item() * share)
            m.total(PG_LOSS_KEY, pg_loss.item() * share)
            m.total(PPO_KL_KEY, ppo_kl.item() * share)
            if kl_loss is not None:
                m.total(KL_LOSS_KEY, kl_loss.item() * share)
            valid_local = float(mask.sum())
            m.mean(CLIP_FRAC_KEY, (clip_frac.item() if clip_frac is not None else 0.0) * valid_local, valid_local)
    m.value(GRAD_NORM_KEY, sum(grad_norms) / len(grad_norms))  # identical on every rank (summed grads)


def optimizer_step(s: RunState, loss: torch.Tensor, step: int) -> float:
    """Backward, sum gradients over ranks, clip, refuse a non-finite norm, step, refresh the sampler."""
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for p in s.policy.parameters() if p.grad is not None]
    if s.group is not None:
        grads = [p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=s.group)
        offset = 0
        for g in grads:
            g.copy_(flat[offset: offset + g.numel()].view_as(g))
            offset += g.numel()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, float(s.cfg.workload.max_grad_norm))
    check_finite_grad_norm(grad_norm, step)
    s.optimizer.step()
    s.optimizer_steps += 1
    if s.optimizer_steps % s.schedule.sampler_refresh_every == 0:
        s.engine.load_weights(sampler_weights(s.policy))
        s.sampler_step = s.optimizer_steps
        if s.probe is not None:  # prove the sync took before step + 1 samples (the run fails naming it otherwise)
            check_sync(s.engine, s.policy, s.probe, step + 1, s.optimizer_steps,
                       Path(s.cfg.output_dir) if s.rank == 0 else None)
    return float(grad_norm)


def train_step(s: RunState, step: int) -> dict[str, float]:
    """rollout -> score -> log-probs -> advantages -> update (epochs x mini-batches) -> metrics."""
    t_step = time.perf_counter()
    m = StepMetrics(s.group, s.device)
    m.value(STALENESS_KEY, s.optimizer_steps - s.sampler_step)
    rollout = rollout_stage(s, step, m)
    lp = logprob_stage(s, rollout, m)
    adv = advantage_stage(s, rollout, lp, step, m)
    update_stage(s, lp, adv, step, m)
    m.total(RESPONSE_TOK_PER_S_KEY, float(sum(len(r) for r in rollout.response_ids)))  # tokens; a rate below
    m.max(ROLLOUT_WALL_KEY, rollout.wall_s)
    m.max(PEAK_MEM_GIB_KEY, peak_memory_gib(s.device))
    metrics = m.finish()
    metrics[RESPONSE_TOK_PER_S_KEY] /= max(metrics.pop(ROLLOUT_WALL_KEY), 1e-9)
    metrics[ALL_ZERO_REWARD_KEY] = float(metrics[ALL_ZERO_REWARD_KEY] == 0)
    metrics[STEP_S_KEY] = time.perf_counter() - t_step
    metrics[LEARNING_RATE_TAG] = float(s.optimizer.param_groups[0]["lr"])
    return metrics


def stop_agreed(stop: StopRequest | None, group, device: torch.device) -> bool:
    """Whether any rank was asked to stop: ``max over ranks of [signal received]``.

    One all_reduce of a single 0/1 value per step boundary (it also keeps the ranks in step, as
    the barrier it replaces did), so every rank stops after the same step; a single process reads
    its own flag without a collective.
    """
    local = stop is not None and stop.requested
    if group is None:
        return local
    flag = torch.tensor([1.0 if local else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item())  # host sync: one value per step, between steps


def run_config_digest(cfg: DictConfig) -> str:
    """SHA256 of what defines the run's numbers (algo, workload, seed); a checkpoint only resumes
    a run with the same digest. Where it runs (output_dir, dp_size, launcher keys) is not part of it."""
    import hashlib

    defining = OmegaConf.to_container(OmegaConf.masked_copy(cfg, ["algo", "workload", "seed"]), resolve=True)
    return hashlib.sha256(json.dumps(defining, sort_keys=True).encode()).hexdigest()


@functools.cache
def software_versions() -> dict[str, str]:
    import transformers

    import trainer

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "proofgrid": getattr(trainer, "__version__", "0.1.0")}


@dataclass(frozen=True)
class RunPlan:
    """What the config-time checks of one run produce, computed once before any rank starts."""

    algo: AlgoConfig
    schedule: UpdateSchedule


def plan_run(cfg: DictConfig) -> RunPlan:
    """Every config-time check of one run (``trainer.run_config.validate``, the update schedule)."""
    return RunPlan(validate(cfg), update_schedule(cfg))


def run_rank(rank: int, world: int, cfg_container: dict, plan: RunPlan, local_rank: int | None = None) -> dict | None:
    """One rank of the run, in its own process: spawned by ``train``, or started by a scheduler
    (``local_rank``: its place on its node, which picks its GPU; a spawned rank's is its rank)."""
    cfg = OmegaConf.create(cfg_container)
    if world > 1:  # a rank's lines carry its rank (a spawned rank starts with no logging set up at all)
        logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(name)s rank{rank} %(levelname)s %(message)s",
                            force=True)
    # Every rank watches for the warning (a spawned rank gets it forwarded by its parent); with
    # several ranks they agree on the stop at a step boundary (``stop_agreed``).
    stop = StopRequest().install()
    if stop is None:
        deliver_held_signals()
    return _run_rank(rank, world, cfg, plan, stop, rank if local_rank is None else local_rank)


def _run_rank(rank: int, world: int, cfg: DictConfig, plan: RunPlan, stop: StopRequest | None,
              local_rank: int) -> dict | None:
    w = cfg.workload
    torch.set_num_threads(int(w.num_threads))
    if str(w.device).startswith("cuda"):
        # Deterministic cuBLAS needs a fixed workspace, set before CUDA initialises.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if world > 1:
            torch.cuda.set_device(local_rank)  # one GPU per rank of a node (NCCL refuses two ranks on one device)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(int(cfg.seed))
    random.seed(int(cfg.seed))
    group = _init_process_group(rank, world, cfg) if world > 1 else None
    try:
        return _run(rank, world, group, cfg, plan, stop)
    finally:
        if group is not None:
            dist.destroy_process_group()


class RendezvousError(TrainerError, RuntimeError):
    """The ranks of a run did not meet (one line: where they were to meet, for how long, and the fix)."""


def _init_process_group(rank: int, world: int, cfg: DictConfig):
    backend = "nccl" if str(cfg.workload.device).startswith("cuda") else "gloo"
    if os.environ.get(RENDEZVOUS_TIMEOUT_ENV):  # ranks a scheduler started, perhaps on several nodes
        return _meet(backend, rank, world, float(os.environ[RENDEZVOUS_TIMEOUT_ENV]))
    if os.environ.get(MASTER_PORT_ENV):  # the launcher's port set provides it
        init = f"tcp://{os.environ.get(MASTER_ADDR_ENV, '127.0.0.1')}:{os.environ[MASTER_PORT_ENV]}"
    else:
        init = f"file://{Path(cfg.output_dir).resolve() / '.dist-store'}"
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    return dist.group.WORLD


def _meet(backend: str, rank: int, world: int, timeout_s: float):
    """Join the group at rank 0's ``MASTER_ADDR:MASTER_PORT`` through torch's own TCPStore, waiting at most
    ``timeout_s`` for every rank (rank 0 serves the store; the others connect to it). Only the meeting is
    bounded: the collectives keep torch's default timeout, so a long checkpoint on rank 0 stalls no one."""
    addr, port = os.environ[MASTER_ADDR_ENV], int(os.environ[MASTER_PORT_ENV])
    try:
        store = dist.TCPStore(addr, port, world, is_master=rank == 0, timeout=datetime.timedelta(seconds=timeout_s))
    except dist.DistError as exc:
        said = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise RendezvousError(  # one line the job's failure keeps whole (launcher.liveness cuts at 300)
            f"rank {rank} of {world} did not meet the others at rank 0's {addr}:{port} within {timeout_s:g} s "
            f"({said[:72]}); can the nodes reach each other on that port? else raise cluster.rendezvous_timeout_s"
        ) from None
    dist.init_process_group(backend, store=store, rank=rank, world_size=world)
    return dist.group.WORLD


def _run(rank: int, world: int, group, cfg: DictConfig, plan: RunPlan, stop: StopRequest | None = None) -> dict | None:
    """One rank's run: set up (and resume), the training steps, then the finish (rank 0 evaluates)."""
    run = set_up(rank, world, group, cfg, plan)
    if run.record is not None:
        run.record.write(RUN_RUNNING, run.start_step)
    try:
        train_steps(run, stop)
        done = finish(run)
    except SystemExit as exc:  # stopped at a checkpoint for a requeue: the session goes on when it resumes
        if exc.code not in (EXIT_CHECKPOINTED, EXIT_STOPPED_UNSAVED) and run.metrics_log is not None:
            run.metrics_log.write_session_end(RUN_FAILED)
        raise
    except BaseException:
        if run.metrics_log is not None:  # rank 0: the HParams session ends failed
            run.metrics_log.write_session_end(RUN_FAILED)
        raise
    if run.metrics_log is not None:
        run.metrics_log.write_session_end(RUN_COMPLETED)
    return done


@dataclass
class RunRecord:
    """``run.json``, the run's own summary: one writer for its states (running, failed, completed)."""

    path: Path
    summary: dict  # what stays the same across the states: identity, inputs, config, declared keys
    responses_per_step: int

    def write(self, status: str, steps_completed: int, **details) -> dict:
        record = {**self.summary, "status": status, "steps_completed": steps_completed,
                  "responses_generated": steps_completed * self.responses_per_step, **details}
        atomic_write_json(self.path, record)
        return record


def run_summary(cfg: DictConfig, algo: AlgoConfig, world: int, inputs: dict[str, str]) -> dict:
    """The part of ``run.json`` every state shares. ``algorithm``: the contract the run declares it
    ran (its record's, with the loss reduction it used); the evidence reads it from here."""
    config = OmegaConf.to_container(cfg, resolve=True)
    for machine_path in ("output_dir", "sweep_dir"):  # the run directory itself says where
        config.pop(machine_path, None)
    return {
        "algo": algo.short_name, "algo_name": algo.estimator, "seed": int(cfg.seed), "workload": str(cfg.workload.name),
        "n_updates": int(cfg.workload.n_updates), "dp_size": world, "versions": software_versions(), "inputs": inputs,
        "source_commit": source_commit(), "config": config,
        METRIC_KEYS_FIELD: metric_keys(algo, str(cfg.workload.engine)),
        TASK_FIELD: task_record(cfg.workload),  # the prompt's SHA256 and the reward the evidence re-scores with
        ALGORITHM_FIELD: {**algorithm(algo.estimator).declaration(), "loss_reduction": algo.loss_reduction},
        **({RANK_LOGS_FIELD: world} if world > 1 else {}),  # every rank records its steps (facts.data_parallel_ranks)
        **image_record(),
    }


def image_record() -> dict:
    """The container image the run ran in (its digest, which the job's runtime checked and hands on), or nothing."""
    digest = os.environ.get(IMAGE_DIGEST_ENV)
    return {IMAGE_DIGEST_FIELD: digest} if digest else {}


@dataclass
class Run:
    """One rank's run around its step state: where it writes, what it resumed from, what it records."""

    state: RunState
    out: Path
    start_step: int
    digest: str  # run_config_digest: a checkpoint resumes only a run with the same one
    inputs: dict[str, str]
    eval_examples: list[Example]
    record: RunRecord | None  # rank 0's run.json
    metrics_log: MetricsLog | None  # rank 0's metrics.jsonl and TensorBoard events
    rank_log: RankLog | None = None  # with several ranks, each one's digest of every step's reduced values
    evaluations: list[dict] | None = None  # rank 0's evaluations during training (workload.eval.every)
    initial: dict | None = None  # the initial checkpoint's evaluation when it ran before training
    ledger: DataLedger | None = None  # rank 0's data ledger: the rows each step consumed (facts.ledger_format)
    step_times: list[float] | None = None  # rank 0's run.json step_ended_at: when each step's line was written

    @property
    def ckpt_root(self) -> Path:
        return self.out / CHECKPOINTS_DIR


@dataclass(frozen=True)
class ResumePoint:
    """Where a run continues: step 0, or its newest checkpoint (loaded into the policy and optimizer)."""

    step: int = 0
    sampler_weights: dict | None = None  # a lagging sampler's weights, saved with the checkpoint
    sampler_step: int | None = None
    checkpoint: str | None = None  # the checkpoint's name (``step_000050``); None: started at step 0

    def record(self) -> dict | None:
        """run.json's ``resumed_from``: the checkpoint and step this start began at, None without one."""
        return None if self.checkpoint is None else {"checkpoint": self.checkpoint, "step": self.step}


def resume_point(cfg: DictConfig, out: Path, policy, optimizer, digest: str, inputs: dict[str, str]) -> ResumePoint:
    """Load the newest checkpoint of ``out`` when resuming; refuse one written with other settings (or, for a LoRA
    policy, on another base model)."""
    if not cfg.resume or (ckpt := latest_checkpoint(out / CHECKPOINTS_DIR)) is None:
        return ResumePoint()
    if checkpoint_state(ckpt).get("config_digest") != digest:
        raise RunConfigError(
            f"{out} holds a checkpoint ({ckpt.name}) of a run with other settings; resuming would mix "
            "two configurations: use a new output_dir, or resume=false to start over"
        )
    state = load_checkpoint(ckpt, policy, optimizer, adapter_record(cfg.workload, inputs))
    log.info("resumed from %s: continuing at step %d of %d", ckpt.name, int(state["step"]), int(cfg.workload.n_updates))
    return ResumePoint(int(state["step"]), load_sampler_weights(ckpt), state.get("sampler_step"), ckpt.name)


def load_models(w: DictConfig, device: torch.device):
    """The policy, a frozen copy of it as the reference, the tokenizer and the policy's AdamW over its trainable
    weights: every weight, or with ``workload.lora`` the adapters injected after the copy (``trainer.lora``)."""
    policy, tokenizer = load_policy(str(resolve(w.model_path)), str(device))
    reference = copy.deepcopy(policy).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    lora = lora_settings(w)
    if lora is not None:
        try:
            check_targets(lora, resolve(w.model_path), str(w.model_path))
        except LoraError as exc:
            raise RunConfigError(str(exc)) from None
        add_lora(policy, lora)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=float(w.lr), betas=tuple(w.adam_betas),
                                  eps=float(w.adam_eps), weight_decay=float(w.weight_decay))
    return policy, reference, tokenizer, optimizer


def set_up(rank: int, world: int, group, cfg: DictConfig, plan: RunPlan) -> Run:
    """Check the inputs, load the models, resume from the newest checkpoint, start the rollout engine."""
    w = cfg.workload
    inputs = verify_inputs(w.manifest, required=[w.model_path, w.train_path, w.test_path])
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(f"cuda:{torch.cuda.current_device()}") if str(w.device).startswith("cuda") \
        else torch.device(str(w.device))
    policy, reference, tokenizer, optimizer = load_models(w, device)
    task = workload_task(w)
    eval_examples = load_split(resolve(w.test_path), task, tokenizer)[: int(w.eval.n_prompts)]
    if len(eval_examples) < int(w.eval.n_prompts):
        raise RunConfigError(
            f"workload.eval.n_prompts={w.eval.n_prompts} but the test split has {len(eval_examples)} rows; "
            f"set workload.eval.n_prompts<={len(eval_examples)}"
        )
    digest = run_config_digest(cfg)
    resumed = resume_point(cfg, out, policy, optimizer, digest, inputs)
    warn_if_greedy(sampling_params(w.sampling, w.max_response_len), "training rollout")
    engine = policy_engine(w, policy, reference, tokenizer)  # after the resume
    scorer = make_scorer(int(w.reward_workers), int(w.reward_max_concurrency), task.reward)
    state = RunState(cfg, plan.algo, rank, world, group, policy, reference, tokenizer, optimizer, engine,
                     PromptStream(load_split(resolve(w.train_path), task, tokenizer), int(cfg.seed)), device, scorer,
                     plan.schedule)
    state.optimizer_steps = state.sampler_step = resumed.step * plan.schedule.updates_per_step
    if resumed.sampler_weights is not None:  # the sampler lagged the policy when the checkpoint was written
        engine.load_weights(resumed.sampler_weights)
        state.sampler_step = int(resumed.sampler_step)
    if str(w.engine) != TORCH_ENGINE:  # the engine starts holding the sampler's weights: the first check
        state.probe = make_probe(engine, [tokenizer(e.prompt, add_special_tokens=False)["input_ids"]
                                          for e in eval_examples], device)
        check_sync(engine, engine.model, state.probe, resumed.step, state.sampler_step, out if rank == 0 else None)
    ledger = DataLedger(out, state.stream, int(w.prompts_per_step), int(w.n_updates), resumed.step,
                        inputs.get(str(w.train_path))) if rank == 0 else None
    summary = {**run_summary(cfg, plan.algo, world, inputs), RESUMED_FROM_FIELD: resumed.record(),
               ENGINE_FIELD: engine.profile(),
               **(ledger.record() if ledger is not None else {}),
               **({PLAN_DIGEST_FIELD: os.environ[PLAN_DIGEST_ENV]} if os.environ.get(PLAN_DIGEST_ENV) else {})}
    record = RunRecord(out / RUN_RECORD, summary, int(w.global_batch_size)) if rank == 0 else None
    metrics_log = MetricsLog(out, resumed.step) if rank == 0 else None
    if metrics_log is not None and resumed.step == 0:
        metrics_log.write_hparams(run_hparams(cfg, out))
    rank_log = RankLog(out, rank, resumed.step) if world > 1 else None
    evaluations = earlier_evaluations(out / RUN_RECORD, resumed.step) if rank == 0 else None
    step_times = earlier_step_times(out / RUN_RECORD, resumed.step) if rank == 0 else None
    return Run(state, out, resumed.step, digest, inputs, eval_examples, record, metrics_log, rank_log, evaluations,
               ledger=ledger, step_times=step_times)


def run_hparams(cfg: DictConfig, out: Path) -> dict:
    """What the HParams dashboard filters runs by: every resolved setting of ``algo``, ``workload``,
    ``seed`` and ``dp_size`` (``workload.lr``, ...) and, for a job of a sweep, its arm and the arm's
    overrides as written (from the job's ``spec.json`` beside the run directory)."""
    config = OmegaConf.to_container(OmegaConf.masked_copy(cfg, ["algo", "workload", "seed", "dp_size"]), resolve=True)
    hparams = hparam_values(config)
    try:
        spec = json.loads((out.parent / JOB_SPEC).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return hparams  # a run of its own: no arm
    if isinstance(spec, dict) and isinstance(spec.get("arm"), str):
        hparams["arm"] = spec["arm"]
        overrides = spec.get("arm_overrides") or {}
        hparams["arm_overrides"] = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    return hparams


def eval_every(cfg: DictConfig) -> int:
    """``workload.eval.every``: evaluate every N steps during training (0, the default: never)."""
    return int(cfg.workload.eval.get("every", 0) or 0)


def earlier_evaluations(run_record: Path, start_step: int) -> list[dict]:
    """The evaluations during training an earlier attempt recorded in ``run.json`` up to ``start_step``
    (a resumed run keeps them; those after its checkpoint are done again)."""
    try:
        record = json.loads(run_record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    entries = (record.get(EVAL_DURING_TRAINING_FIELD) or {}).get("evaluations", []) if start_step else []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("step"), int) and e["step"] <= start_step]


def earlier_step_times(run_record: Path, start_step: int) -> list[float]:
    """The step times an earlier start recorded in ``run.json`` for steps before ``start_step`` (a resumed run
    keeps them; none when that record does not hold them all)."""
    try:
        times = json.loads(run_record.read_text(encoding="utf-8")).get(STEP_TIMES_FIELD) if start_step else []
    except (OSError, ValueError, AttributeError):
        return []
    return list(times[:start_step]) if isinstance(times, list) and len(times) >= start_step else []


def record_details(run: Run) -> dict:
    """What run.json holds beside its status: the evaluations during training and each step's time."""
    times = {STEP_TIMES_FIELD: run.step_times} if run.step_times is not None else {}
    return {**eval_record(run.state.cfg, run.evaluations), **times}


def eval_record(cfg: DictConfig, evaluations: list[dict]) -> dict:
    """run.json's ``eval_during_training``: the cadence, each evaluation (step, seconds, summary) and
    the seconds they cost in all (the initial one at step 0 included when it ran before training)."""
    return {EVAL_DURING_TRAINING_FIELD: {
        "every": eval_every(cfg), "evaluations": evaluations,
        "seconds": round(sum(e["seconds"] for e in evaluations), 3)}} if eval_every(cfg) else {}


def evaluate_during_training(run: Run, step: int) -> None:
    """Rank 0 evaluates the policy after ``step`` updates on the fixed subset, with the evaluation's
    own keyed draws (``mix_seed(eval_seed, row, sample)``, as for the initial and final checkpoints, so
    every point of the ``eval/`` line is paired with them); sampling is counter-based per key, so
    nothing of the training's random streams is drawn or moved. Step 0 is the initial checkpoint's
    evaluation (shared in a sweep). Its seconds go to run.json and TensorBoard."""
    s = run.state
    started = time.perf_counter()
    if step == 0:
        summary = run.initial = evaluate_initial_checkpoint(s.cfg, run.out, s.reference, s.tokenizer,
                                                            run.eval_examples, s.device, run.inputs)
    else:
        e = s.cfg.workload.eval
        with compute_context(s.device, str(s.cfg.workload.dtype)):
            summary = evaluate(current_engine(s), s.tokenizer, run.eval_examples, int(e.k), int(e.seed),
                               sampling_params(e, e.max_response_len), checkpoint_name(step),
                               run.out / EVAL_RESPONSES_DIR / f"{checkpoint_name(step)}.jsonl",
                               workload_reward(s.cfg.workload))
    seconds = time.perf_counter() - started
    run.metrics_log.write_eval(step, summary, seconds)
    run.evaluations = [e for e in run.evaluations if e["step"] != step] + [
        {"step": step, "seconds": round(seconds, 3), "summary": summary}]
    run.record.write(RUN_RUNNING, step, **record_details(run))  # a resumed run keeps them
    log.info("eval at step %d: pass@1=%.4f (%.1f s)", step, summary.get("pass@1", float("nan")), seconds)


def current_engine(s: RunState) -> RolloutEngine:
    """An engine holding the policy's current weights, to evaluate them: the rollout engine when it is up to date,
    else (the sampler lags, ``sampler_refresh_every > 1``) a new one from ``sampler_weights``."""
    if s.sampler_step == s.optimizer_steps:
        return s.engine
    return policy_engine(s.cfg.workload, s.policy, s.reference, s.tokenizer)


def policy_engine(w: DictConfig, policy, reference, tokenizer) -> RolloutEngine:
    """A rollout engine (``workload.engine``) holding the policy's weights: a copy of the policy itself, or for a
    LoRA policy a copy of the plain base model (the reference) loaded with the merged ``sampler_weights``: an
    engine never holds adapter modules (``trainer.lora``)."""
    if not lora_layers(policy):
        return make_engine(str(w.engine), policy, tokenizer.eos_token_id, tokenizer.pad_token_id, engine_settings(w))
    engine = make_engine(str(w.engine), reference, tokenizer.eos_token_id, tokenizer.pad_token_id, engine_settings(w))
    engine.load_weights(sampler_weights(policy))
    return engine


def adapter_record(w: DictConfig, inputs: dict[str, str]) -> AdapterRecord | None:
    """A LoRA run's checkpoint record (its settings, the base model's pinned files), None in full fine-tuning."""
    lora = lora_settings(w)
    return None if lora is None else AdapterRecord(lora.record(), model_files(inputs, w.model_path))


def save_at(run: Run, done: int) -> None:
    """Checkpoint after ``done`` updates; a sampler that lags the policy is saved too (bit-identical resume)."""
    s = run.state
    lagging = s.sampler_step != s.optimizer_steps
    save_checkpoint(run.ckpt_root, done, s.policy, s.optimizer,
                    {"prompts_consumed": done * int(s.cfg.workload.prompts_per_step), "config_digest": run.digest,
                     "sampler_step": s.sampler_step},
                    sampler_state=s.engine.state_dict() if lagging else None,
                    adapter=adapter_record(s.cfg.workload, run.inputs))
    if run.record is not None:  # the steps' times so far, for a resume after a kill
        run.record.write(RUN_RUNNING, done, **record_details(run))


def stop_for_requeue(run: Run, step: int, stop: StopRequest | None, planned: bool = False) -> None:
    """The scheduler's warning reached a rank (or ``planned``: ``stop_at_step``): save what is done and exit
    for a requeue, every rank together."""
    s = run.state
    if s.rank == 0:
        if step > run.start_step and step % int(s.cfg.workload.checkpoint_every):
            save_at(run, step)
        run.metrics_log.close()
        run.ledger.close()
        signum = stop.signum if stop is not None else None  # None: another rank got it
        # Steps are 0-based (as metrics.jsonl and TensorBoard count them): steps 0..step-1 are done.
        n_updates, sender = int(s.cfg.workload.n_updates), signum or "to a rank"
        if planned:
            sender = f"none (stop_at_step={step})"
        if step:
            log.info("signal %s: stopping before step %d of %d for a requeue; checkpoint %s holds steps 0-%d",
                     sender, step, n_updates, checkpoint_name(step), step - 1)
        else:
            log.info("signal %s: stopping before step 0 of %d for a requeue; no step done, nothing checkpointed",
                     sender, n_updates)
    s.scorer.close()
    if run.rank_log is not None:
        run.rank_log.close()
    if s.group is not None:
        dist.barrier(group=s.group)  # no rank exits while rank 0 still writes the checkpoint
    raise SystemExit(EXIT_CHECKPOINTED)


def train_steps(run: Run, stop: StopRequest | None) -> None:
    """Steps ``start_step .. n_updates - 1``; rank 0 logs each and checkpoints every ``checkpoint_every``."""
    s = run.state
    n_updates, every = int(s.cfg.workload.n_updates), int(s.cfg.workload.checkpoint_every)
    evaluate_at = eval_every(s.cfg)
    if evaluate_at and run.start_step == 0 and s.rank == 0:  # step 0 first: TensorBoard drops a step written late
        evaluate_during_training(run, 0)
    stop_at = int(s.cfg.get("stop_at_step") or 0)
    planned_stop = stop_at if run.start_step < stop_at else None  # a run resumed at or past it goes on
    for step in range(run.start_step, n_updates):
        if step == planned_stop:  # every rank reads the same setting: they stop together
            stop_for_requeue(run, step, stop, planned=True)
        if stop_agreed(stop, s.group, s.device):
            stop_for_requeue(run, step, stop)
        try:
            metrics, board = split_board_only(train_step(s, step))
        except (NonFiniteGradientError, EngineSyncError) as exc:
            log.error("%s", exc)
            if run.record is not None:
                run.metrics_log.close()
                run.record.write(RUN_FAILED, step, error=str(exc), failed_step=step)
            raise
        done = step + 1
        if run.rank_log is not None:  # every rank: what it holds of the step after the reductions
            run.rank_log.write(step, metrics)
        if s.rank == 0:
            run.metrics_log.write(step, metrics, board)
            run.ledger.write(step, metrics)
            if len(run.step_times) == step:  # a resume that lost earlier times records none (never misplaced)
                run.step_times.append(round(time.time(), 3))
            log.info("step %d of %d reward=%.3f loss=%.4f", step, n_updates, metrics[RAW_REWARD_KEY],
                     metrics[LOSS_KEY])
            if evaluate_at and done % evaluate_at == 0 and done < n_updates:  # the final one is finish's
                evaluate_during_training(run, done)
            if done % every == 0 or done == n_updates:
                save_at(run, done)


def finish(run: Run) -> dict | None:
    """After the last step: every rank waits for the last checkpoint; rank 0 evaluates the final and
    the initial checkpoint and records the run as completed (its ``run.json`` is returned)."""
    s = run.state
    if s.group is not None:
        dist.barrier(group=s.group)  # the last step's checkpoint is written before any rank leaves
    s.scorer.close()
    if run.rank_log is not None:
        run.rank_log.close()
    if s.rank != 0:
        return None
    run.metrics_log.close()
    run.ledger.close()
    n_updates = int(s.cfg.workload.n_updates)
    final, initial = evaluate_checkpoints(s.cfg, run.out, n_updates, current_engine(s), s.reference, s.tokenizer,
                                          run.eval_examples, s.device, run.inputs, initial=run.initial)
    atomic_write_json(run.out / EVAL_RECORD, {"initial": initial, "final": final})
    # With evaluations during training the initial one went to TensorBoard before the first step.
    log.info("%s", log_eval(run.out, n_updates, initial, final, initial_logged=bool(eval_every(s.cfg))))
    return run.record.write(RUN_COMPLETED, n_updates, **record_details(run))


def initial_eval_identity(cfg: DictConfig, examples: list[Example], device: torch.device, inputs: dict[str, str]) -> dict:
    """Everything that determines the initial checkpoint's evaluation bit for bit: the model and
    tokenizer files (their pinned SHA256s), the eval subset, k, seed and sampling, the engine, dtype,
    device (GPU model), CPU thread count (it changes float reduction order) and the software; and the task
    (prompt and reward, ``task_record``) when it is not the embedded default's (whose identity it leaves as it was)."""
    w, e = cfg.workload, cfg.workload.eval
    task = {} if workload_task(w).is_default() else {TASK_FIELD: task_record(w)}
    gpu = {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda} if device.type == "cuda" else {}
    return {
        "model_files": model_files(inputs, w.model_path),
        "subset_sha256": subset_digest(examples), "n_prompts": len(examples), "k": int(e.k), "eval_seed": int(e.seed),
        "sampling": asdict(sampling_params(e, e.max_response_len)),
        "engine": str(w.engine), "dtype": str(w.dtype), "device": device.type, **gpu,
        "num_threads": torch.get_num_threads(), "versions": software_versions(), "source_commit": source_commit(),
        **task,
    }


def evaluate_checkpoints(cfg: DictConfig, out: Path, n_updates: int, engine: RolloutEngine, reference,
                         tokenizer, examples: list[Example], device: torch.device, inputs: dict[str, str],
                         final_name: str | None = None, initial: dict | None = None) -> tuple[dict, dict]:
    """The final checkpoint's evaluation and the initial checkpoint's (the control, unless ``initial``
    gives it: evaluated before training): in a sweep the latter is computed once and shared
    (``evaluate_initial_checkpoint``), else into ``out``. ``engine`` holds the final weights;
    ``final_name`` names them in eval.json (default: the final checkpoint's ``step_<N>``; an external
    trainer's run names its final model directory)."""
    w, e = cfg.workload, cfg.workload.eval
    eval_sampling = sampling_params(e, e.max_response_len)
    with compute_context(device, str(w.dtype)):
        final = evaluate(engine, tokenizer, examples, int(e.k), int(e.seed), eval_sampling,
                         final_name or checkpoint_name(n_updates), out / EVAL_RESPONSES_DIR / "final.jsonl",
                         workload_reward(w))
    if initial is None:
        initial = evaluate_initial_checkpoint(cfg, out, reference, tokenizer, examples, device, inputs)
    return final, initial


def evaluate_initial_checkpoint(cfg: DictConfig, out: Path, reference, tokenizer, examples: list[Example],
                                device: torch.device, inputs: dict[str, str]) -> dict:
    """The initial checkpoint's evaluation (the control): in a sweep computed once and shared
    (``trainer.evaluate.shared_initial_eval``; its entry names the shared file), else into ``out``."""
    w, e = cfg.workload, cfg.workload.eval
    eval_sampling = sampling_params(e, e.max_response_len)

    def evaluate_initial(responses_path: Path) -> dict:
        control = make_engine(str(w.engine), reference, tokenizer.eos_token_id, tokenizer.pad_token_id,
                              engine_settings(w))
        with compute_context(device, str(w.dtype)):
            return evaluate(control, tokenizer, examples, int(e.k), int(e.seed), eval_sampling, "initial",
                            responses_path, workload_reward(w))

    shared = None
    if cfg.get("sweep_dir"):
        shared = shared_initial_eval(Path(cfg.sweep_dir), initial_eval_identity(cfg, examples, device, inputs),
                                     evaluate_initial, computed_log=out / INITIAL_EVAL_COMPUTED)
        if shared is None:
            log.warning("initial eval: the sweep directory's file system refuses flock; evaluating it in this run")
    if shared is None:
        return evaluate_initial(out / EVAL_RESPONSES_DIR / "initial.jsonl")
    log.info("initial eval: %s %s (key %s)", "computed" if shared.computed else "reused",
             shared.reference["path"], shared.reference["key"][:12])
    (out / EVAL_RESPONSES_DIR / "initial.jsonl").unlink(missing_ok=True)  # a per-run one from an earlier attempt
    return {**shared.summary, "shared": shared.reference}


def ranks_from_environment() -> tuple[int, int, int] | None:
    """``(rank, world, local_rank)`` when torch.distributed's ``env://`` variables say this process is one
    rank of a run whose ranks a scheduler started (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), else None."""
    env = os.environ
    rank, world, local_rank = env.get(RANK_VAR), env.get(WORLD_SIZE_VAR), env.get(LOCAL_RANK_VAR)
    if rank is None or world is None:
        return None
    return int(rank), int(world), int(local_rank if local_rank is not None else rank)


def train(cfg: DictConfig) -> dict:
    """Train one (algo, seed) run into ``cfg.output_dir``; returns the ``run.json`` summary (a rank other
    than 0 of ranks started from outside returns what it did: it writes no run record)."""
    plan = plan_run(cfg)  # refuse before spawning anything; every rank uses this plan
    container = OmegaConf.to_container(cfg, resolve=True)
    world = int(cfg.dp_size)
    given = ranks_from_environment()
    if given is not None:  # one process per rank, started by the scheduler: this is one of them
        rank, given_world, local_rank = given
        if given_world != world or not 0 <= rank < world:
            raise RunConfigError(f"this process is rank {rank} of WORLD_SIZE={given_world} (torch.distributed's "
                                 f"env:// variables) but dp_size={world}; start dp_size ranks, or set dp_size={given_world}")
        summary = run_rank(rank, world, container, plan, local_rank)
        return summary if summary is not None else {"algo": str(cfg.algo.short), "seed": int(cfg.seed), "rank": rank,
                                                    "steps_completed": int(cfg.workload.n_updates)}
    if world == 1:
        return run_rank(0, 1, container, plan)
    import torch.multiprocessing as mp

    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.output_dir) / ".dist-store").unlink(missing_ok=True)
    # This process forwards the scheduler's warning to every rank; the ranks are spawned with it
    # blocked, so one holds it until its own handler is set.
    forward = ForwardToRanks().install()
    ranks = mp.start_processes(run_rank, args=(world, container, plan), nprocs=world, join=False,
                               start_method="spawn")
    forward.ranks_started(ranks.pids())
    try:
        while not ranks.join(grace_period=RANK_EXIT_GRACE_S):
            pass
    except mp.ProcessExitedException as exc:
        if exc.exit_code == EXIT_CHECKPOINTED:  # all ranks stopped at the same step: requeue the job
            raise SystemExit(EXIT_CHECKPOINTED) from None
        raise
    return json.loads((Path(cfg.output_dir) / RUN_RECORD).read_text())
