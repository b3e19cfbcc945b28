"""``python -m benchmarks sizing``: the job-size estimate (``launcher.job_sizing``) against measured runs.

Two parts. ``activations``: the bytes autograd keeps for the backward of the policy's forward
(``trainer.policy.response_logprobs``), counted exactly with ``torch.autograd.graph.saved_tensors_hooks`` on
several Qwen3 shapes, and the least-squares fit that gives ``launcher.job_sizing.ACTIVATION_BYTES``. ``runs``: the
trainer (``python -m trainer``, CPU, one thread) on the toy workload and on larger random-weight Qwen3 models
built here (the toy tokenizer and prompts, responses that mostly run to the cap), each in a process of its
own under ``benchmarks/rusage.py``: its peak resident size against the estimate's peak, and its CPU seconds
(a Slurm job's CPUs are its own, so CPU time is the time it would take there) against the estimate's time.
Step and evaluation costs are separated by differences of runs that differ in steps or evaluation size.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from facts.files import JOB_RUN_DIR, METRICS_LOG
from facts.metrics import RESPONSE_LEN_KEY
from facts.repo import REPO_ROOT

TOY = "trainer/assets/toy"
QWEN3_CONFIG = REPO_ROOT / "benchmarks" / "qwen3_0p6b"
MODELS = "models/sizing-bench"  # git-ignored; built here, removed afterwards

# Qwen3 shapes the activation fit is made on (L, H, heads, kv heads, head_dim, I, V).
FIT_SHAPES = ((2, 256, 4, 2, 64, 768, 512), (4, 256, 4, 2, 64, 768, 512), (2, 256, 8, 2, 64, 768, 512),
              (2, 256, 4, 4, 64, 768, 512), (2, 256, 4, 2, 64, 1536, 512), (2, 512, 4, 2, 64, 768, 512),
              (2, 256, 4, 2, 64, 768, 2048), (3, 384, 8, 4, 32, 1024, 1024), (2, 256, 2, 1, 128, 512, 300),
              (2, 192, 6, 3, 32, 1024, 4096), (5, 128, 4, 4, 32, 384, 256), (2, 384, 3, 1, 128, 1536, 700))
# The larger random-weight models the end-to-end runs use.
RUN_MODELS = {"mid": (4, 512, 8, 4, 64, 1536, 512), "wide-vocab": (2, 256, 4, 2, 64, 768, 8192)}


def _arch(L, H, heads, kv, d, I, V) -> dict:  # noqa: E741 - the formula's names
    return {"num_hidden_layers": L, "hidden_size": H, "num_attention_heads": heads, "num_key_value_heads": kv,
            "head_dim": d, "intermediate_size": I, "vocab_size": V, "layer_types": ["full_attention"] * L,
            "max_position_embeddings": 1024}


def saved_bytes(shape: tuple, dtype: str, responses: int, cap: int) -> int:
    """Bytes autograd keeps for one policy forward of ``shape`` over ``responses`` x ``cap`` tokens (the weights
    themselves excluded; their casts to the compute dtype included)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer.policy import build_token_batch, compute_context, response_logprobs

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(str(QWEN3_CONFIG), local_files_only=True, **_arch(*shape))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    V = config.vocab_size
    prompts = [torch.randint(2, V, (20,)).tolist() for _ in range(2)]
    batch = build_token_batch([prompts[i * 2 // responses] for i in range(responses)],
                              [torch.randint(2, V, (cap,)).tolist() for _ in range(responses)], 0, torch.device("cpu"))
    seen: dict[int, int] = {}

    def keep(t):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t), compute_context(torch.device("cpu"), dtype):
        response_logprobs(model, batch, 1.0)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in seen.items() if ptr not in weights)


def saved_bytes_per_token(shape: tuple, dtype: str, responses: int = 16, cap: int = 32) -> float:
    """Bytes autograd keeps per response token: the growth from ``cap`` to ``2 cap`` tokens per response, so that
    what does not grow with the responses (the weights' casts, the prompts' rows) is left out."""
    return (saved_bytes(shape, dtype, responses, 2 * cap) - saved_bytes(shape, dtype, responses, cap)) / (responses * cap)


