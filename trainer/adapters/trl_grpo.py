"""TRL's ``GRPOTrainer`` as a proofgrid trainer: the command a ``trainer=trl`` spec runs (issue 20).

    python -m trainer.adapters.trl_grpo --model-dir trainer/assets/toy/model \\
        --train trainer/assets/toy/data/train.parquet --output-dir <run dir> --seed 42 --steps 50 \\
        --algo grpo --loss-reduction response_mean --std-normalize true --kl-coef 0.01 --kl-loss-type k2 \\
        --lr 1e-4 --prompts-per-step 4 --responses-per-prompt 8 --max-response-len 48 \\
        --temperature 1.0 --top-k 0 --top-p 1.0 --clip-low 0.2 --clip-high 0.2 [--loss-type dapo] ...

Every setting is an explicit argument, named after the proofgrid setting the harness fills it from
(``{seed}``, ``{workload.lr}``, ``{algo.clip_high}``, ...). The settings are checked and mapped before
TRL is imported: a setting TRL cannot honour is refused in one line with exit code 2, and
``--check-only`` prints the mapped ``GRPOConfig`` arguments as JSON without training (a plan-time
check). The run trains on the CPU (or ``--device cuda``) with the workload's reward
(``--reward``, ``facts.reward``: a built-in, or the user's ``module:function`` of the row) as TRL's reward
function, on the training split's prompts in proofgrid's own order (``trainer.data.PromptStream``), each
rendered by proofgrid's renderer (``trainer.prompts``: the template, or the tokenizer's chat template) and given
to TRL as text: step ``s`` sees exactly the prompts ``python -m trainer`` sees at step ``s`` with the same seed.

Mapping (proofgrid setting -> TRL ``GRPOConfig`` / ``GRPOTrainer`` argument; TRL 1.16)
=========================================  ==========================================================
proofgrid                                  TRL
=========================================  ==========================================================
``workload.model_path`` (--model-dir)      ``GRPOTrainer(model=<dir>)``, ``model_init_kwargs.dtype``;
                                           the tokenizer: ``AutoTokenizer`` of the same directory
``workload.train_path`` (--train)          ``train_dataset``: ``steps x P`` prompts in ``PromptStream(seed)``
                                           order, ``shuffle_dataset=False``; each prompt rendered by
``workload.data``, ``.prompt`` (--task)    proofgrid's renderer, as text (``--task``: the ``{task}`` placeholder,
                                           the workload's field map, prompt and reward as JSON)
``workload.reward`` (--task)               ``reward_funcs``: the reward of (completion, label or row)
``seed``                                   ``seed``, ``data_seed`` (TRL seeds sampling with ``seed + rank``)
``workload.n_updates`` (--steps)           ``max_steps``; one optimizer step per rollout batch:
                                           ``steps_per_generation=1``, ``gradient_accumulation_steps=1``,
                                           ``num_iterations=1``
``prompts_per_step`` P x                   ``per_device_train_batch_size = P x G`` (one process),
``n_samples_per_prompt`` G                 ``num_generations = G``
``max_response_len``                       ``max_completion_length``
``sampling.temperature/top_k/top_p``       ``temperature``, ``top_k`` (0: off in both), ``top_p``
``lr``                                     ``learning_rate``, ``lr_scheduler_type="constant"``, no warm-up
``adam_betas``, ``adam_eps``,              ``adam_beta1``/``adam_beta2``, ``adam_epsilon``, ``weight_decay``
``weight_decay``                           (TRL's default ``adamw_torch``; proofgrid: ``torch.optim.AdamW``)
``max_grad_norm``                          ``max_grad_norm`` (both log the norm before clipping)
``algo.clip_low``, ``algo.clip_high``      ``epsilon``, ``epsilon_high``
``algo.use_kl_loss``, ``kl_loss_coef``     ``beta`` (0 without a KL loss: TRL then loads no reference model)
``algo.kl_loss_type=k2``                   TRL's only estimator, ``k3 * rho`` (``use_bias_correction_kl``):
                                           on-policy its gradient is k2's exactly, since with
                                           ``x = logp - logp_ref``, ``d/dlogp [(e^-x + x - 1) e^(logp -
                                           sg(logp))] = 1 - e^-x + e^-x + x - 1 = x = d/dlogp x^2/2``;
                                           the logged value is k3's, not k2's
``algo.grpo_std_normalize``                ``scale_rewards``: ``group`` | ``none`` (both ddof=1; TRL divides
                                           by ``std + 1e-4``, proofgrid by ``std + 1e-6``)
``algo.loss_reduction``                    ``loss_type``: ``response_mean`` -> ``grpo`` (per-response token
                                           mean, then the batch mean), ``token_mean`` -> ``dapo`` (sum over
                                           the batch's tokens / their number)
``algo=gspo``                              ``importance_sampling_level="sequence"``
``algo=sapo``, ``tau_pos``, ``tau_neg``    ``loss_type="sapo"``, ``sapo_temperature_pos/neg``
``checkpoint_every`` (--save-steps)        ``save_strategy="steps"``, ``save_steps``
``workload.lora``: ``rank``, ``alpha``,     ``GRPOTrainer(peft_config=LoraConfig(r, lora_alpha, lora_dropout,
``dropout``, ``target_modules``            target_modules, bias="none"))`` (TRL's reference is then the base
(--lora-rank, --lora-alpha, ...)           model, the adapters disabled, as proofgrid's is); the final model
                                           is saved merged (``merge_and_unload``), a plain model directory
``num_threads``, ``device``, ``dtype``     ``torch.set_num_threads``, ``use_cpu``, ``bf16`` with bf16 weights
(fixed)                                    ``logging_steps=1``, ``report_to="tensorboard"``,
                                           ``activation_checkpointing=False``, ``disable_dropout=True``,
                                           ``log_completions=False``, ``dataloader_num_workers=0``
=========================================  ==========================================================

TRL's own options pass through: ``--loss-type`` (any of ``TRL_LOSS_TYPES`` that computes the algorithm's
policy loss, e.g. ``grpo`` or ``dapo`` for ``algo=grpo``) and ``--scale-rewards`` (``group``,
``batch``, ``none``) override the mapped value, and ``--trl KEY=VALUE`` sets one of the ``GRPOConfig`` fields of
``PASS_THROUGH_FIELDS`` (a YAML value): those that change neither a setting proofgrid records nor the loss/reward
contract (speed, memory, log verbosity); any other field is refused. The record says which values came from where,
and the declaration (the report's contract table) names every field passed through.

Refused (one line, exit 2), because TRL's ``GRPOTrainer`` has no equivalent: ``algo=rpp`` / ``rppb``
(token-level returns with a k1 reward penalty, global masked normalisation over every valid token),
``algo=dapo`` (dynamic sampling and the soft overlong penalty), ``algo=is_pg`` / ``score_centering``
(their losses), ``loss_reduction=sum`` (no summed loss type; ``dr_grpo`` divides by ``B x
max_completion_length``), ``kl_loss_type=k1``, a KL loss with ``algo=gspo`` (``k3 x`` the sequence
ratio does not have k2's gradient), ``ppo_epochs``, ``ppo_mini_batches`` or
``sampler_refresh_every`` other than 1 (TRL would count each update as a step), fewer than 2
responses per prompt, ``workload.lora.dropout`` other than 0 (``disable_dropout=True``, fixed so that the
model's own dropout stays off as in proofgrid's forward, zeroes the adapters' dropout too), ``trainer.use_vllm=true``
(``USE_VLLM_REFUSED``: TRL's colocated vLLM syncs weights in a way vLLM's CPU build cannot take; proofgrid's trainer
runs vLLM with ``workload.engine=vllm``).

Output directory
----------------
``trl_run.json``                       what ran: settings, the mapped ``GRPOConfig`` arguments, versions,
                                       inputs' SHA256, status (``running`` | ``completed`` | ``stopped``),
                                       steps completed, the checkpoint it resumed from
``tensorboard/events.out.tfevents.*``  TRL's logs, one event per step (``train/<TRL key>``); a resumed run
                                       adds a file (``evidence.gates.tensorboard_log`` reads them all)
``checkpoints/checkpoint-<N>/``        TRL's own checkpoints (weights, optimizer, scheduler, RNG states,
                                       ``trainer_state.json``), every ``--save-steps`` and at the end
``final/``                             the final model as a Hugging Face model directory
                                       (``model.safetensors``, ``config.json``, ``generation_config.json``,
                                       tokenizer files)
``.trainer.lock``                      proofgrid's one-trainer-per-directory lock (``trainer.run_lock``)

Resume and signals: with ``--resume true`` (the default) a run whose ``checkpoints/`` holds a TRL
checkpoint continues from the newest one (``Trainer.train(resume_from_checkpoint=...)``: weights,
optimizer, scheduler, RNG states and the data position). SIGUSR2 (the time-limit warning) or SIGTERM
ends the run at the next step boundary with a checkpoint at that step (a callback sets
``control.should_save`` and ``control.should_training_stop``) and exit code 75
(``trainer.preemption.EXIT_CHECKPOINTED``), as ``python -m trainer`` does. Exit codes: 0 completed,
1 error, 2 refused, 75 stopped with a checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from facts.algorithms import ALGO_ORDER, ALGORITHMS
from facts.process_exit import exit_now
from facts.states import RUN_COMPLETED, RUN_RUNNING, RUN_STOPPED
from trainer.trainer_errors import TrainerError

PROG = "python -m trainer.adapters.trl_grpo"
TENSORBOARD_DIR = "tensorboard"
CHECKPOINTS_DIR = "checkpoints"
FINAL_MODEL_DIR = "final"
RUN_RECORD = "trl_run.json"
# One line per optimizer step: its whole wall and CPU time, generation to optimizer step (TRL's own
# train/step_time stops before the optimizer step): what `python -m benchmarks trl` compares.
STEP_CLOCK = "step_clock.jsonl"
EXIT_REFUSED = 2
PASSED_THROUGH = "TRL option"  # a Plan's source of a field ``--trl`` set (PASS_THROUGH_FIELDS)
# TRL 1.16's loss types (GRPOConfig.loss_type; TRL's names, some of which spell proofgrid algorithms'),
# each with the proofgrid policy loss it computes.
TRL_LOSS_TYPES = {
    "grpo": "clipped surrogate", "dr_grpo": "clipped surrogate", "dapo": "clipped surrogate",
    "bnpo": "clipped surrogate", "cispo": "CISPO", "sapo": "SAPO", "luspo": "LUSPO", "vespo": "VESPO",
}
SCALE_REWARDS = ("group", "batch", "none")


# trainer=trl trainer.use_vllm=true, answered before anything runs (docs/engines.md): TRL 1.16's colocated mode syncs
# every step's weights with `llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights(...)`, which
# vLLM's CPU build (the `vllm` extra, 0.32.0) cannot take: its linear layers are repacked after loading, and the
# call fails at the first of them (measured: "AttributeError: 'Parameter' object has no attribute 'weight_loader'"
# at model.layers.0.self_attn.q_proj.weight); TRL 1.16 also supports vLLM 0.22-0.31 only. proofgrid's own trainer
# runs vLLM with vLLM's reload_weights, which works there (docs/engines.md).
USE_VLLM_REFUSED = ("trainer.use_vllm=true: TRL's colocated vLLM syncs weights with vLLM's in-place load_weights, "
                    "which vLLM's CPU build 0.32.0 cannot take (its linear layers are repacked after loading); run "
                    "trainer=proofgrid workload.engine=vllm for vLLM rollouts, or trainer.use_vllm=false")


class Refused(TrainerError, ValueError):
    """A setting TRL's GRPOTrainer cannot honour; the message names it and what to do instead."""


