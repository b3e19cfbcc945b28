"""The answer in one sentence (issue 22, section 4): the report's first line after its title, generated from
the intervals, printed by the launcher, recomputed by the audit.

Expected sentences are written here from the sweep's own eval files (scipy's t-interval, the MDE by
integrating the power over the SD's chi-square), never from the code under test.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy import stats as sps

from benchmarks.synthetic_sweep import make_sweep
from evidence import audit_bundle
from evidence.statistics.claims import paired_claim
from evidence.statistics.headline import Pair, headline_sentence
from facts.repo import REPO_ROOT
from tests.evidence.bundle_tables import final_pass1
from tests.evidence.statistics.test_claims import evaluated
from tests.evidence.statistics.test_noise import reference_question_interval, replayed_means, run_rates
from tests.evidence.statistics.test_power import (
    independent_mde as mde,  # the power integrated over the SD
)
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
NAMES = {"grpo": "GRPO", "rpp": "REINFORCE++", "rppb": "REINFORCE++-baseline"}


def t_interval(d: list[float]) -> tuple[float, float]:
    return sps.t.interval(0.95, len(d) - 1, loc=np.mean(d), scale=sps.sem(d))


def claimed(d, p_holm=None):
    """What the pair of differences ``d`` may claim, on a grid of 1/100 (25 prompts x 4 responses), its evaluation
    noise agreeing with the seeds."""
    return paired_claim(evaluated(d), 0.95, p_holm)


def test_the_sentence_for_each_kind_of_result():
    assert headline_sentence(["GRPO"], [], 0.95) == (
        "Only GRPO ran: there is no paired comparison on eval pass@1 to state.")
    assert headline_sentence(["A", "B"], [Pair("B", "A", claimed([0.01]))], 0.95) == (
        "On eval pass@1, B − A has 1 seed: no interval; run ≥ 3 seeds.")
    one = [-0.073, 0.01, 0.03]
    low, high = t_interval(one)
    assert headline_sentence(["A", "B"], [Pair("B", "A", claimed(one))], 0.95) == (
        f"No difference detected between B and A on eval pass@1: the 95 % interval of the paired differences, "
        f"[{100 * low:+.1f}, {100 * high:+.1f}] points, includes 0 (3 seeds; this design detects differences of "
        f"{100 * mde(one):.1f} points or more at 80 % power).")
    other = [-0.1, 0.05, 0.02]
    two = [Pair("B", "A", claimed(one)), Pair("C", "A", claimed(other))]
    assert headline_sentence(["A", "B", "C"], two, 0.95) == (
        f"No difference detected on eval pass@1: every 95 % interval of the 2 paired differences includes 0 "
        f"(3 seeds; this design detects differences of {100 * max(mde(one), mde(other)):.1f} points or more in every "
        f"pair at 80 % power).")
    ba, ca, bc = [0.04, 0.06, 0.05], [-0.1, 0.1, 0.0], [0.045, 0.055, 0.05]
    apart = [Pair("B", "A", claimed(ba, 0.12), 3), Pair("C", "A", claimed(ca, 0.9), 3),
             Pair("B", "C", claimed(bc, 0.0004), 3)]
    (l1, h1), (l2, h2) = t_interval(ba), t_interval(bc)
    assert headline_sentence(["A", "B", "C"], apart, 0.95) == (
        f"On eval pass@1, B − A is +5.0 points (95 % interval [{100 * l1:+.1f}, {100 * h1:+.1f}]; does not hold after "
        f"Holm's correction across the 3 pairs, adjusted p 0.120); B − C is +5.0 points (95 % interval "
        f"[{100 * l2:+.1f}, {100 * h2:+.1f}]; holds after Holm's correction across the 3 pairs, adjusted p < 0.001); "
        f"no difference detected in the other 1 pair (3 seeds; this design detects differences of "
        f"{100 * max(mde(ba), mde(ca), mde(bc)):.1f} points or more in every pair at 80 % power).")


def test_the_report_opens_with_the_sentence_its_intervals_give_through_python_m_evidence_build(tmp_path):
    seeds = (42, 1234, 2026)
    sweep = make_sweep(tmp_path, algos=("grpo", "rpp"),
                       final_pass1=lambda arm, seed: {42: 0.50, 1234: 0.55, 2026: 0.47}[seed]
                       + (0.0 if arm == "grpo" else {42: 0.02, 1234: -0.01, 2026: 0.03}[seed]))
    built = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    d = [final_pass1(sweep, "rpp", s) - final_pass1(sweep, "grpo", s) for s in seeds]
    low, high = t_interval(d)
    assert low < 0 < high
    expected = (f"No difference detected between REINFORCE++ and GRPO on eval pass@1: the 95 % interval of the paired "
                f"differences, [{100 * low:+.1f}, {100 * high:+.1f}] points, includes 0 (3 seeds; this design detects "
                f"differences of {100 * mde(d):.1f} points or more at 80 % power).")
    lines = (sweep / "bundle" / "data" / "report.md").read_text().splitlines()
    assert lines[:4] == ["# toy: GRPO, REINFORCE++", "", expected, ""]
    with open(sweep / "bundle" / "data" / "tables" / "headline.csv", newline="") as f:
        assert list(csv.DictReader(f)) == [{"metric": "eval_final_pass@1", "sentence": expected}]


def test_three_arms_name_what_their_intervals_say(clean_build):
    """Each pair as the rules judge it, computed here: scipy's t-interval of the seeds' differences, and the
    crossed bootstrap of the per-prompt differences replayed with plain loops and scipy's question-clustered
    t-interval (a pair the seeds call apart but the prompts do not may claim nothing)."""
    sweep, result = clean_build
    seeds = json.loads((sweep / "sweep.json").read_text())["seeds"]
    sentence = (result.bundle_dir / "data" / "report.md").read_text().splitlines()[2]
    pairs = [("rpp", "grpo"), ("rppb", "grpo"), ("rpp", "rppb")]
    diffs = {p: [final_pass1(sweep, p[0], s) - final_pass1(sweep, p[1], s) for s in seeds] for p in pairs}

    def noise(a: str, b: str) -> list[tuple[float, float]]:
        rates = [[x - y for x, y in zip(run_rates(sweep, a, s).values(), run_rates(sweep, b, s).values())]
                 for s in seeds]
        return [tuple(np.quantile(replayed_means(rates, 2000, 22), [0.025, 0.975])),
                reference_question_interval(rates)]

    def outside(interval) -> bool:
        return not interval[0] <= 0 <= interval[1]

    apart = [p for p, d in diffs.items() if outside(t_interval(d))]
    assert all(np.std(d, ddof=1) > 0.01 / 12 ** 0.5 for d in diffs.values())  # no tied pair in this sweep
    silent = [p for p in apart if not all(outside(i) for i in noise(*p))]
    design = f"{len(seeds)} seeds; this design detects differences of " \
             f"{100 * max(mde(d) for p, d in diffs.items() if p not in silent):.1f} points or more in every pair at " \
             "80 % power)"
    if not apart:
        assert sentence == ("No difference detected on eval pass@1: every 95 % interval of the 3 paired differences "
                            f"includes 0 ({design}.")
    else:
        assert design in sentence
        for a, b in apart:
            said = f"{NAMES[a]} − {NAMES[b]} is " if (a, b) not in silent else f"no interval for {NAMES[a]} − {NAMES[b]}"
            assert said in sentence


def test_an_edited_headline_resealed_is_caught_by_the_audit(clean_build, tmp_path):
    _, result = clean_build
    bag = Path(shutil.copytree(result.bundle_dir, tmp_path / "edited"))
    report = bag / "data" / "report.md"
    lines = report.read_text().split("\n")
    lines[2] = "REINFORCE++ beats GRPO on eval pass@1 by 9.0 points (3 seeds)."
    report.write_text("\n".join(lines))
    table = bag / "data" / "tables" / "headline.csv"
    with open(table, newline="") as f:
        rows = list(csv.reader(f))
    rows[1][1] = lines[2]
    with open(table, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    reseal_bag(bag)
    reasons = [str(f) for f in audit_bundle(bag)]
    assert any(r.startswith("data/report.md: line 3: does not recompute (recorded 'REINFORCE++ beats GRPO")
               for r in reasons), reasons
    assert any(r.startswith("data/tables/headline.csv: line 2, column sentence:") for r in reasons), reasons
    assert not any("SHA256" in r for r in reasons)


def test_the_launchers_seal_prints_the_sentence_first(tmp_path, capsys):
    from launcher.sweep_runner import seal

    sweep = make_sweep(tmp_path, arms={"grpo": {"algo": "grpo"}, "rpp": {"algo": "rpp"}})
    seal(sweep)
    out = capsys.readouterr().out.splitlines()
    sentence = (sweep / "bundle" / "data" / "report.md").read_text().splitlines()[2]
    assert sentence.startswith(("No difference detected between REINFORCE++ and GRPO on eval pass@1", "On eval pass@1, "))
    start = out.index(sentence)
    assert out[start + 2] == "final eval pass@1 (mean ± SD over seeds) vs the initial checkpoint"
    assert out[-1].startswith("training curves:")
