"""A synthetic sweep of accepted jobs on disk, for timing the evidence at sizes no run is needed for.

``python -m benchmarks.synthetic_sweep DIR --jobs N --steps S`` writes ``DIR`` as a finished local
sweep of ``N`` jobs (arms grpo, rpp, rppb, or the first two or one where three do not divide ``N``,
by seeds 0, 1, ...) of ``S`` updates each: the
sweep record, and per job the plan's spec, the job record, both command records, the trainer log and
a complete run directory (run record with the algorithm's declaration and metric keys, one metrics
record per step with every key the run declares, the final checkpoint, the evaluation summary,
responses (each reward the trainer's own score of its text) and frozen subset, a TensorBoard event
file). Names, keys and layout are the ones in ``facts/``; the records have the fields the launcher and the trainer write (compare a real ``make run`` sweep).
Values are deterministic functions of (arm, seed, step), so two sweeps of one size are byte-identical.
What differs from a real sweep, by design: the checkpoint is a small safetensors file (the evidence
hashes checkpoints, it does not load them), the initial evaluation is each job's own (not shared),
and there is no real event file content (proofgrid's own runs log to ``metrics.jsonl``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from facts import (
    ALGORITHM_FIELD,
    CHECKPOINTS_DIR,
    EVAL_RECORD,
    KL_LOSS_BY_ALGO,
    KL_LOSS_KEY,
    METRIC_KEYS_FIELD,
    METRICS_LOG,
    OFF_POLICY_KEYS,
    REQUIRED_KEYS,
    RUN_RECORD,
    algorithm,
    checkpoint_name,
    run_dir_of_job,
    sweep_job_dir,
)
from facts.evaluation import recompute_eval, subset_bytes
from facts.files import (
    COMMAND_PUBLIC_RECORD,
    COMMAND_RECORD,
    COMMANDS_FILE,
    EVAL_RESPONSES_DIR,
    EVAL_SUBSET,
    JOB_RECORD,
    JOB_SPEC,
    LATEST_CHECKPOINT,
    RESOURCE_SAMPLES,
    RESOURCE_SAMPLING_FIELD,
    SWEEP_RECORD,
    TENSORBOARD_DIR,
    TRAINER_LOG,
    TRAINER_STATE,
    WEIGHTS_FILE,
    eval_responses_name,
)
from facts.metrics import (
    ADV_NORM_STD_KEY,
    ADV_RAW_STD_KEY,
    GRAD_NORM_KEY,
    IS_RATIO_MAX_KEY,
    IS_RATIO_MEAN_KEY,
    LOSS_KEY,
    PEAK_MEM_GIB_KEY,
    PG_LOSS_KEY,
    RAW_REWARD_KEY,
    RESPONSE_LEN_KEY,
    RESPONSE_TOK_PER_S_KEY,
    RETURNS_KEY,
    STEP_S_KEY,
    VALID_TOKENS_KEY,
)
from facts.reward import math_reward
from facts.states import COMPLETED, RUN_COMPLETED

ARMS = ("grpo", "rpp", "rppb")
COMMIT = "5f7cd574372288391bb1c41ca0677422cd31e725"
NODE = "cn-042.cluster.example"
RESPONSES = (" 10 + 20 = 30\n#### 30",)  # the trainer log's sample
EVAL_PROMPTS, EVAL_K = 25, 4


def write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def metric_keys(arm: str) -> list[str]:
    """The keys the trainer logs at every step of ``arm`` (``trainer.metrics.metric_keys``'s rule)."""
    return sorted([*REQUIRED_KEYS, *OFF_POLICY_KEYS, *([KL_LOSS_KEY] if KL_LOSS_BY_ALGO[arm] else [])])


def metrics_lines(arm: str, seed: int, steps: int) -> str:
    """One JSON line per step: every declared key, values in the ranges a toy run logs."""
    rng = random.Random(f"{arm}-{seed}")
    keys = metric_keys(arm)
    lines = []
    for step in range(steps):
        raw = round(0.2 + 0.3 * step / max(steps, 1) + rng.uniform(-0.05, 0.05), 6)
        record = {key: 0.0 for key in keys}
        record.update({
            RAW_REWARD_KEY: raw, RETURNS_KEY: raw if arm != "rpp" else round(raw - 0.001 * step, 6),
            ADV_RAW_STD_KEY: round(0.8 + 0.1 * rng.random(), 6), ADV_NORM_STD_KEY: 1.0,
            VALID_TOKENS_KEY: float(300 + rng.randrange(200)), RESPONSE_LEN_KEY: round(12 + rng.random(), 4),
            LOSS_KEY: round(rng.uniform(-0.1, 0.1), 6), PG_LOSS_KEY: round(rng.uniform(-0.1, 0.0), 6),
            GRAD_NORM_KEY: round(0.5 + rng.random(), 6), IS_RATIO_MEAN_KEY: 1.0, IS_RATIO_MAX_KEY: 1.000002,
            RESPONSE_TOK_PER_S_KEY: round(6000 + 500 * rng.random(), 3), STEP_S_KEY: round(0.2 + 0.02 * rng.random(), 6),
            PEAK_MEM_GIB_KEY: round(0.5 + 0.01 * rng.random(), 6),
        })
        if KL_LOSS_BY_ALGO[arm]:
            record[KL_LOSS_KEY] = round(0.001 * rng.random(), 8)
        lines.append(json.dumps({"step": step, **record}) + "\n")
    return "".join(lines)


def subset_rows() -> list[list]:
    """The frozen evaluation subset: ``[index, question, label]`` rows."""
    return [[i, f"Tom has {i} apples and buys {i + 1} more. How many apples does he have?", str(2 * i + 1)]
            for i in range(EVAL_PROMPTS)]


def eval_responses(pass1: float) -> list[dict]:
    """Responses to the subset, ``round(pass1 x responses)`` of them correct, spread over the prompts; each
    record's reward is the trainer's own score of its text, so the evidence's re-scoring agrees."""
    correct = round(pass1 * EVAL_PROMPTS * EVAL_K)
    records = []
    for index, _, label in subset_rows():
        right = correct // EVAL_PROMPTS + (index < correct % EVAL_PROMPTS)
        for sample in range(EVAL_K):
            answer = int(label) + (sample >= right)
            response = f" {index} + {index + 1} = {answer}\n#### {answer}"
            records.append({"index": index, "sample": sample, "response": response, "label": label,
                            "reward": math_reward(response, label), "length": 13, "finished": True})
    return records


def eval_summary(checkpoint: str, records: list[dict]) -> dict:
    """The summary the trainer writes of ``records``: their statistics, the subset's digest, the eval seed."""
    stats = recompute_eval(records, EVAL_K)
    return {"checkpoint": checkpoint, "eval_seed": 29, "subset_sha256": hashlib.sha256(subset_bytes(subset_rows())).hexdigest(),
            "all_zero_reward": stats["mean_reward"] == 0, **stats}


def write_eval(run_dir: Path, checkpoint: str, pass1: float) -> None:
    """eval.json, both evaluations' responses and the frozen subset they are scored against."""
    summary = {}
    (run_dir / EVAL_RESPONSES_DIR).mkdir(parents=True, exist_ok=True)
    for kind, name, rate in (("initial", "initial", 0.25), ("final", checkpoint, pass1)):
        records = eval_responses(rate)
        summary[kind] = eval_summary(name, records)
        (run_dir / EVAL_RESPONSES_DIR / eval_responses_name(kind)).write_text(
            "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (run_dir / EVAL_RESPONSES_DIR / EVAL_SUBSET).write_bytes(subset_bytes(subset_rows()))
    write_json(run_dir / EVAL_RECORD, summary)


def write_run_dir(run_dir: Path, arm: str, seed: int, steps: int, index: int) -> None:
    """The trainer's output: run record, metrics, checkpoint, evaluation, event file."""
    record = algorithm(arm)
    write_json(run_dir / RUN_RECORD, {
        "algo": arm, "algo_name": record.name, "seed": seed, "workload": "toy", "n_updates": steps,
        "steps_completed": steps, "responses_generated": 32 * steps, "dp_size": 1, "status": RUN_COMPLETED,
        "source_commit": COMMIT, METRIC_KEYS_FIELD: metric_keys(arm),
        ALGORITHM_FIELD: {**record.declaration(), "loss_reduction": "response_mean"},
        "versions": {"proofgrid": "0.1.0", "python": "3.11.7", "torch": "2.13.0+cpu"},
        "inputs": {f"trainer/assets/toy/model/{WEIGHTS_FILE}": hashlib.sha256(b"toy model").hexdigest()},
        "config": {"seed": seed, "dp_size": 1, "algo": {"short": arm, **record.config},
                   "workload": {"name": "toy", "n_updates": steps, "lr": 1e-4, "global_batch_size": 32}},
        "output_dir_abs": str(run_dir.resolve()),
    })
    (run_dir / METRICS_LOG).write_text(metrics_lines(arm, seed, steps), encoding="utf-8")
    (run_dir / TENSORBOARD_DIR).mkdir(parents=True, exist_ok=True)
    (run_dir / TENSORBOARD_DIR / f"events.out.tfevents.1796156243.{NODE}.{index}.0").write_bytes(b"\x18\x00" * 64)
    checkpoint = checkpoint_name(steps)
    ckpt = run_dir / CHECKPOINTS_DIR / checkpoint
    ckpt.mkdir(parents=True, exist_ok=True)
    save_file({"embed.weight": np.arange(8, dtype=np.float32).reshape(2, 4) + seed}, str(ckpt / WEIGHTS_FILE))
    (ckpt / "optimizer.pt").write_bytes(b"optimizer-state")
    write_json(ckpt / TRAINER_STATE, {"step": steps})
    (run_dir / CHECKPOINTS_DIR / LATEST_CHECKPOINT).write_text(checkpoint + "\n", encoding="utf-8")
    write_eval(run_dir, checkpoint, 0.4 + random.Random(f"eval-{arm}-{seed}").uniform(-0.1, 0.1))


def write_job(sweep: Path, name: str, arm: str, seed: int, steps: int, index: int) -> None:
    """One accepted job's directory: the launcher's records around the trainer's run directory."""
    job_dir = sweep_job_dir(sweep, name)
    for root in ("ray", "cache", "tmp"):
        (job_dir / "roots" / root).mkdir(parents=True, exist_ok=True)
    overrides = [f"algo={arm}", f"seed={seed}"]
    write_json(job_dir / JOB_SPEC, {
        "algo": arm, "arm": arm, "arm_overrides": {"algo": arm}, "cpus": 1, "gpu_model": None, "n_updates": steps,
        "name": name, "ray_cpus": 0, "seed": seed, "share_initial_eval": False, "source_commit": COMMIT,
        "sweep_dir": str(sweep.resolve()), "trainer_overrides": overrides})
    block = 20000 + 64 * index
    write_json(job_dir / JOB_RECORD, {
        "algo": arm, "arm": arm, "arm_overrides": {"algo": arm}, "array_index": index, "cleanup": [],
        "elapsed_s": 15.0 + index % 7, "exit_code": 0, "failure": None, "job_id": f"local-{index}", "node": NODE,
        "ports": {"block": [block, block + 63], "master_port": block + 11}, "restart_count": 0,
        "roots": {"cache": "roots/cache", "output": "run", "ray": "roots/ray", "tmp": "roots/tmp"},
        "runtime_state": COMPLETED, "scheduler": "local", "seed": seed, "source_commit": COMMIT,
        "started_at": 1796156236.0 + index, "state": COMPLETED,
        RESOURCE_SAMPLING_FIELD: {"file": RESOURCE_SAMPLES, "interval_s": 5.0, "samples": 4,
                                  "gpu": "skipped: no GPU visible to the job"}})
    with open(job_dir / RESOURCE_SAMPLES, "w", encoding="utf-8") as samples:  # the runtime's, 5 s apart
        for n in range(4):
            samples.write(json.dumps({"t": 1796156236.0 + index + 5 * n, "cpu_percent": 90.0 + n, "processes": 2,
                                      "rss_bytes": (400 + n + index % 5) * 2**20, "gpus": None}) + "\n")
    argv = ["-m", "trainer", *overrides]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(block + 11), "PYTHONNOUSERSITE": "1", "HF_HUB_OFFLINE": "1"}
    write_json(job_dir / COMMAND_RECORD, {
        "argv": ["python", *argv, f"output_dir={run_dir_of_job(job_dir).resolve()}"], "cwd": ".", "sbatch": None,
        "env": {**env, "TMPDIR": str((job_dir / "roots" / "tmp").resolve())}})
    write_json(job_dir / COMMAND_PUBLIC_RECORD, {
        "argv": ["<PYTHON_BIN>/python", *argv, "output_dir=<JOB_DIR>/run"], "cwd": "<REPO>", "sbatch": None,
        "env": {**env, "TMPDIR": "<JOB_DIR>/roots/tmp"}})
    (job_dir / TRAINER_LOG).write_text("".join(f"step {s} loss 0.01 reward 0.3\n" for s in range(0, steps, 10))
                                         + f"sample: {RESPONSES[0]}\ndone\n", encoding="utf-8")
    write_run_dir(run_dir_of_job(job_dir), arm, seed, steps, index)


def write_sweep(sweep: Path, jobs: int, steps: int) -> Path:
    """``jobs`` accepted jobs of ``steps`` updates: the grid of the first ``a`` of ``ARMS`` (the most that
    divide ``jobs``: the evidence expects every arm at every seed) by seeds ``0 .. jobs / a - 1``."""
    n_arms = next(a for a in range(len(ARMS), 0, -1) if jobs % a == 0)
    cells = [(ARMS[i % n_arms], i // n_arms) for i in range(jobs)]
    names = [f"{arm}-{seed}" for arm, seed in cells]
    sweep.mkdir(parents=True, exist_ok=False)
    arms = sorted({arm for arm, _ in cells}, key=ARMS.index)
    write_json(sweep / SWEEP_RECORD, {
        "algos": arms, "arms": {arm: {"algo": arm} for arm in arms}, "cluster": {"kind": "local", "max_parallel": None},
        "created": "2026-12-01", "eval_responses": EVAL_PROMPTS * EVAL_K, "jobs": names, "n_updates": steps,
        "seeds": sorted({seed for _, seed in cells}), "source_commit": COMMIT, "workload": "toy"})
    for index, ((arm, seed), name) in enumerate(zip(cells, names)):
        write_job(sweep, name, arm, seed, steps, index)
    (sweep / COMMANDS_FILE).write_text("".join(
        f"[{i}] {name}: python -m trainer algo={arm} seed={seed} output_dir=<JOB_DIR>/run\n"
        for i, ((arm, seed), name) in enumerate(zip(cells, names))), encoding="utf-8")
    return sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    write_sweep(args.sweep_dir, args.jobs, args.steps)


if __name__ == "__main__":
    main()
