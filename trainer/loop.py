"""One training run: rollout -> reward -> old/ref log-probs -> advantages -> PPO update, N times,
then the fixed-subset evaluation of the final checkpoint and of the initial-checkpoint control.

Data parallelism: ``dp_size`` ranks run this same loop in separate processes joined by a
torch.distributed group (gloo on CPU, nccl on GPU). Each rank owns whole prompt groups; the
advantage normaliser and the loss denominators are global (``trainer.algorithms``); gradients are
summed across ranks because each rank's loss is its share of the global loss.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import platform
import random
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from trainer.algorithms import (
    KL_ESTIMATORS,
    AlgoConfig,
    RolloutBatch,
    compute_advantages,
    masked_global_normalize,
    ppo_clip_token_loss,
    reduce_loss,
)
from trainer.checkpoint import checkpoint_name, latest_checkpoint, load_checkpoint, save_checkpoint
from trainer.config import RunConfigError, validate
from trainer.data import PromptStream, load_split, mix_seed
from trainer.evaluate import evaluate
from trainer.inputs import REPO_ROOT, resolve, verify_inputs
from trainer.metrics import KL_LOSS_KEY, MetricsLog
from trainer.policy import build_token_batch, compute_context, load_policy, response_logprobs
from trainer.preemption import EXIT_CHECKPOINTED, StopRequest, deliver_held_signals
from trainer.reward_workers import make_scorer
from trainer.rollout import RolloutEngine, SamplingParams, make_engine, warn_if_greedy

log = logging.getLogger("trainer")
VAR_FLOOR = 1e-8


def sampling_params(node: DictConfig, max_new_tokens: int) -> SamplingParams:
    return SamplingParams(float(node.temperature), int(node.top_k), float(node.top_p), int(max_new_tokens))


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def source_commit() -> str | None:
    if commit := os.environ.get("PROOFGRID_SOURCE_COMMIT"):
        return commit
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


class Collective:
    """Host-side aggregation of monitoring scalars across ranks (never used in the numerical hot path)."""

    def __init__(self, group, device: torch.device):
        self.group = group
        self.device = device  # NCCL reduces device tensors only

    def sum(self, values: list[float]) -> list[float]:
        return self._reduce(values, dist.ReduceOp.SUM)

    def max(self, values: list[float]) -> list[float]:
        return self._reduce(values, dist.ReduceOp.MAX)

    def _reduce(self, values, op):
        if self.group is None:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=op, group=self.group)
        return t.tolist()


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


def train_step(s: RunState, step: int) -> dict[str, float]:
    """One rollout batch and one actor update; returns the step's global metrics."""
    w, seed = s.cfg.workload, int(s.cfg.seed)
    t_step = time.perf_counter()
    P, K = int(w.prompts_per_step), int(w.n_samples_per_prompt)
    per_rank = P // s.world
    local = s.stream.step_prompts(step, P)[s.rank * per_rank:(s.rank + 1) * per_rank]

    prompt_ids, keys, labels = [], [], []
    for position, example in local:
        ids = s.tokenizer(example.prompt, add_special_tokens=False)["input_ids"]
        for j in range(K):
            prompt_ids.append(ids)
            keys.append(mix_seed(seed, step, position, j))
            labels.append(example.label)
    sampling = sampling_params(w.sampling, w.max_response_len)
    compute = compute_context(s.device, str(w.dtype))
    with compute:
        rollout = s.engine.generate(prompt_ids, keys, sampling)
    texts = [s.tokenizer.decode(g.response_ids, skip_special_tokens=True) for g in rollout.generations]
    reward = torch.tensor(s.scorer.score(texts, labels), dtype=torch.float32, device=s.device)

    batch = build_token_batch(prompt_ids, [g.response_ids for g in rollout.generations],
                              s.tokenizer.pad_token_id, s.device)
    mask = batch.response_mask
    temperature = sampling.temperature if not sampling.greedy else 1.0
    with torch.no_grad(), compute:
        logp_old = response_logprobs(s.policy, batch, temperature)
        logp_ref = response_logprobs(s.reference, batch, temperature)
    adv = compute_advantages(RolloutBatch(reward, mask, logp_old, logp_ref, K), s.algo, group=s.group)
    _, norm_mean, norm_var, _ = masked_global_normalize(adv.normalized, mask, group=s.group)
    if s.cfg.debug.dump_advantages:  # for the dp-invariance test: this rank's slice of the step
        dump = Path(s.cfg.output_dir) / "debug" / f"step{step:06d}-rank{s.rank}.pt"
        dump.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"positions": [pos for pos, _ in local], "raw": adv.raw, "normalized": adv.normalized,
                    "mask": mask, "reward": reward}, dump)

    with compute:
        logp = response_logprobs(s.policy, batch, temperature)
    token_pg, clip_frac = ppo_clip_token_loss(logp, logp_old, adv.normalized, mask, s.algo.clip_low, s.algo.clip_high)
    pg_loss = reduce_loss(token_pg, mask, s.algo.loss_reduction, group=s.group)
    loss = pg_loss
    kl_loss = None
    if s.algo.use_kl_loss:
        kl_loss = reduce_loss(KL_ESTIMATORS[s.algo.kl_loss_type](logp, logp_ref), mask, s.algo.loss_reduction,
                              group=s.group)
        loss = loss + s.algo.kl_loss_coef * kl_loss
    ppo_kl = reduce_loss((logp_old - logp).detach(), mask, "response_mean", group=s.group)

    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for p in s.policy.parameters() if p.grad is not None]
    if s.group is not None:
        flat = torch._utils._flatten_dense_tensors([p.grad for p in params])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=s.group)
        for p, g in zip(params, torch._utils._unflatten_dense_tensors(flat, [p.grad for p in params])):
            p.grad.copy_(g)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, float(w.max_grad_norm))
    s.optimizer.step()
    s.engine.load_weights(s.policy.state_dict())

    first_return = adv.returns[:, 0] if adv.returns is not None else reward
    n_local = len(rollout.generations)
    valid_local = mask.sum().item()
    sums = Collective(s.group, s.device).sum([
        reward.sum().item(), first_return.sum().item(), n_local, float(sum(r > 0 for r in reward.tolist())),
        float(mask.sum(dim=1).sum().item()), float(sum(not g.finished for g in rollout.generations)),
        clip_frac.item() * valid_local, loss.item(), pg_loss.item(), ppo_kl.item(),
        kl_loss.item() if kl_loss is not None else 0.0, float(rollout.response_tokens),
    ])
    (r_sum, ret_sum, n, n_nonzero, len_sum, trunc_sum, clipped, loss_v, pg_v, ppo_kl_v, kl_v, tokens) = sums
    raw_var = adv.raw_var.item()
    rollout_wall, peak = Collective(s.group, s.device).max([rollout.wall_s, peak_memory_gib(s.device)])
    metrics = {
        "rollout/raw_reward": r_sum / n,
        "rollout/returns": ret_sum / n,
        "rollout/adv_raw_mean": adv.raw_mean.item(),
        "rollout/adv_raw_std": raw_var ** 0.5,
        "rollout/adv_norm_mean": norm_mean.item(),
        "rollout/adv_norm_std": max(norm_var.item(), 0.0) ** 0.5,
        "rollout/valid_tokens": adv.valid_tokens.item(),
        "rollout/zero_variance": float(raw_var < VAR_FLOOR),
        "rollout/all_zero_reward": float(n_nonzero == 0),
        "rollout/response_len": len_sum / n,
        "rollout/truncated": trunc_sum / n,
        "train/loss": loss_v,
        "train/pg_loss": pg_v,
        "train/ppo_kl": ppo_kl_v,
        "train/clip_frac": clipped / max(adv.valid_tokens.item(), 1.0),
        "train/grad_norm": float(grad_norm),
        "perf/response_tok_per_s": tokens / max(rollout_wall, 1e-9),
        "perf/step_s": time.perf_counter() - t_step,
        "perf/peak_mem_gib": peak,
    }
    if kl_loss is not None:
        metrics[KL_LOSS_KEY] = kl_v
    return metrics


