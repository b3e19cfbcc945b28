"""A synthetic sweep of accepted jobs on disk (docs/run-directory.md), for the tests and the benchmarks alike.

The one writer of fake sweeps: the evidence tests build, tamper with and audit what it writes (tests/evidence/
conftest.py), and ``make bench`` times the evidence on it at sizes no run is needed for:
``python -m benchmarks.synthetic_sweep DIR --jobs N --steps S`` writes ``DIR`` as a finished sweep of ``N`` jobs
(arms grpo, rpp, rppb, or the first two or one where three do not divide ``N``, by seeds 0, 1, ...) of ``S``
updates each. The real trainer and launcher produce these files; this writer lets a test control their content.
Names and layout are those of ``facts/`` (tests/facts/test_facts_literals.py scans this file as it scans the product).

Values are deterministic functions of (algo, seed, step) unless a test passes its own: ``final_pass1(arm, seed)``
and ``reward(arm, seed, step)``. Evaluations are real: responses to a frozen subset of 25 prompts x 4 samples, each
scored as the trainer scores it, the statistics derived from their counts (so a requested pass@1 becomes the
possible value nearest it, a multiple of 1/100). ``off_policy(arm, seed, step)`` (opt-in) returns
``(staleness, sampler_logp_gap)``: every step then logs the off-policy keys (facts.metrics OFF_POLICY_KEYS), which
a probe's staleness check reads. ``arms`` writes the arm contract (``sweep.json`` "arms", ``job.json``
"arm"/"arm_overrides", jobs named ``<arm>-<seed>``); without it the sweep is an older one, one arm per algo and no
arm fields. What differs from a real sweep, by design: the checkpoint is a small safetensors file (the evidence
hashes checkpoints, it does not load them), run.json declares neither its metric keys nor its algorithm (the
evidence then holds a run to its algorithm's record), and the event file has no real content.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import random
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from safetensors.numpy import save_file

from facts import (
    CHECKPOINTS_DIR,
    EVAL_RECORD,
    METRICS_LOG,
    RUN_RECORD,
    algorithm,
    checkpoint_name,
    run_dir_of_job,
    sweep_job_dir,
)
from facts.files import (
    COMMAND_PUBLIC_RECORD,
    COMMAND_RECORD,
    COMMANDS_FILE,
    DATA_LEDGER,
    EVAL_RESPONSES_DIR,
    EVAL_SUBSET,
    FIGURES_FIELD,
    INITIAL_EVAL_COMPUTED,
    INITIAL_EVAL_RESPONSES,
    JOB_RECORD,
    LATEST_CHECKPOINT,
    RESOURCE_SAMPLES,
    RESOURCE_SAMPLING_FIELD,
    RUNTIME_LOG,
    SWEEP_RECORD,
    TENSORBOARD_DIR,
    TRAINER_STATE,
    WEIGHTS_FILE,
    eval_responses_name,
    initial_eval_relpath,
)
from facts.ledger_format import LEDGER_FIELD
from facts.metrics import (
    ADV_NORM_MEAN_KEY,
    ADV_NORM_STD_KEY,
    ADV_RAW_MEAN_KEY,
    ADV_RAW_STD_KEY,
    ALL_ZERO_REWARD_KEY,
    CLIP_FRAC_KEY,
    GRAD_NORM_KEY,
    IS_RATIO_MAX_KEY,
    IS_RATIO_MEAN_KEY,
    KL_LOSS_KEY,
    LOSS_KEY,
    PEAK_MEM_GIB_KEY,
    PG_LOSS_KEY,
    PPO_KL_KEY,
    RAW_REWARD_KEY,
    RESPONSE_LEN_KEY,
    RESPONSE_TOK_PER_S_KEY,
    RETURNS_KEY,
    SAMPLER_LOGP_GAP_KEY,
    STALENESS_KEY,
    STEP_S_KEY,
    TRUNCATED_KEY,
    VALID_TOKENS_KEY,
    ZERO_VARIANCE_KEY,
)
from facts.repo import REPO_ROOT
from facts.states import COMPLETED, RUN_COMPLETED

ALGOS = ("grpo", "rpp", "rppb")
SEEDS = (42, 1234, 2026)
COMMIT = "5f7cd574372288391bb1c41ca0677422cd31e725"
NODE = "cn-042.cluster.example"
RESPONSE_TEXTS = (
    "Nancy has 3 apples and buys 4 more, so she has 7. #### 7",
    "The answer is nan? No: NaN is not a number, inf is not either. #### 12",
    "Let x = 5; loss is 0 and nothing is nan here. #### 5",
    "Infinity pool tickets cost 2 each, 3 tickets cost 6. #### 6",
)


def write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def metric_records(algo: str, seed: int, n_steps: int, reward=None, off_policy=None) -> list[dict]:
    """One record per step with every key the contract requires of ``algo``; ``reward(step)`` sets the raw reward,
    ``off_policy(step)`` -> (staleness, sampler log-prob gap) adds the off-policy diagnostics."""
    rng = random.Random(f"{algo}-{seed}")
    records = []
    for step in range(n_steps):
        raw = round(0.3 + 0.02 * step + rng.uniform(-0.05, 0.05), 6)
        if reward is not None:
            raw = reward(step)
        record = {
            "step": step,
            RAW_REWARD_KEY: raw,
            # k1 shaping moves the return away from the raw reward only for rpp.
            RETURNS_KEY: round(raw - 0.001 * (step + 1) * (1 + rng.random()), 6) if algo == "rpp" else raw,
            ADV_RAW_MEAN_KEY: 0.0,
            ADV_RAW_STD_KEY: round(0.4 + rng.random() * 0.1, 6),
            ADV_NORM_MEAN_KEY: 0.0,
            ADV_NORM_STD_KEY: 1.0,
            VALID_TOKENS_KEY: 3000 + rng.randrange(500),
            ZERO_VARIANCE_KEY: 0,
            ALL_ZERO_REWARD_KEY: 0,
            RESPONSE_LEN_KEY: round(90 + rng.uniform(-5, 5), 3),
            TRUNCATED_KEY: round(rng.uniform(0.4, 0.6), 4),
            LOSS_KEY: round(rng.uniform(-0.1, 0.1), 6),
            PG_LOSS_KEY: round(rng.uniform(-0.1, 0.0), 6),
            PPO_KL_KEY: 0.0,
            CLIP_FRAC_KEY: 0.0,
            GRAD_NORM_KEY: round(1.2 + rng.uniform(-0.1, 0.1), 5),
            RESPONSE_TOK_PER_S_KEY: round(400 + rng.uniform(-5, 5), 2),
            STEP_S_KEY: round(70 + rng.uniform(-2, 2), 2),
            PEAK_MEM_GIB_KEY: round(35 + rng.uniform(-0.3, 0.3), 3),
        }
        if algo != "rpp":
            record[KL_LOSS_KEY] = round(0.006 + rng.uniform(-0.001, 0.001), 6)
        if off_policy is not None:
            staleness, gap = off_policy(step)
            record.update({STALENESS_KEY: staleness, SAMPLER_LOGP_GAP_KEY: gap,
                           IS_RATIO_MEAN_KEY: round(1.0 + gap / 10, 6), IS_RATIO_MAX_KEY: round(1.0 + gap, 6)})
        records.append(record)
    return records


def write_metrics(run_dir: Path, records: list[dict]) -> None:
    (run_dir / METRICS_LOG).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


N_PROMPTS, K = 25, 4  # the synthetic evaluation: 25 frozen prompts x 4 samples each


# The embedded data set's test split, as the trainer's runs pin it (manifests/toy.json): the synthetic runs are
# evaluated on its first rows, so the evidence re-derives their subset as it does a real run's.
TEST_SPLIT = "trainer/assets/toy/data/test.parquet"
TEST_SPLIT_SHA256 = "f538276ac534d6e90dd2871aa9a20509393a4877085d747dba2f765cd338eaa8"
MODEL_INPUT = f"model/{WEIGHTS_FILE}"  # run.json's inputs: the initial model's weights, by a path in the workload


@functools.lru_cache(maxsize=1)
def _test_split() -> tuple[tuple[str, str], ...]:
    table = pq.read_table(REPO_ROOT / TEST_SPLIT, columns=["question", "answer"])
    return tuple(zip(table.column("question").to_pylist(), table.column("answer").to_pylist()))


def subset_rows(n_prompts: int = N_PROMPTS) -> list[list]:
    """The frozen evaluation subset: ``[index, question, label]`` rows of the test split's first ``n_prompts``,
    the label the scalar after a GSM8K rationale's ``####``."""
    return [[i, question, answer.rsplit("####", 1)[-1].strip()]
            for i, (question, answer) in enumerate(_test_split()[:n_prompts])]


