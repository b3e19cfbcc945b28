"""Several treatments against one baseline (issue 22, section 2): the spec names them, the verdict applies Holm's
correction across them and says so (the family, its arms, its metric, each p-value adjusted, each treatment's
verdict), the report shows it, and the audit recomputes it.

The references are written here: each paired t p-value from scipy.stats.ttest_rel, Holm's step-down by hand from
its definition (p_(i) sorted, max over j <= i of min(1, (m - j + 1) p_(j))), never the code under test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scipy import stats as sps

from benchmarks.synthetic_sweep import make_sweep
from evidence import audit_bundle, build_bundle
from evidence.dataset import load_bundle_data
from evidence.verdict import VerdictError, experiment_verdict, parse_experiment
from facts.repo import REPO_ROOT
from launcher.experiment.stage_runner import verdict_line
from tests.evidence.experiment_stages import add_launcher_stages
from tests.experiment_spec import experiment_yaml
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
SEEDS = (1, 2, 3)
BASE = {1: 0.50, 2: 0.52, 3: 0.48}
ARMS = {"grpo": {"algo": "grpo"}, "rppb": {"algo": "rppb"}, "rpp": {"algo": "rpp"}}
SPEC = experiment_yaml(hypothesis="sc or ent reaches at least 4 points higher pass@1 than isp",
                       arms={"isp": {"algo": "grpo"}, "sc": {"algo": "rppb"}, "ent": {"algo": "rpp"}},
                       criterion={"treatment": ["sc", "ent"], "inconclusive_below_points": 2})


def family_sweep(tmp_path: Path, sc: dict[int, int], ent: dict[int, int]) -> Path:
    """Baseline grpo at BASE; rppb (sc) and rpp (ent) at BASE + d/100 by seed; probe stage and registration beside."""
    diff = {"rppb": sc, "rpp": ent, "grpo": {s: 0 for s in SEEDS}}
    confirm = make_sweep(tmp_path, seeds=SEEDS, name="confirm", arms=ARMS,
                         final_pass1=lambda arm, seed: BASE[seed] + diff[arm][seed] / 100)
    (confirm / "experiment.yaml").write_text(SPEC, encoding="utf-8")
    add_launcher_stages(confirm, SPEC)
    return confirm


def holm_by_hand(p: list[float]) -> list[float]:
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def test_holm_keeps_a_treatment_whose_own_interval_excludes_0_from_being_validated(tmp_path):
    # sc: d = (5, 7, 9) points, mean 7, SD 2: its own 95% interval [2.03, 11.97] excludes 0 (p = 0.026), but
    # across two treatments Holm doubles the smaller p: 0.052 > 0.05. ent: d = (1, -1, 3), mean 1: FAILED.
    bag = build_bundle(family_sweep(tmp_path, {1: 5, 2: 7, 3: 9}, {1: 1, 2: -1, 3: 3}), figures=False).bundle_dir
    verdict = json.loads((bag / "data" / "verdict.json").read_text())
    p = [float(sps.ttest_rel([BASE[s] + d[s] / 100 for s in SEEDS], [BASE[s] for s in SEEDS]).pvalue)
         for d in ({1: 5, 2: 7, 3: 9}, {1: 1, 2: -1, 3: 3})]
    assert 0.025 < p[0] < 0.05  # alone, sc would pass the interval's test of 0
    family = verdict["family"]
    assert (family["correction"], family["baseline"], family["treatments"], family["metric"]) == (
        "holm", "isp", ["sc", "ent"], "eval/pass@1")
    assert family["alpha"] == pytest.approx(0.05)
    assert family["p_values"] == pytest.approx(p, rel=1e-6)
    assert family["adjusted_p_values"] == pytest.approx(holm_by_hand(p), rel=1e-6)
    assert family["adjusted_p_values"][0] > 0.05
    sc, ent = verdict["comparisons"]
    assert (sc["verdict"], sc["rule"]) == ("INCONCLUSIVE", "threshold-within-noise")
    assert "Holm-adjusted p 0.052" in sc["reason"]
    assert sc["difference_ci95"][0] > 0  # the per-pair interval stands beside it, unchanged
    assert (ent["verdict"], ent["rule"]) == ("FAILED", "below-threshold")
    assert sc["arms"]["treatment"] == {"name": "sc", "arm": "rppb", "overrides": {"algo": "rppb"}}
    assert ent["arms"]["baseline"]["arm"] == "grpo"
    assert (verdict["verdict"], verdict["rule"]) == ("INCONCLUSIVE", "holm-family")
    assert family["verdicts"] == ["INCONCLUSIVE", "FAILED"]
    report = (bag / "data" / "report.md").read_text()
    assert "## Verdict: INCONCLUSIVE\n" in report
    assert "Holm's step-down correction across the 2 comparisons at family-wise α = 0.05" in report
    assert f"| sc | +7.00 | [+2.03, +11.97] | {p[0]:.3g} | {holm_by_hand(p)[0]:.3g} | INCONCLUSIVE |" in report
    assert "### sc against isp: INCONCLUSIVE" in report and "### ent against isp: FAILED" in report
    line = verdict_line(verdict, "confirm/bundle.tar.gz").splitlines()
    assert line[0] == ("verdict: INCONCLUSIVE by rule holm-family: 2 treatments against isp, Holm-corrected at "
                       "family-wise α 0.05; bundle confirm/bundle.tar.gz")
    assert line[1].startswith("   sc: INCONCLUSIVE by rule threshold-within-noise: eval/pass@1 difference +7 ")
    assert line[1].endswith(f"; Holm-adjusted p {holm_by_hand(p)[0]:.3g}")
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bag)], cwd=REPO, capture_output=True,
                             text=True, timeout=300)
    assert audited.returncode == 0, audited.stdout

    # An adjusted p-value edited below α and the treatment's verdict with it, resealed: the audit recomputes both.
    edited = Path(shutil.copytree(bag, tmp_path / "edited"))
    record = json.loads((edited / "data" / "verdict.json").read_text())
    record["family"]["adjusted_p_values"][0] = 0.026
    record["comparisons"][0]["verdict"] = "VALIDATED"
    (edited / "data" / "verdict.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    reseal_bag(edited)
    reasons = [str(f) for f in audit_bundle(edited)]
    assert any(r.startswith("data/verdict.json: does not recompute: family.adjusted_p_values[0]: recorded 0.026")
               for r in reasons), reasons
    assert ("data/verdict.json: does not recompute: comparisons[0].verdict: recorded 'VALIDATED', recomputed "
            "'INCONCLUSIVE'") in reasons


def test_a_treatment_clear_of_the_correction_validates_the_family_and_a_one_item_list_is_a_two_arm_spec(tmp_path):
    confirm = family_sweep(tmp_path, {1: 6, 2: 5, 3: 6}, {1: 1, 2: 0, 3: 2})
    bag = build_bundle(confirm, figures=False).bundle_dir
    verdict = json.loads((bag / "data" / "verdict.json").read_text())
    assert [c["verdict"] for c in verdict["comparisons"]] == ["VALIDATED", "FAILED"]
    assert verdict["verdict"] == "VALIDATED"
    data = load_bundle_data(bag / "data")
    spec = yaml.safe_load(SPEC)
    one = experiment_verdict(parse_experiment({**spec, "criterion": {**spec["criterion"], "treatment": ["sc"]}}), data)
    plain = experiment_verdict(parse_experiment({**spec, "criterion": {**spec["criterion"], "treatment": "sc"}}), data)
    assert one == plain and "family" not in plain and plain["rule"] == "threshold"


@pytest.mark.parametrize(("criterion", "message"), [
    ({"baseline": None}, "criterion: no baseline; name the arm every treatment is compared with (baseline: <arm>)"),
    ({"treatment": None}, "criterion: no treatment; name the arm compared with the baseline"),
    ({"treatment": ["sc", "ent", "sc"]}, "criterion: treatment lists sc twice; name each treatment once"),
    ({"treatment": ["sc", "isp"]}, "criterion: the baseline isp is also listed as a treatment"),
    ({"treatment": ["sc", "nope"]}, "criterion: treatment 'nope' is not an arm of the spec (arms: isp, sc, ent)"),
    ({"treatment": []}, "criterion: treatment is an empty list; name at least one arm"),
    ({"baseline": "nope"}, "criterion: baseline 'nope' is not an arm of the spec"),
])
def test_a_bad_family_spec_is_one_line_naming_the_fix(criterion, message):
    spec = yaml.safe_load(SPEC)
    spec["criterion"].update(criterion)
    with pytest.raises(VerdictError) as caught:
        parse_experiment(spec)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
