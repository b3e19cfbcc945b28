"""Pre-registered verdicts on synthetic evidence, against numbers computed by hand.

Seed 003's criterion at toy scale: treatment − baseline >= 4 points, failed below 2, a collapse
of more than 10 points from the baseline's own peak also validates. Every expected number below
is written out from the definitions (t quantiles from tables), never from the code under test.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep
from evidence import audit_bundle, build_bundle
from evidence.dataset import load_bundle_data
from evidence.verdict import (
    VerdictError,
    decide,
    experiment_verdict,
    extend_grid,
    parse_experiment,
    select_setting,
    select_settings,
)
from facts.repo import REPO_ROOT
from tests.evidence.experiment_stages import add_launcher_stages, register, set_cpus
from tests.experiment_spec import experiment_yaml
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
T_975_DF2 = 4.302652729911275  # Student t, two-sided 95 %, 2 degrees of freedom
SEEDS = (1, 2, 3)
BASE = {1: 0.50, 2: 0.52, 3: 0.48}

SPEC = experiment_yaml(criterion={"inconclusive_below_points": 2, "collapse": {"drop_points": 10}})


def spec_with(**criterion) -> dict:
    import yaml

    spec = yaml.safe_load(SPEC)
    spec["criterion"].update(criterion)
    return spec


def eval_sweep(tmp_path: Path, differences_points: dict[int, float], name="sweep", stages: bool = False) -> Path:
    """Baseline arm grpo at BASE, treatment arm rppb at BASE + d/100, by seed; only algo varies.
    ``stages``: with the probe stage and the registration link the launcher leaves (an audited experiment)."""
    treat = {s: BASE[s] + differences_points[s] / 100 for s in SEEDS}
    sweep = make_sweep(tmp_path, seeds=SEEDS, name=name, arms={"grpo": {"algo": "grpo"}, "rppb": {"algo": "rppb"}},
                       final_pass1=lambda arm, seed: BASE[seed] if arm == "grpo" else treat[seed])
    (sweep / "experiment.yaml").write_text(SPEC, encoding="utf-8")
    if stages:
        add_launcher_stages(sweep, SPEC)
    return sweep


def verdict_of(sweep: Path) -> dict:
    result = build_bundle(sweep, figures=False)
    return json.loads((result.bundle_dir / "data" / "verdict.json").read_text())


# ---- the four outcomes, through the build ------------------------------------------------------

def test_a_gap_of_at_least_4_points_with_an_interval_above_zero_is_validated(tmp_path):
    verdict = verdict_of(eval_sweep(tmp_path, {1: 6, 2: 5, 3: 6}))
    # d = (6, 5, 6): mean 17/3, SD sqrt(1/3), half-width t(2) * SD / sqrt(3) = t(2) / 3
    mean, sd = 17 / 3, math.sqrt(1 / 3)
    assert (verdict["verdict"], verdict["rule"]) == ("VALIDATED", "threshold")
    assert verdict["seeds"] == [1, 2, 3]
    assert [round(r["difference"], 9) for r in verdict["per_seed"]] == [6, 5, 6]
    assert [round(r["baseline"], 9) for r in verdict["per_seed"]] == [50, 52, 48]
    assert math.isclose(verdict["difference_mean"], mean, rel_tol=1e-12)
    assert math.isclose(verdict["difference_sd"], sd, rel_tol=1e-9)
    low, high = verdict["difference_ci95"]
    assert math.isclose(low, mean - T_975_DF2 / 3, rel_tol=1e-9)
    assert math.isclose(high, mean + T_975_DF2 / 3, rel_tol=1e-9)
    assert verdict["threshold"] == 4 and verdict["metric"] == {"name": "eval/pass@1", "at": "final",
                                                                "last_k": None, "units": "points"}
    assert verdict["arms"]["baseline"] == {"name": "isp", "arm": "grpo", "overrides": {"algo": "grpo"}}
    assert verdict["edge_of_grid"] == [] and verdict["selected"] == {} and verdict["provisional"] is False


def test_a_gap_under_2_points_is_failed(tmp_path):
    verdict = verdict_of(eval_sweep(tmp_path, {1: 1, 2: 0, 3: 2}))
    assert (verdict["verdict"], verdict["rule"]) == ("FAILED", "below-threshold")
    assert math.isclose(verdict["difference_mean"], 1.0, rel_tol=1e-9)
    assert math.isclose(verdict["difference_sd"], 1.0, rel_tol=1e-9)  # sqrt((0 + 1 + 1) / 2)


def test_a_gap_between_2_and_4_points_is_inconclusive(tmp_path):
    verdict = verdict_of(eval_sweep(tmp_path, {1: 3, 2: 2, 3: 4}))
    assert (verdict["verdict"], verdict["rule"]) == ("INCONCLUSIVE", "inconclusive-band")
    assert math.isclose(verdict["difference_mean"], 3.0, rel_tol=1e-9)


def test_a_mean_gap_of_4_points_inside_seed_noise_is_inconclusive(tmp_path):
    verdict = verdict_of(eval_sweep(tmp_path, {1: 10, 2: -2, 3: 4}))
    # mean 4, SD sqrt((36 + 36 + 0) / 2) = 6, half-width t(2) * 6 / sqrt(3): the interval includes 0
    assert (verdict["verdict"], verdict["rule"]) == ("INCONCLUSIVE", "threshold-within-noise")
    assert math.isclose(verdict["difference_ci95"][0], 4 - T_975_DF2 * 6 / math.sqrt(3), rel_tol=1e-9)


RISE_AND_FALL = (0.3, 0.4, 0.5, 0.6, 0.6, 0.6, 0.5, 0.4, 0.3, 0.3)
REWARD_SPEC = SPEC.replace("metric: eval/pass@1\n  at: final", "metric: rollout/raw_reward\n  at: last_k\n  last_k: 3")


def reward_sweep(tmp_path: Path, treatment_collapses: bool) -> Path:
    def reward(arm, seed, step):
        if arm == "grpo" or treatment_collapses:
            return RISE_AND_FALL[step]
        return 0.34 + 0.01 * (seed - 2)

    sweep = make_sweep(tmp_path, seeds=SEEDS, arms={"grpo": {"algo": "grpo"}, "rppb": {"algo": "rppb"}}, reward=reward)
    (sweep / "experiment.yaml").write_text(REWARD_SPEC, encoding="utf-8")
    return sweep


def test_a_baseline_collapse_the_treatment_avoids_is_validated_by_the_collapse_rule(tmp_path):
    verdict = verdict_of(reward_sweep(tmp_path, treatment_collapses=False))
    # Trailing 3-step means of RISE_AND_FALL: 0.4, 0.5, 0.5667, 0.6, 0.5667, 0.5, 0.4, 0.3333: peak 0.6,
    # final 1/3 -> a drop of 26.67 points > 10. The treatment is flat: drop 0.
    collapse = verdict["collapse"]
    assert math.isclose(collapse["baseline"]["peak"], 60.0, rel_tol=1e-9)
    assert math.isclose(collapse["baseline"]["final"], 100 / 3, rel_tol=1e-9)
    assert math.isclose(collapse["baseline"]["drop"], 60 - 100 / 3, rel_tol=1e-9)
    assert collapse["baseline"]["collapsed"] and not collapse["treatment"]["collapsed"]
    assert (verdict["verdict"], verdict["rule"]) == ("VALIDATED", "collapse")
    # the gap alone would have failed: d = 100 * (0.33, 0.34, 0.35) - 100/3 = (-1/3, 2/3, 5/3), mean 2/3 < 2
    assert math.isclose(verdict["difference_mean"], 2 / 3, rel_tol=1e-9)
    assert verdict["metric"] == {"name": "rollout/raw_reward", "at": "last_k", "last_k": 3, "units": "points"}


def test_a_collapse_in_both_arms_is_no_collapse_difference(tmp_path):
    verdict = verdict_of(reward_sweep(tmp_path, treatment_collapses=True))
    assert verdict["collapse"]["baseline"]["collapsed"] and verdict["collapse"]["treatment"]["collapsed"]
    # no collapse rule; the arms tie on every seed (d = 0, 0, 0): a design that supports no test of 0 decides
    # nothing in either direction (adversarial finding F8), never FAILED
    assert (verdict["verdict"], verdict["rule"]) == ("INCONCLUSIVE", "no-inference")
    assert [m["rule"] for m in verdict["claim"]["missing"]] == ["tied-evaluations"]
    assert verdict["difference_mean"] == 0.0


def test_a_rejected_job_leaving_fewer_than_3_paired_seeds_is_inconclusive(tmp_path):
    sweep = eval_sweep(tmp_path, {1: 6, 2: 5, 3: 6})
    (sweep / "jobs" / "rppb-2" / "run" / "eval.json").unlink()
    verdict = verdict_of(sweep)
    assert (verdict["verdict"], verdict["rule"]) == ("INCONCLUSIVE", "too-few-seeds")
    assert verdict["seeds"] == [1, 3] and verdict["seeds_missing"] == [2]
    assert math.isclose(verdict["difference_mean"], 6.0, rel_tol=1e-9)


# ---- the rule, unit level ---------------------------------------------------------------------

def test_decide_without_an_inconclusive_band_fails_below_the_threshold_and_needs_two_seeds():
    criterion = parse_experiment({**spec_with(), "criterion": {
        "metric": "eval/pass@1", "baseline": "isp", "treatment": "sc", "threshold_points": 4}}).criterion
    outcome = decide(criterion, {1: 0.5, 2: 0.5, 3: 0.5}, {1: 0.53, 2: 0.535, 3: 0.52})
    assert (outcome.verdict, outcome.rule) == ("FAILED", "below-threshold")
    assert math.isclose(outcome.summary.mean, 17 / 6, rel_tol=1e-9)
    # two seeds support no test of 0: below the threshold too, the verdict is no refutation (finding F8)
    outcome = decide(criterion, {1: 0.5, 2: 0.5}, {1: 0.53, 2: 0.535})
    assert (outcome.verdict, outcome.rule) == ("INCONCLUSIVE", "no-inference")
    assert "is below the threshold 4 points" in outcome.reason and "in either direction" in outcome.reason
    assert decide(replace(criterion, ci_excludes_zero=False), {1: 0.5, 2: 0.5}, {1: 0.53, 2: 0.535}).verdict == \
        "FAILED"  # a rule on the mean alone decides on the mean alone, either way
    assert decide(criterion, {1: 0.5}, {1: 0.9}).rule == "too-few-seeds"
    assert decide(criterion, {1: 0.5, 2: 0.5}, {3: 0.9, 4: 0.9}).verdict == "INCONCLUSIVE"


def test_a_threshold_in_the_metrics_own_units_needs_no_rate():
    spec = spec_with()
    spec["criterion"] = {"metric": "train/loss", "at": "last_k", "baseline": "isp", "treatment": "sc",
                         "threshold": 0.5, "ci_excludes_zero": False}
    criterion = parse_experiment(spec).criterion
    outcome = decide(criterion, {1: 1.0, 2: 2.0, 3: 3.0}, {1: 1.6, 2: 2.5, 3: 3.5})
    assert (outcome.verdict, outcome.rule) == ("VALIDATED", "threshold")
    assert math.isclose(outcome.summary.mean, 1.6 / 3, rel_tol=1e-9)


@pytest.mark.parametrize(("change", "message"), [
    ({"metric": "eval/pass@3"}, "unknown eval metric eval/pass@3"),
    ({"metric": "loss"}, "name a metric as eval/pass@1"),
    ({"metric": "train/loss", "at": "last_k"}, "train/loss is not a rate, so it has no points"),
    ({"at": "last_k"}, "evaluations are read at 'final'"),
    ({"baseline": "nope"}, "baseline 'nope' is not an arm of the spec"),
    ({"treatment": "isp"}, "baseline and treatment are the same arm"),
    ({"inconclusive_below_points": 5}, "inconclusive_below (5) is above the threshold (4)"),
    ({"threshold": 0.04}, "give threshold_points or threshold, not both"),
    ({"collapse": {"drop_points": 0}}, "collapse needs a positive drop_points"),
    ({"collapse": {"drop": 0.1}}, "criterion: drop mixes units with the threshold"),
    ({"threshold_points": "4"}, "threshold must be a finite number"),
    ({"direction": "up"}, "unknown key 'direction'"),
])
def test_bad_criteria_are_one_line_errors(change, message):
    with pytest.raises(VerdictError) as caught:
        parse_experiment(spec_with(**change))
    text = str(caught.value)
    assert message in text and "\n" not in text


@pytest.mark.parametrize(("change", "message"), [
    ({"seeds": [1, 2]}, "2 seed(s); a verdict needs at least 3 (or declare exploratory: true)"),
    ({"arms": {"isp": {"algo": "grpo"}, "sc": {"algo": "grpo"}}}, "arms isp and sc are identical"),
    ({"tuning": {"setting": "workload.lr", "values": [1e-5, 4e-5], "metric": "eval/pass@1"}},
     "metric eval/pass@1 is the verdict metric"),
    ({"tuning": {"setting": "workload.lr", "values": [1e-5, 4e-5], "metric": "eval/pass@4"}},
     "eval/pass@4 is measured on the test split"),
    ({"tuning": {"setting": "workload.lr", "values": {"isp": [1, 2], "sc": [1, 2, 3]},
                 "metric": "rollout/raw_reward"}}, "same number of settings"),
    ({"tuning": {"setting": "algo", "values": [1, 2], "metric": "rollout/raw_reward"}},
     "arm isp fixes algo=grpo; tuning cannot vary it"),
    ({"tuning": {"setting": "workload.lr", "values": ["1e-4", "0.0001"], "metric": "rollout/raw_reward"}},
     "repeats a value"),
])
def test_bad_experiment_specs_are_one_line_errors(change, message):
    spec = spec_with()
    spec.update(change)
    with pytest.raises(VerdictError) as caught:
        parse_experiment(spec)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_an_exploratory_spec_may_have_fewer_seeds():
    spec = spec_with()
    spec.update(seeds=[1], exploratory=True)
    assert parse_experiment(spec).exploratory


# ---- tuning-stage selection and the edge of the grid ----------------------------------------------

def test_selection_picks_the_best_value_and_flags_a_winner_on_the_grid_edge():
    interior = select_setting("isp", "workload.lr", {"1e-5": 0.30, "4e-5": 0.50, "1.6e-4": 0.40})
    assert (interior.value, interior.edge) == ("4e-5", None)
    high = select_setting("sc", "workload.lr", {"4e-5": 0.5, "1e-5": 0.3, "1.6e-4": 0.7})  # declared out of order
    assert (high.value, high.edge) == ("1.6e-4", "high")
    low = select_setting("sc", "workload.lr", {"1e-5": 0.3, "4e-5": 0.5, "1.6e-4": 0.7}, goal="min")
    assert (low.value, low.edge) == ("1e-5", "low")
    tie = select_setting("sc", "workload.lr", {"1e-5": 0.3, "4e-5": 0.5, "1.6e-4": 0.5})
    assert tie.value == "4e-5"  # ties go to the lower value
    assert select_setting("sc", "workload.lr", {"1e-5": None, "4e-5": 0.1, "1.6e-4": None}).edge is None
    with pytest.raises(VerdictError, match="no accepted run of arm sc"):
        select_setting("sc", "workload.lr", {"1e-5": None, "4e-5": None})
    # the grid extends once beyond the edge by its own outer ratio
    assert float(extend_grid(["1e-5", "4e-5", "1.6e-4"], "high")) == pytest.approx(6.4e-4, rel=1e-12)
    assert float(extend_grid(["1e-5", "4e-5", "1.6e-4"], "low")) == pytest.approx(2.5e-6, rel=1e-12)


LRS = ("1e-5", "4e-5", "1.6e-4")
TUNED_SPEC = SPEC + """\
tuning_seeds: [1, 2]
tuning:
  setting: workload.lr
  values: [1e-5, 4e-5, 1.6e-4]
  metric: rollout/raw_reward
  at: last_k
  last_k: 3
  goal: max
  on_edge: provisional