def run_config_digest(cfg: DictConfig) -> str:
    """SHA256 of what defines the run's numbers (algo, workload, seed); a checkpoint only resumes
    a run with the same digest. Where it runs (output_dir, dp_size, launcher keys) is not part of it."""
    import hashlib

    defining = OmegaConf.to_container(OmegaConf.masked_copy(cfg, ["algo", "workload", "seed"]), resolve=True)
    return hashlib.sha256(json.dumps(defining, sort_keys=True).encode()).hexdigest()


def _versions() -> dict[str, str]:
    import transformers

    import trainer

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "proofgrid": getattr(trainer, "__version__", "0.1.0")}


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def run_rank(rank: int, world: int, cfg_container: dict) -> dict | None:
    cfg = OmegaConf.create(cfg_container)
    # One process only: with several ranks a stop must be agreed collectively (not implemented).
    stop = StopRequest().install() if world == 1 else None
    if stop is None:
        deliver_held_signals()
    try:
        return _run_rank(rank, world, cfg, stop)
    finally:
        if stop is not None:
            stop.uninstall()


def _run_rank(rank: int, world: int, cfg: DictConfig, stop: StopRequest | None) -> dict | None:
    algo = validate(cfg)
    w = cfg.workload
    torch.set_num_threads(int(w.num_threads))
    if str(w.device).startswith("cuda"):
        # Deterministic cuBLAS needs a fixed workspace, set before CUDA initialises.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if world > 1:
            torch.cuda.set_device(rank)  # one GPU per rank (NCCL refuses two ranks on one device)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(int(cfg.seed))
    random.seed(int(cfg.seed))
    group = _init_process_group(rank, world, cfg) if world > 1 else None
    try:
        return _run(rank, world, group, cfg, algo, stop)
    finally:
        if group is not None:
            dist.destroy_process_group()