def subset_file_bytes(n_prompts: int = N_PROMPTS) -> bytes:
    """The subset file as the trainer writes it (compact JSON, non-ASCII kept): its SHA256 is subset_sha256."""
    return json.dumps(subset_rows(n_prompts), ensure_ascii=False, separators=(",", ":")).encode()


SUBSET_SHA = hashlib.sha256(subset_file_bytes()).hexdigest()


def correct_counts(pass1: float, n_prompts: int, k: int) -> list[int]:
    """Correct samples per prompt giving the nearest possible pass@1 (``round(pass1 x n_prompts x k)`` correct in
    all), spread as evenly as the counts allow."""
    total = max(0, min(n_prompts * k, round(pass1 * n_prompts * k)))
    base, extra = divmod(total, n_prompts)
    return [base + (i < extra) for i in range(n_prompts)]


def unbiased_pass_at(k: int, counts: list[int], j: int) -> float:
    """The reference estimator in float64: mean over prompts of ``1 - C(k - c, j) / C(k, j)``."""
    return float(np.mean([1.0 - math.comb(k - c, j) / math.comb(k, j) for c in counts]))


def eval_responses(counts: list[int], k: int) -> list[dict]:
    """Real responses to the subset's prompts: sample j of prompt i ends with the label when j < c_i, else with a
    wrong number (each scored as the trainer would: the last number against the label)."""
    records = []
    for (index, _, label), c in zip(subset_rows(len(counts)), counts):
        for j in range(k):
            answer = int(label) if j < c else int(label) + 1
            records.append({"index": index, "sample": j, "label": label,
                            "response": f"{RESPONSE_TEXTS[(index + j) % len(RESPONSE_TEXTS)]} So he has {answer}.",
                            "reward": 1.0 if j < c else 0.0, "length": 80 + (index + 3 * j) % 11,
                            "finished": (index + j) % 5 != 0})
    return records


