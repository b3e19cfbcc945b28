"""Evidence grouped by arm (the arm contract): an lr x algo x seed sweep, and older sweeps without arm fields."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

from benchmarks.synthetic_sweep import job_dir, make_sweep
from evidence import audit_bundle, build_bundle
from facts.repo import REPO_ROOT
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
ARMS = {
    "grpo-lr1e-4": {"algo": "grpo", "workload.lr": "1e-4"},
    "grpo-lr3e-4": {"algo": "grpo", "workload.lr": "3e-4"},
    "rpp-lr1e-4": {"algo": "rpp", "workload.lr": "1e-4"},
    "rpp-lr3e-4": {"algo": "rpp", "workload.lr": "3e-4"},
}
# Final pass@1 by (arm, seed), chosen so every mean and difference below is exact by hand.
PASS1 = {
    ("grpo-lr1e-4", 1): 0.50, ("grpo-lr1e-4", 2): 0.60,
    ("grpo-lr3e-4", 1): 0.40, ("grpo-lr3e-4", 2): 0.70,
    ("rpp-lr1e-4", 1): 0.55, ("rpp-lr1e-4", 2): 0.65,
    ("rpp-lr3e-4", 1): 0.30, ("rpp-lr3e-4", 2): 0.50,
}


def rows(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def arm_sweep(tmp_path):
    return make_sweep(tmp_path, seeds=(1, 2), arms=ARMS, final_pass1=lambda arm, seed: PASS1[(arm, seed)])


def test_an_lr_by_algo_sweep_builds_through_the_cli_grouped_by_arm_and_audits_clean(tmp_path):
    sweep = arm_sweep(tmp_path)
    run = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    data = sweep / "bundle" / "data"
    index = rows(data / "index.csv")
    assert [(r["job"], r["arm"], r["algo"], r["accepted"]) for r in index] == [
        (f"{arm}-{seed}", arm, ARMS[arm]["algo"], "yes") for arm in ARMS for seed in (1, 2)]
    assert {r["arm"] for r in rows(data / "steps.csv")} == set(ARMS)

    finals = {r["arm"]: r for r in rows(data / "tables" / "eval_aggregate.csv") if r["checkpoint"] == "final"}
    assert list(finals) == list(ARMS)
    for arm in ARMS:
        values = [PASS1[(arm, 1)], PASS1[(arm, 2)]]
        mean = sum(values) / 2
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 1)
        assert math.isclose(float(finals[arm]["pass@1_mean"]), mean, abs_tol=1e-12)
        assert math.isclose(float(finals[arm]["pass@1_sd"]), sd, abs_tol=1e-12)
        assert finals[arm]["algo"] == ARMS[arm]["algo"]

    paired = {(r["a"], r["b"]): r for r in rows(data / "tables" / "paired_differences.csv")
              if r["metric"] == "eval_final_pass@1"}
    assert len(paired) == 6  # every pair of the four arms, compared by seed
    row = paired[("grpo-lr3e-4", "grpo-lr1e-4")]
    # d = (0.40 - 0.50, 0.70 - 0.60) = (-0.10, +0.10): mean 0, SD sqrt(0.02), t(0.975, 1) = 12.7062047
    assert math.isclose(float(row["seed_1"]), -0.10, abs_tol=1e-12)
    assert math.isclose(float(row["seed_2"]), 0.10, abs_tol=1e-12)
    assert math.isclose(float(row["mean"]), 0.0, abs_tol=1e-12)
    half = 12.706204736174698 * math.sqrt(0.02) / math.sqrt(2)
    assert math.isclose(float(row["ci_high"]), half, rel_tol=1e-9)

    config = rows(data / "tables" / "algorithm_config.csv")
    lr = next(r for r in config if r["setting"] == "lr")
    assert (lr["grpo-lr1e-4"], lr["rpp-lr3e-4"]) == ("0.0001", "0.0003")
    report = (data / "report.md").read_text()
    assert "| Arm | Seed |" in report and "rpp-lr3e-4 (algo=rpp, workload.lr=3e-4)" in report
    assert "grpo-lr3e-4 − grpo-lr1e-4" in report
    assert audit_bundle(sweep / "bundle") == []


def test_a_sweep_without_arm_fields_is_one_arm_per_algo(clean_build):
    _, result = clean_build
    data = result.bundle_dir / "data"
    assert all(r["arm"] == r["algo"] for r in rows(data / "index.csv"))
    assert [r["arm"] for r in rows(data / "tables" / "stability.csv")] == ["grpo", "rpp", "rppb"]
    report = (data / "report.md").read_text()
    assert "| Algorithm | Seed |" in report and "REINFORCE++ − GRPO" in report and "Arms (" not in report


def test_a_job_recording_another_arm_is_rejected(tmp_path):
    sweep = arm_sweep(tmp_path)
    path = job_dir(sweep, "rpp-lr3e-4", 2) / "job.json"
    record = json.loads(path.read_text())
    record["arm"] = "rpp-lr1e-4"
    path.write_text(json.dumps(record))
    result = build_bundle(sweep, figures=False)
    row = next(r for r in result.jobs if r["job"] == "rpp-lr3e-4-2")
    assert row["accepted"] == "no" and "records arm rpp-lr1e-4, not rpp-lr3e-4" in row["reason"]


def test_a_bundle_whose_sweep_json_names_an_unsafe_arm_is_a_finding_not_a_crash(tmp_path):
    sweep = arm_sweep(tmp_path)
    bag = build_bundle(sweep, figures=False).bundle_dir
    path = bag / "data" / "sweep.json"
    record = json.loads(path.read_text())
    record["arms"]["../escape"] = record["arms"].pop("rpp-lr3e-4")
    path.write_text(json.dumps(record))
    reseal_bag(bag)
    reasons = [str(f) for f in audit_bundle(bag)]
    assert "data: cannot recompute (SweepError: sweep.json: arm label '../escape' is not a filesystem-safe name)" in reasons