@dataclass(frozen=True)
class TrlLoss:
    """How one of proofgrid's policy losses runs on TRL: the loss it is there, the loss type of each
    reduction, and the algorithm settings that map onto ``GRPOConfig`` fields."""

    policy_loss: str  # a value of TRL_LOSS_TYPES
    loss_types: dict  # proofgrid loss_reduction -> TRL loss_type
    importance_sampling_level: str = "token"
    kl_exact: bool = True  # TRL's k3 * rho has k2's gradient (token-level ratio)
    settings: dict = field(default_factory=dict)  # AlgoConfig field -> GRPOConfig field
    settings_are: str = ""  # what those settings are, for the error that asks for them


# Keyed on the traits of an algorithm's record (facts.algorithms), never on its name: an algorithm runs
# on TRL when its advantage is TRL's group-relative one, it normalises no wider than a group, its policy
# loss is one TRL computes and it reads no setting TRL lacks.
TRL_ADVANTAGE = "group_relative"
REFUSED_ADVANTAGES = {
    "kl_shaped_return": "shapes token-level returns with a k1 KL penalty and normalises them over every valid "
                        "token (global, ddof=0); TRL's GRPOTrainer only scales sequence rewards per group or batch",
    "group_baseline": "normalises its advantages over every valid token of the batch (global, ddof=0); "
                      "TRL's GRPOTrainer only scales sequence rewards per group or batch",
}
GLOBAL_NORMALIZATION_REFUSED = ("normalises its advantages over every valid token of the batch (global, ddof=0); "
                                "TRL's GRPOTrainer only scales sequence rewards per group or batch")
