"""``python -m evidence compare A B`` on synthetic sweeps, against ratios and intervals computed by hand."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats as scipy_stats
from sweep_factory import make_sweep

from evidence import build_bundle
from evidence.compare import CompareError, compare_paths

REPO = Path(__file__).resolve().parents[2]
T_975_DF2 = 4.302652729911275  # Student t, two-sided 95 %, 2 degrees of freedom
PASS1_A = {("grpo", 1): 0.40, ("grpo", 2): 0.50, ("grpo", 3): 0.45, ("rpp", 1): 0.30, ("rpp", 2): 0.35, ("rpp", 3): 0.40}
PASS1_B = {("grpo", 1): 0.38, ("grpo", 2): 0.44, ("grpo", 3): 0.42, ("rpp", 1): 0.31, ("rpp", 2): 0.36, ("rpp", 3): 0.41,
           ("grpo", 4): 0.40, ("grpo", 5): 0.50}


def before_after(tmp_path: Path, seeds_b=(1, 2, 3), workload_b="toy", arms_b=None):
    a = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=(1, 2, 3), name="before",
                   final_pass1=lambda arm, seed: PASS1_A[(arm, seed)],
                   reward=lambda arm, seed, step: 0.5 + 0.01 * seed)
    b = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=seeds_b, name="after", workload=workload_b, arms=arms_b,
                   final_pass1=lambda arm, seed: PASS1_B.get((arm, seed), 0.5),
                   reward=lambda arm, seed, step: 0.6 + 0.02 * seed)
    # seed 002's regression: the loss about 80x and the gradient norm about 130x larger after the change
    for log in (b / "jobs").glob("*/run/metrics.jsonl"):
        records = [json.loads(line) for line in log.read_text().splitlines()]
        for r in records:
            r["train/loss"] *= 80
            r["train/grad_norm"] *= 130
        log.write_text("".join(json.dumps(r) + "\n" for r in records))
    return a, b


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evidence", "compare", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def csv_rows(path: Path) -> dict[tuple[str, str], dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return {(r["metric"], r["arm"]): r for r in csv.DictReader(handle)}


def last_k_mean_from_logs(sweep: Path, job: str, key: str, k: int = 10) -> float:
    records = [json.loads(line) for line in (sweep / "jobs" / job / "run" / "metrics.jsonl").read_text().splitlines()]
    values = [r[key] for r in records][-k:]
    return sum(values) / len(values)


def test_compare_pairs_by_seed_with_hand_computed_ratio_change_and_interval(tmp_path):
    a, b = before_after(tmp_path)
    result = cli(a, b, "--csv", tmp_path / "cmp.csv", "--metric", "train/clip_frac")
    assert result.returncode == 0, result.stderr
    assert not (a / "bundle").exists() and not (b / "bundle").exists()  # compare writes nothing into a sweep
    rows = csv_rows(tmp_path / "cmp.csv")
    assert {m for m, _ in rows} == {"train/loss", "train/grad_norm", "rollout/raw_reward", "eval/pass@1",
                                    "train/clip_frac"}
    assert {arm for _, arm in rows} == {"grpo", "rpp"}

    row = rows[("eval/pass@1", "grpo")]
    mean_a, mean_b = (0.40 + 0.50 + 0.45) / 3, (0.38 + 0.44 + 0.42) / 3
    assert math.isclose(float(row["a_mean"]), mean_a, rel_tol=1e-12)
    assert math.isclose(float(row["ratio_b_over_a"]), mean_b / mean_a, rel_tol=1e-12)  # 0.91852
    assert math.isclose(float(row["change_pct"]), (mean_b - mean_a) / mean_a * 100, rel_tol=1e-9)  # -8.15 %
    assert math.isclose(float(row["change_points"]), -11 / 3, rel_tol=1e-9)
    # paired by seed, in points: d = (-2, -6, -3), mean -11/3, SD sqrt(((5/3)^2 + (7/3)^2 + (2/3)^2) / 2)
    sd = math.sqrt(((5 / 3) ** 2 + (7 / 3) ** 2 + (2 / 3) ** 2) / 2)
    assert row["pairing"] == "paired" and row["n_pairs"] == "3" and row["diff_units"] == "points"
    assert math.isclose(float(row["diff_mean"]), -11 / 3, rel_tol=1e-9)
    assert math.isclose(float(row["diff_sd"]), sd, rel_tol=1e-9)
    assert math.isclose(float(row["ci_low"]), -11 / 3 - T_975_DF2 * sd / math.sqrt(3), rel_tol=1e-9)
    assert math.isclose(float(row["ci_high"]), -11 / 3 + T_975_DF2 * sd / math.sqrt(3), rel_tol=1e-9)

    reward = rows[("rollout/raw_reward", "rpp")]
    # constant per run: A 0.5 + 0.01 s, B 0.6 + 0.02 s for s = 1, 2, 3: means 0.52 and 0.64,
    # d = 10 + s points = (11, 12, 13): mean 12, SD 1
    assert math.isclose(float(reward["ratio_b_over_a"]), 0.64 / 0.52, rel_tol=1e-9)
    assert math.isclose(float(reward["diff_mean"]), 12.0, rel_tol=1e-9)
    assert math.isclose(float(reward["diff_sd"]), 1.0, rel_tol=1e-9)

    loss = rows[("train/loss", "grpo")]
    runs_a = [last_k_mean_from_logs(a, f"grpo-{s}", "train/loss") for s in (1, 2, 3)]
    runs_b = [last_k_mean_from_logs(b, f"grpo-{s}", "train/loss") for s in (1, 2, 3)]
    assert math.isclose(float(loss["ratio_b_over_a"]), (sum(runs_b) / 3) / (sum(runs_a) / 3), rel_tol=1e-9)
    assert math.isclose(float(loss["ratio_b_over_a"]), 80, rel_tol=1e-9)
    grad = rows[("train/grad_norm", "rpp")]
    assert math.isclose(float(grad["change_pct"]), 12900, rel_tol=1e-9)  # 130x = +12,900 %
    assert loss["diff_units"] == "units" and loss["change_points"] == ""
    diffs = [rb - ra for ra, rb in zip(runs_a, runs_b)]
    assert math.isclose(float(loss["diff_mean"]), sum(diffs) / 3, rel_tol=1e-9, abs_tol=1e-15)

    lines = result.stdout.splitlines()
    assert lines[0] == "# Compare A = before -> B = after"
    shown = next(line for line in lines if line.startswith("| eval/pass@1 (final) | grpo |"))
    assert "| 0.45 | 0.4133 | 0.919x | -8.1% (-3.67 points) | -3.667 ± 2.082 points |" in shown


def test_compare_reads_bundle_archives_and_directories_like_the_sweeps(tmp_path):
    a, b = before_after(tmp_path)
    from_sweeps = compare_paths(a, b)
    build_bundle(a, figures=False)
    build_bundle(b, figures=False)
    from_bundles = compare_paths(a / "bundle.tar.gz", b / "bundle").split("\n")
    assert from_bundles[0] == "# Compare A = before/bundle.tar.gz -> B = after/bundle"
    assert from_bundles[4:] == from_sweeps.split("\n")[4:]


def test_different_seeds_compare_unpaired_with_a_welch_interval_and_a_note(tmp_path):
    a, b = before_after(tmp_path, seeds_b=(4, 5))
    result = cli(a, b, "--csv", tmp_path / "cmp.csv")
    assert result.returncode == 0, result.stderr
    row = csv_rows(tmp_path / "cmp.csv")[("eval/pass@1", "grpo")]
    assert row["pairing"] == "unpaired" and "seeds differ (A 1, 2, 3; B 4, 5)" in row["note"]
    group_a, group_b = [40.0, 50.0, 45.0], [40.0, 50.0]  # points
    ma, mb = sum(group_a) / 3, sum(group_b) / 2
    va = sum((x - ma) ** 2 for x in group_a) / 2 / 3
    vb = sum((x - mb) ** 2 for x in group_b) / 1 / 2
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 1)
    half = scipy_stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert math.isclose(float(row["diff_mean"]), mb - ma, abs_tol=1e-12)
    assert math.isclose(float(row["ci_low"]), mb - ma - half, rel_tol=1e-9)
    assert math.isclose(float(row["ci_high"]), mb - ma + half, rel_tol=1e-9)


def test_compare_refuses_different_workloads_and_no_common_arm_unless_forced(tmp_path):
    a, b = before_after(tmp_path, workload_b="gsm8k_qwen3_0p6b")
    refused = cli(a, b)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == ("python -m evidence: error: A ran workload 'toy' and B 'gsm8k_qwen3_0p6b': not "
                              "comparable (--force compares them anyway)\n")
    assert cli(a, b, "--force").returncode == 0

    other = make_sweep(tmp_path, seeds=(1, 2, 3), name="lr", arms={"rpp-lr3e-4": {"algo": "rpp", "workload.lr": "3e-4"},
                                                                  "rpp-lr1e-4": {"algo": "rpp", "workload.lr": "1e-4"}})
    refused = cli(a, other)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "no arm in both (A: grpo, rpp; B: rpp-lr1e-4, rpp-lr3e-4)" in refused.stderr
    forced = cli(a, other, "--force")
    assert forced.returncode == 0 and "_No arm in both inputs: nothing to compare._" in forced.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("missing-a", "missing-b"), "missing-a: no such file or directory"),
    (("{a}", "{a}", "--metric", "eval/pass@3"), "--metric: unknown eval metric eval/pass@3"),
    (("{a}", "{a}", "--last-k", "0"), "--last-k must be at least 1"),
])
def test_compare_bad_input_is_one_line(tmp_path, args, message):
    a = make_sweep(tmp_path, algos=("grpo",), seeds=(1, 2))
    result = cli(*(x.format(a=a) for x in args))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr


def test_compare_refuses_an_unknown_input_kind(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CompareError, match="not a sweep directory"):
        compare_paths(tmp_path, tmp_path / "notes.txt")
