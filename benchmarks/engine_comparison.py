"""The rollout engines side by side (``python -m benchmarks engines``): the torch engine against vLLM's CPU build
in one process, on the same model, prompts, keys and thread count, interleaved.

    python -m benchmarks.engine_comparison <model dir> --prompts 4 --k 8 --tokens 48 --rounds 3

prints one JSON line: per engine its best round's response tokens per second and wall seconds, and the start-up
vLLM paid. ``bench_engines`` (``benchmarks/__main__.py``) runs it on the toy model (the default's geometry: 4
prompts x 8 responses, 48 tokens) and on a larger random-weight Qwen3-architecture model with long responses, each
in a process of its own (vLLM serves one model per process), then one short training run per engine for the step
time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

QUESTION = "Question: Tom has 3 apples and buys 4 more. How many apples does Tom have now?\nAnswer:"
# A larger Qwen3 (random weights: responses run to the cap, where batching should pay): 8 layers of width 512,
# 8 query and 4 key/value heads of 64, the toy's tokenizer and vocabulary.
LARGE = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
             num_key_value_heads=4, head_dim=64, max_position_embeddings=2048, rms_norm_eps=1e-6,
             tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def write_large_model(toy_model: Path, out: Path) -> Path:
    """A random-weight Qwen3 of the ``LARGE`` geometry with the toy's tokenizer, saved to ``out``."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(toy_model, local_files_only=True)
    config = Qwen3Config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None, **LARGE)
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def measure(model_dir: Path, prompts: int, k: int, tokens: int, rounds: int) -> dict:
    from trainer.engine_registry import EngineSettings
    from trainer.policy import load_policy
    from trainer.rollout import SamplingParams, TorchEngine
    from trainer.vllm_engine import VLLMEngine

    torch.set_num_threads(1)
    model, tokenizer = load_policy(str(model_dir))
    prompt_ids = [tokenizer(f"{QUESTION} ({p})", add_special_tokens=False)["input_ids"] for p in range(prompts)]
    batch = [ids for ids in prompt_ids for _ in range(k)]
    sampling = SamplingParams(1.0, 0, 1.0, tokens)
    started = time.perf_counter()
    engines = {"torch": TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id),
               "vllm": VLLMEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, EngineSettings())}
    start_s = time.perf_counter() - started
    results = {name: [] for name in engines}
    for r in range(rounds):
        order = list(engines) if r % 2 == 0 else list(engines)[::-1]
        for name in order:
            keys = [1000 * r + i for i in range(len(batch))]
            begun = time.perf_counter()
            out = engines[name].generate(batch, keys, sampling)
            wall = time.perf_counter() - begun
            results[name].append((out.response_tokens / wall, wall, out.response_tokens))
    best = {name: max(runs) for name, runs in results.items()}
    return {"model": model_dir.name, "prompts": prompts, "k": k, "tokens": tokens, "threads": 1,
            "vllm_start_s": round(start_s, 1),
            **{f"{name}_tok_per_s": round(v[0]) for name, v in best.items()},
            **{f"{name}_wall_s": round(v[1], 3) for name, v in best.items()},
            **{f"{name}_response_tokens": v[2] for name, v in best.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write-large", action="store_true", help="first write the LARGE model into model_dir")
    args = ap.parse_args(argv)
    if args.write_large:
        from facts.repo import REPO_ROOT

        write_large_model(REPO_ROOT / "trainer" / "assets" / "toy" / "model", args.model_dir)
    print(json.dumps(measure(args.model_dir, args.prompts, args.k, args.tokens, args.rounds)), flush=True)
    return 0


def step_times(engine: str, steps: int, out: Path) -> float:
    """The median wall seconds of steps 1.. of a short toy GRPO run of ``python -m trainer`` on ``engine``."""
    import subprocess

    from facts.files import METRICS_LOG
    from facts.metrics import STEP_S_KEY
    from facts.repo import REPO_ROOT

    subprocess.run([sys.executable, "-m", "trainer", "algo=grpo", "seed=1", f"workload.engine={engine}",
                    f"workload.n_updates={steps}", "workload.eval.n_prompts=4", f"output_dir={out}"], cwd=REPO_ROOT,
                   check=True, capture_output=True)
    values = sorted(json.loads(line)[STEP_S_KEY] for line in (out / METRICS_LOG).read_text().splitlines()[1:])
    return values[len(values) // 2]


def bench_engines() -> None:
    """Toy geometry and a larger model with long responses, torch against vLLM; then the toy step time of each."""
    import subprocess

    from facts.repo import REPO_ROOT

    toy = REPO_ROOT / "trainer" / "assets" / "toy" / "model"
    with tempfile.TemporaryDirectory() as tmp:
        cases = [[str(toy)], [str(Path(tmp) / "large"), "--write-large", "--prompts", "4", "--k", "4", "--tokens", "512",
                                "--rounds", "2"]]
        for case in cases:
            proc = subprocess.run([sys.executable, "-m", "benchmarks.engine_comparison", *case], cwd=REPO_ROOT, capture_output=True,
                                  text=True, check=True)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"engines   {r['model']} ({r['prompts']} prompts x {r['k']}, up to {r['tokens']} tokens, 1 thread): "
                  f"torch {r['torch_tok_per_s']:,} response tok/s ({r['torch_wall_s']} s), vLLM "
                  f"{r['vllm_tok_per_s']:,} tok/s ({r['vllm_wall_s']} s), vLLM/torch "
                  f"{r['vllm_tok_per_s'] / r['torch_tok_per_s']:.2f}x; vLLM's start {r['vllm_start_s']} s", flush=True)
        steps = {engine: step_times(engine, 8, Path(tmp) / engine) for engine in ("torch", "vllm")}
    print(f"engines   toy GRPO step (8-step runs, median of steps 1-7): torch {steps['torch'] * 1e3:.0f} ms, vLLM "
          f"{steps['vllm'] * 1e3:.0f} ms ({steps['vllm'] / steps['torch']:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
