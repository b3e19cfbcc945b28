"""Several pairs as one family (issue 22, section 2): Holm's step-down and Bonferroni's simultaneous intervals.

References written here: Holm's procedure run at every candidate level (the smallest level that rejects a
hypothesis is its adjusted p-value), scipy.stats' paired t-test and t-interval, a simulation of the
intervals' joint coverage, and the sweep's own eval files for what the build writes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from benchmarks.synthetic_sweep import make_sweep
from evidence import audit_bundle, build_bundle
from evidence.statistics import family
from tests.evidence.bundle_tables import edit_cell, final_pass1, rows
from tests.sweeps import reseal_bag


def holm_rejects(p: list[float], alpha: float) -> list[bool]:
    """Holm's step-down at level α: walk the sorted p-values, reject while p_(j) <= α/(m − j + 1), stop at the
    first that is not (compared as (m − j + 1)·p_(j) <= α: exact at the candidate levels below)."""
    m = len(p)
    rejected = [False] * m
    for j, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        if (m - j) * p[i] > alpha:
            break
        rejected[i] = True
    return rejected


def brute_force_holm(p: list[float]) -> list[float]:
    """Each hypothesis's adjusted p-value: the smallest level at which the procedure rejects it (levels tried:
    every (m − j)·p_(j) below 1); 1 for one no level below 1 rejects."""
    m = len(p)
    candidates = sorted({(m - j) * q for j, q in enumerate(sorted(p)) if (m - j) * q < 1})
    return [next((a for a in candidates if holm_rejects(p, a)[i]), 1.0) for i in range(m)]


def test_holm_matches_the_procedure_run_at_every_level():
    rng = np.random.default_rng(3)
    for _ in range(300):
        m = int(rng.integers(1, 7))
        p = list(rng.choice([0.001, 0.01, 0.02, 0.03, 0.2, 0.5], size=m)) if rng.random() < 0.3 \
            else list(rng.uniform(0, 0.2, size=m))  # ties too
        assert family.holm(p) == pytest.approx(brute_force_holm(p), abs=1e-15)


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, max(0.06, 1*0.04)
    assert family.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert family.holm([0.6, 0.9]) == [1.0, 1.0]


def test_the_paired_p_value_and_family_interval_are_scipy_stats():
    d = [0.031, -0.004, 0.052, 0.018]
    assert family.paired_t_p_value(d) == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue, rel=1e-12)
    low, high = family.family_interval(d, 0.95, 3)
    ref = sps.t.interval(1 - 0.05 / 3, len(d) - 1, loc=np.mean(d), scale=sps.sem(d))
    assert (low, high) == (pytest.approx(ref[0], rel=1e-12), pytest.approx(ref[1], rel=1e-12))
    assert family.paired_t_p_value([0.1]) is None
    assert family.paired_t_p_value([0.2, 0.2]) == 0.0 and family.paired_t_p_value([0.0, 0.0]) == 1.0


def test_bonferroni_intervals_cover_all_pairs_together_at_least_95_percent_in_simulation():
    rng = np.random.default_rng(11)
    reps, n, m = 4000, 4, 3
    covered = 0
    for _ in range(reps):
        true = np.array([0.0, 0.5, -0.3])
        d = rng.normal(true[:, None], 1.0, size=(m, n))
        intervals = [family.family_interval(list(row), 0.95, m) for row in d]
        covered += all(lo <= t <= hi for (lo, hi), t in zip(intervals, true))
    assert covered / reps >= 0.95 - 4 * np.sqrt(0.05 * 0.95 / reps)


# ---- through the build and the audit ------------------------------------------------------------



def test_a_three_arm_sweep_reports_each_metric_as_a_family_of_three_pairs(tmp_path):
    sweep = make_sweep(tmp_path)
    bag = build_bundle(sweep, figures=False).bundle_dir
    family_rows = [r for r in rows(bag / "data" / "tables" / "paired_family.csv") if r["metric"] == "eval_final_pass@1"]
    assert len(family_rows) == 3
    seeds = json.loads((sweep / "sweep.json").read_text())["seeds"]
    diffs = [[final_pass1(sweep, r["a"], s) - final_pass1(sweep, r["b"], s) for s in seeds] for r in family_rows]
    p = [sps.ttest_1samp(d, 0.0).pvalue for d in diffs]
    for row, d, p_raw, p_holm in zip(family_rows, diffs, p, brute_force_holm(p)):
        assert (row["family_arms"], row["m"], row["n"]) == ("grpo,rpp,rppb", "3", str(len(seeds)))
        assert float(row["p_value"]) == pytest.approx(p_raw, rel=1e-9)
        assert float(row["p_holm"]) == pytest.approx(p_holm, rel=1e-9)
        low, high = sps.t.interval(1 - 0.05 / 3, len(d) - 1, loc=np.mean(d), scale=sps.sem(d))
        assert float(row["family_ci_low"]) == pytest.approx(low, rel=1e-9)
        assert float(row["family_ci_high"]) == pytest.approx(high, rel=1e-9)
        assert float(row["pair_level"]) == pytest.approx(1 - 0.05 / 3, rel=1e-12)
    report = (bag / "data" / "report.md").read_text()
    assert "## The family of comparisons" in report and "(98.33% for m = 3)" in report
    assert "With 3 arms (GRPO, REINFORCE++, REINFORCE++-baseline)" in report

    edited = Path(shutil.copytree(bag, tmp_path / "edited"))
    table = edited / "data" / "tables" / "paired_family.csv"
    edit_cell(table, 2, "p_holm", 0.001)
    reseal_bag(edited)
    reasons = [str(f) for f in audit_bundle(edited)]
    assert any(r.startswith("data/tables/paired_family.csv: line 2, column p_holm:") for r in reasons), reasons


def test_two_arms_are_no_family(tmp_path):
    bag = build_bundle(make_sweep(tmp_path, algos=("grpo", "rpp")), figures=False).bundle_dir
    assert rows(bag / "data" / "tables" / "paired_family.csv") == []
    assert "## The family of comparisons" not in (bag / "data" / "report.md").read_text()