def bench_activations() -> dict:
    import numpy as np

    fits = {}
    for dtype in ("float32", "bfloat16"):
        rows = [(shape, saved_bytes_per_token(shape, dtype)) for shape in FIT_SHAPES]
        X = np.array([[n * h, n * heads * d, n * kv * d, n * i, v, 1] for (n, h, heads, kv, d, i, v), _ in rows], float)
        y = np.array([b for _, b in rows])
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        worst = float(np.max(np.abs(X @ coef - y) / y))
        fits[dtype] = {"H": coef[0], "A": coef[1], "K": coef[2], "I": coef[3], "V": coef[4], "0": coef[5],
                       "worst_residual": worst}
        print(f"activations {dtype}: bytes per response token = L ({coef[0]:.1f} H + {coef[1]:.1f} A + {coef[2]:.1f} K "
              f"+ {coef[3]:.1f} I) + {coef[4]:.2f} V + {coef[5]:.0f}; worst residual {worst:.1%} over "
              f"{len(rows)} shapes")
    return fits


# Forward + backward resident peaks measured against the update's estimate: two shapes to fit
# BACKWARD_FACTOR and LOGITS_GRADIENT_BYTES, a third (in both dtypes) to check them.
BACKWARD_SHAPES = (((4, 512, 8, 4, 64, 1536, 512), "float32", 96), ((2, 256, 4, 2, 64, 768, 8192), "float32", 96),
                   ((3, 384, 8, 4, 32, 1024, 1024), "float32", 128), ((3, 384, 8, 4, 32, 1024, 1024), "bfloat16", 128))