TRL_POLICY_LOSSES = {
    "ppo_clip": TrlLoss("clipped surrogate", {"response_mean": "grpo", "token_mean": "dapo"}),
    "sequence_ratio_clip": TrlLoss("clipped surrogate", {"response_mean": "grpo", "token_mean": "dapo"},
                                   importance_sampling_level="sequence", kl_exact=False),
    "sigmoid_gate": TrlLoss("SAPO", {"response_mean": "sapo"},
                            settings={"tau_pos": "sapo_temperature_pos", "tau_neg": "sapo_temperature_neg"},
                            settings_are="its gate temperatures"),
}
REFUSED_POLICY_LOSSES = {
    "importance_sampled": "TRL's GRPOTrainer has no importance-sampled policy gradient against the sampler's log-probs",
    "centred_score": "TRL's GRPOTrainer has no score-centering loss",
}
REFUSED_SETTINGS = {
    "dynamic_sampling": "TRL's GRPOTrainer has no dynamic sampling (zero-variance groups refilled) nor DAPO's soft "
                        "overlong penalty; for DAPO's loss alone run algo=grpo with TRL's loss_type=dapo, "
                        "algo.clip_high=0.28 and no KL",
}


def trl_loss(short: str) -> TrlLoss:
    """The TRL form of the algorithm ``short`` (its record's traits), or ``Refused`` naming why it has none."""
    record = ALGORITHMS.get(short)
    if record is None:
        raise Refused(f"algo={short} is not a proofgrid algorithm ({', '.join(ALGO_ORDER)})")
    reason = REFUSED_ADVANTAGES.get(record.raw_advantage)
    if reason is None and record.global_normalization:
        reason = GLOBAL_NORMALIZATION_REFUSED
    if reason is not None:
        reason = f"{record.display_name} {reason}"
    if reason is None and record.raw_advantage != TRL_ADVANTAGE:
        reason = f"TRL's GRPOTrainer has no {record.raw_advantage} advantage"
    reason = reason or REFUSED_POLICY_LOSSES.get(record.policy_loss)
    if reason is None and record.policy_loss not in TRL_POLICY_LOSSES:
        reason = f"TRL's GRPOTrainer has no {record.policy_loss} policy loss"
    reason = reason or next((REFUSED_SETTINGS[s] for s in record.settings if s in REFUSED_SETTINGS), None)
    if reason is not None:
        raise Refused(f"algo={short} cannot run on TRL: {reason}")
    return TRL_POLICY_LOSSES[record.policy_loss]


