"""Beside the t-interval (issue 22, section 3): the paired bootstrap interval, the interquartile mean and the
probability of improvement.

References written here: the bootstrap distribution enumerated exactly (every resample of a few seeds), scipy's
``bootstrap`` called with the method and seed each row records, the IQM and the probability of improvement
from their definitions by sorting and counting, and the sweep's own eval files for what the build writes.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from benchmarks.synthetic_sweep import make_sweep
from evidence import audit_bundle, build_bundle
from evidence.statistics import resampling, robust
from tests.evidence.bundle_tables import edit_cell, final_pass1, rows
from tests.sweeps import reseal_bag


def exact_bootstrap_percentiles(d: list[float], level: float) -> tuple[float, float]:
    """The percentile interval of the exact bootstrap distribution: the mean of each of the n^n equally likely
    resamples, and its (1 ∓ level)/2 quantiles."""
    means = np.array([np.mean(r) for r in itertools.product(d, repeat=len(d))])
    return tuple(np.quantile(means, [(1 - level) / 2, (1 + level) / 2]))


def test_the_bootstrap_interval_approaches_the_exact_bootstrap_distribution():
    d = [0.031, -0.004, 0.052, 0.018, -0.021, 0.066]
    low, high = resampling.paired_bootstrap_interval(d, 0.95)
    ref_low, ref_high = exact_bootstrap_percentiles(d, 0.95)
    spread = max(d) - min(d)
    assert low == pytest.approx(ref_low, abs=0.02 * spread)  # Monte Carlo of 9999 resamples against the exact one
    assert high == pytest.approx(ref_high, abs=0.02 * spread)


def test_the_bootstrap_interval_is_reproduced_exactly_from_its_recorded_seed():
    d = [0.031, -0.004, 0.052, 0.018]
    res = sps.bootstrap((np.array(d),), np.mean, n_resamples=9999, confidence_level=0.95, method="percentile",
                        rng=np.random.default_rng(22))
    assert resampling.paired_bootstrap_interval(d, 0.95) == (res.confidence_interval.low, res.confidence_interval.high)
    assert (resampling.BOOTSTRAP_METHOD, resampling.BOOTSTRAP_RESAMPLES, resampling.BOOTSTRAP_SEED) == (
        "percentile", 9999, 22)
    many = list(np.random.default_rng(1).normal(size=12))  # enough distinct resample means for seeds to differ
    assert resampling.paired_bootstrap_interval(many, 0.95, seed=23) != resampling.paired_bootstrap_interval(many, 0.95)
    assert resampling.paired_bootstrap_interval([0.5], 0.95) is None
    assert resampling.paired_bootstrap_interval([0.5, 0.5, 0.5], 0.95) == (0.5, 0.5)


def reference_iqm(values: list[float]) -> float:
    """Sort, drop floor(n/4) runs from each end, average the rest."""
    k = len(values) // 4
    kept = sorted(values)[k:len(values) - k]
    return sum(kept) / len(kept)


def reference_poi(a: list[float], b: list[float]) -> float:
    """Count every (run of a, run of b): a win 1, a tie ½; divide by the pairs."""
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b) / (len(a) * len(b))


def test_iqm_and_probability_of_improvement_by_their_definitions_and_refused_below_four_runs():
    rng = np.random.default_rng(5)
    for n in range(4, 13):
        values = list(rng.normal(size=n))
        assert robust.interquartile_mean(values) == pytest.approx(reference_iqm(values), rel=1e-12)
        other = list(np.round(rng.normal(size=n + 1), 1))
        mine = list(np.round(values, 1))  # ties
        assert robust.probability_of_improvement(mine, other) == pytest.approx(reference_poi(mine, other), rel=1e-12)
        # the library definitions the docstrings name (computed in numpy there: scipy.stats costs a second to import)
        assert robust.interquartile_mean(values) == pytest.approx(sps.trim_mean(values, 0.25), rel=1e-12)
        u = sps.mannwhitneyu(mine, other, alternative="two-sided").statistic
        assert robust.probability_of_improvement(mine, other) == pytest.approx(u / (len(mine) * len(other)), rel=1e-12)
    assert robust.interquartile_mean([1.0, 2.0, 100.0, 3.0, 4.0]) == pytest.approx(3.0)  # 100 trimmed
    assert robust.interquartile_mean([1.0, 2.0, 3.0]) is None
    assert robust.probability_of_improvement([1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]) is None


# ---- through the build and the audit ------------------------------------------------------------



def test_five_seeds_give_the_bootstrap_the_iqm_and_the_probability_of_improvement_and_the_audit_redraws_them(tmp_path):
    seeds = (1, 2, 3, 4, 5)
    sweep = make_sweep(tmp_path, seeds=seeds)
    bag = build_bundle(sweep, figures=False).bundle_dir
    tables = bag / "data" / "tables"
    for row in (r for r in rows(tables / "paired_differences.csv") if r["metric"] == "eval_final_pass@1"):
        d = [final_pass1(sweep, row["a"], s) - final_pass1(sweep, row["b"], s) for s in seeds]
        res = sps.bootstrap((np.array(d),), np.mean, n_resamples=int(row["boot_resamples"]), confidence_level=0.95,
                            method=row["boot_method"], rng=np.random.default_rng(int(row["boot_seed"])))
        assert float(row["boot_low"]) == pytest.approx(res.confidence_interval.low, rel=1e-12)
        assert float(row["boot_high"]) == pytest.approx(res.confidence_interval.high, rel=1e-12)
    measured = [r for r in rows(tables / "robust_measures.csv") if r["metric"] == "eval_final_pass@1"]
    assert len(measured) == 6  # three arms' IQM, three pairs' probability of improvement
    for row in measured:
        a = [final_pass1(sweep, row["a"], s) for s in seeds]
        if row["measure"] == "iqm":
            assert float(row["value"]) == pytest.approx(reference_iqm(a), rel=1e-12)
        else:
            b = [final_pass1(sweep, row["b"], s) for s in seeds]
            assert float(row["value"]) == pytest.approx(reference_poi(a, b), rel=1e-12)
        assert row["refused"] == ""
    assert "Refused here" not in (bag / "data" / "report.md").read_text()

    edited = Path(shutil.copytree(bag, tmp_path / "edited"))
    edit_cell(edited / "data" / "tables" / "paired_differences.csv", 2, "boot_seed", 7)
    edit_cell(edited / "data" / "tables" / "robust_measures.csv", 2, "value", 0.99)
    reseal_bag(edited)
    reasons = [str(f) for f in audit_bundle(edited)]
    assert any(r.startswith("data/tables/paired_differences.csv: line 2, column boot_seed:") for r in reasons), reasons
    assert any(r.startswith("data/tables/robust_measures.csv: line 2, column value:") for r in reasons), reasons


def test_three_seeds_refuse_the_robust_measures_and_the_report_says_why(clean_build):
    _, result = clean_build
    data = result.bundle_dir / "data"
    measured = rows(data / "tables" / "robust_measures.csv")
    assert measured and all(r["value"] == "" and r["refused"] == "n=3 < 4" for r in measured)
    report = (data / "report.md").read_text()
    assert ("Refused here for every measure: an arm has 3 accepted run(s); run at least 4 seeds per arm to have them "
            "(table `robust_measures` lists each).") in report
    assert "refused (n=3 < 4)" not in report  # one sentence, not a row each (issue 32)
