"""The minimum detectable effect of a paired design (issue 22, section 1) against simulation and scipy.stats.

The references are written here: a Monte Carlo run of the paired t-test at the claimed MDE (its rejection
rate must be 80 %), the power integrated over the SD's chi-square with scipy.integrate, the normal approximation for large n, and
the sweep's own eval files for the numbers the build writes.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sps

from benchmarks.synthetic_sweep import make_sweep
from evidence import audit_bundle, build_bundle
from evidence.statistics import minimum_detectable_effect, paired_t_power
from facts.repo import REPO_ROOT
from launcher.experiment.stage_runner import verdict_line
from tests.evidence.bundle_tables import edit_cell, final_pass1, rows
from tests.evidence.experiment_stages import add_launcher_stages
from tests.experiment_spec import experiment_yaml
from tests.sweeps import reseal_bag

REPO = REPO_ROOT


def simulated_power(delta: float, sd: float, n: int, alpha: float, reps: int = 200_000, seed: int = 7) -> float:
    """The share of simulated paired designs (n differences ~ N(δ, σ²)) the two-sided t-test rejects."""
    rng = np.random.default_rng(seed)
    d = rng.normal(delta, sd, size=(reps, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    return float(np.mean(np.abs(t) > sps.t.ppf(1 - alpha / 2, n - 1)))


@pytest.mark.parametrize("n, sd, alpha", [(3, 1.0, 0.05), (5, 0.02, 0.05), (10, 2.5, 0.05), (4, 3.0, 0.1)])
def test_the_paired_mde_is_detected_80_percent_of_the_time_in_simulation(n, sd, alpha):
    mde = minimum_detectable_effect(sd, n, alpha)
    reps = 200_000
    tolerance = 4 * math.sqrt(0.8 * 0.2 / reps)  # four binomial standard errors
    assert simulated_power(mde, sd, n, alpha, reps) == pytest.approx(0.8, abs=tolerance)
    assert simulated_power(0.9 * mde, sd, n, alpha, reps) < 0.8 - tolerance  # a smaller effect is missed more often


def integrated_power(delta: float, sd: float, n: int, alpha: float) -> float:
    """The paired t-test's power by integrating over the chi-square of the SD: T = (Z + λ)/√(V/df), so
    P(|T| > c) = ∫ [Φ(λ − c√(v/df)) + Φ(−λ − c√(v/df))] f_χ²(v; df) dv (no noncentral t code at all)."""
    from scipy import integrate, special

    df, lam = n - 1, delta * math.sqrt(n) / sd
    c = sps.t.ppf(1 - alpha / 2, df)
    log_norm = (df / 2) * math.log(2) + math.lgamma(df / 2)

    def integrand(v):  # Φ by special.ndtr and the χ² density written out: scipy.stats' per-call overhead is 100x
        if v <= 0:
            return 0.0
        s = c * math.sqrt(v / df)
        density = math.exp((df / 2 - 1) * math.log(v) - v / 2 - log_norm)
        return (special.ndtr(lam - s) + special.ndtr(-lam - s)) * density
    return integrate.quad(integrand, 0, np.inf, epsabs=1e-13, epsrel=1e-11, limit=200)[0]


def test_the_power_matches_the_integral_over_the_sd_and_is_alpha_at_zero():
    for n, delta, sd in ((3, 2.0, 1.0), (8, 0.5, 1.3), (2, 20.0, 1.0), (30, 0.4, 1.0), (5, 0.0, 1.0)):
        assert paired_t_power(delta, sd, n, 0.05) == pytest.approx(integrated_power(delta, sd, n, 0.05), rel=1e-7)
    assert paired_t_power(0.0, 1.0, 5, 0.05) == pytest.approx(0.05, rel=1e-12)


def test_the_mde_solves_power_080_by_the_integral_and_meets_the_normal_formula_at_large_n():
    def reference_mde(sd, n, alpha):
        return optimize.brentq(lambda d: integrated_power(d, sd, n, alpha) - 0.8, 0.0, 50 * sd, xtol=1e-12)

    for n, sd in ((3, 1.0), (6, 0.7), (12, 4.0)):
        assert minimum_detectable_effect(sd, n, 0.05) == pytest.approx(reference_mde(sd, n, 0.05), rel=1e-7)
    normal = (sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) / math.sqrt(400)
    assert minimum_detectable_effect(1.0, 400, 0.05) == pytest.approx(normal, rel=5e-3)
    assert minimum_detectable_effect(1.0, 3, 0.05) > 1.5 * (sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) / math.sqrt(3)


def test_no_mde_without_two_seeds_and_zero_without_spread():
    assert minimum_detectable_effect(None, 1, 0.05) is None
    assert minimum_detectable_effect(0.3, 1, 0.05) is None
    assert minimum_detectable_effect(0.0, 3, 0.05) == 0.0


# ---- through the build and the audit ------------------------------------------------------------



def independent_mde(differences: list[float]) -> float:
    """MDE at 80 % power, α 0.05, by a root of the integrated power (not the code under test)."""
    n, sd = len(differences), float(np.std(differences, ddof=1))
    return optimize.brentq(lambda d: integrated_power(d, sd, n, 0.05) - 0.8, 0.0, 100 * sd, xtol=1e-14 * sd)


def test_the_paired_table_states_each_pairs_mde_through_python_m_evidence_build(tmp_path):
    sweep = make_sweep(tmp_path)
    built = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    data = sweep / "bundle" / "data"
    checked = 0
    for row in rows(data / "tables" / "paired_differences.csv"):
        if row["metric"] != "eval_final_pass@1":
            continue
        seeds = json.loads((sweep / "sweep.json").read_text())["seeds"]
        diffs = [final_pass1(sweep, row["a"], s) - final_pass1(sweep, row["b"], s) for s in seeds]
        assert float(row["mde"]) == pytest.approx(independent_mde(diffs), rel=1e-7)
        checked += 1
    assert checked == 3
    report = (data / "report.md").read_text()
    assert "| MDE (80% power) |" in report and "with 80% power in a two-sided paired t-test at α = 0.05" in report


BASE = {1: 0.50, 2: 0.52, 3: 0.48}
SPEC = experiment_yaml(criterion={"inconclusive_below_points": 2})


def experiment_sweep(tmp_path: Path, points: dict[int, float]) -> Path:
    sweep = make_sweep(tmp_path, seeds=(1, 2, 3), arms={"grpo": {"algo": "grpo"}, "rppb": {"algo": "rppb"}},
                       final_pass1=lambda arm, seed: BASE[seed] + (points[seed] / 100 if arm == "rppb" else 0))
    (sweep / "experiment.yaml").write_text(SPEC, encoding="utf-8")
    add_launcher_stages(sweep, SPEC)  # the probe stage and the registration link an experiment's bundle carries
    return sweep


def verdict_points(sweep: Path) -> list[float]:
    """The per-seed differences in points, from the sweep's own eval files."""
    return [100 * (final_pass1(sweep, "rppb", s) - final_pass1(sweep, "grpo", s)) for s in (1, 2, 3)]