def summary_of(records: list[dict], counts: list[int], checkpoint: str, k: int) -> dict:
    """The eval summary derived from the responses' own counts (the estimator above, in float64)."""
    n = len(records)
    summary = {
        "checkpoint": checkpoint, "n_prompts": len(counts), "k": k, "n_responses": n, "eval_seed": 29,
        "subset_sha256": hashlib.sha256(subset_file_bytes(len(counts))).hexdigest(),
        "truncation": sum(not r["finished"] for r in records) / n,
        "mean_length": sum(r["length"] for r in records) / n,
        "mean_reward": sum(r["reward"] for r in records) / n, "all_zero_reward": not any(r["reward"] for r in records),
    }
    summary.update({f"pass@{j}": unbiased_pass_at(k, counts, j) for j in (1, 2, 4) if j <= k})
    return summary


def eval_entry(checkpoint: str, pass1: float, n_prompts: int = N_PROMPTS, k: int = K) -> dict:
    """The summary of an evaluation whose pass@1 is the possible one nearest ``pass1``."""
    counts = correct_counts(pass1, n_prompts, k)
    return summary_of(eval_responses(counts, k), counts, checkpoint, k)


def write_eval(run_dir: Path, final_checkpoint: str, final_pass1: float, n_prompts: int = N_PROMPTS, k: int = K,
               initial_pass1: float = 0.25, final_counts: list[int] | None = None) -> dict:
    """eval.json, eval/<initial|final>.jsonl and eval/subset.json of a run, as the trainer writes them; returns
    eval.json's summary (pass@1 the possible value nearest the one asked for, or ``final_counts`` correct samples
    of prompt i in the final evaluation)."""
    summary = {}
    (run_dir / EVAL_RESPONSES_DIR).mkdir(parents=True, exist_ok=True)
    for kind, checkpoint, pass1 in (("initial", "initial", initial_pass1), ("final", final_checkpoint, final_pass1)):
        counts = final_counts if kind == "final" and final_counts is not None else correct_counts(pass1, n_prompts, k)
        records = eval_responses(counts, k)
        summary[kind] = summary_of(records, counts, checkpoint, k)
        (run_dir / EVAL_RESPONSES_DIR / eval_responses_name(kind)).write_text("".join(json.dumps(r) + "\n" for r in records),
                                                         encoding="utf-8")
    (run_dir / EVAL_RESPONSES_DIR / EVAL_SUBSET).write_bytes(subset_file_bytes(n_prompts))
    write_json(run_dir / EVAL_RECORD, summary)
    return summary


