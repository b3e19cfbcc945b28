"""The degenerate designs of issue 32 as sweeps: each an experiment (spec, probe stage, registration link) sealed
in process as the launcher seals it (build, the summary it prints, audit), then read through the report's first
line, the launcher's summary, ``verdict.json``, the report's verdict section and the line the confirm stage prints.
The issue's own example class (2 seeds, tied differences) also through ``python -m evidence build``, and an edited
headline in a resealed bundle through the audit.

Expected numbers come from the sweeps' own eval files with scipy, statsmodels and the crossed bootstrap replayed
with plain loops (test_evidence_stats_noise.replayed_means), never from the code under test. The adversarial
findings F7 (a tied pair in a Holm family), F8 (a refutation from a design that supports no inference) and F9/F10
(a difference of 1, 2, 2 responses of 100, judged on pass@1 and on pass@4) are rows of the same tables.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

from benchmarks.synthetic_sweep import N_PROMPTS, K, make_sweep
from evidence import audit_bundle
from facts.repo import REPO_ROOT
from launcher.experiment.stage_runner import verdict_line
from tests.evidence.bundle_tables import final_pass1
from tests.evidence.experiment_stages import add_launcher_stages
from tests.evidence.statistics.test_noise import reference_question_interval, replayed_means
from tests.sweeps import reseal_bag

pytestmark = pytest.mark.slow  # nine experiments sealed and audited: about a minute and a half on two cores

REPO = REPO_ROOT
ARMS = {"grpo": {"algo": "grpo"}, "rpp": {"algo": "rpp"}}
SPEC = """\
title: degenerate designs
hypothesis: treated reaches at least 2 points more eval pass@1 than control
arms:
  control: {{algo: grpo}}
  treated: {{algo: rpp}}
seeds: {seeds}
exploratory: true
criterion:
  metric: eval/pass@1
  at: final
  baseline: control
  treatment: treated
  threshold_points: 2
  inconclusive_below_points: 1
