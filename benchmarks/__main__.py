"""``python -m benchmarks [name ...]``: run the benchmarks and print each figure with its reference.

None of these is a pass/fail test; record the numbers in BENCHMARKS.md with the machine they came from.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


def best_of(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_numerics() -> None:
    """Normaliser + PPO loss + response-mean on 1M tokens vs a plain two-pass torch reference and a copy."""
    from trainer.algorithms import masked_global_normalize, ppo_clip_token_loss, reduce_loss

    torch.manual_seed(0)
    B, T = 1024, 1024
    lengths = torch.randint(1, T + 1, (B,))
    mask = torch.arange(T).expand(B, T) < lengths[:, None]
    values, logp, logp_old = torch.randn(B, T), -torch.rand(B, T), -torch.rand(B, T)

    def production():
        adv, *_ = masked_global_normalize(values, mask)
        loss, _ = ppo_clip_token_loss(logp, logp_old, adv, mask)
        reduce_loss(loss, mask, "response_mean")

    def reference():  # the straightforward version: boolean indexing (host sync), no NaN guarding
        sel = values[mask]
        mean = sel.mean()
        var = ((sel - mean) ** 2).mean()
        adv = (values - mean) * torch.rsqrt(torch.clamp(var, min=1e-8)) * mask
        ratio = torch.exp(logp - logp_old)
        loss = torch.maximum(-ratio * adv, -ratio.clamp(0.8, 1.2) * adv) * mask
        (loss.sum(1) / mask.sum(1).clamp(min=1)).mean()

    def copy():
        values.clone()

    t_prod, t_ref, t_copy = best_of(production), best_of(reference), best_of(copy)
    print(f"numerics  1M tokens: production {t_prod * 1e3:.1f} ms | two-pass reference {t_ref * 1e3:.1f} ms "
          f"(ratio {t_prod / t_ref:.2f}) | tensor copy {t_copy * 1e3:.2f} ms (ratio {t_prod / t_copy:.1f})")


def bench_hashing() -> None:
    """Bundle hashing (evidence.fileio.sha256_file) vs sha256sum on the same files."""
    from evidence.fileio import sha256_file

    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i in range(4):
            p = Path(tmp) / f"f{i}.bin"
            p.write_bytes(os.urandom(64 << 20))
            files.append(p)
        t_ours = best_of(lambda: [sha256_file(p) for p in files], 3)
        t_ref = best_of(lambda: subprocess.run(["sha256sum", *map(str, files)], check=True, capture_output=True), 3)
    print(f"hashing   256 MiB: evidence {t_ours:.2f} s | sha256sum {t_ref:.2f} s (ratio {t_ours / t_ref:.2f})")


def bench_validation() -> None:
    """Structured metrics validation throughput on a 100k-step metrics.jsonl."""
    from evidence.metrics_log import validate_metrics
    from trainer.metrics import KL_LOSS_KEY, REQUIRED_KEYS

    n = 100_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.jsonl"
        with open(path, "w") as f:
            for step in range(n):
                f.write(json.dumps({"step": step, **{k: 0.5 for k in (*REQUIRED_KEYS, KL_LOSS_KEY)}}) + "\n")
        t = best_of(lambda: validate_metrics(path, "grpo", n), 2)
        t_parse = best_of(lambda: [json.loads(line) for line in path.read_text().splitlines()], 2)
    print(f"validate  100k steps: {n / t:,.0f} records/s ({t:.2f} s) | bare json.loads {n / t_parse:,.0f} records/s")


HEAVY_AT_PLAN_TIME = ("torch", "transformers", "ray", "matplotlib", "submitit", "bagit")


def bench_dry_run() -> None:
    """Dry run of a 1,002-job grid (3 algos x 334 seeds), start to end as a user types it (target
    < 3 s), against the same command for 1 job; and which heavy packages planning imported."""
    with tempfile.TemporaryDirectory() as tmp:
        def dry_run(*grid: str, where: str, flags: tuple[str, ...] = ()) -> tuple[float, float, str]:
            """(wall s, CPU s of the process, its stderr)."""
            cmd = [sys.executable, *flags, "launch.py", "-m", *grid, "dry_run=true", f"hydra.sweep.dir={tmp}/{where}"]
            cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            proc = subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            return wall, after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, proc.stderr

        t, cpu, _ = min(dry_run("algo=grpo,rpp,rppb", "seed=range(334)", where=f"big{i}") for i in range(3))
        t_one, cpu_one, _ = min(dry_run("algo=grpo", "seed=1", where=f"one{i}") for i in range(3))
        *_, imports = dry_run("algo=grpo,rpp,rppb", "seed=range(334)", where="imports", flags=("-X", "importtime"))
    imported = {line.rsplit("|", 1)[-1].strip() for line in imports.splitlines() if line.startswith("import time:")}
    heavy = [name for name in HEAVY_AT_PLAN_TIME if name in imported]
    print(f"dry run   1,002 jobs: {t:.2f} s, {cpu:.2f} CPU s (target < 3 s) | 1 job: {t_one:.2f} s, {cpu_one:.2f} "
          f"CPU s (per extra job {(t - t_one) / 1001 * 1e3:.2f} ms) | heavy packages imported: {', '.join(heavy) or 'none'}")


def bench_training() -> None:
    """One toy training step and one 50-step toy run (wall time, response tok/s)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainer", "algo=rppb", "seed=42", f"output_dir={out}"], cwd=REPO,
                       check=True, capture_output=True)
        total = time.perf_counter() - start
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r["perf/step_s"] for r in records]
    tok = sum(r["perf/response_tok_per_s"] for r in records) / len(records)
    print(f"training  toy step: median {sorted(steps)[len(steps) // 2] * 1e3:.0f} ms | 50-step run incl. "
          f"start-up and both evals: {total:.1f} s (target < 60 s) | rollout {tok:,.0f} response tok/s")


BENCHMARKS = {"numerics": bench_numerics, "hashing": bench_hashing, "validation": bench_validation,
              "dry_run": bench_dry_run, "training": bench_training}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(BENCHMARKS)})")
    args = ap.parse_args()
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    torch.set_num_threads(1)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"torch {torch.__version__} (1 thread); sha256sum: {shutil.which('sha256sum') is not None}")
    for name in args.names or BENCHMARKS:
        BENCHMARKS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
