"""Seeds in waves (issue 32, section 3): K looks with Lan–DeMets boundaries, and what the whole design claims.

References written here: published boundaries (DeMets and Lan 1994, Table 1; R gsDesign's ``sfLDOF`` with
``test.type = 2``), scipy's multivariate normal CDF (Genz), a Monte Carlo of the canonical joint distribution, and a
numpy simulation of the whole design (each wave's paired t statistic, its mapping to a standard normal, the fixed
weights, the stops) under the null and under the alternative the design claims to detect.
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
from scipy import special
from scipy import stats as sps

from evidence import build_bundle
from evidence.statistics.waves import boundaries, operating, spending_boundaries
from evidence.verdict import parse_experiment
from evidence.verdict.sizing import sized_look
from facts.repo import REPO_ROOT
from study.design import fractions
from tests.evidence.experiment_stages import paired_experiment, z_by_hand
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
ALPHA = 0.05


def equal(k: int) -> tuple[float, ...]:
    return tuple((i + 1) / k for i in range(k))


def spent_by_hand(rule: str, t: float) -> float:
    """The spending functions from their formulas (two-sided α)."""
    if rule == "obrien-fleming":
        return 2 * sps.norm.sf(sps.norm.ppf(1 - ALPHA / 2) / math.sqrt(t))
    return ALPHA * math.log(1 + (math.e - 1) * t)


# ---- the boundaries -----------------------------------------------------------------------------------------------

# DeMets and Lan (1994), Table 1, and gsDesign(k, test.type = 2, sfu = sfLDOF): the O'Brien-Fleming-type function
# spent on each side at α/2, α(t) = 4 − 4Φ(z_{1−α/4}/√t) in all, equally spaced looks, two-sided α = 0.05.
PUBLISHED_OBF_EACH_SIDE = {3: (3.7103, 2.5114, 1.9930), 4: (4.3326, 2.9631, 2.3590, 2.0141),
                           5: (4.8769, 3.3569, 2.6803, 2.2898, 2.0310)}


@pytest.mark.parametrize("k", [3, 4, 5])
def test_the_recursion_gives_the_published_boundaries_for_three_to_five_looks(k):
    ts = equal(k)
    spent = tuple(4 - 4 * sps.norm.cdf(sps.norm.ppf(1 - ALPHA / 4) / math.sqrt(t)) for t in ts)
    assert spending_boundaries(ts, spent) == pytest.approx(PUBLISHED_OBF_EACH_SIDE[k], abs=6e-4)


def test_pocock_type_boundaries_at_two_equally_spaced_looks_are_the_published_ones():
    # Lan-DeMets Pocock-type spending, two-sided α 0.05 (the two-look design's test, again through the K-look code)
    assert [round(c, 3) for c in boundaries("pocock", equal(2), ALPHA)] == [2.157, 2.201]


@pytest.mark.parametrize(("rule", "ts"), [("obrien-fleming", equal(3)), ("pocock", equal(4)),
                                          ("obrien-fleming", fractions((3, 3, 4))), ("pocock", fractions((3, 2, 2, 5)))])
def test_each_look_spends_what_the_rule_says_by_scipys_multivariate_normal(rule, ts):
    """P(every look k' ≤ k inside its boundary) = 1 − α(t_k), the joint law of (Z₁..Z_k) with corr √(t_i/t_j), by
    Genz's algorithm (scipy.stats.multivariate_normal) rather than the recursion."""
    c = np.array(boundaries(rule, ts, ALPHA))
    t = np.array(ts)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    assert 2 * sps.norm.sf(c[0]) == pytest.approx(spent_by_hand(rule, ts[0]), rel=1e-9)
    for k in range(2, len(ts) + 1):
        mvn = sps.multivariate_normal(np.zeros(k), cov[:k, :k], abseps=1e-8, releps=1e-8, maxpts=2_000_000)
        inside = mvn.cdf(c[:k], lower_limit=-c[:k])
        assert inside == pytest.approx(1 - spent_by_hand(rule, ts[k - 1]), abs=2e-6)


@pytest.mark.parametrize("rule", ["obrien-fleming", "pocock"])
def test_each_look_spends_what_the_rule_says_in_a_monte_carlo_of_the_looks(rule):
    """400,000 draws of (Z₁..Z₅) built as scaled sums of independent normals (corr √(t_i/t_j)): the share that first
    crosses at look k is α(t_k) − α(t_{k−1}), each within 4.5 binomial standard errors."""
    ts = equal(5)
    c = np.array(boundaries(rule, ts, ALPHA))
    rng = np.random.default_rng(32)
    reps = 400_000
    increments = rng.normal(size=(reps, 5)) * math.sqrt(1 / 5)
    z = np.cumsum(increments, axis=1) / np.sqrt(np.array(ts))
    crossed = np.abs(z) >= c
    first = np.where(crossed.any(1), crossed.argmax(1), -1)
    spent = [spent_by_hand(rule, t) for t in ts]
    for k in range(5):
        p = spent[k] - (spent[k - 1] if k else 0.0)
        assert (first == k).mean() == pytest.approx(p, abs=4.5 * math.sqrt(p * (1 - p) / reps) + 1e-6)


# ---- the whole design by simulation ---------------------------------------------------------------------------------

def t_to_z(x: np.ndarray) -> np.ndarray:
    """Each row's paired t statistic mapped to the standard normal by its own t distribution (df = n − 1)."""
    n = x.shape[1]
    t = x.mean(1) / (x.std(1, ddof=1) / math.sqrt(n))
    return np.where(t > 0, -special.ndtri(special.stdtr(n - 1, -t)), special.ndtri(special.stdtr(n - 1, t)))


def simulate(waves: list[int], c: list[float], futility: float | None, effect: float, reps: int, seed: int):
    """``reps`` designs of normal paired differences (mean ``effect``, SD 1) run wave by wave: each wave's own t
    statistic to z, look k's Z = Σ √m_j·z_j / √M_k, a stop at the first |Z| ≥ c_k or an interim Z below the futility
    bound. Returns (look at which each stopped, 0-based; +1 upward, −1 downward, 0 otherwise; each look's Z)."""
    rng = np.random.default_rng(seed)
    d = rng.normal(effect, 1.0, size=(reps, sum(waves)))
    edges = np.cumsum([0, *waves])
    zs = np.column_stack([t_to_z(d[:, edges[k]:edges[k + 1]]) for k in range(len(waves))])
    big = np.cumsum(zs * np.sqrt(waves), axis=1) / np.sqrt(np.cumsum(waves))
    stop_at = np.full(reps, len(waves) - 1)
    side = np.zeros(reps, dtype=int)
    going = np.ones(reps, dtype=bool)
    for k in range(len(waves)):
        up, down = going & (big[:, k] >= c[k]), going & (big[:, k] <= -c[k])
        futile = going & ~up & ~down & (futility is not None and k < len(waves) - 1) & (big[:, k] < (futility or 0))
        side[up], side[down] = 1, -1
        stopped = up | down | futile
        stop_at[stopped] = k
        going &= ~stopped
    return stop_at, side, big, d


DESIGNS = {"obrien-fleming [3, 3, 4]": ("obrien-fleming", [3, 3, 4], None),
           "pocock [3, 3, 4], futility 0": ("pocock", [3, 3, 4], 0.0),
           "obrien-fleming [4, 2, 2, 2], futility -0.5": ("obrien-fleming", [4, 2, 2, 2], -0.5)}


@pytest.mark.parametrize("name", list(DESIGNS))
def test_the_whole_designs_type_i_error_and_power_are_what_it_claims_in_simulation(name):
    """20,000 simulated designs under the null and 20,000 at the standardized difference the design claims to detect
    with 80 % power: the share rejecting 0 (either side) is the claimed type I error, the share crossing upward the
    claimed 80 %, each within 4.5 binomial standard errors (about ±0.0069 at 5 %, ±0.0127 at 80 %)."""
    rule, waves, futility = DESIGNS[name]
    spec = {"arms": {"a": {"algo": "grpo"}, "b": {"algo": "rppb"}},
            "seeds": {"n": "auto", "waves": waves, "spending": rule, **({} if futility is None else {"futility": futility})},
            "criterion": {"metric": "train/loss", "at": "last_k", "baseline": "a", "treatment": "b", "threshold": 1.0}}
    experiment = parse_experiment(spec)
    record = sized_look(experiment.sizing, experiment.criterion, {}, ALPHA).record
    claims, c = record["claims"], record["boundaries"]
    if futility is None:
        assert claims["type_i_error"] == pytest.approx(ALPHA, abs=1e-9)  # no futility: all of α is spent
    else:
        assert claims["type_i_error"] < ALPHA  # a futility stop only removes chances to reject (non-binding)
    reps = 20_000
    _, side, _, _ = simulate(waves, c, futility, 0.0, reps, seed=320)
    p = claims["type_i_error"]
    assert (side != 0).mean() == pytest.approx(p, abs=4.5 * math.sqrt(p * (1 - p) / reps))
    effect = claims["detectable_effect_sd"]
    _, side, _, _ = simulate(waves, c, futility, effect, reps, seed=321)
    assert (side == 1).mean() == pytest.approx(0.8, abs=4.5 * math.sqrt(0.8 * 0.2 / reps))
    # and the exact stopping probabilities per look agree with the simulation's shares
    stops = operating(rule, tuple(waves), ALPHA, futility, effect)
    stop_at, side, _, _ = simulate(waves, c, futility, effect, reps, seed=322)
    for k, q in enumerate(stops.up):
        assert ((stop_at == k) & (side == 1)).mean() == pytest.approx(q, abs=4.5 * math.sqrt(q * (1 - q) / reps) + 1e-4)


def test_the_verdict_takes_the_decisions_the_simulation_takes():
    """The simulation above models the production looks: on 200 of its designs (half under the null, half at a
    difference of 1 SD; a threshold every mean reaches) the verdict stops at the same look, on the same side, with the
    same Z at each look it took."""
    waves, futility = [3, 3, 4], 0.0
    spec = {"arms": {"a": {"algo": "grpo"}, "b": {"algo": "rppb"}},
            "seeds": {"n": "auto", "waves": waves, "spending": "pocock", "futility": futility},
            "criterion": {"metric": "train/loss", "at": "last_k", "baseline": "a", "treatment": "b",
                          "threshold": -1000.0}}
    experiment = parse_experiment(spec)
    c = sized_look(experiment.sizing, experiment.criterion, {}, ALPHA).record["boundaries"]
    for effect, seed in ((0.0, 7), (1.0, 8)):
        stop_at, side, big, d = simulate(waves, c, futility, effect, 100, seed)
        for i in range(100):
            record = sized_look(experiment.sizing, experiment.criterion,
                                {s + 1: float(d[i, s]) for s in range(10)}, ALPHA).record
            looks = record["looks"]
            assert len(looks) == stop_at[i] + 1
            assert [look["z"] for look in looks] == pytest.approx(list(big[i, :len(looks)]), rel=1e-9, abs=1e-12)
            decided = {"stop-efficacy": 1, "stop-worse": -1}.get(looks[-1]["decision"])
            if looks[-1]["decision"] == "final":
                z = looks[-1]["z"]
                decided = 1 if z >= c[-1] else -1 if z <= -c[-1] else 0
            assert (decided or 0) == side[i], (i, looks)


def test_a_validated_verdict_under_the_null_is_no_likelier_than_the_claimed_upward_type_i_error():
    """With the threshold at 0 (a crossing stops only with the mean ahead), 3,000 null designs through the verdict's
    own looks: the share whose last look tells the difference from 0 upward stays within the claimed upward type I
    error (4.5 binomial SEs)."""
    spec = {"arms": {"a": {"algo": "grpo"}, "b": {"algo": "rppb"}},
            "seeds": {"n": "auto", "waves": [3, 3, 4], "spending": "obrien-fleming"},
            "criterion": {"metric": "train/loss", "at": "last_k", "baseline": "a", "treatment": "b", "threshold": 0.0}}
    experiment = parse_experiment(spec)
    rng = np.random.default_rng(9)
    reps, told = 3000, 0
    for _ in range(reps):
        d = rng.normal(0.0, 1.0, 10)
        look = sized_look(experiment.sizing, experiment.criterion, {s + 1: float(d[s]) for s in range(10)}, ALPHA)
        told += look.test[0]
    upward = look.record["claims"]["type_i_error_upward"]
    assert upward == pytest.approx(ALPHA / 2, abs=1e-9)
    assert told / reps <= upward + 4.5 * math.sqrt(upward * (1 - upward) / reps)


# ---- a built design in waves, its audit -----------------------------------------------------------------------------

BASE = {s: 0.50 + 0.01 * ((s * 7) % 5 - 2) for s in range(1, 11)}
SPEC = """\
title: seeds in waves
hypothesis: rppb reaches at least 4 points higher pass@1 than grpo
arms:
  isp: {algo: grpo}
  sc: {algo: rppb}
seeds: {n: auto, waves: [3, 3, 4], spending: obrien_fleming, futility: 0}
criterion:
  metric: eval/pass@1
  at: final
  baseline: isp
  treatment: sc
  threshold_points: 4
  inconclusive_below_points: 2
"""


def waves_experiment(tmp_path: Path, differences: dict[int, int]) -> Path:
    return paired_experiment(tmp_path, SPEC, BASE, differences)


@pytest.mark.slow
def test_two_waves_then_the_third_decides_and_the_audit_catches_an_edited_look(tmp_path):
    """Waves [3, 3, 4]: look 1 and look 2 go on, look 3 decides; every look's Z is the fixed-weight combination of its
    waves' own t statistics (recomputed here with scipy.stats), the report states what each decision cost, and an
    edited look of verdict.json is a finding of ``python -m evidence audit``."""
    d = {1: 4, 2: -3, 3: 2, 4: 6, 5: 1, 6: 3, 7: 7, 8: 5, 9: 6, 10: 9}
    bag = build_bundle(waves_experiment(tmp_path, d), figures=False).bundle_dir
    verdict = json.loads((bag / "data" / "verdict.json").read_text())
    sizing = verdict["sizing"]
    assert sizing["rule"] == "obrien-fleming" and sizing["waves"] == [3, 3, 4] and sizing["futility"] == 0
    stage = [z_by_hand([d[s] for s in seeds]) for seeds in ([1, 2, 3], [4, 5, 6], [7, 8, 9, 10])]
    by_hand = [stage[0], (math.sqrt(3) * stage[0] + math.sqrt(3) * stage[1]) / math.sqrt(6),
               (math.sqrt(3) * stage[0] + math.sqrt(3) * stage[1] + 2 * stage[2]) / math.sqrt(10)]
    looks = sizing["looks"]
    assert [look["z"] for look in looks] == pytest.approx(by_hand, rel=1e-7)
    assert [look["decision"] for look in looks] == ["continue", "continue", "final"]
    assert by_hand[1] < sizing["boundaries"][1] and by_hand[2] >= sizing["boundaries"][2]
    assert (verdict["verdict"], verdict["rule"]) == ("VALIDATED", "threshold")
    assert verdict["seeds"] == list(range(1, 11)) and sizing["design_seeds"] == 10
    assert all(look["cost"]["jobs"] == 2 * len(look["seeds"]) for look in looks)
    report = (bag / "data" / "report.md").read_text()
    assert "Seeds in waves (`seeds: {n: auto, waves: [3, 3, 4], futility: 0}`)" in report
    assert "Look 3: seeds 7, 8, 9, 10" in report and "the last look decides; its wave " in report
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bag)], cwd=REPO, capture_output=True,
                             text=True, timeout=300)
    assert audited.returncode == 0, audited.stdout
    edited = Path(shutil.copytree(bag, tmp_path / "edited"))
    record = json.loads((edited / "data" / "verdict.json").read_text())
    record["sizing"]["looks"][1]["z"] = 3.5  # look 2 made to cross, as if the design had stopped there
    record["sizing"]["looks"][1]["decision"] = "stop-efficacy"
    (edited / "data" / "verdict.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    reseal_bag(edited)
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(edited)], cwd=REPO, capture_output=True,
                             text=True, timeout=300)
    assert audited.returncode == 1
    assert "data/verdict.json: does not recompute: sizing.looks[1].decision: recorded 'stop-efficacy', recomputed " \
           "'continue'" in audited.stdout, audited.stdout
    assert "data/verdict.json: does not recompute: sizing.looks[1].z: recorded 3.5" in audited.stdout