equivalence_margin_points: 10
"""
BASE = {1: 0.50, 2: 0.55, 3: 0.48}
# Improvement on one hard prompt only (prompt 1, solved 3, 4 and 4 times of 4 by the treated seeds): the seeds agree
# (+3, +4, +4 points: their interval excludes 0), the prompts do not (24 of 25 contribute nothing).
EASY = [K if i % 2 == 0 else 0 for i in range(N_PROMPTS)]


def concentrated(arm: str, seed: int) -> list[int]:
    if arm == "grpo":
        return list(EASY)
    counts = list(EASY)
    counts[1] = {1: 3, 2: 4, 3: 4}[seed]
    return counts


def adversary_counts(arm: str, seed: int) -> list[int]:
    """Finding F9: control solves the even prompts 4/4 and the odd 0/4; treated the same plus 1/4 on prompt 1 (every
    seed) and on prompt 3 (seeds 2, 3): a difference of 1, 2, 2 responses of 100 on the same prompts."""
    counts = list(EASY)
    if arm == "rpp":
        counts[1] = 1
        if seed in (2, 3):
            counts[3] = 1
    return counts


PASS4_SPEC = SPEC.replace("eval/pass@1", "eval/pass@4").replace("threshold_points: 2", "threshold_points: 4") \
    .replace("inconclusive_below_points: 1", "inconclusive_below_points: 2")


def reject_arm(sweep: Path, arm: str) -> None:
    """Every run of ``arm`` one metrics step short: rejected by the evidence."""
    for metrics in sorted((sweep / "jobs").glob(f"{arm}-*/run/metrics.jsonl")):
        metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:-1]))


# name -> (seeds, make_sweep's keyword arguments, what the sweep does to itself before sealing)
CASES = {
    "issue: 2 seeds, tied": ((1, 2), {"final_pass1": lambda a, s: BASE[s] + (0.03 if a == "rpp" else 0)}, None),
    "three seeds tied": ((1, 2, 3), {"final_pass1": lambda a, s: BASE[s] + (0.03 if a == "rpp" else 0)}, None),
    "n = 1": ((1,), {"final_pass1": lambda a, s: BASE[s] + (0.03 if a == "rpp" else 0)}, None),
    "n = 2": ((1, 2), {"final_pass1": lambda a, s: BASE[s] + ({1: 0.01, 2: 0.05}[s] if a == "rpp" else 0)}, None),
    "all-equal responses": ((1, 2, 3), {"final_pass1": lambda a, s: 1.0}, None),
    "one arm rejected": ((1, 2, 3), {"final_pass1": lambda a, s: BASE[s]}, lambda sweep: reject_arm(sweep, "rpp")),
    "a single prompt": ((1, 2, 3), {"n_prompts": 1, "final_pass1": lambda a, s: {
        ("grpo", 1): 0.25, ("grpo", 2): 0.5, ("grpo", 3): 0.25, ("rpp", 1): 0.5, ("rpp", 2): 1.0, ("rpp", 3): 0.75}[
        (a, s)]}, None),
    "the evaluation's noise": ((1, 2, 3), {"final_counts": concentrated}, None),
    "equivalent by TOST": ((1, 2, 3), {"final_pass1": lambda a, s: BASE[s] + ({1: 0.01, 2: 0.0, 3: -0.01}[s]
                                                                                 if a == "rpp" else 0)}, None),
    "F8: a single prompt, below the threshold": ((1, 2, 3), {"n_prompts": 1, "final_pass1": lambda a, s: {
        ("grpo", 1): 0.25, ("grpo", 2): 0.5, ("grpo", 3): 0.25, ("rpp", 1): 0.5, ("rpp", 2): 0.25, ("rpp", 3): 0.25}[
        (a, s)]}, None),
    "F9: 1, 2, 2 responses of 100": ((1, 2, 3), {"final_counts": adversary_counts}, None),
    "F10: the same on pass@4": ((1, 2, 3), {"final_counts": adversary_counts}, None),
}
SPECS = {"F10: the same on pass@4": PASS4_SPEC}  # a case's own spec (else SPEC)
NOISE_BOTH = ("2 evaluation-noise intervals that include 0 (crossed bootstrap over seeds and prompts; "
              "question-clustered paired t-interval)")
# name -> (the report's first line, the verdict and its rule, the rules the verdict's design falls short of)
EXPECTED = {
    "issue: 2 seeds, tied": ("On eval pass@1, treated − control has 2 seeds and tied evaluations: no interval; run ≥ "
                             "3 seeds or more evaluation prompts.", ("INCONCLUSIVE", "no-inference"),
                             ["too-few-seeds", "tied-evaluations"]),
    "three seeds tied": ("On eval pass@1, treated − control has tied evaluations: no interval; run more evaluation "
                         "prompts.", ("INCONCLUSIVE", "no-inference"), ["tied-evaluations"]),
    "n = 1": ("On eval pass@1, treated − control has 1 seed: no interval; run ≥ 3 seeds.",
              ("INCONCLUSIVE", "too-few-seeds"), ["too-few-seeds"]),
    "n = 2": ("On eval pass@1, treated − control has 2 seeds: no interval; run ≥ 3 seeds.",
              ("INCONCLUSIVE", "no-inference"), ["too-few-seeds"]),
    "all-equal responses": ("On eval pass@1, treated − control has tied evaluations: no interval; run more "
                            "evaluation prompts.", ("INCONCLUSIVE", "no-inference"), ["tied-evaluations"]),
    "one arm rejected": ("On eval pass@1, treated − control has no seed accepted in both arms: no interval; run ≥ 3 "
                         "seeds.", ("INCONCLUSIVE", "too-few-seeds"), ["too-few-seeds"]),
    "a single prompt": ("On eval pass@1, treated − control has 1 evaluation prompt: no interval; run more evaluation "
                        "prompts.", ("INCONCLUSIVE", "no-inference"), ["single-prompt"]),
    "the evaluation's noise": (f"On eval pass@1, treated − control has {NOISE_BOTH}: no interval; run more "
                               "evaluation prompts.", ("INCONCLUSIVE", "no-inference"), ["noise-contradicts"]),
    "F8: a single prompt, below the threshold": (
        "On eval pass@1, treated − control has 1 evaluation prompt: no interval; run more evaluation prompts.",
        ("INCONCLUSIVE", "no-inference"), ["single-prompt"]),
    "F9: 1, 2, 2 responses of 100": (
        f"On eval pass@1, treated − control has {NOISE_BOTH}: no interval; run more evaluation prompts.",
        ("INCONCLUSIVE", "no-inference"), ["noise-contradicts"]),
    "F10: the same on pass@4": (
        f"On eval pass@1, treated − control has {NOISE_BOTH}: no interval; run more evaluation prompts.",
        ("INCONCLUSIVE", "no-inference"), ["noise-contradicts"]),
}


@pytest.fixture(scope="module")
def sealed(tmp_path_factory) -> dict[str, tuple[Path, str, int]]:
    """Each case an experiment's confirm sweep sealed as the launcher seals it: (sweep, what it printed, exit code)."""
    from launcher.sweep_runner import seal

    out = {}
    for i, (name, (seeds, kwargs, change)) in enumerate(CASES.items()):
        root = tmp_path_factory.mktemp(f"case{i}")
        sweep = make_sweep(root, seeds=seeds, name="confirm", arms=ARMS, **kwargs)
        spec = SPECS.get(name, SPEC).format(seeds=list(seeds))
        (sweep / "experiment.yaml").write_text(spec, encoding="utf-8")
        add_launcher_stages(sweep, spec)
        if change is not None:
            change(sweep)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            code = seal(sweep)
        out[name] = (sweep, printed.getvalue(), code)
    return out