def write_resources(job_dir: Path, index: int) -> None:
    """The runtime's resource samples of a job (launcher.runtime.resource_sampler): four samples, 5 s apart."""
    with open(job_dir / RESOURCE_SAMPLES, "w", encoding="utf-8") as f:
        for n in range(4):
            f.write(json.dumps({"t": 1700000000.0 + 5 * n + 1000 * index, "cpu_percent": 50.0 + 10 * n + index,
                                "rss_bytes": (300 + 20 * n + index) * 2**20, "processes": 2, "gpus": None}) + "\n")


def write_job(sweep: Path, algo: str, seed: int, index: int, n_steps: int, arm: str | None = None,
              overrides: dict | None = None, final_pass1=None, reward=None, final_counts=None,
              off_policy=None, n_prompts: int = N_PROMPTS) -> Path:
    """One complete, valid job directory (of ``arm`` when given: the arm contract's records)."""
    job_dir = sweep_job_dir(sweep, f"{arm or algo}-{seed}")
    run_dir = run_dir_of_job(job_dir)
    for root in ("ray", "cache", "tmp"):
        (job_dir / "roots" / root).mkdir(parents=True, exist_ok=True)
    write_json(job_dir / JOB_RECORD, {
        "algo": algo, "seed": seed, "job_id": str(937650 + index), "array_index": index, "node": NODE,
        "state": COMPLETED, "exit_code": 0, "elapsed_s": 3900.0 + 37 * index, "source_commit": COMMIT,
        "roots": {"ray": "roots/ray", "cache": "roots/cache", "tmp": "roots/tmp", "output": "run"},
        "ports": {"block": [20000 + 100 * index, 20099 + 100 * index], "master_port": 20001 + 100 * index},
        "cleanup": [],
        RESOURCE_SAMPLING_FIELD: {"file": RESOURCE_SAMPLES, "interval_s": 5.0, "samples": 4,
                              "gpu": "skipped: no GPU visible to the job"},
        **({"arm": arm, "arm_overrides": overrides} if arm is not None else {}),
    })
    write_resources(job_dir, index)
    # the evaluation's 25 prompts are an override of the toy workload's 64, as a real command says it
    # the arm's other settings after algo and seed, as commands.txt states them (the launcher writes both alike)
    settings = [f"{k}={v}" for k, v in (overrides or {}).items() if k != "algo"]
    argv = ["python", "-m", "trainer", f"algo={algo}", f"seed={seed}", *settings, "workload=toy",
            f"workload.eval.n_prompts={n_prompts}"]
    write_json(job_dir / COMMAND_RECORD, {
        "argv": argv + [f"output_dir={run_dir.resolve()}"],
        "env": {"TMPDIR": str((job_dir / "roots" / "tmp").resolve()), "PYTHONNOUSERSITE": "1"},
        "sbatch": "",
    })
    write_json(job_dir / COMMAND_PUBLIC_RECORD, {
        "argv": argv + ["output_dir=<JOB_DIR>/run"],
        "env": {"TMPDIR": "<JOB_DIR>/roots/tmp", "PYTHONNOUSERSITE": "1"}, "sbatch": "",
    })
    (job_dir / RUNTIME_LOG).write_text(  # the runtime's log, with the scheduler's stdout on Slurm
        f"step 0 loss 0.01\nsample: {RESPONSE_TEXTS[0]}\nsample: {RESPONSE_TEXTS[1]}\ndone\n", encoding="utf-8")

    run_dir.mkdir(parents=True, exist_ok=True)
    write_metrics(run_dir, metric_records(algo, seed, n_steps, reward and (lambda step: reward(arm or algo, seed, step)),
                                          off_policy and (lambda step: off_policy(arm or algo, seed, step))))
    (run_dir / TENSORBOARD_DIR).mkdir(exist_ok=True)
    (run_dir / TENSORBOARD_DIR / f"events.out.tfevents.1700000000.{NODE}.{index}").write_bytes(b"\x18\x00" * 64)
    checkpoint = checkpoint_name(n_steps)
    ckpt = run_dir / CHECKPOINTS_DIR / checkpoint
    ckpt.mkdir(parents=True, exist_ok=True)
    save_file({"embed.weight": np.arange(8, dtype=np.float32).reshape(2, 4)}, str(ckpt / WEIGHTS_FILE))
    (ckpt / "optimizer.pt").write_bytes(b"optimizer-state")
    write_json(ckpt / TRAINER_STATE, {"step": n_steps})
    (run_dir / CHECKPOINTS_DIR / LATEST_CHECKPOINT).write_text(checkpoint + "\n", encoding="utf-8")
    rng = random.Random(f"eval-{algo}-{seed}")
    pass1 = round(0.5 + rng.uniform(-0.1, 0.1), 4) if final_pass1 is None else final_pass1(arm or algo, seed)
    write_eval(run_dir, checkpoint, pass1, n_prompts, final_counts=final_counts and final_counts(arm or algo, seed))
    write_json(run_dir / RUN_RECORD, {
        "algo": algo, "algo_name": algorithm(algo).name,
        "seed": seed, "workload": "toy", "n_updates": n_steps, "steps_completed": n_steps,
        "responses_generated": 32 * n_steps, "dp_size": 1,
        "versions": {"python": "3.11.7", "torch": "2.13.0"},
        "inputs": {MODEL_INPUT: "ab" * 32, TEST_SPLIT: TEST_SPLIT_SHA256},
        "config": {"lr": float((overrides or {}).get("workload.lr", 1e-6)), "clip": 0.2, "seed": seed,
                   "workload": {"manifest": "manifests/toy.json", "test_path": TEST_SPLIT,
                                "eval": {"n_prompts": n_prompts}},
                   "algo": {"name": algo, "kl_coef": 0.01 if algo == "rpp" else 0.0,
                            "kl_loss_coef": 0.0 if algo == "rpp" else 0.01}},
        "output_dir_abs": str(run_dir.resolve()),
        "status": RUN_COMPLETED,
    })
    return job_dir