def _init_process_group(rank: int, world: int, cfg: DictConfig):
    backend = "nccl" if str(cfg.workload.device).startswith("cuda") else "gloo"
    if os.environ.get("MASTER_PORT"):  # the launcher's port set provides it
        init = f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ['MASTER_PORT']}"
    else:
        init = f"file://{Path(cfg.output_dir).resolve() / '.dist-store'}"
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    return dist.group.WORLD


def _run(rank: int, world: int, group, cfg: DictConfig, algo: AlgoConfig, stop: StopRequest | None = None) -> dict | None:
    w = cfg.workload
    inputs = verify_inputs(w.manifest, required=[w.model_path, w.train_path, w.test_path])
    eval_examples = load_split(resolve(w.test_path))[: int(w.eval.n_prompts)]
    if len(eval_examples) < int(w.eval.n_prompts):
        raise RunConfigError(
            f"workload.eval.n_prompts={w.eval.n_prompts} but the test split has {len(eval_examples)} rows; "
            f"set workload.eval.n_prompts<={len(eval_examples)}"
        )
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(f"cuda:{torch.cuda.current_device()}") if str(w.device).startswith("cuda") \
        else torch.device(str(w.device))
    policy, tokenizer = load_policy(str(resolve(w.model_path)), str(device))
    reference = copy.deepcopy(policy).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=float(w.lr), betas=tuple(w.adam_betas),
                                  eps=float(w.adam_eps), weight_decay=float(w.weight_decay))
    ckpt_root = out / "checkpoints"
    start_step = 0
    digest = run_config_digest(cfg)
    if cfg.resume and (ckpt := latest_checkpoint(ckpt_root)) is not None:
        state = load_checkpoint(ckpt, policy, optimizer)
        if state.get("config_digest") != digest:
            raise RunConfigError(
                f"{out} holds a checkpoint ({ckpt.name}) of a run with other settings; resuming would mix "
                "two configurations: use a new output_dir, or resume=false to start over"
            )
        start_step = int(state["step"])
        log.info("resumed from %s at step %d", ckpt.name, start_step)
    warn_if_greedy(sampling_params(w.sampling, w.max_response_len), "training rollout")
    engine = make_engine(str(w.engine), policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    scorer = make_scorer(int(w.reward_workers), int(w.reward_max_concurrency))
    state = RunState(cfg, algo, rank, world, group, policy, reference, tokenizer, optimizer, engine,
                     PromptStream(load_split(resolve(w.train_path)), int(cfg.seed)), device, scorer)
    n_updates = int(w.n_updates)
    summary = {
        "algo": algo.short_name, "algo_name": algo.estimator, "seed": int(cfg.seed), "workload": str(w.name),
        "n_updates": n_updates, "dp_size": world, "versions": _versions(), "inputs": inputs,
        "source_commit": source_commit(), "config": OmegaConf.to_container(cfg, resolve=True),
    }
    summary["config"].pop("output_dir", None)  # a machine path; the run directory itself says where
    metrics_log = MetricsLog(out, start_step) if rank == 0 else None
    if rank == 0:
        _write_json(out / "run.json", {**summary, "status": "running", "steps_completed": start_step,
                                       "responses_generated": start_step * int(w.global_batch_size)})
    every = int(w.checkpoint_every)
    for step in range(start_step, n_updates):
        if stop is not None and stop.requested:  # the scheduler's warning: save what is done, stop
            if step > start_step and step % every:
                save_checkpoint(ckpt_root, step, policy, optimizer,
                                {"prompts_consumed": step * int(w.prompts_per_step), "config_digest": digest})
            log.info("signal %d: checkpointed at step %d; stopping for a requeue", stop.signum, step)
            metrics_log.close()
            scorer.close()
            raise SystemExit(EXIT_CHECKPOINTED)
        metrics = train_step(state, step)
        done = step + 1
        if rank == 0:
            metrics_log.write(step, metrics)
            log.info("step %d/%d reward=%.3f loss=%.4f", done, n_updates, metrics["rollout/raw_reward"],
                     metrics["train/loss"])
            if done % every == 0 or done == n_updates:
                save_checkpoint(ckpt_root, done, policy, optimizer,
                                {"prompts_consumed": done * int(w.prompts_per_step), "config_digest": digest})
        if group is not None:
            dist.barrier(group=group)
    scorer.close()
    if rank != 0:
        return None
    metrics_log.close()
    e = w.eval
    examples = eval_examples
    eval_sampling = sampling_params(e, e.max_response_len)
    with compute_context(device, str(w.dtype)):
        final = evaluate(engine, tokenizer, examples, int(e.k), int(e.seed), eval_sampling,
                         checkpoint_name(n_updates), out / "eval" / "final.jsonl")
        control = make_engine(str(w.engine), reference, tokenizer.eos_token_id, tokenizer.pad_token_id)
        initial = evaluate(control, tokenizer, examples, int(e.k), int(e.seed), eval_sampling, "initial",
                           out / "eval" / "initial.jsonl")
    _write_json(out / "eval.json", {"initial": initial, "final": final})
    result = {**summary, "status": "completed", "steps_completed": n_updates,
              "responses_generated": n_updates * int(w.global_batch_size)}
    _write_json(out / "run.json", result)
    return result


def train(cfg: DictConfig) -> dict:
    """Train one (algo, seed) run into ``cfg.output_dir``; returns the ``run.json`` summary."""
    validate(cfg)  # refuse before spawning anything
    container = OmegaConf.to_container(cfg, resolve=True)
    world = int(cfg.dp_size)
    if world == 1:
        return run_rank(0, 1, container)
    import torch.multiprocessing as mp

    deliver_held_signals()  # the ranks must not inherit the runtime's held signals

    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.output_dir) / ".dist-store").unlink(missing_ok=True)
    mp.start_processes(run_rank, args=(world, container), nprocs=world, join=True, start_method="spawn")
    return json.loads((Path(cfg.output_dir) / "run.json").read_text())