def headline(sweep: Path) -> str:
    return (sweep / "bundle" / "data" / "report.md").read_text().splitlines()[2]


def verdict(sweep: Path) -> dict:
    return json.loads((sweep / "bundle" / "data" / "verdict.json").read_text())


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_degenerate_design_says_what_is_missing_in_the_report_the_summary_and_the_verdict(sealed, name):
    sweep, printed, code = sealed[name]
    sentence, decided, rules = EXPECTED[name]
    assert headline(sweep) == sentence
    lines = printed.splitlines()
    assert sentence in lines, printed  # the launcher's summary prints the report's first line
    assert lines[lines.index(sentence) + 2] == "final eval pass@1 (mean ± SD over seeds) vs the initial checkpoint"
    assert "audit: clean" in lines, printed
    assert code == (1 if name == "one arm rejected" else 0)
    v = verdict(sweep)
    assert (v["verdict"], v["rule"]) == decided
    if decided[1] != "too-few-seeds":  # a design the rule reads: what it lacks, and nothing inferential stated
        assert [m["rule"] for m in v["claim"]["missing"]] == rules
        assert v["claim"]["kind"] == "no claim" and v["mde"]["value"] is None and v["under_powered"] is False
        assert v["claim"]["equivalence"]["withheld"].startswith(v["claim"]["sentence"].split(":")[0])
        line = verdict_line(v, "confirm/bundle.tar.gz")
        assert f"({v['claim']['sentence']}); bundle" in line and "[" not in line  # no interval printed
        report = (sweep / "bundle" / "data" / "report.md").read_text()
        assert f", no interval ({', '.join(m['what'] for m in v['claim']['missing'])}) |" in report
        assert f"Minimum detectable effect: not stated ({v['claim']['sentence']})." in report


def test_the_issues_class_would_have_claimed_a_difference_from_a_collapsed_interval(sealed):
    """The premise of the first case, from the sweep's own files: both seeds differ by the same +3 points, so the
    sample SD is 0 and the t-interval of the old headline is [+3, +3] (its p-value 0): a claim from nothing."""
    sweep, _, _ = sealed["issue: 2 seeds, tied"]
    d = [final_pass1(sweep, "rpp", s) - final_pass1(sweep, "grpo", s) for s in (1, 2)]
    assert d[0] == pytest.approx(d[1], abs=1e-12) and d[0] == pytest.approx(0.03, abs=1e-12)
    v = verdict(sweep)
    assert v["difference_mean"] == pytest.approx(3.0) and v["difference_sd"] == pytest.approx(0.0, abs=1e-9)
    report = (sweep / "bundle" / "data" / "report.md").read_text()
    assert "holds after Holm" not in report and "[+3.0, +3.0]" not in report