# What each TRL loss type does with a batch's per-token losses (TRL 1.16's GRPOTrainer._compute_loss),
# for the run's declaration (the report's contract table).
LOSS_TYPE_REDUCTIONS = {
    "grpo": "per-response token mean, then the batch mean (TRL loss_type=grpo)",
    "dr_grpo": "token sum / (batch x max_completion_length) (TRL loss_type=dr_grpo)",
    "dapo": "token sum / the batch's token count (TRL loss_type=dapo)",
    "bnpo": "token sum / the local batch's token count (TRL loss_type=bnpo)",
    "cispo": "token sum / the batch's token count (TRL loss_type=cispo)",
    "sapo": "per-response token mean, then the batch mean (TRL loss_type=sapo)",
    "luspo": "per-response token sum, then the batch mean (TRL loss_type=luspo)",
    "vespo": "token sum / the batch's token count (TRL loss_type=vespo)",
}
SCALE_REWARDS_ADVANTAGE = {
    "group": "same-prompt group centering and group-std scaling (std + 1e-4)",
    "batch": "same-prompt group centering, batch-std scaling (std + 1e-4)",
    "none": "same-prompt group centering, no std scaling",
}


def declaration(p: Plan, algo: str) -> dict:
    """What the run computes, in the words of proofgrid's algorithm contract (``advantage``,
    ``normalization``, ``kl_regularization``, ``loss``), from the mapped ``GRPOConfig``: the harness
    reads it from ``trl_run.json`` (its ``algorithm`` object) into the run's record."""
    c = p.grpo_config
    beta = float(c["beta"])
    kl = f"separate KL loss, TRL's k3 x ratio (k2's gradient on-policy), beta={beta:g}" if beta else "none (beta=0)"
    level = "sequence-ratio" if c["importance_sampling_level"] == "sequence" else "token"
    policy_loss = TRL_LOSS_TYPES[c["loss_type"]]
    loss = f"{level} PPO clipped surrogate (epsilon {c['epsilon']:g}/{c['epsilon_high']:g})" \
        if policy_loss == "clipped surrogate" else f"{policy_loss} (TRL loss_type={c['loss_type']})"
    passed = {k: v for k, v in c.items() if p.sources.get(k) == PASSED_THROUGH}
    if passed:  # in the contract table too: what else the run was given
        loss += "; TRL options passed through: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in passed.items())
    return {"trl_algo": algo, "loss_type": c["loss_type"], "scale_rewards": c["scale_rewards"], "beta": beta,
            "importance_sampling_level": c["importance_sampling_level"], "kl_estimator": "k3 x ratio" if beta else None,
            "trl_options": passed,
            "contract": {"advantage": SCALE_REWARDS_ADVANTAGE[c["scale_rewards"]],
                         "normalization": LOSS_TYPE_REDUCTIONS[c["loss_type"]], "kl_regularization": kl, "loss": loss}}


# GRPOConfig fields this adapter sets from proofgrid settings (or fixes): --trl may not set them.
OWNED_FIELDS = frozenset({
    "output_dir", "seed", "data_seed", "max_steps", "per_device_train_batch_size", "num_generations",
    "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size", "num_iterations",
    "max_completion_length", "temperature", "top_k", "top_p", "learning_rate", "lr_scheduler_type",
    "warmup_steps", "warmup_ratio", "adam_beta1", "adam_beta2", "adam_epsilon", "weight_decay", "max_grad_norm",
    "epsilon", "epsilon_high", "beta", "scale_rewards", "loss_type", "importance_sampling_level",
    "sapo_temperature_pos", "sapo_temperature_neg", "save_strategy", "save_steps", "use_cpu", "bf16", "fp16",
    "logging_steps", "logging_strategy", "report_to", "model_init_kwargs", "shuffle_dataset",
    "use_bias_correction_kl", "resume_from_checkpoint", "activation_checkpointing", "gradient_checkpointing",
    "use_vllm", "vllm_mode", "disable_tqdm", "disable_dropout", "log_completions", "dataloader_num_workers",
})


# The GRPOConfig fields ``--trl`` may set (TRL 1.16), each with why it changes neither a setting proofgrid records
# (the mapping above) nor the loss/reward contract (``declaration``): performance, memory and log verbosity only. Any
# other field is refused: TRL's sampling (``generation_kwargs``, ``min_p``, ``repetition_penalty``) overrides the
# workload's recorded sampling, ``optim*`` replaces the AdamW whose settings are recorded, and the loss and reward
# fields (``delta``, ``top_entropy_quantile``, ``mask_truncated_completions``, ``reward_weights``, ``entropy_coef``,
# ``cast_lm_head_to_fp32``, ...) change what the contract table says the run computes. An accepted field is in
# ``trl_run.json``'s declaration and the report's contract table (``declaration``).
PASS_THROUGH_FIELDS = {
    "cache_implementation": "the generation's KV-cache layout (GenerationConfig's cache_implementation): speed only",
    "pad_to_multiple_of": "pads prompts and completions to a multiple, masked out of attention and loss: speed only",
    "torch_empty_cache_steps": "empties the device's memory cache every N steps: memory only",
    "dataloader_pin_memory": "pinned host memory for the data loader: speed only",
    "full_determinism": "transformers' enable_full_determinism(seed) instead of set_seed(seed): the same seed, "
                        "deterministic kernels",
    "log_level": "the verbosity of transformers' log: its console only",
}


def _bool(text: str) -> bool:
    """``true``/``false`` in any case (Hydra writes Python's ``True``/``False``)."""
    value = {"true": True, "false": False, "1": True, "0": False}.get(str(text).strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def _key_value(text: str) -> tuple[str, object]:
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), yaml.safe_load(value)


