"""A plain training script, the kind a lab keeps: REINFORCE with a group-mean baseline on a causal LM,
in PyTorch and transformers only (no proofgrid import). It is ``trainer=command``'s default command and
the tested example of docs/trainers.md: what any script needs to run under proofgrid is to take its
settings on the command line, log one JSON object per step with a step key, and save the final model
as a Hugging Face model directory.

    python examples/trainers/reinforce.py --model-dir M --train train.parquet --output-dir OUT \\
        --seed 1 --steps 50 --lr 1e-4 --prompts-per-step 4 --responses-per-prompt 8 --max-response-len 48

Per step: sample G responses for each of P prompts (in the training file's order, shuffled by the seed),
reward 1 when the response's last number equals the answer after ``####``, advantage = reward minus
its prompt group's mean, loss = -mean over responses of advantage x (sum of the response's token
log-probs) / its token count; one AdamW step, gradients clipped to norm 1. Writes ``OUT/log.jsonl``
(``{"iteration", "reward", "loss", "grad_norm", "length", "seconds"}``) and ``OUT/model/``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def reward(response: str, answer: str) -> float:
    numbers = NUMBER.findall(response.replace(",", ""))
    target = answer.split("####")[-1].strip().replace(",", "")
    return 1.0 if numbers and float(numbers[-1]) == float(target) else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, kind in (("model-dir", str), ("train", str), ("output-dir", Path), ("seed", int), ("steps", int),
                       ("lr", float), ("prompts-per-step", int), ("responses-per-prompt", int),
                       ("max-response-len", int)):
        ap.add_argument(f"--{name}", type=kind, required=True)
    ap.add_argument("--temperature", type=float, default=1.0)
    a = ap.parse_args()
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(a.model_dir, local_files_only=True)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(a.model_dir, local_files_only=True, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr)
    rows = pq.read_table(a.train).to_pylist()
    random.shuffle(rows)
    a.output_dir.mkdir(parents=True, exist_ok=True)
    with open(a.output_dir / "log.jsonl", "w", encoding="utf-8") as log:
        for step in range(a.steps):
            start = time.perf_counter()
            batch = [rows[(step * a.prompts_per_step + i) % len(rows)] for i in range(a.prompts_per_step)]
            prompts = [f"Question: {r['question']}\nAnswer:" for r in batch for _ in range(a.responses_per_prompt)]
            enc = tokenizer(prompts, return_tensors="pt", padding=True)
            with torch.no_grad():
                out = model.generate(**enc, do_sample=True, temperature=a.temperature, top_k=0,
                                     max_new_tokens=a.max_response_len, pad_token_id=tokenizer.pad_token_id)
            response = out[:, enc["input_ids"].shape[1]:]
            mask = torch.ones_like(response, dtype=torch.float32)
            ended = (response == tokenizer.eos_token_id).float().cumsum(-1)
            mask = mask * ((ended - (response == tokenizer.eos_token_id).float()) == 0).float()  # through the end token
            texts = tokenizer.batch_decode(response, skip_special_tokens=True)
            rewards = torch.tensor([reward(t, r["answer"]) for t, r in zip(texts, [b for b in batch
                                                                                  for _ in range(a.responses_per_prompt)])])
            groups = rewards.view(a.prompts_per_step, a.responses_per_prompt)
            advantage = (groups - groups.mean(-1, keepdim=True)).flatten()
            logits = model(input_ids=out, attention_mask=torch.cat([enc["attention_mask"], mask.long()], -1)).logits
            logp = torch.log_softmax(logits[:, enc["input_ids"].shape[1] - 1:-1], -1)
            token_logp = logp.gather(-1, response.unsqueeze(-1)).squeeze(-1)
            per_response = (token_logp * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
            loss = -(advantage * per_response).mean()
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            log.write(json.dumps({"iteration": step, "reward": rewards.mean().item(), "loss": loss.item(),
                                  "grad_norm": grad_norm.item(), "length": mask.sum(-1).mean().item(),
                                  "seconds": time.perf_counter() - start}) + "\n")
            log.flush()
    model.save_pretrained(a.output_dir / "model")
    tokenizer.save_pretrained(a.output_dir / "model")


if __name__ == "__main__":
    main()
