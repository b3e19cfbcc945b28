"""TRL's ``GRPOTrainer`` on proofgrid's toy workload, for the side-by-side step benchmark.

``python -m benchmarks.trl_grpo --steps 60 --seed 1 --out trl.json`` trains with TRL (the optional
``trl`` extra: ``make trl``) on exactly what ``python -m trainer algo=grpo`` uses: the
model, training split and prompt template of ``workload=toy``, its geometry (prompts per step x
responses per prompt, response cap), sampling, optimiser settings and thread count, and ``algo=grpo``'s
loss (per-response mean, k2 KL loss with the same coefficient, the same clip range). Every setting is
read from the composed proofgrid config, so the two sides cannot drift apart. It writes one record per
step: wall seconds, this process's CPU seconds, response tokens, and the seconds spent inside
``generate``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

import torch
from transformers import TrainerCallback

from benchmarks import step_run_args


def grpo_config_kwargs(cfg, steps: int, seed: int, output_dir: str) -> dict:
    """TRL ``GRPOConfig`` arguments equal to proofgrid's composed ``algo=grpo`` toy run."""
    w, a = cfg.workload, cfg.algo
    batch = int(w.prompts_per_step) * int(w.n_samples_per_prompt)
    return dict(
        output_dir=output_dir, use_cpu=str(w.device) == "cpu", bf16=str(w.dtype) == "bfloat16", fp16=False,
        seed=seed, data_seed=seed, max_steps=steps, logging_steps=1, save_strategy="no", report_to="none",
        disable_tqdm=True, dataloader_num_workers=0, gradient_checkpointing=False,
        per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=int(w.n_samples_per_prompt), num_iterations=1,
        max_completion_length=int(w.max_response_len),
        temperature=float(w.sampling.temperature), top_k=int(w.sampling.top_k), top_p=float(w.sampling.top_p),
        learning_rate=float(w.lr), lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=float(w.adam_betas[0]), adam_beta2=float(w.adam_betas[1]), adam_epsilon=float(w.adam_eps),
        weight_decay=float(w.weight_decay), max_grad_norm=float(w.max_grad_norm),
        beta=float(a.kl_loss_coef), epsilon=float(a.clip_low), epsilon_high=float(a.clip_high),
        loss_type="grpo",  # per-response token mean, then the batch mean: proofgrid's response_mean
        scale_rewards="group" if bool(a.grpo_std_normalize) else "none",
        log_completions=False,
    )


class StepTimer(TrainerCallback):
    """A trainer callback that records each step's wall and CPU time and TRL's logged completion length."""

    def __init__(self, batch: int):
        self.batch = batch
        self.records: list[dict] = []
        self._start = 0.0
        self._start_cpu = 0.0
        self.generate_s = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self.generate_s = 0.0
        self._start = time.perf_counter()
        self._start_cpu = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.records.append({"step_s": time.perf_counter() - self._start, "cpu_s": time.process_time() - self._start_cpu,
                             "generate_s": self.generate_s})

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "completions/mean_length" in logs and self.records:
            self.records[-1]["response_tokens"] = logs["completions/mean_length"] * self.batch

    def timed(self, generate):
        """``generate`` that adds its wall time to the current step's rollout seconds."""
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                self.generate_s += time.perf_counter() - start
        return wrapper


def run(steps: int, seed: int) -> list[dict]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from trainer.config import compose
    from trainer.data import load_split
    from trainer.inputs import resolve
    from trainer.reward import math_reward

    cfg = compose(["algo=grpo", "workload=toy", f"seed={seed}"])
    w = cfg.workload
    torch.set_num_threads(int(w.num_threads))
    model_path = str(resolve(w.model_path))
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, local_files_only=True)
    examples = load_split(resolve(w.train_path))
    dataset = Dataset.from_list([{"prompt": e.prompt, "label": e.label} for e in examples])

    def reward(completions, label, **_):
        return [math_reward(c, y) for c, y in zip(completions, label)]

    timer = StepTimer(int(w.prompts_per_step) * int(w.n_samples_per_prompt))
    model.generate = timer.timed(model.generate)  # this model's own generate, wrapped: rollout seconds
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(**grpo_config_kwargs(cfg, steps, seed, tmp))
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                              processing_class=tokenizer, callbacks=[timer])
        trainer.train()
    return timer.records


def main(argv: list[str] | None = None) -> int:
    args = step_run_args(__doc__, argv)
    try:
        import trl
    except ImportError:
        print("benchmarks.trl_grpo: error: TRL is not installed; pip install -e '.[trl]' (make trl)", file=sys.stderr)
        return 2
    records = run(args.steps, args.seed)
    args.out.write_text(json.dumps({"trl": trl.__version__, "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