def look_at(differences: dict[int, float]):
    """The verdict's current look of SPEC's design on these differences (points), without a bundle."""
    experiment = parse_experiment(SPEC)
    return sized_look(experiment.sizing, experiment.criterion, differences, ALPHA)


def test_a_look_that_crosses_with_the_mean_at_the_threshold_stops_the_design_before_the_next_wave():
    look = look_at({1: 9, 2: 10, 3: 11, 4: 9, 5: 10, 6: 11, 7: 0})
    sizing = look.record
    assert [one["decision"] for one in sizing["looks"]] == ["continue", "stop-efficacy"]
    assert sizing["stopped_early"] and sizing["next_wave"] is None and sizing["design_seeds"] == 6
    assert look.test == (True, "") and look.seeds == [1, 2, 3, 4, 5, 6] and sizing["seeds_outside_design"] == [7]


def test_a_look_below_the_futility_bound_stops_the_design_and_says_why():
    look = look_at({1: -2, 2: -4, 3: 1})
    assert look.record["looks"][0]["decision"] == "stop-futility" and look.pending is None
    assert look.test[0] is False and "is below the futility bound 0: the design stopped for futility" in look.test[1]


def test_a_look_that_has_not_decided_waits_for_the_next_wave_naming_its_seeds():
    look = look_at({1: 4, 2: -3, 3: 2, 4: 5})
    assert look.record["next_wave"] == [4, 6] and look.record["design_seeds"] == 3 and look.seeds == [1, 2, 3]
    assert look.pending.startswith("look 1 (3 seeds of its wave) does not cross its boundary upward (Z = ")
    assert look.pending.endswith("; look 2 needs seeds 4..6, at least two of them paired (it has 1)")