"""
# Selection-metric level by (algo, lr): grpo is best at 4e-5 (inside), rppb at 1.6e-4 (the grid's edge).
TUNING_REWARD = {("grpo", "1e-5"): 0.30, ("grpo", "4e-5"): 0.50, ("grpo", "1.6e-4"): 0.40,
                 ("rppb", "1e-5"): 0.20, ("rppb", "4e-5"): 0.30, ("rppb", "1.6e-4"): 0.45}


def tuned_experiment(tmp_path: Path, extension: dict | None = None, rewards: dict = TUNING_REWARD) -> Path:
    """<experiment>/tuning (built) and <experiment>/confirm with the spec; returns the confirm sweep.

    ``extension``: extra tuning-stage arms, as the launcher runs them after an edge winner."""
    arms = {f"{algo}-lr{lr}": {"algo": algo, "workload.lr": lr} for algo in ("grpo", "rppb") for lr in LRS}
    arms.update(extension or {})
    tuning = make_sweep(tmp_path / "exp", seeds=(1, 2), name="tuning", arms=arms,
                        reward=lambda arm, seed, step: rewards[(arms[arm]["algo"], arms[arm]["workload.lr"])]
                        + 0.01 * seed)
    set_cpus(tuning)
    register(tuning, TUNED_SPEC)  # the launcher's pre-registration digest in the stage's records
    build_bundle(tuning, figures=False)
    confirm_arms = {"grpo-lr4e-5": {"algo": "grpo", "workload.lr": "4e-5"},
                    "rppb-lr1.6e-4": {"algo": "rppb", "workload.lr": "1.6e-4"}}
    treat = {1: 0.56, 2: 0.57, 3: 0.54}
    confirm = make_sweep(tmp_path / "exp", seeds=SEEDS, name="confirm", arms=confirm_arms,
                         final_pass1=lambda arm, seed: BASE[seed] if arm.startswith("grpo") else treat[seed])
    (confirm / "experiment.yaml").write_text(TUNED_SPEC, encoding="utf-8")
    add_launcher_stages(confirm, TUNED_SPEC, tuning_steps=10)
    return confirm


def test_tuned_experiment_selects_per_arm_flags_the_edge_and_audits_clean_through_the_cli(tmp_path):
    confirm = tuned_experiment(tmp_path)
    tuning_data = load_bundle_data(confirm.parent / "tuning" / "bundle" / "data")
    experiment = parse_experiment(TUNED_SPEC)
    selections = select_settings(experiment.tuning, experiment.arms, tuning_data)
    # mean over seeds 1, 2 of (level + 0.01 * seed): level + 0.015
    assert selections["isp"].scores["4e-5"] == pytest.approx(0.515, abs=1e-12)
    assert (selections["isp"].value, selections["isp"].edge) == ("4e-5", None)
    assert (selections["sc"].value, selections["sc"].edge) == ("1.6e-4", "high")

    run = subprocess.run([sys.executable, "-m", "evidence", "build", str(confirm), "--no-figures"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    data = confirm / "bundle" / "data"
    verdict = json.loads((data / "verdict.json").read_text())
    assert verdict["selected"] == {"isp": {"workload.lr": "4e-5"}, "sc": {"workload.lr": "1.6e-4"}}
    assert verdict["edge_of_grid"] == [{"arm": "sc", "setting": "workload.lr", "value": "1.6e-4", "side": "high"}]
    assert verdict["provisional"] is True and verdict["verdict"] == "VALIDATED"
    assert verdict["arms"]["treatment"]["arm"] == "rppb-lr1.6e-4"
    assert (data / "experiment.yaml").read_text() == TUNED_SPEC
    assert (data / "stages" / "tuning" / "steps.csv").is_file()
    report = (data / "report.md").read_text()
    assert report.splitlines()[4] == "## Verdict: VALIDATED (provisional: a tuning winner sits on the edge of its grid)"
    assert "| mean ± SD | 50.00 | 55.67 | +5.67 ± 0.58, 95% t-interval [+4.23, +7.10] |" in report

    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(confirm / "bundle.tar.gz")],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
    assert audited.returncode == 0, audited.stdout


def test_the_launcher_facing_calls_select_from_a_built_tuning_stage_and_refuse_unlogged_metrics(tmp_path):
    from evidence import check_logged, parse_experiment, select_from_bundle

    confirm = tuned_experiment(tmp_path)
    experiment = parse_experiment(TUNED_SPEC)
    chosen = select_from_bundle(experiment, confirm.parent / "tuning" / "bundle")
    assert {name: (s.value, s.edge) for name, s in chosen.items()} == {"isp": ("4e-5", None), "sc": ("1.6e-4", "high")}
    probe = load_bundle_data(confirm.parent / "tuning" / "bundle" / "data")
    check_logged(experiment, probe)
    unlogged = parse_experiment(TUNED_SPEC.replace("metric: rollout/raw_reward", "metric: train/entropy"))
    with pytest.raises(VerdictError, match="^tuning metric train/entropy is logged by no accepted run; logged: "):
        check_logged(unlogged, probe)


def test_a_grid_extended_past_its_edge_joins_the_selection_and_clears_the_flag(tmp_path):
    # The launcher extended sc's grid once beyond 1.6e-4 by the grid's ratio (x4): 6.4e-4 scores lower.
    confirm = tuned_experiment(tmp_path, {"rppb-lr6.4e-4": {"algo": "rppb", "workload.lr": "6.4e-4"}},
                               {**TUNING_REWARD, ("rppb", "6.4e-4"): 0.35})
    assert float(extend_grid(list(LRS), "high")) == pytest.approx(6.4e-4, rel=1e-12)
    experiment = parse_experiment(TUNED_SPEC)
    chosen = select_settings(experiment.tuning, experiment.arms,
                             load_bundle_data(confirm.parent / "tuning" / "bundle" / "data"))
    assert list(chosen["sc"].scores) == ["1e-5", "4e-5", "1.6e-4", "6.4e-4"]
    assert chosen["sc"].scores["6.4e-4"] == pytest.approx(0.365, abs=1e-12)
    assert (chosen["sc"].value, chosen["sc"].edge) == ("1.6e-4", None)
    verdict = verdict_of(confirm)
    assert verdict["edge_of_grid"] == [] and verdict["provisional"] is False
    assert verdict["tuning"]["scores"]["sc"]["6.4e-4"] == pytest.approx(0.365, abs=1e-12)


def reseal(bag: Path) -> None:
    reseal_bag(bag)


def test_a_hand_edited_verdict_resealed_does_not_pass_the_audit(tmp_path):
    sweep = eval_sweep(tmp_path, {1: 1, 2: 0, 3: 2}, stages=True)
    bag = build_bundle(sweep, figures=False).bundle_dir
    assert audit_bundle(bag) == []
    edited = Path(shutil.copytree(bag, tmp_path / "edited"))
    path = edited / "data" / "verdict.json"
    record = json.loads(path.read_text())
    assert record["verdict"] == "FAILED"
    record.update(verdict="VALIDATED", rule="threshold", difference_mean=5.0)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    reseal(edited)
    reasons = [str(f) for f in audit_bundle(edited)]
    assert "data/verdict.json: does not recompute: verdict: recorded 'VALIDATED', recomputed 'FAILED'" in reasons
    assert any(r.startswith("data/verdict.json: does not recompute: difference_mean") for r in reasons)
    assert not any("SHA256" in r for r in reasons)
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(edited)], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert audited.returncode == 1
    assert "data/verdict.json: does not recompute: verdict: recorded 'VALIDATED', recomputed 'FAILED'" in audited.stdout


def test_a_loosened_spec_resealed_is_caught_by_the_report_and_by_the_pre_registered_digest(tmp_path):
    sweep = eval_sweep(tmp_path, {1: 3, 2: 2, 3: 4}, stages=True)
    record = json.loads((sweep / "sweep.json").read_text())
    import hashlib

    record["experiment_sha256"] = hashlib.sha256(SPEC.encode()).hexdigest()
    (sweep / "sweep.json").write_text(json.dumps(record))
    bag = build_bundle(sweep, figures=False).bundle_dir
    assert audit_bundle(bag) == []
    # Lower the threshold to 2 points and rewrite verdict.json to what the edited spec gives.
    spec = bag / "data" / "experiment.yaml"
    spec.write_text(SPEC.replace("threshold_points: 4", "threshold_points: 2").replace(
        "inconclusive_below_points: 2", "inconclusive_below_points: 1"))
    data = load_bundle_data(bag / "data")
    forged = experiment_verdict(parse_experiment(data.experiment), data)
    assert forged["verdict"] == "VALIDATED"
    (bag / "data" / "verdict.json").write_text(json.dumps(forged, indent=2, sort_keys=True) + "\n")
    reseal(bag)
    reasons = [str(f) for f in audit_bundle(bag)]
    assert "data/experiment.yaml: SHA256 differs from the pre-registered experiment_sha256 in sweep.json" in reasons
    assert any(r.startswith("data/report.md: line") for r in reasons)  # the report still says INCONCLUSIVE


def test_an_edited_tuning_stage_resealed_is_caught_in_the_stage_and_in_the_verdict(tmp_path):
    confirm = tuned_experiment(tmp_path)
    bag = build_bundle(confirm, figures=False).bundle_dir
    assert audit_bundle(bag) == []
    # Make the baseline's edge value win its tuning: raise grpo-lr1.6e-4's rewards in the stage's steps.csv.
    steps = bag / "data" / "stages" / "tuning" / "steps.csv"
    lines = steps.read_text().splitlines()
    column = lines[0].split(",").index("rollout/raw_reward")
    for i, line in enumerate(lines):
        cells = line.split(",")
        if cells[0] == "grpo-lr1.6e-4":
            cells[column] = "0.9"
            lines[i] = ",".join(cells)
    steps.write_text("\n".join(lines) + "\n")
    reseal(bag)
    reasons = [str(f) for f in audit_bundle(bag)]
    assert any(r.startswith("data/stages/tuning/steps.csv: grpo-lr1.6e-4-1 step 0 differs from "
                            "data/stages/tuning/runs/grpo-lr1.6e-4-1/metrics.jsonl") for r in reasons)
    assert any(r.startswith("data/stages/tuning/tables/") for r in reasons)
    # the baseline's tuning winner is now 1.6e-4, which the confirm stage never ran
    assert ("data/verdict.json: cannot recompute (spec arm isp (algo=grpo, workload.lr=1.6e-4) matches 0 arms of "
            "the sweep (grpo-lr4e-5, rppb-lr1.6e-4); it must match exactly one)") in reasons


def test_a_verdict_without_its_spec_is_a_finding(clean_build, tmp_path):
    _, result = clean_build
    bag = Path(shutil.copytree(result.bundle_dir, tmp_path / "bag"))
    (bag / "data" / "verdict.json").write_text('{"verdict": "VALIDATED"}\n')
    reseal(bag)
    assert [str(f) for f in audit_bundle(bag)] == [
        "data/verdict.json: present without data/experiment.yaml: nothing to recompute it from"]


def test_a_spec_naming_no_sweep_arm_refuses_the_build_in_one_line(tmp_path):
    sweep = eval_sweep(tmp_path, {1: 1, 2: 1, 3: 1})
    (sweep / "experiment.yaml").write_text(SPEC.replace("sc: {algo: rppb}", "sc: {algo: rpp}"))
    run = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    assert run.stderr.strip() == ("python -m evidence: error: spec arm sc (algo=rpp) matches 0 arms of the sweep "
                                  "(grpo, rppb); it must match exactly one")
