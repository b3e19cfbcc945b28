"""The verdict decides about the arms the spec names: each spec arm owns the runs of its overrides,
never the runs of a label that happens to be its name (``grpo: {algo: rppb}`` beside ``rppb: {algo: grpo}``)."""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.synthetic_sweep import make_sweep
from evidence.verdict import arm_owner
from facts.repo import REPO_ROOT
from tests.evidence.experiment_stages import add_launcher_stages

REPO = REPO_ROOT
SEEDS = (1, 2, 3)
BASE = {1: 0.50, 2: 0.52, 3: 0.48}
# The treatment's spec arm is named grpo and runs rppb; the baseline's is named rppb and runs grpo.
SWAPPED = """\
title: swapped names
hypothesis: rppb reaches at least 4 points higher pass@1 than grpo
arms:
  rppb: {algo: grpo}
  grpo: {algo: rppb}
seeds: [1, 2, 3]
criterion:
  metric: eval/pass@1
  at: final
  baseline: rppb
  treatment: grpo
  threshold_points: 4
  inconclusive_below_points: 2
"""


def test_spec_arms_named_like_the_other_arms_labels_decide_about_their_own_runs(tmp_path):
    treat = {s: BASE[s] + 0.04 + 0.01 * s for s in SEEDS}  # the rppb runs are 5, 6 and 7 points better
    sweep = make_sweep(tmp_path, seeds=SEEDS, arms={"grpo": {"algo": "grpo"}, "rppb": {"algo": "rppb"}},
                       final_pass1=lambda arm, seed: treat[seed] if arm == "rppb" else BASE[seed])
    (sweep / "experiment.yaml").write_text(SWAPPED, encoding="utf-8")
    add_launcher_stages(sweep, SWAPPED)  # the probe stage and the registration link an experiment's bundle carries
    run = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    verdict = json.loads((sweep / "bundle" / "data" / "verdict.json").read_text())
    assert verdict["arms"]["treatment"] == {"name": "grpo", "arm": "rppb", "overrides": {"algo": "rppb"}}
    assert verdict["arms"]["baseline"] == {"name": "rppb", "arm": "grpo", "overrides": {"algo": "grpo"}}
    assert [round(r["difference"], 9) for r in verdict["per_seed"]] == [5.0, 6.0, 7.0]
    assert verdict["verdict"] == "VALIDATED"
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(sweep / "bundle.tar.gz")],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
    assert audited.returncode == 0, audited.stdout


def test_an_arm_owns_the_runs_that_carry_its_overrides_and_no_other_arms_keys():
    arms = {"plain": {"algo": "dapo"}, "token": {"algo": "dapo", "algo.loss_reduction": "token_mean"}}
    assert arm_owner(arms, {"algo": "dapo", "workload.lr": "1e-4"}) == "plain"
    assert arm_owner(arms, {"algo": "dapo", "algo.loss_reduction": "token_mean"}) == "token"
    assert arm_owner(arms, {"algo": "dapo", "algo.loss_reduction": "sum"}) is None
    assert arm_owner({"a": {"algo": "rpp"}, "b": {"algo": "grpo"}}, {"algo": "rppb"}) is None
    assert arm_owner({"a": {"workload.lr": "3e-4"}, "b": {"workload.lr": "1e-4"}}, {"workload.lr": "0.0003"}) == "a"