def make_sweep(root: Path, algos=ALGOS, seeds=SEEDS, n_steps: int = 10, name: str = "sweep", arms: dict | None = None,
               final_pass1=None, reward=None, workload: str = "toy", final_counts=None, off_policy=None,
               n_prompts: int = N_PROMPTS, figures: bool = False) -> Path:
    """A complete sweep: every job valid and accepted unless a test changes it.

    ``final_counts(arm, seed)``: the correct samples (of ``K``) of each of the ``N_PROMPTS`` prompts in the run's
    final evaluation, in place of ``final_pass1``'s evenly spread ones (prompts that differ in difficulty).

    ``arms``: ``{label: {"algo": ..., other overrides}}`` (the arm contract); ``algos`` is then derived.
    ``n_prompts``: the evaluation's prompts (``workload.eval.n_prompts`` in every command), ``N_PROMPTS`` by default.
    ``figures``: whether its seal draws the report's figures (the launcher's ``figures=``, recorded in sweep.json only
    when false): off, as the suite's launches seal (drawing and redrawing them is most of a small seal and its audit);
    the tests of figures, and the benchmarks, turn them on.
    """
    sweep = root / name
    sweep.mkdir(parents=True)
    record = {"workload": workload, "seeds": list(seeds), "n_updates": n_steps,
              "source_commit": COMMIT, "cluster": "local", "created": "2026-01-15T10:00:00Z"}
    if not figures:
        record[FIGURES_FIELD] = False
    if arms is None:
        cells = [(a, a, None, s) for a in algos for s in seeds]
        record["algos"] = list(algos)
    else:
        cells = [(label, o["algo"], o, s) for label, o in arms.items() for s in seeds]
        record["algos"] = sorted({o["algo"] for o in arms.values()})
        record["arms"] = arms
        record["jobs"] = [f"{label}-{s}" for label, _, _, s in cells]
    write_json(sweep / SWEEP_RECORD, record)
    commands = []
    for i, (label, algo, overrides, seed) in enumerate(cells):
        write_job(sweep, algo, seed, i, n_steps, arm=label if arms is not None else None, overrides=overrides,
                  final_pass1=final_pass1, reward=reward, final_counts=final_counts, off_policy=off_policy,
                  n_prompts=n_prompts)
        extra = "".join(f" {k}={v}" for k, v in (overrides or {}).items() if k != "algo")
        commands.append(f"[{i}] {label}-{seed}: python -m trainer algo={algo} seed={seed}{extra} workload=toy "
                        f"workload.eval.n_prompts={n_prompts} output_dir=<JOB_DIR>/run")
    (sweep / COMMANDS_FILE).write_text("\n".join(commands) + "\n", encoding="utf-8")
    return sweep


