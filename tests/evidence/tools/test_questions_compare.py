"""``python -m evidence compare``'s question-level lines (issue 32 §2): B − A per question with its clustered interval
(statsmodels' clustered OLS on the responses the two sweeps wrote), the components of the difference and the
allocation sentence, and a bad ``--smallest-difference`` as one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import statsmodels.api as sm

from facts.repo import REPO_ROOT
from tests.evidence.tools.test_compare import before_after

REPO = REPO_ROOT


def compare(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evidence", "compare", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def rates(sweep: Path, job: str) -> dict[int, float]:
    """A job's share of correct responses per question, from its eval/final.jsonl (reward > 0 correct)."""
    cells: dict[int, list[int]] = {}
    for line in (sweep / "jobs" / job / "run" / "eval" / "final.jsonl").read_text().splitlines():
        record = json.loads(line)
        cell = cells.setdefault(record["index"], [0, 0])
        cell[0] += record["reward"] > 0
        cell[1] += 1
    return {i: c / n for i, (c, n) in cells.items()}


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    a, b = before_after(tmp_path_factory.mktemp("q"))
    return a, b, compare(a, b, "--smallest-difference", "3")


def test_compare_states_each_arms_question_level_difference_as_statsmodels_clusters_it(compared):
    a, b, result = compared
    assert result.returncode == 0, result.stderr
    for arm in ("grpo", "rpp"):
        d, groups = [], []
        for seed in (1, 2, 3):
            ra, rb = rates(a, f"{arm}-{seed}"), rates(b, f"{arm}-{seed}")
            d += [rb[i] - ra[i] for i in sorted(ra)]
            groups += sorted(ra)
        fit = sm.OLS(np.array(d) * 100, np.ones(len(d))).fit(cov_type="cluster", cov_kwds={"groups": groups},
                                                              use_t=True)
        low, high = fit.conf_int(0.05)[0]
        line = next(x for x in result.stdout.splitlines() if x.startswith(f"- {arm}: by question"))
        assert f"is {fit.params[0]:+.2f} points over 25 questions and 3 seed(s) (SE {fit.bse[0]:.2f} clustered by " \
               f"question, 95% paired interval [{low:+.2f}, {high:+.2f}]" in line
        assert re.search(r"components of the difference: seed \S+, question \S+, seed×question \S+, response \S+", line)
        advice = next(x for x in result.stdout.splitlines() if x.startswith(f"  {arm} (B − A): to detect 3 points "
                                                                            "(--smallest-difference) at 80% power"))
        assert re.search(r"the cheapest design that reaches it is \d+ seeds × \d+ questions × \d+ response\(s\) per "
                         r"question", advice)
        assert "with the seed-level paired t-test (3 seeds or more, S − 1 df)" in advice


@pytest.mark.parametrize("value", ["0", "-2", "250"])
def test_a_smallest_difference_out_of_range_is_one_line(compared, value):
    a, b, _ = compared
    result = compare(a, b, "--smallest-difference", value)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"python -m evidence: error: --smallest-difference {float(value):g}: give a difference in points, above 0 and at "
        "most 100 (5 = five points of pass@1)"]


def test_tied_evaluations_give_no_interval_in_compares_table_or_its_question_lines(tmp_path):
    """A's every question 2/4 correct, B's 3/4, at each of 3 seeds: every seed's and every question's B − A is +25
    points (the evaluation's granularity). No t-interval, MDE or bootstrap interval in the table, no question-level
    interval under it: the claims' words instead (adversarial finding: [25, 25] and [+25.00, +25.00])."""
    import csv

    from benchmarks.synthetic_sweep import make_sweep

    a = make_sweep(tmp_path, algos=("grpo",), seeds=(1, 2, 3), name="before", final_counts=lambda arm, seed: [2] * 25)
    b = make_sweep(tmp_path, algos=("grpo",), seeds=(1, 2, 3), name="after", final_counts=lambda arm, seed: [3] * 25)
    result = compare(a, b, "--csv", tmp_path / "cmp.csv")
    assert result.returncode == 0, result.stderr
    words = "tied evaluations: no interval; run more evaluation prompts"
    with open(tmp_path / "cmp.csv", newline="", encoding="utf-8") as handle:
        row = next(r for r in csv.DictReader(handle) if r["metric"] == "eval/pass@1")
    assert float(row["diff_mean"]) == pytest.approx(25.0) and float(row["diff_sd"]) == 0.0
    assert row["ci_low"] == row["ci_high"] == row["mde"] == row["boot_low"] == row["boot_high"] == ""
    assert row["note"] == words
    assert "[25, 25]" not in result.stdout and f"] {words}" in result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith("- grpo: by question"))
    assert f"is +25.00 points over 25 questions and 3 seed(s) ({words}; unpaired SE" in line
    assert "[+25.00, +25.00]" not in line and "SE 0.00 clustered" not in line


def test_two_seeds_give_compare_no_interval(tmp_path):
    """claims' too-few-seeds rule: 2 paired seeds, no t-interval, MDE or bootstrap interval in compare's table."""
    import csv

    from benchmarks.synthetic_sweep import make_sweep

    a = make_sweep(tmp_path, algos=("grpo",), seeds=(1, 2), name="before", final_pass1=lambda arm, seed: 0.3)
    b = make_sweep(tmp_path, algos=("grpo",), seeds=(1, 2), name="after",
                   final_pass1=lambda arm, seed: 0.3 + 0.04 * seed)
    result = compare(a, b, "--csv", tmp_path / "cmp.csv")
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "cmp.csv", newline="", encoding="utf-8") as handle:
        row = next(r for r in csv.DictReader(handle) if r["metric"] == "eval/pass@1")
    assert row["n_pairs"] == "2" and row["ci_low"] == row["mde"] == row["boot_low"] == ""
    assert row["note"] == "2 seeds: no interval; run ≥ 3 seeds"