@pytest.mark.slow
def test_a_duplicated_key_in_verdict_json_is_a_finding_of_the_audit(tmp_path):
    """A forger prepends '"verdict": "VALIDATED", "rule": "threshold",' to an INCONCLUSIVE verdict.json and reseals:
    Python's reader keeps the last of a duplicated key, so the values would recompute, while the file's first lines
    (what a reader, or a first-key-wins parser, sees) say VALIDATED. The strict reader refuses the file, naming it and
    the key (adversarial finding of issue 32)."""
    d = {1: 4, 2: -3, 3: 2, 4: 6, 5: 1, 6: 3, 7: 5, 8: 5, 9: 5, 10: 5}
    bag = Path(shutil.copytree(build_bundle(waves_experiment(tmp_path, d), figures=False).bundle_dir,
                               tmp_path / "forged"))
    verdict = bag / "data" / "verdict.json"
    assert json.loads(verdict.read_text())["verdict"] != "VALIDATED"
    verdict.write_text('{\n  "verdict": "VALIDATED",\n  "rule": "threshold",' + verdict.read_text()[1:])
    reseal_bag(bag)
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bag)], cwd=REPO, capture_output=True,
                             text=True, timeout=300)
    assert audited.returncode == 1, audited.stdout
    assert "data/verdict.json: not valid JSON (duplicate keys 'rule', 'verdict')" in audited.stdout, audited.stdout


