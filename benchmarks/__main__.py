"""``python -m benchmarks [name ...]``: run the benchmarks and print each figure with its reference.

None of these is a pass/fail test; record the numbers in BENCHMARKS.md with the machine they came from.
"""

from __future__ import annotations

import argparse
import csv
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

from facts import checkpoint_name
from facts.files import (
    BUNDLE_ARCHIVE,
    BUNDLE_DIR,
    BUNDLE_PAYLOAD,
    CHECKPOINTS_DIR,
    INDEX_TABLE,
    JOB_RUN_DIR,
    METRICS_LOG,
    WEIGHTS_FILE,
)
from facts.metrics import RESPONSE_LEN_KEY, RESPONSE_TOK_PER_S_KEY, STEP_S_KEY, TRL_TRAIN_RUNTIME_TAG
from facts.repo import REPO_ROOT

REPO = REPO_ROOT


def best_of(fn, repeat: int = 5, clock=time.perf_counter) -> float:
    """Best of ``repeat`` runs of ``fn`` by ``clock`` (wall time unless told)."""
    best = float("inf")
    for _ in range(repeat):
        start = clock()
        fn()
        best = min(best, clock() - start)
    return best


def cpu_best_of(fn, repeat: int = 3) -> float:
    """Best of ``repeat`` runs in this thread's CPU time: waiting for a core shared with other work
    does not count, so a ratio of two such figures holds on a loaded machine."""
    return best_of(fn, repeat, clock=time.thread_time)


def paired_ratios(production, reference, pairs: int, repeat: int = 5) -> tuple[list[float], list[float], list[float]]:
    """Per-pair CPU times of ``production`` and ``reference`` and their ratio (reference / production).

    The two sides alternate within each pair and swap order from pair to pair, so a change of load
    on a shared machine hits both; each side of a pair is its best of ``repeat`` runs in this
    thread's CPU time (a run that waited for a core does not count the wait)."""
    t_prod, t_ref = [], []
    for pair in range(pairs):
        sides = ((production, t_prod), (reference, t_ref))
        for fn, times in sides if pair % 2 == 0 else sides[::-1]:
            times.append(cpu_best_of(fn, repeat))
    return t_prod, t_ref, [r / p for p, r in zip(t_prod, t_ref)]


