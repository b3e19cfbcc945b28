"""Response tok/s and s/step of proofgrid's trainer on a Qwen3-0.6B-architecture model at seed 000's
geometry (4 prompts x 8 responses, response cap 1024, bfloat16 on one GPU); part of
scripts/device_check.sh.

With the real inputs of ``workload=gsm8k_qwen3_0p6b`` in place (models/Qwen3-0.6B, data/gsm8k, pinned
in manifests/) it trains on them. Otherwise it builds the model from benchmarks/qwen3_0p6b/config.json
(Qwen3-0.6B's published config) with random weights (seed 0), uses the toy tokenizer and the toy
prompts, and says so: random weights almost never emit the end token, so every response runs to the
cap, the heaviest case of the geometry. ``--cpu-smoke`` shrinks model and geometry to check this
path on a CPU in seconds. Writes ``device_check.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from facts.files import JOB_RUN_DIR, METRICS_LOG, TRAINER_LOG
from facts.metrics import (
    PEAK_MEM_GIB_KEY,
    RESPONSE_LEN_KEY,
    RESPONSE_TOK_PER_S_KEY,
    STEP_S_KEY,
    TRUNCATED_KEY,
)
from facts.repo import REPO_ROOT

REPO = REPO_ROOT
QWEN3_0P6B_CONFIG = Path(__file__).resolve().parent / "qwen3_0p6b"
TOY_MODEL = "trainer/assets/toy/model"
TOY_DATA = "trainer/assets/toy/data"
RANDOM_MODEL = "models/qwen3-0p6b-random-init"  # git-ignored; built here, removed afterwards
SEED000_A40_TOK_PER_S = 409.8  # seed 000: response tok/s of one run on one A40
GOAL_RATIO = 3.0
# --cpu-smoke: the same architecture family, small enough for a CPU, and a small geometry.
SMOKE_ARCH = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 32, "layer_types": ["full_attention"] * 2, "vocab_size": 512}
SMOKE_WORKLOAD = ("workload.device=cpu", "workload.dtype=float32", "workload.num_threads=1",
                  "workload.prompts_per_step=2", "workload.n_samples_per_prompt=2", "workload.global_batch_size=4",
                  "workload.max_response_len=8")


def real_inputs_present() -> bool:
    from trainer.inputs import InputDigestError, resolve, verify_inputs
    from trainer.run_config import compose

    w = compose(["workload=gsm8k_qwen3_0p6b"]).workload
    if not all(resolve(p).exists() for p in (w.model_path, w.train_path, w.test_path, w.manifest)):
        return False
    try:
        verify_inputs(w.manifest, required=[w.model_path, w.train_path, w.test_path])
    except InputDigestError as exc:
        print(f"device_throughput: real inputs present but not as pinned ({exc}); using random weights")
        return False
    return True


def build_random_model(dest: Path, smoke: bool, device: str) -> int:
    """Qwen3-0.6B's architecture with seeded random weights and the toy tokenizer; returns the
    parameter count. The toy tokenizer's ids are a subset of the model's vocabulary; sampled ids
    outside it decode to nothing."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    toy = json.loads((REPO / TOY_MODEL / "config.json").read_text())
    special = {key: toy[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id")}  # the toy tokenizer's
    config = AutoConfig.from_pretrained(str(QWEN3_0P6B_CONFIG), local_files_only=True, **special,
                                        **(SMOKE_ARCH if smoke else {}))
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if dest.exists():
        shutil.rmtree(dest)
    model.save_pretrained(str(dest))
    for f in (REPO / TOY_MODEL).iterdir():
        if f.name.startswith("tokenizer"):
            shutil.copy(f, dest / f.name)
    n_params = sum(p.numel() for p in model.parameters())
    del model
    if device == "cuda":
        torch.cuda.empty_cache()  # the trainer process needs the memory, not this one
    return n_params


def _train(result: dict, overrides: list[str], smoke: bool, cuda: bool, tmp: Path, budget_s: float, log: Path):
    """Build or find the model, run the trainer; returns (exit code, metrics records). A trainer
    still running when the budget is spent is stopped; the steps it logged still count."""
    from trainer.inputs import pin

    if not smoke and real_inputs_present():
        result["weights"] = "real: models/Qwen3-0.6B, data/gsm8k (workload=gsm8k_qwen3_0p6b as pinned)"
    else:
        start = time.perf_counter()
        n_params = build_random_model(REPO / RANDOM_MODEL, smoke, "cuda" if cuda else "cpu")
        result["weights"] = (f"RANDOM (seed 0), real Qwen3-0.6B weights absent: architecture from "
                             f"benchmarks/qwen3_0p6b/config.json{' shrunk for the CPU smoke' if smoke else ''}, "
                             f"{n_params / 1e6:.1f}M parameters; toy tokenizer and toy prompts; responses "
                             "rarely end before the cap")
        result["build_model_s"] = round(time.perf_counter() - start, 1)
        manifest = pin("device_check", [RANDOM_MODEL, f"{TOY_DATA}/train.parquet", f"{TOY_DATA}/test.parquet"],
                       manifest_dir=Path(tmp))
        overrides += [f"workload.model_path={RANDOM_MODEL}", f"workload.manifest={manifest}",
                      f"workload.train_path={TOY_DATA}/train.parquet", f"workload.test_path={TOY_DATA}/test.parquet"]
    run_dir = Path(tmp) / JOB_RUN_DIR
    overrides.append(f"output_dir={run_dir}")
    result["trainer_overrides"] = [o for o in overrides if not o.startswith(("output_dir=", "workload.manifest="))]
    start = time.perf_counter()
    with open(log, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "trainer", *overrides], cwd=REPO, stdout=sink,
                                stderr=subprocess.STDOUT, env={**os.environ, "PYTHONNOUSERSITE": "1"})
        try:
            code = proc.wait(timeout=max(1.0, budget_s - (time.perf_counter() - start)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
            result["stopped"] = f"the trainer was stopped after {budget_s:.0f} s (the check's time budget)"
    result["trainer_wall_s"] = round(time.perf_counter() - start, 1)
    if code not in (0, None):
        result["error"] = f"trainer exited {code}: {log.read_text()[-3000:]}"
    records = ([json.loads(line) for line in (run_dir / METRICS_LOG).read_text().splitlines()]
               if (run_dir / METRICS_LOG).is_file() else [])
    return code, records


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def cuda_test_summary(junit: Path) -> dict | None:
    """Counts from the CUDA tests' JUnit XML (written by scripts/device_check.sh), if it exists."""
    if not junit.is_file():
        return None
    import xml.etree.ElementTree as ET

    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    failed = [case.get("name") for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    return {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")} | {"failed": failed}


def run(out: Path, steps: int, smoke: bool, budget_s: float) -> dict:
    start = time.perf_counter()
    import torch
    import transformers

    from trainer.run_config import compose

    cuda = torch.cuda.is_available() and not smoke
    result: dict = {
        "mode": "cpu-smoke" if smoke else "gpu",
        "device": torch.cuda.get_device_name(0) if cuda else platform.processor() or platform.machine(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "cuda": torch.version.cuda, "transformers": transformers.__version__},
    }
    overrides = ["algo=grpo", "workload=gsm8k_qwen3_0p6b", "seed=42", f"workload.n_updates={steps}",
                 f"workload.checkpoint_every={steps}", "workload.reward_workers=0",
                 "workload.eval.n_prompts=1", "workload.eval.k=1", "workload.eval.max_response_len=8"]
    if smoke:
        overrides += SMOKE_WORKLOAD
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            _, records = _train(result, overrides, smoke, cuda, Path(tmp), budget_s - (time.perf_counter() - start),
                                out / TRAINER_LOG)
        finally:
            shutil.rmtree(REPO / RANDOM_MODEL, ignore_errors=True)
    w = compose([o for o in overrides if not o.startswith(("output_dir=", "workload.manifest="))]).workload
    result["geometry"] = {"prompts_per_step": int(w.prompts_per_step), "n_samples_per_prompt": int(w.n_samples_per_prompt),
                          "max_response_len": int(w.max_response_len), "dtype": str(w.dtype), "device": str(w.device)}
    result["steps"] = [{"step_s": r[STEP_S_KEY], "response_tok_per_s": r[RESPONSE_TOK_PER_S_KEY],
                        "response_len": r[RESPONSE_LEN_KEY], "truncated": r[TRUNCATED_KEY],
                        "peak_mem_gib": r[PEAK_MEM_GIB_KEY]} for r in records]
    steady = result["steps"][1:] or result["steps"]  # the first step carries the warm-up
    if steady:
        n = int(w.prompts_per_step) * int(w.n_samples_per_prompt)
        rollout_tok_per_s = median([s["response_tok_per_s"] for s in steady])
        step_tok_per_s = sum(s["response_len"] * n for s in steady) / sum(s["step_s"] for s in steady)
        result["summary"] = {
            "s_per_step_median": median([s["step_s"] for s in steady]),
            "response_tok_per_s_of_step_time": step_tok_per_s,
            "response_tok_per_s_of_rollout_time_median": rollout_tok_per_s,
            "steps_measured": len(steady),
        }
        if not smoke:  # seed 000's figure is whole-step throughput: 32 x 897 tokens per ~70 s step
            result["summary"]["reference"] = {"seed000_one_a40_response_tok_per_s": SEED000_A40_TOK_PER_S,
                                              "ratio": step_tok_per_s / SEED000_A40_TOK_PER_S, "goal_ratio": GOAL_RATIO}
    result["cuda_tests"] = cuda_test_summary(out / "cuda_tests.xml") or "not run"
    (out / "device_check.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=3, help="training steps (the first is left out of the medians)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny model and geometry on the CPU")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop the trainer after this many seconds")
    args = ap.parse_args(argv)
    result = run(args.out, args.steps, args.cpu_smoke, args.budget_s)
    print(f"weights: {result['weights']}")
    if "summary" in result:
        s = result["summary"]
        print(f"throughput: {s['response_tok_per_s_of_step_time']:,.1f} response tok/s of step time "
              f"({s['response_tok_per_s_of_rollout_time_median']:,.1f} of rollout time), {s['s_per_step_median']:.2f} "
              f"s/step over {s['steps_measured']} step(s)" + (
                  f"; seed 000 on one A40: {SEED000_A40_TOK_PER_S} tok/s, ratio {s['reference']['ratio']:.2f}x "
                  f"(goal {GOAL_RATIO:.0f}x)" if "reference" in s else " (smoke: no reference)"))
    if "stopped" in result:
        print(f"device_throughput: note: {result['stopped']}; {len(result['steps'])} step(s) logged")
    if "error" in result or not result["steps"]:
        print(f"device_throughput: error: {result.get('error', 'no training step completed')}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