@pytest.mark.slow
def test_an_interim_looks_headline_claims_nothing_and_the_audit_catches_an_edited_one(tmp_path):
    """Look 1 of waves [3, 3, 4] on differences 5, 6, 7 points: Z = 2.61 inside its boundary 3.578, the verdict waits
    for wave 2. The report's first line, the headline table (the launcher's summary prints it) and every pair of the
    paired table claim nothing while the design runs (``claims.sequential_design``), though a fixed-sample 95 %
    t-interval of the three seeds excludes 0 (adversarial finding of issue 32); the old fixed-sample sentence put back
    in report.md, resealed, is a finding of ``python -m evidence audit``."""
    bag = Path(build_bundle(waves_experiment(tmp_path, {1: 5, 2: 6, 3: 7}), figures=False).bundle_dir)
    data = bag / "data"
    verdict = json.loads((data / "verdict.json").read_text())
    assert verdict["rule"] == "next-wave-pending" and verdict["sizing"]["decision"] == "pending"
    line = (data / "report.md").read_text().splitlines()[2]
    expected = ("On eval pass@1, sc − isp has a design in waves that has not decided yet (look 1 of 3: Z = 2.61, "
                "boundary ±3.578): no interval; run wave 2 (seeds 4..6) of the design.")
    assert expected in line and "95 % interval" not in line, line
    assert expected in (data / "tables" / "headline.csv").read_text()
    rows = (data / "tables" / "paired_differences.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert all(row.split(",")[header.index("claim")] == "no claim" for row in rows[1:] if row.split(",")[0]), rows
    edited = Path(shutil.copytree(bag, tmp_path / "edited"))
    report = edited / "data" / "report.md"
    report.write_text(report.read_text().replace(expected, "On eval pass@1, sc − isp is +6.0 points (95 % interval "
                                                           "[+3.5, +8.5])."))
    reseal_bag(edited)
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(edited)], cwd=REPO, capture_output=True,
                             text=True, timeout=300)
    assert audited.returncode == 1
    assert "data/report.md: line 3: does not recompute (recorded '" in audited.stdout, audited.stdout