def test_a_failed_verdict_whose_interval_reaches_the_threshold_is_marked_under_powered(tmp_path):
    sweep = experiment_sweep(tmp_path, {1: 4, 2: -3, 3: 1})
    bag = build_bundle(sweep, figures=False).bundle_dir
    verdict = json.loads((bag / "data" / "verdict.json").read_text())
    d = verdict_points(sweep)
    half = sps.t.ppf(0.975, 2) * np.std(d, ddof=1) / math.sqrt(3)
    assert np.mean(d) < 2 and np.mean(d) + half >= 4  # FAILED by the rule, yet the interval reaches 4 points
    assert (verdict["verdict"], verdict["rule"], verdict["under_powered"]) == ("FAILED", "below-threshold", True)
    assert verdict["mde"]["power"] == 0.8 and verdict["mde"]["alpha"] == pytest.approx(0.05)
    assert verdict["mde"]["value"] == pytest.approx(independent_mde(d), rel=1e-7)
    report = (bag / "data" / "report.md").read_text()
    assert "## Verdict: FAILED (under-powered)" in report
    assert f"Minimum detectable effect: {independent_mde(d):.2f} points" in report
    assert "The pre-registered rule's verdict stands." in report
    assert audit_bundle(bag) == []
    # the line the launcher prints after the confirm stage carries the mark too
    assert verdict_line(verdict, "confirm/bundle.tar.gz").startswith(
        "verdict: FAILED (under-powered) by rule below-threshold: eval/pass@1 difference ")


def test_a_failed_verdict_with_a_tight_interval_is_not_under_powered(tmp_path):
    verdict = json.loads((build_bundle(experiment_sweep(tmp_path, {1: 1, 2: 0, 3: 2}), figures=False).bundle_dir
                          / "data" / "verdict.json").read_text())
    assert verdict["verdict"] == "FAILED" and verdict["under_powered"] is False  # interval high 1 + 2.48 < 4
    assert verdict_line(verdict, "confirm/bundle.tar.gz") == (
        "verdict: FAILED by rule below-threshold: eval/pass@1 difference +1 [-1.48, +3.48] points; bundle "
        "confirm/bundle.tar.gz")


def test_an_edited_mde_resealed_is_caught_in_the_table_the_report_and_the_verdict(tmp_path):
    sweep = experiment_sweep(tmp_path, {1: 4, 2: -3, 3: 1})
    bag = Path(shutil.copytree(build_bundle(sweep, figures=False).bundle_dir, tmp_path / "edited"))
    table = bag / "data" / "tables" / "paired_differences.csv"
    edit_cell(table, 2, "mde", float(rows(table)[0]["mde"]) / 2)  # claim twice the sensitivity
    record = json.loads((bag / "data" / "verdict.json").read_text())
    record["mde"]["value"] = 1.0
    record["under_powered"] = False
    (bag / "data" / "verdict.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    report = bag / "data" / "report.md"
    report.write_text(report.read_text().replace("## Verdict: FAILED (under-powered)", "## Verdict: FAILED"))
    reseal_bag(bag)
    reasons = [str(f) for f in audit_bundle(bag)]
    assert any(r.startswith("data/tables/paired_differences.csv: line 2, column mde:") for r in reasons), reasons
    assert any(r.startswith("data/verdict.json: does not recompute: mde.value") for r in reasons), reasons
    assert "data/verdict.json: does not recompute: under_powered: recorded False, recomputed True" in reasons
    assert any(r.startswith("data/report.md: line") and "under-powered" in r for r in reasons), reasons
    assert not any("SHA256" in r for r in reasons)