def numerics_case(B: int = 1024, T: int = 1024, seed: int = 0) -> dict[str, torch.Tensor]:
    """1M tokens: right-padded responses of uniform random length 1..T, float32 like a trainer's log-probs."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    return {"mask": torch.arange(T).expand(B, T) < lengths[:, None], "values": torch.randn(B, T, generator=gen),
            "logp": -torch.rand(B, T, generator=gen), "logp_old": -torch.rand(B, T, generator=gen)}


def bench_numerics(pairs: int = 41) -> None:
    """Normaliser + PPO loss + response-mean on 1M tokens vs the naive two-pass torch reference,
    forward alone and forward + backward (what a trainer runs; ``logp`` requires grad).

    Target (issue 14): production at least as fast as the reference (speed >= 1.0x), while keeping
    NaN-safety, float64 moments and centring, and no host synchronisation. ``pairs`` interleaved
    production/reference pairs; prints the median and range of the per-pair speed ratio.
    """
    from trainer.algorithms import masked_global_normalize, ppo_clip_token_loss, reduce_loss

    case = numerics_case()
    mask, values, logp_old = case["mask"], case["values"], case["logp_old"]
    logp_leaf = case["logp"].clone().requires_grad_(True)

    def production(logp):
        adv, *_ = masked_global_normalize(values, mask)
        loss, _ = ppo_clip_token_loss(logp, logp_old, adv, mask)
        return reduce_loss(loss, mask, "response_mean")

    def reference(logp):  # the straightforward version: boolean indexing (host sync), no NaN guarding
        sel = values[mask]
        mean = sel.mean()
        var = ((sel - mean) ** 2).mean()
        adv = (values - mean) * torch.rsqrt(torch.clamp(var, min=1e-8)) * mask
        ratio = torch.exp(logp - logp_old)
        loss = torch.maximum(-ratio * adv, -ratio.clamp(0.8, 1.2) * adv) * mask
        return (loss.sum(1) / mask.sum(1).clamp(min=1)).mean()

    def forward_and_backward(fn):
        def run():
            logp_leaf.grad = None
            fn(logp_leaf).backward()
        return run

    def copy():
        values.clone()

    t_copy = cpu_best_of(copy, 50)
    rows = (("forward", lambda: production(case["logp"]), lambda: reference(case["logp"])),
            ("forward+backward", forward_and_backward(production), forward_and_backward(reference)))
    for label, prod, ref in rows:
        t_prod, t_ref, ratios = paired_ratios(prod, ref, pairs)
        print(f"numerics  1M tokens, {label} (CPU time, {pairs} interleaved pairs): production median "
              f"{median(t_prod) * 1e3:.2f} ms ({min(t_prod) * 1e3:.2f}-{max(t_prod) * 1e3:.2f}) | naive reference "
              f"{median(t_ref) * 1e3:.2f} ms ({min(t_ref) * 1e3:.2f}-{max(t_ref) * 1e3:.2f}) | speed vs reference "
              f"per pair: median {median(ratios):.2f}x, range {min(ratios):.2f}-{max(ratios):.2f}x, "
              f"{sum(r >= 1.0 for r in ratios)}/{pairs} pairs >= 1.0x (target >= 1.0x) | "
              f"{median(t_prod) / t_copy:.0f} tensor copies")


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
    from evidence.gates.metrics_log import validate_metrics
    from trainer.metrics_writer import KL_LOSS_KEY, REQUIRED_KEYS

    n = 100_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / METRICS_LOG
        with open(path, "w") as f:
            for step in range(n):
                f.write(json.dumps({"step": step, **{k: 0.5 for k in (*REQUIRED_KEYS, KL_LOSS_KEY)}}) + "\n")
        t = best_of(lambda: validate_metrics(path, "grpo", n), 2)
        t_parse = best_of(lambda: [json.loads(line) for line in path.read_text().splitlines()], 2)
    print(f"validate  100k steps: {n / t:,.0f} records/s ({t:.2f} s) | bare json.loads {n / t_parse:,.0f} records/s")


HEAVY_AT_PLAN_TIME = ("torch", "transformers", "ray", "matplotlib", "submitit", "bagit", "pyarrow", "numpy")


def bench_dry_run(repo: Path = REPO) -> None:
    """Dry run of a 1,002-job grid (3 algos x 334 seeds), start to end as a user types it (target
    < 3 s), against the same command for 1 job and against ``launch.py --help`` (target: a 1-job dry
    run little more than ``--help``, each further job well under 1 ms); and which heavy packages
    planning imported. ``repo``: the checkout whose ``launch.py`` runs (another commit's, to compare)."""
    with tempfile.TemporaryDirectory() as tmp:
        def dry_run(*grid: str, where: str, flags: tuple[str, ...] = (), help: bool = False) -> tuple[float, float, str]:
            """(wall s, CPU s of the process, its stderr)."""
            cmd = [sys.executable, *flags, "launch.py", "-m", *grid, "dry_run=true", f"hydra.sweep.dir={tmp}/{where}"]
            cmd = [sys.executable, "launch.py", "--help"] if help else cmd
            cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            proc = subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            return wall, after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, proc.stderr

        runs = {"help": [], "one": [], "big": []}
        for i in range(3):  # interleaved, so that a change of load hits all three alike
            runs["help"].append(dry_run(where="", help=True))
            runs["one"].append(dry_run("algo=grpo", "seed=1", where=f"one{i}"))
            runs["big"].append(dry_run("algo=grpo,rpp,rppb", "seed=range(334)", where=f"big{i}"))
        (t_help, cpu_help, _), (t_one, cpu_one, _), (t, cpu, _) = (min(runs[k], key=lambda r: r[1])
                                                                    for k in ("help", "one", "big"))
        *_, imports = dry_run("algo=grpo,rpp,rppb", "seed=range(334)", where="imports", flags=("-X", "importtime"))
    imported = {line.rsplit("|", 1)[-1].strip() for line in imports.splitlines() if line.startswith("import time:")}
    heavy = [name for name in HEAVY_AT_PLAN_TIME if name in imported]
    print(f"dry run   1,002 jobs: {t:.2f} s, {cpu:.2f} CPU s (target < 3 s) | 1 job: {t_one:.2f} s, {cpu_one:.2f} "
          f"CPU s (per extra job {(cpu - cpu_one) / 1001 * 1e3:.2f} CPU ms) | launch.py --help: {t_help:.2f} s, "
          f"{cpu_help:.2f} CPU s (1 job / --help: {cpu_one / cpu_help:.2f}x CPU) | heavy packages imported: "
          f"{', '.join(heavy) or 'none'}")


def _timed_child(cmd: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak resident MiB) of one command run to its end (``benchmarks.rusage``)."""
    with tempfile.TemporaryDirectory() as tmp:
        figures = Path(tmp) / "rusage.json"
        proc = subprocess.run([sys.executable, "-m", "benchmarks.rusage", str(figures), *cmd], cwd=REPO,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[1:4])} failed: {proc.stdout[-300:]}{proc.stderr[-300:]}")
        usage = json.loads(figures.read_text())
    return usage["wall_s"], usage["cpu_s"], usage["peak_mib"]


EVIDENCE_SIZES = ((10, 50), (100, 50), (1000, 50))


def _all_accepted(sweep: Path, jobs: int) -> None:
    """Every synthetic job accepted by the build: a rejected one skips the checks and copies being timed."""
    with open(sweep / BUNDLE_DIR / BUNDLE_PAYLOAD / INDEX_TABLE, newline="", encoding="utf-8") as f:
        accepted = sum(row["accepted"] == "yes" for row in csv.DictReader(f))
    if accepted != jobs:
        raise SystemExit(f"benchmarks: the synthetic sweep's build accepted {accepted} of {jobs} jobs; "
                         "benchmarks/synthetic_sweep.py no longer writes what the evidence accepts")


def bench_evidence(sizes=EVIDENCE_SIZES) -> None:
    """``python -m evidence build`` and ``audit`` of synthetic sweeps of accepted jobs
    (benchmarks/synthetic_sweep.py) at growing sizes: wall, CPU and peak memory, and the CPU cost per
    job and per step record above the smallest size (the fixed cost: the smallest size's CPU time).
    Target (issue 24): seconds per thousand step records."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for jobs, steps in sizes:
            sweep = Path(tmp) / f"sweep-{jobs}x{steps}"
            subprocess.run([sys.executable, "-m", "benchmarks.synthetic_sweep", str(sweep), f"--jobs={jobs}",
                            f"--steps={steps}"], cwd=REPO, check=True)
            build = _timed_child([sys.executable, "-m", "evidence", "build", str(sweep)])
            _all_accepted(sweep, jobs)
            audit = _timed_child([sys.executable, "-m", "evidence", "audit", str(sweep / BUNDLE_ARCHIVE)])
            rows.append((jobs, steps, build, audit))
            shutil.rmtree(sweep)
    (jobs0, steps0, build0, audit0) = rows[0]
    for jobs, steps, build, audit in rows:
        records = jobs * steps
        line = f"evidence  {jobs:,} jobs x {steps} steps ({records:,} records):"
        for label, (wall, cpu, peak), base in (("build", build, build0), ("audit", audit, audit0)):
            line += f" {label} {wall:.1f} s wall, {cpu:.1f} CPU s, {peak:.0f} MiB peak"
            if records > jobs0 * steps0:
                per = (cpu - base[1]) / (records - jobs0 * steps0)
                line += f" ({per * 1e3:.2f} CPU ms per record above {jobs0} jobs, {per * 1e3 * steps:.0f} ms per job)"
            line += ";"
        print(line + " target: seconds per 1,000 records")


# Job count at few steps: the cost per job (index, validation, payload, sanitiser) apart from the
# cost per step record; 10,000 is synthetic only (a run of that many is not needed to see the slope).
EVIDENCE_JOB_SIZES = ((10, 5), (1000, 5), (10000, 5))


def bench_evidence_jobs() -> None:
    """``bench_evidence`` at 10, 1,000 and 10,000 jobs of 5 steps: how build and audit grow with the
    number of jobs when the records per job are few."""
    bench_evidence(EVIDENCE_JOB_SIZES)


def _slurm_env() -> dict[str, str] | None:
    """The throwaway cluster's variables (its ``env.sh``, ``PROOFGRID_SLURM_DIR``), or None when none is up."""
    state = Path(os.environ.get("PROOFGRID_SLURM_DIR", "/tmp/proofgrid-slurm"))
    if not (state / "env.sh").is_file():
        return None
    env = {}
    for line in (state / "env.sh").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = value.strip("'\"")
    ok = subprocess.run(["sinfo", "-h"], env={**os.environ, **env}, capture_output=True).returncode == 0
    return env if ok else None


SLURM_ARRAY_SIZES = (100, 1000)
# The throwaway cluster's node advertises more CPUs than a 2-core machine has: more tasks at once would
# only queue on the cores (and starve whatever else runs there); the launcher's figures do not depend on it.
SLURM_ARRAY_PARALLELISM = int(os.environ.get("PROOFGRID_BENCH_ARRAY_PARALLELISM", "3"))


def bench_slurm_array(sizes=SLURM_ARRAY_SIZES) -> None:
    """A Slurm array of N tiny jobs on the throwaway cluster (scripts/slurm/cluster.sh), through
    ``launch.py -m ... cluster=slurm`` as a user types it: planned, submitted as one array, watched and
    sealed. Each job's trainer is ``python -c pass`` (``trainer=command``): it exits at once, writes no
    metrics and is rejected, so what is measured is the harness. The launcher's own CPU (its process
    and the ``sbatch``/``sacct``/``squeue`` it runs: the tasks are slurmd's children, not its) against the
    tasks' summed run time (their ``job.json`` ``elapsed_s``): the launcher's share must stay small and
    its cost per job flat."""
    from facts.files import JOB_RECORD, job_files_glob, sweep_jobs_dir

    env = _slurm_env()
    if env is None:
        print("slurm_array skipped: no throwaway Slurm cluster is up (bash scripts/slurm/cluster.sh start "
              "/tmp/proofgrid-slurm)")
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in sizes:
            sweep = Path(tmp) / f"array-{jobs}"
            figures = Path(tmp) / f"rusage-{jobs}.json"
            cmd = [sys.executable, "-m", "benchmarks.rusage", str(figures), sys.executable, "launch.py", "-m",
                   "trainer=command", "trainer.command=['{python}',-c,pass]", f"seed=range({jobs})", "cluster=slurm",
                   "cluster.mem=300M", "workload.cpus_per_job=1", f"cluster.array_parallelism={SLURM_ARRAY_PARALLELISM}",
                   f"hydra.sweep.dir={sweep}"]
            proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True)
            records = [json.loads(p.read_text()) for p in sweep_jobs_dir(sweep).glob(job_files_glob(JOB_RECORD))]
            if len(records) != jobs:
                print(f"slurm_array {jobs} jobs: failed (exit {proc.returncode}, {len(records)} job records): "
                      f"{proc.stdout[-400:]}{proc.stderr[-400:]}")
                return
            launcher = json.loads(figures.read_text())
            tasks_s = sum(float(r.get("elapsed_s") or 0.0) for r in records)
            states = sorted({str(r.get("state")) for r in records})
            rows.append((jobs, launcher, tasks_s, states))
            shutil.rmtree(sweep)
            jobs0, first = rows[0][0], rows[0][1]  # each size is printed as it ends: 1,000 tasks take a while
            line = (f"slurm_array {jobs:,} tiny jobs (one array, {SLURM_ARRAY_PARALLELISM} at a time; states "
                    f"{', '.join(states)}): launch.py {launcher['wall_s']:.0f} s wall, {launcher['cpu_s']:.1f} CPU s "
                    f"({launcher['cpu_s'] / jobs * 1e3:.0f} CPU ms per job), {launcher['peak_mib']:.0f} MiB peak | the "
                    f"tasks' own run time {tasks_s:.0f} s in all | launcher CPU / tasks' time "
                    f"{launcher['cpu_s'] / tasks_s:.2f}")
            if jobs > jobs0:
                line += f" | {(launcher['cpu_s'] - first['cpu_s']) / (jobs - jobs0) * 1e3:.0f} CPU ms per job above {jobs0}"
            print(line, flush=True)


def bench_training() -> None:
    """One toy training step and one 50-step toy run (wall time, response tok/s)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / JOB_RUN_DIR
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainer", "algo=rppb", "seed=42", f"output_dir={out}"], cwd=REPO,
                       check=True, capture_output=True)
        total = time.perf_counter() - start
        records = [json.loads(line) for line in (out / METRICS_LOG).read_text().splitlines()]
    steps = [r[STEP_S_KEY] for r in records]
    tok = sum(r[RESPONSE_TOK_PER_S_KEY] for r in records) / len(records)
    print(f"training  toy step: median {sorted(steps)[len(steps) // 2] * 1e3:.0f} ms | 50-step run incl. "
          f"start-up and both evals: {total:.1f} s (target < 60 s) | rollout {tok:,.0f} response tok/s")


def bench_sizing() -> None:
    """The job-size estimate (launcher.job_sizing) against measured runs: benchmarks/sizing_accuracy.py."""
    from benchmarks.sizing_accuracy import bench_sizing as run

    run()


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def step_figures(records: list[dict]) -> dict[str, float]:
    """Median wall s/step and response tok/s over the steps' wall time (and median CPU s/step where the
    side records it: TRL's step clock).

    Each record is one step: ``step_s``, ``response_tokens`` and ``cpu_s`` (None where not recorded).
    The first step (allocator and kernel warm-up) is left out, on both sides alike."""
    steady = records[1:]
    tokens = sum(r["response_tokens"] for r in steady)
    cpu = [r["cpu_s"] for r in steady if r["cpu_s"] is not None]
    return {"s_per_step": median([r["step_s"] for r in steady]),
            "tok_per_s": tokens / sum(r["step_s"] for r in steady),
            "cpu_s_per_step": median(cpu) if cpu else float("nan")}


def run_through_harness(trainer: str, steps: int, seed: int, tmp: Path) -> list[dict]:
    """One ``algo=grpo`` job of ``trainer`` (proofgrid or trl) through ``launch.py`` as a user runs it
    (plan, job runtime, the trainer's process, metrics, evaluation, seal); its steps as records.

    proofgrid's step: ``perf/step_s`` of its metrics (rollout to optimizer step). TRL's: the adapter's
    step clock (trainer/adapters/trl_grpo.py ``STEP_CLOCK``: TRL's step from generation to optimizer
    step, wall and CPU; TRL's own ``train/step_time`` stops before the optimizer step). Response
    tokens: ``rollout/response_len`` x the batch, on both sides."""
    from facts.files import TRAINER_OUTPUT_DIR, run_dir_of_job, sweep_jobs_dir
    from trainer.adapters.trl_grpo import STEP_CLOCK
    from trainer.run_config import compose

    sweep = tmp / f"{trainer}-{seed}"
    subprocess.run([sys.executable, "launch.py", "-m", f"trainer={trainer}", "algo=grpo", f"seed={seed}",
                    f"workload.n_updates={steps}", f"workload.checkpoint_every={steps}", "workload.eval.n_prompts=4",
                    f"hydra.sweep.dir={sweep}"], cwd=REPO, check=True, capture_output=True)
    (job_dir,) = (d for d in sweep_jobs_dir(sweep).iterdir() if d.is_dir())  # the one job, whatever its label
    run_dir = run_dir_of_job(job_dir)
    batch = int(compose(["algo=grpo", "workload=toy"]).workload.global_batch_size)
    metrics = [json.loads(line) for line in (run_dir / METRICS_LOG).read_text().splitlines()]
    tokens = [m[RESPONSE_LEN_KEY] * batch for m in metrics]
    if trainer == "proofgrid":
        return [{"step_s": m[STEP_S_KEY], "cpu_s": None, "response_tokens": t} for m, t in zip(metrics, tokens)]
    clock = [json.loads(line) for line in (run_dir / TRAINER_OUTPUT_DIR / STEP_CLOCK).read_text().splitlines()]
    return [{"step_s": c["wall_s"], "cpu_s": c["cpu_s"], "response_tokens": t} for c, t in zip(clock, tokens)]


def bench_trl(steps: int = 60, pairs: int = 3) -> None:
    """proofgrid's toy GRPO step against TRL's GRPOTrainer, both through the harness (``launch.py``
    ``trainer=proofgrid`` and ``trainer=trl``, one job each): same model, data, template, geometry,
    sampling, threads and steps (the TRL adapter maps them, docs/trainers.md). The runs alternate
    (TRL, proofgrid, proofgrid, TRL, ...) so drifting load hits both sides alike. Ratio = TRL s/step /
    proofgrid s/step in wall time (> 1: proofgrid faster); TRL's CPU s/step beside it."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        print("trl       skipped: TRL is not installed (pip install -e '.[trl]' (make trl))")
        return
    from importlib.metadata import version

    results: dict[str, list[dict]] = {"trl": [], "proofgrid": []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(pairs):
            order = ("trl", "proofgrid") if pair % 2 == 0 else ("proofgrid", "trl")
            for side in order:
                results[side].append(step_figures(run_through_harness(side, steps, pair + 1, Path(tmp))))
            trl, ours = results["trl"][-1], results["proofgrid"][-1]
            print(f"trl       pair {pair + 1} (load average {os.getloadavg()[0]:.1f}): TRL {version('trl')} "
                  f"{trl['s_per_step']:.3f} s/step ({trl['cpu_s_per_step']:.3f} CPU) {trl['tok_per_s']:,.0f} tok/s | "
                  f"proofgrid {ours['s_per_step']:.3f} s/step {ours['tok_per_s']:,.0f} tok/s | speed ratio "
                  f"{trl['s_per_step'] / ours['s_per_step']:.2f}x")
    figures = {side: {key: median([r[key] for r in runs]) for key in runs[0]} for side, runs in results.items()}
    trl, ours = figures["trl"], figures["proofgrid"]
    print(f"trl       {pairs} pairs x {steps} steps through launch.py, medians: TRL {trl['s_per_step']:.3f} s/step "
          f"({trl['cpu_s_per_step']:.3f} CPU) {trl['tok_per_s']:,.0f} tok/s | proofgrid {ours['s_per_step']:.3f} "
          f"s/step {ours['tok_per_s']:,.0f} tok/s | s/step ratio TRL/proofgrid {trl['s_per_step'] / ours['s_per_step']:.2f}x; "
          f"tok/s ratio proofgrid/TRL {ours['tok_per_s'] / trl['tok_per_s']:.2f}x (target >= 2)")


def bench_trl_harness(steps: int = 20) -> None:
    """``trainer=trl`` through the harness: ``launch.py`` with one local TRL job (plan, job runtime,
    ``python -m trainer.external``, TRL's process, metrics, the final model's evaluation, the seal),
    against TRL's own time inside it (its ``train()``, ``train/train_runtime``) and its whole process
    (imports and model load included). Overhead = what the harness adds around TRL's process."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        print("trl_harness skipped: TRL is not installed (make trl)")
        return
    from evidence.gates.tensorboard_log import read_scalars
    from facts import (
        METRICS_LOG,
        RUN_RECORD,
        TENSORBOARD_DIR,
        TRAINER_OUTPUT_DIR,
        run_dir_of_job,
        sweep_job_dir,
    )
    from facts.files import JOB_RECORD

    with tempfile.TemporaryDirectory() as tmp:
        sweep = Path(tmp) / "sweep"
        start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "launch.py", "-m", "trainer=trl", "algo=grpo", "seed=1",
                        f"workload.n_updates={steps}", f"workload.checkpoint_every={steps}", f"hydra.sweep.dir={sweep}"],
                       cwd=REPO, check=True, capture_output=True)
        total, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime  # every process it started
        job_dir = sweep_job_dir(sweep, "grpo-trl-1")
        run_dir = run_dir_of_job(job_dir)
        stages = json.loads((run_dir / RUN_RECORD).read_text())["trainer"]["seconds"]
        job_s = json.loads((job_dir / JOB_RECORD).read_text())["elapsed_s"]
        trl_train = read_scalars(run_dir / TRAINER_OUTPUT_DIR / TENSORBOARD_DIR).points(TRL_TRAIN_RUNTIME_TAG)[-1].value
        step_s = [json.loads(line)[STEP_S_KEY] for line in (run_dir / METRICS_LOG).read_text().splitlines()]
    process = stages["trainer"]
    overhead = total - process
    print(f"trl_harness {steps} steps, load average {os.getloadavg()[0]:.1f}: launch.py {total:.1f} s wall "
          f"({cpu_s:.1f} CPU s, all its processes) = TRL's "
          f"process {process:.1f} s (its train() {trl_train:.1f} s, imports and model load {process - trl_train:.1f} s) "
          f"+ harness {overhead:.1f} s ({overhead / process:.2f}x TRL's process, {overhead / trl_train:.2f}x its train()): "
          f"input check {stages['verify_inputs']:.1f} s, the evaluator's imports {stages['imports']:.1f} s, "
          f"metrics {stages['metrics']:.1f} s, evaluation "
          f"{stages['evaluation']:.1f} s (the same evaluation every trainer gets), job start and end "
          f"{job_s - sum(stages.values()):.1f} s, plan and seal {total - job_s:.1f} s; TRL step through the harness "
          f"{median(step_s):.3f} s median (train/step_time)")


def bench_engines() -> None:
    """The rollout engines side by side: ``benchmarks.engine_comparison`` (vLLM's CPU build: the `vllm` extra)."""
    from benchmarks.engine_comparison import bench_engines as run

    run()


LORA = "workload.lora={rank:8,alpha:16}"  # the toy's LoRA: rank 8 on every projection (docs/lora.md)


def lora_run(lora: bool, steps: int, seed: int, tmp: Path) -> dict[str, float]:
    """``python -m trainer algo=grpo`` on the toy with LoRA (at its learning rate, 1e-3) or full fine-tuning (the
    toy's 1e-4), run for ``steps`` and for 1 step: the CPU seconds a step costs, ``(CPU(steps) - CPU(1)) / (steps -
    1)`` over the whole process (start-up, imports and the two evaluations cancel; a core shared with other work
    does not count its wait), the median wall s/step and tokens per step (``perf/step_s``, ``rollout/response_len``),
    the longer run's peak resident memory, and what the trained weights cost: their count, AdamW's two moments and
    the checkpoint (weights + optimizer state)."""
    figures = {}
    for n in (1, steps):
        out = tmp / f"{'lora' if lora else 'full'}-{seed}-{n}"
        settings = [LORA, "workload.lr=1e-3"] if lora else []
        _, figures[n], peak_mib = _timed_child([sys.executable, "-m", "trainer", "algo=grpo", f"seed={seed}", *settings,
                                                f"workload.n_updates={n}", f"workload.checkpoint_every={n}",
                                                "workload.eval.n_prompts=4", f"output_dir={out}"])
    metrics = [json.loads(line) for line in (out / METRICS_LOG).read_text().splitlines()][1:]  # warm steps
    ckpt = out / CHECKPOINTS_DIR / checkpoint_name(steps)
    moments = [t for state in torch.load(ckpt / "optimizer.pt", weights_only=False)["state"].values()
               for k, t in state.items() if k in ("exp_avg", "exp_avg_sq")]
    return {"cpu_s_per_step": (figures[steps] - figures[1]) / (steps - 1),
            "s_per_step": median([m[STEP_S_KEY] for m in metrics]),
            "tokens_per_step": median([m[RESPONSE_LEN_KEY] * 32 for m in metrics]),  # 4 prompts x 8 responses
            "peak_mib": peak_mib, "trainable": sum(t.numel() for t in moments) / 2,
            "moments_bytes": sum(t.numel() * t.element_size() for t in moments),
            "checkpoint_bytes": sum(f.stat().st_size for f in ckpt.iterdir() if f.name in (WEIGHTS_FILE, "optimizer.pt"))}


def bench_lora(steps: int = 20, pairs: int = 3) -> None:
    """LoRA (``workload.lora``, rank 8 on every projection) against full fine-tuning on the toy step, in one run:
    each side its own ``python -m trainer`` processes with the same seed, geometry and steps, alternating (full,
    LoRA, LoRA, full, ...) so that drifting load hits both. Per side, medians over the pairs of ``lora_run``'s
    figures: CPU s/step (the load-robust one), wall s/step, response tokens per step, peak resident memory, and the
    trained weights' state. The toy's 0.3 M weights are a few MiB of a ~550 MiB process, so the peak memory barely
    moves; the state columns are what scales with the model."""
    results: dict[str, list[dict]] = {"full": [], "lora": []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(pairs):
            for side in (("full", "lora") if pair % 2 == 0 else ("lora", "full")):
                results[side].append(lora_run(side == "lora", steps, pair + 1, Path(tmp)))
            full, lora = results["full"][-1], results["lora"][-1]
            print(f"lora      pair {pair + 1} (load average {os.getloadavg()[0]:.1f}): full {full['cpu_s_per_step']:.3f} "
                  f"CPU s/step {full['s_per_step']:.3f} wall | LoRA {lora['cpu_s_per_step']:.3f} CPU s/step "
                  f"{lora['s_per_step']:.3f} wall", flush=True)
    med = {side: {key: median([r[key] for r in runs]) for key in runs[0]} for side, runs in results.items()}
    for side, label in (("full", "full fine-tuning"), ("lora", "LoRA rank 8    ")):
        m = med[side]
        print(f"lora      {label}: {m['cpu_s_per_step']:.3f} CPU s/step ({m['s_per_step']:.3f} wall, "
              f"{m['tokens_per_step']:.0f} response tokens), peak {m['peak_mib']:.0f} MiB resident, "
              f"{m['trainable']:,.0f} trained weights, AdamW moments {m['moments_bytes'] / 2**10:,.0f} KiB, "
              f"checkpoint {m['checkpoint_bytes'] / 2**10:,.0f} KiB")
    full, lora = med["full"], med["lora"]
    print(f"lora      {pairs} pairs x {steps} steps, LoRA / full: CPU s/step "
          f"{lora['cpu_s_per_step'] / full['cpu_s_per_step']:.2f}x, peak memory {lora['peak_mib'] / full['peak_mib']:.2f}x, "
          f"trained weights {lora['trainable'] / full['trainable']:.3f}x, AdamW moments "
          f"{lora['moments_bytes'] / full['moments_bytes']:.3f}x, checkpoint "
          f"{lora['checkpoint_bytes'] / full['checkpoint_bytes']:.2f}x")


BENCHMARKS = {"numerics": bench_numerics, "hashing": bench_hashing, "validation": bench_validation,
              "dry_run": bench_dry_run, "evidence": bench_evidence, "training": bench_training, "trl": bench_trl,
              "trl_harness": bench_trl_harness, "evidence_jobs": bench_evidence_jobs,
              "slurm_array": bench_slurm_array, "engines": bench_engines, "lora": bench_lora,
              "sizing": bench_sizing}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(BENCHMARKS)})")
    ap.add_argument("--trl-steps", type=int, default=60, help="training steps of each TRL/proofgrid run")
    ap.add_argument("--trl-pairs", type=int, default=3, help="interleaved TRL/proofgrid run pairs")
    ap.add_argument("--numerics-pairs", type=int, default=41, help="interleaved production/reference pairs")
    args = ap.parse_args()
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    torch.set_num_threads(1)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"torch {torch.__version__} (1 thread); sha256sum: {shutil.which('sha256sum') is not None}")
    for name in args.names or BENCHMARKS:
        if name == "trl":
            bench_trl(args.trl_steps, args.trl_pairs)
        elif name == "numerics":
            bench_numerics(args.numerics_pairs)
        else:
            BENCHMARKS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