# ---- a wave without a test of its own, a pending look's claim, bad designs (adversarial findings, issue 32 §3) --------

def _audit(bag: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evidence", "audit", str(bag)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_a_wave_of_tied_differences_gives_no_test_and_the_design_cannot_decide(tmp_path):
    """Wave 2's differences all 5 points (SD 0): its t would be ±∞ and look 2 'crossed', VALIDATED while the verdict's
    own interval includes 0. Now wave 2 gives no stage Z, so no look from 2 on can decide: INCONCLUSIVE by rule
    wave-without-test naming wave 2, no further wave, no fixed-sample claim; look 1's Z is the paired t of wave 1 by
    scipy; the audit recomputes every look."""
    d = {1: -8, 2: 16, 3: 4, 4: 5, 5: 5, 6: 5}
    bag = build_bundle(waves_experiment(tmp_path, d), figures=False).bundle_dir
    verdict = json.loads((bag / "data" / "verdict.json").read_text())
    assert (verdict["verdict"], verdict["rule"]) == ("INCONCLUSIVE", "wave-without-test")
    assert verdict["reason"].startswith("wave 2 (seeds 4..6) gives no test of its own (tied evaluations)")
    looks = verdict["sizing"]["looks"]
    assert [look["decision"] for look in looks] == ["continue", "stop-no-test"]
    assert looks[0]["z"] == pytest.approx(z_by_hand([-8, 16, 4]), rel=1e-9)
    assert (looks[1]["z"], looks[1]["z_stage"], looks[1]["crossed"], looks[1]["sd"]) == (None, None, False, 0.0)
    assert looks[1]["why"] == verdict["reason"] and verdict["sizing"]["next_wave"] is None
    assert verdict["claim"]["kind"] == "no claim" and verdict["mde"]["value"] is None
    assert verdict["claim"]["missing"][0]["rule"] == "wave-without-test"
    assert verdict["difference_ci95"][0] < 0 < verdict["difference_ci95"][1]  # the fixed-sample interval, for reference
    audited = _audit(bag)
    assert audited.returncode == 0, audited.stdout


def test_a_first_wave_with_one_paired_seed_spends_no_later_wave():
    """Two of wave 1's three seeds rejected: look 1 has no Z, and every later Z combines it: the design stops there
    without a test, naming wave 1 (before: it planned wave 2, then wave 3)."""
    look = look_at({1: 10.0})
    assert look.record["next_wave"] is None and look.pending is None and look.test[0] is False
    assert look.record["looks"][0]["decision"] == "stop-no-test"
    assert look.without.startswith("wave 1 (seeds 1..3) gives no test of its own (1 paired seed; its paired t "
                                   "statistic needs two)")


def test_a_later_wave_whose_jobs_ran_but_were_rejected_is_never_planned_again():
    """Wave 2 ran (its seeds 4..6 listed in the bundle) but only seed 4 is paired: not the next wave again (the runner
    could loop) but a design without a test; while its seeds have not all run, it is the next wave."""
    d = {1: 4, 2: -3, 3: 2, 4: 5}
    experiment = parse_experiment(SPEC)
    ran = sized_look(experiment.sizing, experiment.criterion, d, ALPHA, listed=range(1, 7))
    assert ran.record["next_wave"] is None and ran.record["looks"][-1]["decision"] == "stop-no-test"
    assert ran.without.startswith("wave 2 (seeds 4..6) gives no test of its own (1 paired seed")
    assert look_at(d).record["next_wave"] == [4, 6]


def test_a_look_that_has_not_decided_claims_no_fixed_sample_difference(tmp_path):
    """Look 1 of waves [3, 3, 4]: Z inside its boundary, wave 2 pending. verdict.json's claim is 'pending' (the look,
    its Z and boundary, the next wave), never 'differs' from an unadjusted t-interval, and states no MDE; the boundary
    is O'Brien-Fleming's c₁ = z_{0.975}/√0.3 and Z the paired t of wave 1 by scipy; the audit recomputes it."""
    bag = build_bundle(waves_experiment(tmp_path, {1: 5, 2: 6, 3: 7}), figures=False).bundle_dir
    verdict = json.loads((bag / "data" / "verdict.json").read_text())
    assert verdict["rule"] == "next-wave-pending"
    claim = verdict["claim"]
    assert claim["kind"] == "pending" and verdict["mde"]["value"] is None
    pending = claim["pending"]
    assert (pending["look"], pending["looks"], pending["next_wave"]) == (1, 3, [4, 6])
    assert pending["z"] == pytest.approx(z_by_hand([5, 6, 7]), rel=1e-9)
    assert pending["boundary"] == pytest.approx(sps.norm.ppf(0.975) / math.sqrt(0.3), rel=1e-9)
    assert claim["sentence"] == (f"not decided at look 1 of 3 (Z = {pending['z']:.3g}, boundary "
                                 f"±{pending['boundary']:.4g}): no interval until the design decides; wave 2, seeds "
                                 f"4..6, runs next")
    assert _audit(bag).returncode == 0


def test_seeds_of_a_later_wave_that_ran_early_are_ahead_not_outside_the_design():
    look = look_at({1: 4, 2: -3, 3: 2, 7: 5, 8: 1, 11: 3})
    assert look.record["next_wave"] == [4, 6]
    assert look.record["seeds_outside_design"] == [11] and look.record["seeds_ahead"] == [7, 8]


def test_a_design_whose_first_wave_is_a_small_share_has_finite_boundaries_that_spend_alpha():
    """waves [3, 100]: O'Brien-Fleming's α(t₁) at t₁ = 3/103 is ~1e-30 (2 − 2Φ(x) rounded it to 0: c₁ = ∞, and
    scipy's 'function value at x=0.0 is NaN' at registration). c₁ = Φ⁻¹(1 − α(t₁)/2) from the tail, and the two
    looks spend α by scipy's bivariate normal (Genz)."""
    from evidence.verdict.sizing import design_record

    experiment = parse_experiment({**yaml_spec(), "seeds": {"n": "auto", "waves": [3, 100]}})
    record = design_record(experiment.sizing, ALPHA)
    t1 = 3 / 103
    c = record["boundaries"]
    assert c[0] == pytest.approx(sps.norm.isf(spent_by_hand("obrien-fleming", t1) / 2), rel=1e-9)
    cov = np.array([[1, math.sqrt(t1)], [math.sqrt(t1), 1]])
    inside = sps.multivariate_normal(np.zeros(2), cov, abseps=1e-10, releps=1e-10).cdf(np.array(c), lower_limit=-np.array(c))
    assert inside == pytest.approx(1 - ALPHA, abs=2e-6)
    assert record["claims"]["type_i_error"] == pytest.approx(ALPHA, abs=1e-6)
    assert 0 < record["claims"]["detectable_effect_sd"] < 1


def yaml_spec() -> dict:
    import yaml

    return {k: v for k, v in yaml.safe_load(SPEC).items() if k in ("arms", "criterion")}


@pytest.mark.parametrize(("seeds", "message"), [
    ({"n": "auto", "waves": [3, 3, 4], "futility": 100},
     "seeds: futility 100 is at or above look 1's boundary 3.578 (obrien-fleming, α 0.05): every design would stop at "
     "look 1; give a bound below 2.535 (e.g. futility: 0), or drop it"),
    ({"n": "auto", "waves": [3, 3, 4], "futility": 1e308}, "seeds: futility 1e+308 is at or above look 1's boundary"),
    ({"n": "auto", "waves": [3, 3, 4], "futility": 3}, "seeds: futility 3 is at or above look 2's boundary 2.535"),
    ({"n": "auto", "waves": [3, 10 ** 6]}, "seeds: waves [3, 1000000] give look 1"),
])
def test_a_design_the_looks_cannot_run_is_one_line(seeds, message):
    from evidence.problems import VerdictError
    from evidence.verdict.sizing import check_design

    experiment = parse_experiment({**yaml_spec(), "seeds": seeds})
    with pytest.raises(VerdictError) as caught:
        check_design(experiment.sizing, ALPHA)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