def backward_peak(shape: tuple, dtype: str, cap: int, responses: int = 32) -> dict:
    """In this (fresh) process: the resident size before, and the peak over, a second forward and backward of the
    policy over ``responses`` x ``cap`` tokens (the first one allocates the gradients and warms the allocator)."""
    import resource

    import psutil
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer.policy import build_token_batch, compute_context, response_logprobs

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(str(QWEN3_CONFIG), local_files_only=True, **_arch(*shape))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    V = config.vocab_size
    prompts = [torch.randint(2, V, (40,)).tolist() for _ in range(4)]
    batch = build_token_batch([prompts[i * 4 // responses] for i in range(responses)],
                              [torch.randint(2, V, (cap,)).tolist() for _ in range(responses)], 0, torch.device("cpu"))
    before = psutil.Process().memory_info().rss
    for _ in range(2):
        with compute_context(torch.device("cpu"), dtype):
            logp = response_logprobs(model, batch, 1.0)
        logp.sum().backward()
        del logp
    return {"before": before, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def bench_backward() -> None:
    from launcher.job_sizing import ACTIVATION_BYTES, BACKWARD_FACTOR, LOGITS_GRADIENT_BYTES, ModelShape

    for shape, dtype, cap in BACKWARD_SHAPES:
        code = f"import json; from benchmarks.sizing_accuracy import backward_peak; print(json.dumps(backward_peak({shape}, {dtype!r}, {cap})))"
        out = json.loads(subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True, capture_output=True,
                                        text=True).stdout)
        L, H, heads, kv, d, I, V = shape  # noqa: E741 - the formula's names
        a = ACTIVATION_BYTES[dtype]
        kept = L * (a["H"] * H + a["A"] * heads * d + a["K"] * kv * d + a["I"] * I) + a["V"] * V + a["0"]
        tokens = 32 * cap
        params = ModelShape.from_config({**json.loads((QWEN3_CONFIG / "config.json").read_text()), **_arch(*shape)}).params
        predicted = tokens * (BACKWARD_FACTOR * kept + LOGITS_GRADIENT_BYTES * V) + (2 * params if dtype != "float32" else 0)
        measured = out["peak"] - out["before"]
        print(f"backward {shape} {dtype} x {tokens} tokens: resident peak +{measured / 2**20:,.0f} MiB vs the update's "
              f"estimate {predicted / 2**20:,.0f} MiB ({(predicted - measured) / measured:+.1%}); autograd kept "
              f"{tokens * kept / 2**20:,.0f} MiB by the fit")


def build_model(name: str, shape: tuple) -> str:
    """A random-weight Qwen3 model of ``shape`` with the toy tokenizer under ``models/``; its repo path."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    toy = json.loads((REPO_ROOT / TOY / "model" / "config.json").read_text())
    special = {key: toy[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id")}
    config = AutoConfig.from_pretrained(str(QWEN3_CONFIG), local_files_only=True, **special, **_arch(*shape))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    rel = f"{MODELS}/{name}"
    dest = REPO_ROOT / rel
    shutil.rmtree(dest, ignore_errors=True)
    model.save_pretrained(str(dest))
    for f in (REPO_ROOT / TOY / "model").iterdir():
        if f.name.startswith("tokenizer"):
            shutil.copy(f, dest / f.name)
    return rel


def measure(overrides: list[str], tmp: Path, tag: str) -> dict:
    """One trainer run under benchmarks/rusage.py: peak MiB, CPU s, wall s, and its steps' response tokens."""
    out = tmp / tag / JOB_RUN_DIR
    usage = tmp / f"{tag}.json"
    cmd = [sys.executable, "-m", "benchmarks.rusage", str(usage), sys.executable, "-m", "trainer", "algo=grpo",
           "seed=1", "resume=false", "workload.num_threads=1", f"output_dir={out}", *overrides]
    subprocess.run(cmd, cwd=REPO_ROOT, check=True, capture_output=True)
    figures = json.loads(usage.read_text())
    records = [json.loads(line) for line in (out / METRICS_LOG).read_text().splitlines()]
    figures["mean_response_len"] = sum(r[RESPONSE_LEN_KEY] for r in records) / len(records)
    return figures


def predicted(overrides: list[str], tmp: Path):
    from launcher.job_sizing import estimate
    from trainer.run_config import compose

    cfg = compose([o for o in overrides if not o.startswith("output_dir=")] + ["workload.num_threads=1"])
    return estimate(cfg.workload, 1, 1)


def bench_runs() -> None:
    """Peak memory and CPU time of trainer runs against the estimate."""
    from trainer.inputs import pin

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        variants: dict[str, list[str]] = {"toy": []}
        try:
            for name, shape in RUN_MODELS.items():
                rel = build_model(name, shape)
                manifest = pin(f"sizing-{name}", [rel, f"{TOY}/data/train.parquet", f"{TOY}/data/test.parquet"],
                               manifest_dir=tmp)
                variants[name] = [f"workload.model_path={rel}", f"workload.manifest={manifest}"]
            caps = {"toy": 48, "mid": 96, "wide-vocab": 96}
            for name, base in variants.items():
                cap = caps[name]
                base = base + [f"workload.max_response_len={cap}", "workload.checkpoint_every=1000"]
                short = base + ["workload.n_updates=2", "workload.eval.n_prompts=8", "workload.eval.max_response_len=48"]
                long = base + ["workload.n_updates=8", "workload.eval.n_prompts=8", "workload.eval.max_response_len=48"]
                evals = base + ["workload.n_updates=2", "workload.eval.n_prompts=64", "workload.eval.max_response_len=48"]
                a, b, c = (measure(o, tmp, f"{name}-{i}") for i, o in enumerate((short, long, evals)))
                step_cpu = (b["cpu_s"] - a["cpu_s"]) / 6
                eval_cpu = (c["cpu_s"] - a["cpu_s"]) / 2  # two evaluations, 56 more prompts x k=4 each
                est = predicted(long, tmp)
                tokens = 32 * b["mean_response_len"]
                est_step = next(p.value for p in est.time if p.name.endswith("steps")) / 8
                est_step_at_measured_len = est_step * b["mean_response_len"] / cap
                print(f"runs {name}: P={est.shape.params / 1e6:.2f}M; peak RSS {max(a['peak_mib'], b['peak_mib']):,.0f} "
                      f"MiB (evaluation run {c['peak_mib']:,.0f}) vs estimated peak {est.host_peak / 2**20:,.0f} MiB; "
                      f"step {step_cpu:.3f} CPU s for {tokens:,.0f} response tokens ({tokens / step_cpu:,.0f} tok/CPU s) "
                      f"vs estimated {est_step_at_measured_len:.3f} s at the measured length ({est_step:.3f} s at the cap); "
                      f"evaluation {eval_cpu / (56 * 4 * 48):.2e} CPU s per response-token slot; "
                      f"start + 2 evals + 2 steps {a['cpu_s']:.1f} CPU s")
        finally:
            shutil.rmtree(REPO_ROOT / MODELS, ignore_errors=True)


def bench_sizing() -> None:
    bench_activations()
    bench_backward()
    bench_runs()