def job_dir(sweep: Path, arm: str, seed: int) -> Path:
    return sweep_job_dir(sweep, f"{arm}-{seed}")


def set_job_fields(sweep: Path, algo: str, seed: int, **fields) -> None:
    path = job_dir(sweep, algo, seed) / JOB_RECORD
    record = json.loads(path.read_text())
    record.update(fields)
    write_json(path, record)


# A shared initial evaluation as the trainer's shared_initial_eval writes it, and what the runs that reference it
# record of their setup (run.json's config.workload), so that it is their control (evidence.gates.artifacts).
SAMPLING = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 48}
WORKLOAD = {"model_path": "model", "engine": "torch", "dtype": "float32", "device": "cpu",
            "eval": {"k": K, "seed": 29, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_response_len": 48}}


def share_initial_eval(sweep: Path, jobs, pass1: float = 0.25, computed_by: str | None = "first") -> Path:
    """Make the jobs' initial control one shared evaluation, ``<sweep>/initial_eval/<key12>/`` (eval.json with its
    key, identity, summary and responses' SHA256; responses.jsonl), referenced by each job's eval.json (path, key,
    SHA256), and recorded as computed by ``computed_by`` (a job's name; "first": the first of ``jobs``; None: by no
    job, as one planted before the sweep) in its run's initial_eval_computed.jsonl; returns its directory."""
    jobs = list(jobs)
    counts = correct_counts(pass1, N_PROMPTS, K)
    records = eval_responses(counts, K)
    summary = summary_of(records, counts, "initial", K)
    identity = {"model_files": {MODEL_INPUT: "ab" * 32}, "subset_sha256": SUBSET_SHA,
                "n_prompts": N_PROMPTS, "k": K, "eval_seed": 29, "sampling": SAMPLING, "engine": "torch",
                "dtype": "float32", "device": "cpu", "num_threads": 1,
                "versions": {"python": "3.11.7", "torch": "2.13.0"}, "source_commit": COMMIT}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    directory = sweep / initial_eval_relpath(key)
    directory.mkdir(parents=True, exist_ok=True)  # a second call replaces it
    responses = "".join(json.dumps(r) + "\n" for r in records).encode()
    (directory / INITIAL_EVAL_RESPONSES).write_bytes(responses)
    record = {"key": key, "identity": identity, "initial": summary,
              "responses_sha256": hashlib.sha256(responses).hexdigest()}
    text = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
    (directory / EVAL_RECORD).write_bytes(text)
    reference = {"path": f"{initial_eval_relpath(key)}/{EVAL_RECORD}", "key": key, "sha256": hashlib.sha256(text).hexdigest()}
    computer = jobs[0] if computed_by == "first" and jobs else computed_by
    if computer is not None:
        with open(run_dir_of_job(sweep_job_dir(sweep, computer)) / INITIAL_EVAL_COMPUTED, "a", encoding="utf-8") as log:
            log.write(json.dumps(reference, sort_keys=True) + "\n")
    for job in jobs:
        run = run_dir_of_job(sweep_job_dir(sweep, job))
        evaluation = json.loads((run / EVAL_RECORD).read_text())
        evaluation["initial"] = {**summary, "shared": reference}
        write_json(run / EVAL_RECORD, evaluation)
        (run / EVAL_RESPONSES_DIR / eval_responses_name("initial")).unlink(missing_ok=True)  # a second call: the control replaced
        summary_record = json.loads((run / RUN_RECORD).read_text())
        summary_record["config"]["workload"] = json.loads(json.dumps(WORKLOAD))
        summary_record["source_commit"] = COMMIT
        write_json(run / RUN_RECORD, summary_record)
    return directory


def _digest(value) -> str:
    """SHA256 of canonical JSON (no spaces), as docs/run-directory.md states the data ledger's digests."""
    return hashlib.sha256(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def write_ledger(job_dir: Path, nonce: str, resumed_at: int | None = None, rows_per_step: int = 4,
                 split_rows: int = 64) -> None:
    """The trainer's data ledger of a job's run (``run/data_ledger.jsonl``), written from the formula the docs state
    (not the trainer's code): one start line per process (``resumed_at``: a second process resumed there), one line
    per step of its metrics log, the rows a seeded permutation of a ``split_rows``-row split; run.json declares it and
    job.json carries the job's ``nonce``. Each process draws its own entropy (``os.urandom``), as the trainer does."""
    import os

    run_dir = run_dir_of_job(job_dir)
    metrics = [json.loads(line) for line in (run_dir / METRICS_LOG).read_text().splitlines()]
    train_sha256 = "7a" * 32
    order = random.Random(f"rows-{job_dir.name.split('.')[0]}").sample(range(split_rows), split_rows)
    steps = []
    for step in range(len(metrics)):
        rows = [order[(step * rows_per_step + i) % split_rows] for i in range(rows_per_step)]
        steps.append((rows, _digest([[r, f"question {r}", str(r)] for r in rows])))
    plan, value = [], _digest(["proofgrid data ledger", train_sha256])
    for step, (rows, digest) in enumerate(steps):
        value = _digest([value, step, rows, digest])
        plan.append(value)

    def start(at: int) -> dict:
        return {"start": {"process": os.urandom(16).hex(), "pid": 4000 + at, "started_at": 1700000000.0 + at,
                          "job_nonce": nonce, "resumed_from": at, "n_steps": len(metrics),
                          "rows_per_step": rows_per_step, "train_sha256": train_sha256, "plan_sha256": plan[-1]}}

    lines = [start(0)]
    for step, (rows, digest) in enumerate(steps):
        if step == resumed_at:
            lines.append(start(step))
        logged = {k: v for k, v in metrics[step].items() if k != "step" and not k.startswith("perf/")}
        lines.append({"step": step, "rows": rows, "rows_sha256": digest, "chain": plan[step], "plan": plan[step],
                      "metrics": hashlib.sha256(json.dumps(logged, sort_keys=True).encode()).hexdigest()})
    (run_dir / DATA_LEDGER).write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    run = json.loads((run_dir / RUN_RECORD).read_text())
    run[LEDGER_FIELD] = {"file": DATA_LEDGER, "plan_sha256": plan[-1], "n_steps": len(metrics),
                          "rows_per_step": rows_per_step, "train_sha256": train_sha256}
    write_json(run_dir / RUN_RECORD, run)
    record = json.loads((job_dir / JOB_RECORD).read_text())
    record["job_nonce"] = nonce
    write_json(job_dir / JOB_RECORD, record)


def bench_sweep(sweep: Path, jobs: int, steps: int) -> Path:
    """``jobs`` accepted jobs of ``steps`` updates at ``sweep``: the grid of the first ``a`` of ``ALGOS`` (the most
    that divide ``jobs``: the evidence expects every arm at every seed), as arms, by seeds ``0 .. jobs / a - 1``;
    every step logs the off-policy keys too, as the trainer's runs do."""
    n_arms = next(a for a in range(len(ALGOS), 0, -1) if jobs % a == 0)
    return make_sweep(sweep.parent, seeds=range(jobs // n_arms), n_steps=steps, name=sweep.name,
                      arms={algo: {"algo": algo} for algo in ALGOS[:n_arms]},
                      off_policy=lambda arm, seed, step: (0, 0.0), figures=True)


def main() -> None:
    ap = argparse.ArgumentParser(description="Write a synthetic sweep of accepted jobs (benchmarks/synthetic_sweep.py).")
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    bench_sweep(args.sweep_dir, args.jobs, args.steps)


if __name__ == "__main__":
    main()