def parser(cls: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> argparse.ArgumentParser:
    ap = cls(prog=PROG, description=__doc__.splitlines()[0])
    req = ap.add_argument_group("run")
    req.add_argument("--model-dir", required=True, help="{workload.model_path}: a Hugging Face model directory")
    req.add_argument("--train", required=True, help="{workload.train_path}: a split (parquet, jsonl or saved dataset)")
    req.add_argument("--output-dir", required=True, type=Path, help="{output_dir}")
    req.add_argument("--seed", required=True, type=int, help="{seed}")
    req.add_argument("--steps", required=True, type=int, help="{workload.n_updates}: rollout batches")
    req.add_argument("--manifest", help="{workload.manifest}: verify the model and split against their pins")
    alg = ap.add_argument_group("algorithm (proofgrid's names)")
    alg.add_argument("--algo", required=True, help="{algo.short}: grpo, gspo or sapo")
    alg.add_argument("--loss-reduction", required=True, help="{algo.loss_reduction}")
    alg.add_argument("--std-normalize", type=_bool, default=True, help="{algo.grpo_std_normalize}")
    alg.add_argument("--use-kl-loss", type=_bool, default=True, help="{algo.use_kl_loss}")
    alg.add_argument("--kl-coef", required=True, type=float, help="{algo.kl_loss_coef}: TRL's beta")
    alg.add_argument("--kl-loss-type", default="k2", help="{algo.kl_loss_type}")
    alg.add_argument("--clip-low", type=float, default=0.2, help="{algo.clip_low}: TRL's epsilon")
    alg.add_argument("--clip-high", type=float, default=0.2, help="{algo.clip_high}: TRL's epsilon_high")
    alg.add_argument("--tau-pos", type=float, help="{algo.tau_pos} (algo=sapo)")
    alg.add_argument("--tau-neg", type=float, help="{algo.tau_neg} (algo=sapo)")
    wl = ap.add_argument_group("workload")
    wl.add_argument("--lr", required=True, type=float, help="{workload.lr}")
    wl.add_argument("--prompts-per-step", required=True, type=int, help="{workload.prompts_per_step}")
    wl.add_argument("--responses-per-prompt", required=True, type=int, help="{workload.n_samples_per_prompt}")
    wl.add_argument("--max-response-len", required=True, type=int, help="{workload.max_response_len}")
    wl.add_argument("--temperature", type=float, default=1.0, help="{workload.sampling.temperature}")
    wl.add_argument("--top-k", type=int, default=0, help="{workload.sampling.top_k}")
    wl.add_argument("--top-p", type=float, default=1.0, help="{workload.sampling.top_p}")
    wl.add_argument("--adam-betas", type=float, nargs=2, default=(0.9, 0.999), help="{workload.adam_betas}")
    wl.add_argument("--adam-eps", type=float, default=1e-8, help="{workload.adam_eps}")
    wl.add_argument("--weight-decay", type=float, default=0.0, help="{workload.weight_decay}")
    wl.add_argument("--max-grad-norm", type=float, default=1.0, help="{workload.max_grad_norm}")
    wl.add_argument("--ppo-epochs", type=int, default=1, help="{workload.ppo_epochs}")
    wl.add_argument("--ppo-mini-batches", type=int, default=1, help="{workload.ppo_mini_batches}")
    wl.add_argument("--sampler-refresh-every", type=int, default=1, help="{workload.sampler_refresh_every}")
    wl.add_argument("--lora-rank", type=int, help="{workload.lora.rank}: train LoRA adapters (TRL's peft_config)")
    wl.add_argument("--lora-alpha", type=float, help="{workload.lora.alpha}")
    wl.add_argument("--lora-dropout", type=float, default=0.0, help="{workload.lora.dropout}")
    wl.add_argument("--lora-target-modules", nargs="+", help="{workload.lora.target_modules}")
    wl.add_argument("--save-steps", type=int, default=25, help="{workload.checkpoint_every}")
    wl.add_argument("--num-threads", type=int, default=1, help="{workload.num_threads}")
    wl.add_argument("--device", default="cpu", help="{workload.device}: cpu or cuda")
    wl.add_argument("--dtype", default="float32", help="{workload.dtype}: float32 or bfloat16")
    wl.add_argument("--task", type=_task, default=None,
                    help="{task}: the workload's data field map, prompt and reward as JSON (default: the embedded "
                         "default's: question/answer, 'Question: {question}\\nAnswer:', gsm8k_hash)")
    trl = ap.add_argument_group("TRL's own options")
    trl.add_argument("--loss-type", help=f"TRL's loss_type ({', '.join(TRL_LOSS_TYPES)}); default: from --loss-reduction")
    trl.add_argument("--scale-rewards", help=f"TRL's scale_rewards ({', '.join(SCALE_REWARDS)}); default: from --std-normalize")
    trl.add_argument("--use-vllm", type=_bool, default=False,
                     help="{trainer.use_vllm}: TRL's colocated vLLM generation (refused: see USE_VLLM_REFUSED)")
    trl.add_argument("--trl", type=_key_value, action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                     help="GRPOConfig fields passed through (YAML values; PASS_THROUGH_FIELDS), e.g. "
                          "cache_implementation=static")
    ap.add_argument("--resume", type=_bool, default=True, help="{resume}: continue from the newest TRL checkpoint")
    ap.add_argument("--check-only", action="store_true", help="check and map the settings, print them, train nothing")
    return ap


@dataclass(frozen=True)
class Plan:
    """The mapped run: ``GRPOConfig`` arguments (without ``output_dir``) and where each choice came from."""

    grpo_config: dict
    sources: dict  # GRPOConfig field -> the proofgrid setting or option it came from
    model_dtype: str
    peft_config: dict | None = None  # LoraConfig's arguments (workload.lora), None: full fine-tuning


def lora_config(a: argparse.Namespace) -> dict | None:
    """``workload.lora`` as ``peft.LoraConfig`` arguments, or None; ``Refused`` for what TRL cannot honour."""
    given = {"rank": a.lora_rank, "alpha": a.lora_alpha, "target_modules": a.lora_target_modules}
    if all(v is None for v in given.values()):
        return None
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise Refused(f"a LoRA policy needs --lora-{missing[0].replace('_', '-')} too "
                      f"(pass every one of {{workload.lora.rank}}, alpha, dropout and target_modules)")
    if a.lora_rank < 1 or a.lora_alpha <= 0 or not 0 <= a.lora_dropout < 1:
        raise Refused(f"workload.lora rank={a.lora_rank} alpha={a.lora_alpha:g} dropout={a.lora_dropout:g}: the rank "
                      "must be >= 1, alpha > 0 and the dropout in [0, 1)")
    if a.lora_dropout != 0:
        raise Refused(f"workload.lora.dropout={a.lora_dropout:g}: TRL's disable_dropout=True (fixed, so that the model's "
                      "own dropout stays off as in proofgrid's forward) zeroes the adapters' dropout too; set "
                      "workload.lora.dropout=0")
    return {"r": a.lora_rank, "lora_alpha": a.lora_alpha, "lora_dropout": a.lora_dropout,
            "target_modules": list(a.lora_target_modules), "bias": "none"}


def plan(a: argparse.Namespace) -> Plan:
    """Map the settings onto TRL's arguments, or raise ``Refused`` for one TRL cannot honour."""
    algo = trl_loss(a.algo)
    sources = {}

    if a.loss_type is None:
        if a.loss_reduction not in algo.loss_types:
            no_sum = " (TRL has no summed loss; its dr_grpo divides by B x max_completion_length)" \
                if a.loss_reduction == "sum" else ""
            raise Refused(f"algo={a.algo} with loss_reduction={a.loss_reduction} has no TRL loss_type{no_sum}; "
                          f"use loss_reduction={' or '.join(algo.loss_types)}, or pass TRL's own loss_type")
        loss_type, sources["loss_type"] = algo.loss_types[a.loss_reduction], f"algo.loss_reduction={a.loss_reduction}"
    elif a.loss_type not in TRL_LOSS_TYPES:
        raise Refused(f"loss_type={a.loss_type} is not one of TRL's: {', '.join(TRL_LOSS_TYPES)}")
    elif TRL_LOSS_TYPES[a.loss_type] != algo.policy_loss:
        fits = [t for t, loss in TRL_LOSS_TYPES.items() if loss == algo.policy_loss]
        raise Refused(f"TRL's loss_type={a.loss_type} computes the {TRL_LOSS_TYPES[a.loss_type]} loss, not "
                      f"algo={a.algo}'s {algo.policy_loss}; use loss_type={', '.join(fits)} or another algo")
    else:
        loss_type, sources["loss_type"] = a.loss_type, "TRL option loss_type"

    if a.scale_rewards is None:
        scale_rewards = "group" if a.std_normalize else "none"
        sources["scale_rewards"] = f"algo.grpo_std_normalize={str(a.std_normalize).lower()}"
    elif a.scale_rewards not in SCALE_REWARDS:
        raise Refused(f"scale_rewards={a.scale_rewards} is not one of TRL's: {', '.join(SCALE_REWARDS)}")
    else:
        scale_rewards, sources["scale_rewards"] = a.scale_rewards, "TRL option scale_rewards"

    beta = float(a.kl_coef) if a.use_kl_loss else 0.0
    if beta != 0.0 and a.kl_loss_type != "k2":
        raise Refused(f"kl_loss_type={a.kl_loss_type} has no TRL equivalent: TRL's KL term (k3 times the ratio) "
                      "has the k2 gradient; use kl_loss_type=k2")
    if beta != 0.0 and not algo.kl_exact:
        raise Refused(f"algo={a.algo} with a KL loss: TRL's KL term (k3 times the sequence ratio) does not have the "
                      "k2 gradient; set algo.kl_loss_coef=0 or algo.use_kl_loss=false")
    if a.use_vllm:
        raise Refused(USE_VLLM_REFUSED)
    for name, value in (("ppo_epochs", a.ppo_epochs), ("ppo_mini_batches", a.ppo_mini_batches),
                        ("sampler_refresh_every", a.sampler_refresh_every)):
        if value != 1:
            raise Refused(f"workload.{name}={value}: the TRL adapter runs one on-policy update per rollout batch "
                          f"(TRL would count each update as a step); set workload.{name}=1")
    if a.responses_per_prompt < 2:
        raise Refused(f"workload.n_samples_per_prompt={a.responses_per_prompt}: TRL's GRPO needs at least 2 "
                      "responses per prompt")
    for name, value in (("n_updates", a.steps), ("prompts_per_step", a.prompts_per_step),
                        ("max_response_len", a.max_response_len), ("checkpoint_every", a.save_steps),
                        ("num_threads", a.num_threads)):
        if value < 1:
            raise Refused(f"workload.{name}={value} must be at least 1")
    if a.device not in ("cpu", "cuda"):
        raise Refused(f"workload.device={a.device}: the TRL adapter runs on cpu or cuda")
    if a.dtype not in ("float32", "bfloat16"):
        raise Refused(f"workload.dtype={a.dtype}: the TRL adapter trains in float32 or bfloat16")

    batch = a.prompts_per_step * a.responses_per_prompt
    config = dict(
        seed=a.seed, data_seed=a.seed, max_steps=a.steps,
        per_device_train_batch_size=batch, num_generations=a.responses_per_prompt,
        gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        max_completion_length=a.max_response_len,
        temperature=a.temperature, top_k=a.top_k, top_p=a.top_p,
        learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=a.adam_betas[0], adam_beta2=a.adam_betas[1], adam_epsilon=a.adam_eps,
        weight_decay=a.weight_decay, max_grad_norm=a.max_grad_norm,
        epsilon=a.clip_low, epsilon_high=a.clip_high, beta=beta, use_bias_correction_kl=True,
        loss_type=loss_type, scale_rewards=scale_rewards,
        importance_sampling_level=algo.importance_sampling_level,
        shuffle_dataset=False,  # the dataset is already in proofgrid's order
        save_strategy="steps", save_steps=a.save_steps,
        use_cpu=a.device == "cpu", bf16=a.dtype == "bfloat16", fp16=False,
        logging_steps=1, report_to="tensorboard", disable_tqdm=True,
        activation_checkpointing=False, disable_dropout=True, log_completions=False, dataloader_num_workers=0,
    )
    missing = [setting for setting in algo.settings if getattr(a, setting) is None]
    if missing:
        flags = " ".join(f"--{setting.replace('_', '-')} {{algo.{setting}}}" for setting in missing)
        raise Refused(f"algo={a.algo} needs {algo.settings_are}: pass {flags}")
    config.update({trl_field: getattr(a, setting) for setting, trl_field in algo.settings.items()})
    for key, value in a.trl:
        if key in OWNED_FIELDS:
            raise Refused(f"TRL option {key} is set from proofgrid's settings here; change the proofgrid setting")
        if key not in PASS_THROUGH_FIELDS:
            raise Refused(f"TRL option {key} is not passed through: it may change the settings proofgrid records or "
                          f"the loss/reward contract; the fields passed through are {', '.join(PASS_THROUGH_FIELDS)}")
        config[key] = value
        sources[key] = PASSED_THROUGH
    return Plan(config, sources, a.dtype, lora_config(a))


class _CheckParser(argparse.ArgumentParser):
    """The adapter's parser for a plan-time check: a bad argument is a ``Refused``, not an exit."""

    def error(self, message: str):
        raise Refused(f"its command does not parse: {message}")


def check_command(argv: list[str]) -> None:
    """The plan-time check of a ``trainer=trl`` job, in the launcher's process: ``argv`` is the job's
    whole command (``python -m trainer.adapters.trl_grpo ...``, its placeholders filled); raises
    ``Refused`` (a ``ValueError``) with the one-line reason TRL cannot honour it. Imports no TRL."""
    try:
        start = argv.index(__name__) + 1
    except ValueError:
        raise Refused(f"its command does not run {__name__}") from None
    plan(parser(_CheckParser).parse_args(argv[start:]))


def check_trl_fields(config: dict) -> None:
    """Every key is a ``GRPOConfig`` field of the installed TRL (a pass-through typo is refused)."""
    from trl import GRPOConfig

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    unknown = sorted(set(config) - fields)
    if unknown:
        raise Refused(f"{', '.join(unknown)} is not a GRPOConfig field of this TRL; see GRPOConfig's documentation")


def _versions() -> dict:
    from importlib.metadata import version

    return {name: version(name) for name in ("trl", "transformers", "torch", "accelerate", "datasets", "peft")}


def _write_record(out: Path, record: dict) -> None:
    from facts import atomic_write_json

    atomic_write_json(out / RUN_RECORD, record)


def _task(text: str):
    """``--task``: the workload's task settings (``facts.task``) as the ``{task}`` placeholder writes them."""
    from facts.task import Task

    try:
        settings = json.loads(text)
        if not isinstance(settings, dict):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a JSON object of task settings: {text[:60]!r}") from None
    return Task.of(settings)


def train(a: argparse.Namespace, p: Plan, stop) -> int:
    """Run TRL's GRPOTrainer into ``a.output_dir``; the exit code (0, or 75 when stopped by a signal)."""
    out = a.output_dir
    # transformers' TensorBoardCallback reads its directory from this variable (else a runs/<date>_<host>/).
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(out / TENSORBOARD_DIR)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
    # It reports to TensorBoard only; transformers' integrations (which TRL imports) would otherwise
    # import an installed MLflow, about 4 CPU s of every run's start-up.
    os.environ.setdefault("DISABLE_MLFLOW_INTEGRATION", "TRUE")
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from transformers.trainer_utils import get_last_checkpoint
    from trl import GRPOConfig, GRPOTrainer

    from facts.reward import reward
    from facts.task import Task
    from trainer.data import PromptStream, load_split
    from trainer.inputs import resolve, verify_inputs
    from trainer.preemption import EXIT_CHECKPOINTED

    check_trl_fields(p.grpo_config)
    model_dir, train_path = resolve(a.model_dir), resolve(a.train)
    inputs = verify_inputs(a.manifest, [a.model_dir, a.train]) if a.manifest else {}
    checkpoints = out / CHECKPOINTS_DIR
    last = get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None
    if last is not None and not a.resume:
        raise Refused(f"{out.name}/{CHECKPOINTS_DIR} holds an earlier run's checkpoints and resume=false; "
                      "resume, or use a fresh output directory")
    torch.set_num_threads(a.num_threads)

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    task = a.task or Task()
    scorer = reward(task.reward)
    stream = PromptStream(load_split(train_path, task, tokenizer, scorer), a.seed)
    examples = [stream.at(pos) for pos in range(a.steps * a.prompts_per_step)]
    dataset = Dataset.from_list([{"prompt": e.prompt, "label": e.label, "row_index": e.index,
                                  "row_json": json.dumps(e.row) if e.row is not None else ""} for e in examples])

    def math_reward(completions, label, row_index, row_json, **_):  # TRL names the reward's logs after the function
        return [scorer.score(c, y, json.loads(r) if r else None, f"row {i} of the train split")
                for c, y, i, r in zip(completions, label, row_index, row_json)]

    class StopAtStepBoundary(TrainerCallback):
        """On a checkpoint signal: save at the end of this step and stop (TRL's public control flags)."""

        stopped_at: int | None = None

        def on_step_end(self, args, state, control, **kwargs):
            if stop is not None and stop.requested and state.global_step < state.max_steps:
                control.should_save = True
                control.should_training_stop = True
                self.stopped_at = state.global_step
            return control

    class StepClock(TrainerCallback):
        """Each optimizer step's wall and process CPU seconds, appended to STEP_CLOCK as it ends."""

        def on_step_begin(self, args, state, control, **kwargs):
            self.begin = (time.perf_counter(), time.process_time())

        def on_step_end(self, args, state, control, **kwargs):
            wall, cpu = time.perf_counter() - self.begin[0], time.process_time() - self.begin[1]
            with open(out / STEP_CLOCK, "a") as f:
                f.write(json.dumps({"step": state.global_step, "wall_s": round(wall, 6), "cpu_s": round(cpu, 6)}) + "\n")

    record = {
        "trainer": "trl", "entry": PROG, "status": RUN_RUNNING, "seed": a.seed, "steps": a.steps,
        "algo": a.algo, "settings": {k: (str(v) if isinstance(v, Path) else v.settings() if isinstance(v, Task) else v)
                                     for k, v in vars(a).items()
                                     if k not in ("output_dir", "check_only", "trl")},
        "trl_options": dict(a.trl), "grpo_config": p.grpo_config, "peft_config": p.peft_config,
        "sources": p.sources, "versions": _versions(),
        "inputs": inputs, "resumed_from": Path(last).name if last else None, "steps_completed": 0,
        "tensorboard": TENSORBOARD_DIR, "checkpoints": CHECKPOINTS_DIR, "final_model": FINAL_MODEL_DIR,
        "algorithm": declaration(p, a.algo),
    }
    _write_record(out, record)
    args = GRPOConfig(output_dir=str(checkpoints), **p.grpo_config,
                      model_init_kwargs={"dtype": p.model_dtype, "local_files_only": True})
    stopper = StopAtStepBoundary()
    peft_config = None
    if p.peft_config is not None:
        from peft import LoraConfig

        peft_config = LoraConfig(**p.peft_config, task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=math_reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[stopper, StepClock()], peft_config=peft_config)
    trainer.train(resume_from_checkpoint=last)
    record["steps_completed"] = trainer.state.global_step
    if stopper.stopped_at is not None:
        record["status"] = RUN_STOPPED
        record["stop_signal"] = stop.signum
        _write_record(out, record)
        print(f"{PROG}: stopped by signal {stop.signum} after step {stopper.stopped_at}, "
              f"checkpoint {CHECKPOINTS_DIR}/checkpoint-{stopper.stopped_at}", file=sys.stderr)
        return EXIT_CHECKPOINTED
    final = out / FINAL_MODEL_DIR
    # Weights, config, generation config; no trainer pickles. A LoRA policy's are the merged weights, so the final
    # model is a plain model directory, as the harness's evaluator loads it.
    model = trainer.model.merge_and_unload() if p.peft_config is not None else trainer.model
    model.save_pretrained(str(final))
    tokenizer.save_pretrained(str(final))
    record["status"] = RUN_COMPLETED
    _write_record(out, record)
    print(f"trained TRL GRPO (loss_type={p.grpo_config['loss_type']}) seed {a.seed}: "
          f"{trainer.state.global_step} steps, final model in {FINAL_MODEL_DIR}/")
    return 0


def main(argv: list[str] | None = None) -> int:
    # Before anything slow: a time-limit warning held by the job runtime (signals blocked across exec)
    # is delivered to this handler, not to the default action that would kill a trainer still loading.
    from trainer.inputs import InputDigestError
    from trainer.preemption import StopRequest
    from trainer.run_lock import LockHeld, own_run_dir

    stop = StopRequest().install()
    a = parser().parse_args(argv)
    try:
        p = plan(a)
        if a.check_only:
            check_trl_fields(p.grpo_config)
            print(json.dumps({"grpo_config": p.grpo_config, "peft_config": p.peft_config, "sources": p.sources},
                             indent=1, sort_keys=True))
            return 0
        a.output_dir.mkdir(parents=True, exist_ok=True)
        with own_run_dir(a.output_dir):
            return train(a, p, stop)
    except Refused as exc:
        print(f"{PROG}: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except (InputDigestError, LockHeld) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED


if __name__ == "__main__":
    exit_now(main())  # a normal exit, less the interpreter's teardown (facts/process_exit.py)