def test_the_noise_case_is_a_seed_interval_the_crossed_intervals_contradict(sealed):
    sweep, _, _ = sealed["the evaluation's noise"]
    d = np.array([final_pass1(sweep, "rpp", s) - final_pass1(sweep, "grpo", s) for s in (1, 2, 3)])
    low, _ = sps.t.interval(0.95, 2, loc=d.mean(), scale=sps.sem(d))
    assert low > 0  # the seeds alone would claim a difference
    rates = [[(r - g) / K for r, g in zip(concentrated("rpp", s), concentrated("grpo", s))] for s in (1, 2, 3)]
    cb_low, cb_high = np.quantile(replayed_means(rates, 2000, 22), [0.025, 0.975])
    q_low, q_high = reference_question_interval(rates)
    assert cb_low <= 0 < cb_high and q_low <= 0 < q_high  # the prompts say it could be none
    with open(sweep / "bundle" / "data" / "tables" / "eval_noise.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["b"] == "grpo")
    assert (float(row["cb_low"]), float(row["cb_high"])) == pytest.approx((cb_low, cb_high), rel=1e-12, abs=1e-15)
    assert (float(row["q_low"]), float(row["q_high"])) == pytest.approx((q_low, q_high), rel=1e-12, abs=1e-15)


def pass_at(j: int, counts: list[int]) -> list[float]:
    """Per prompt, the unbiased pass@j of ``counts`` correct of K, in float64."""
    return [1 - math.comb(K - c, j) / math.comb(K, j) for c in counts]


@pytest.mark.parametrize("name, j", [("F9: 1, 2, 2 responses of 100", 1), ("F10: the same on pass@4", 4)])
def test_the_adversarys_difference_is_within_the_evaluations_noise_on_pass1_and_on_pass4(sealed, name, j):
    """Finding F9/F10 from the sweep's design, computed here: the seeds' t-interval excludes 0 on pass@j, while the
    question-clustered t-interval of the per-prompt pass@j differences includes it; the verdict records pass@j's grid
    1/(P·C(k, j)) and both intervals (the crossed bootstrap replayed by loops), and states no interval or MDE."""
    sweep, _, _ = sealed[name]
    block = [[a - b for a, b in zip(pass_at(j, adversary_counts("rpp", s)), pass_at(j, adversary_counts("grpo", s)))]
             for s in (1, 2, 3)]
    d = 100 * np.array([np.mean(row) for row in block])
    assert sps.t.interval(0.95, 2, loc=d.mean(), scale=sps.sem(d))[0] > 0  # the seeds alone would claim it
    q = reference_question_interval(block)
    assert q[0] <= 0 < q[1]
    v = verdict(sweep)
    assert v["metric"]["name"] == f"eval/pass@{j}" and v["difference_mean"] == pytest.approx(d.mean(), rel=1e-12)
    assert v["claim"]["step"] == pytest.approx(100 / (N_PROMPTS * math.comb(K, j)), rel=1e-12)
    noise = {n["name"]: n["interval"] for n in v["claim"]["noise"]}
    cb = np.quantile(replayed_means(block, 2000, 22), [0.025, 0.975])
    assert noise["crossed bootstrap over seeds and prompts"] == pytest.approx(list(100 * cb), rel=1e-12, abs=1e-12)
    assert noise["question-clustered paired t-interval"] == pytest.approx([100 * q[0], 100 * q[1]], rel=1e-9)
    assert v["mde"]["value"] is None and v["under_powered"] is False


def test_a_tied_pair_is_no_rejection_in_the_holm_family(tmp_path):
    """Finding F7 through the seal: grpo 0.30 on every seed, rpp 0.40 on every seed (rpp − grpo tied), rppb 0.60,
    0.70, 0.80. The tied pair has no p-value and counts as 1: Holm (statsmodels) of the other two with m = 3, so
    neither holds; the sentence says one of the 3 was untestable."""
    from launcher.sweep_runner import seal

    arms = {"grpo": {"algo": "grpo"}, "rpp": {"algo": "rpp"}, "rppb": {"algo": "rppb"}}
    value = {"grpo": lambda s: 0.30, "rpp": lambda s: 0.40, "rppb": lambda s: {1: 0.60, 2: 0.70, 3: 0.80}[s]}
    sweep = make_sweep(tmp_path, seeds=(1, 2, 3), arms=arms, final_pass1=lambda a, s: value[a](s))
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert seal(sweep) == 0
    assert "audit: clean" in printed.getvalue()
    with open(sweep / "bundle" / "data" / "tables" / "paired_family.csv", newline="") as f:
        family = {(r["a"], r["b"]): r for r in csv.DictReader(f) if r["metric"] == "eval_final_pass@1"}
    d = {pair: np.array([final_pass1(sweep, pair[0], s) - final_pass1(sweep, pair[1], s) for s in (1, 2, 3)])
         for pair in family}
    assert np.std(d[("rpp", "grpo")]) < 1e-12  # tied
    p = [1.0] + [sps.ttest_1samp(d[pair], 0).pvalue for pair in (("rppb", "grpo"), ("rpp", "rppb"))]
    holm = multipletests(p, method="holm")[1]
    assert (family[("rpp", "grpo")]["p_value"], family[("rpp", "grpo")]["p_holm"]) == ("", "")
    assert float(family[("rppb", "grpo")]["p_holm"]) == pytest.approx(holm[1], rel=1e-9)
    assert float(family[("rpp", "rppb")]["p_holm"]) == pytest.approx(holm[2], rel=1e-9) and min(holm[1:]) > 0.05
    sentence = headline(sweep)
    assert sentence.count("does not hold after Holm's correction across the 3 pairs (1 of them untestable, counted "
                          "as not rejected)") == 2, sentence
    assert sentence.endswith("no interval for REINFORCE++ − GRPO (tied evaluations; run more evaluation prompts).")


def test_equivalence_is_claimed_by_tost_against_the_specs_margin_with_its_interval(sealed):
    sweep, printed, code = sealed["equivalent by TOST"]
    seeds = (1, 2, 3)
    treated = np.array([final_pass1(sweep, "rpp", s) for s in seeds])
    control = np.array([final_pass1(sweep, "grpo", s) for s in seeds])
    p, _, _ = ttost_paired(100 * treated, 100 * control, -10, 10)
    d = 100 * (treated - control)
    low, high = sps.t.interval(0.9, 2, loc=d.mean(), scale=sps.sem(d))
    e = verdict(sweep)["claim"]["equivalence"]
    assert e["equivalent"] is True and e["p_value"] == pytest.approx(p, rel=1e-9)
    assert e["interval"] == pytest.approx([low, high], rel=1e-9) and e["level"] == pytest.approx(0.9)
    sentence = headline(sweep)
    assert sentence.startswith("No difference detected between treated and control on eval pass@1: ")
    assert sentence.endswith(f"; by TOST against the declared margin of ±10.0 points, equivalent (90 % interval "
                             f"[{low:+.1f}, {high:+.1f}], p {p:.3f}).")
    assert sentence in printed.splitlines() and code == 0
    report = (sweep / "bundle" / "data" / "report.md").read_text()
    assert (f"Equivalence within ±10 points (the spec's equivalence margin), by TOST, two one-sided paired t-tests "
            f"at α = 0.05: equivalent (p = {p:.3g}; 90% t-interval [{low:+.2f}, {high:+.2f}] points, inside ±10).") \
        in report


def test_the_spec_arm_names_label_every_table_and_the_launchers_summary(sealed, capsys):
    from launcher.sweep_runner import arm_names, print_eval_summary

    sweep, _, _ = sealed["equivalent by TOST"]
    data = sweep / "bundle" / "data"
    report = (data / "report.md").read_text()
    assert report.splitlines()[0] == "# toy: control, treated"
    assert "| treated − control |" in report and "| control | 3 |" in report
    assert "REINFORCE++ − GRPO" not in report and "| GRPO | 3 |" not in report  # the contract table names algorithms
    assert arm_names(data) == {"grpo": "control", "rpp": "treated"}
    with open(data / "index.csv", newline="") as f:
        jobs = list(csv.DictReader(f))
    print_eval_summary(data / "tables", jobs, {j["job"]: j["arm"] for j in jobs}, arm_names(data))
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == ["control", "treated"]


def test_an_overclaiming_headline_resealed_into_a_degenerate_bundle_is_a_finding(sealed, tmp_path):
    sweep, _, _ = sealed["issue: 2 seeds, tied"]
    bag = Path(shutil.copytree(sweep / "bundle", tmp_path / "edited"))
    forged = ("treated − control is +3.0 points (95 % interval [+3.0, +3.0]) (2 seeds; this design detects "
              "differences of 0.0 points or more at 80 % power).")
    report = bag / "data" / "report.md"
    lines = report.read_text().split("\n")
    lines[2] = forged
    report.write_text("\n".join(lines))
    table = bag / "data" / "tables" / "headline.csv"
    table.write_text(f"metric,sentence\neval_final_pass@1,{forged}\n")
    reseal_bag(bag)
    reasons = [str(f) for f in audit_bundle(bag)]
    assert any(r.startswith("data/report.md: line 3: does not recompute (recorded 'treated − control is +3.0")
               for r in reasons), reasons
    assert any(r.startswith("data/tables/headline.csv: line 2, column sentence:") for r in reasons), reasons


def test_the_issues_example_through_python_m_evidence_build(tmp_path):
    """The issue's sweep as a user builds it: ``-m algo=grpo,rpp seed=1,2 workload.lr=1e-4,3e-4
    workload.eval.n_prompts=16`` (4 arms, 6 pairs of 2 seeds, pass@1 on a grid of 1/64); three pairs' differences
    tie, rpp-lr3e-4 − grpo-lr3e-4 at +2/64 on both seeds (the issue's "+3.1 points, [+3.1, +3.1]")."""
    arms = {f"{algo}-lr{lr}": {"algo": algo, "workload.lr": lr} for algo in ("grpo", "rpp") for lr in ("1e-4", "3e-4")}
    base = {1: 32 / 64, 2: 36 / 64}
    offset = {"grpo-lr1e-4": lambda s: 0, "grpo-lr3e-4": lambda s: 1 / 64, "rpp-lr1e-4": lambda s: (2 * s) / 64,
              "rpp-lr3e-4": lambda s: 3 / 64}
    sweep = make_sweep(tmp_path, seeds=(1, 2), arms=arms, n_prompts=16,
                       final_pass1=lambda a, s: base[s] + offset[a](s))
    built = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    d = [final_pass1(sweep, "rpp-lr3e-4", s) - final_pass1(sweep, "grpo-lr3e-4", s) for s in (1, 2)]
    assert d == pytest.approx([2 / 64, 2 / 64], abs=1e-12)  # the old headline's collapsed interval, [+3.1, +3.1]
    assert headline(sweep) == ("On eval pass@1, the 6 paired comparisons have 2 seeds and tied evaluations in 3 of "
                               "them: no interval; run ≥ 3 seeds or more evaluation prompts.")
    with open(sweep / "bundle" / "data" / "tables" / "paired_differences.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if (r["a"], r["b"]) == ("rpp-lr3e-4", "grpo-lr3e-4")
                   and r["metric"] == "eval_final_pass@1")
    assert (row["claim"], row["missing"]) == ("no claim", "2 seeds and tied evaluations: no interval; run ≥ 3 seeds "
                                                          "or more evaluation prompts")
    report = (sweep / "bundle" / "data" / "report.md").read_text()
    assert "| none (2 seeds; tied evaluations) |" in report  # the paired table's t-interval cell
    family = report.split("## The family of comparisons", 1)[1].split("\n## ", 1)[0]
    assert "holds after Holm" not in report and "| none (2 seeds" in family and "| 0.0000 |" not in family
