"""A sized design (issue 22, section 1): ``seeds: {n: auto, min, max}``, two looks, an alpha-spending rule.

The references are written here: the spending functions from their formulas, the second boundary's crossing
probability from scipy's bivariate normal CDF, the combined α on simulated null data (numpy, the looks' test
done here from the t statistics), the power of the sized n by simulation, and every number of a built
verdict from the sweep's own differences with scipy.stats.
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
import yaml
from scipy import optimize, special
from scipy import stats as sps

from evidence import audit_bundle, build_bundle
from evidence.statistics import waves
from evidence.statistics.sequential import required_seeds
from evidence.verdict import VerdictError, parse_experiment
from evidence.verdict.sizing import sized_look
from facts.repo import REPO_ROOT
from launcher.experiment.stage_runner import verdict_line
from tests.evidence.experiment_stages import paired_experiment, z_by_hand
from tests.experiment_spec import experiment_yaml
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
ALPHA = 0.05
RULES = ("obrien-fleming", "pocock")


def boundaries(rule: str, t: float, alpha: float) -> tuple[float, float]:
    """A two-look design's boundaries: the K = 2 case of the waves' boundaries, at information fraction t."""
    c1, c2 = waves.boundaries(rule, (t, 1.0), alpha)
    return c1, c2


def spent_by_hand(rule: str, t: float) -> float:
    if rule == "obrien-fleming":
        return 2 * sps.norm.sf(sps.norm.ppf(1 - ALPHA / 2) / math.sqrt(t))
    return ALPHA * math.log(1 + (math.e - 1) * t)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("t", [0.3, 0.5, 0.75])
def test_the_two_boundaries_spend_alpha_as_the_rule_says(rule, t):
    c1, c2 = boundaries(rule, t, ALPHA)
    assert 2 * sps.norm.sf(c1) == pytest.approx(spent_by_hand(rule, t), rel=1e-9)
    # P(|Z1| < c1, |Z2| >= c2), corr sqrt(t): P(|Z1| < c1) minus the box both stay inside, by scipy's bivariate CDF
    mvn = sps.multivariate_normal([0, 0], [[1, math.sqrt(t)], [math.sqrt(t), 1]], abseps=1e-10, releps=1e-10)
    both_inside = mvn.cdf([c1, c2], lower_limit=[-c1, -c2])
    assert (1 - 2 * sps.norm.sf(c1)) - both_inside == pytest.approx(ALPHA - spent_by_hand(rule, t), abs=1e-6)


def test_pocock_type_boundaries_at_half_the_information_are_the_published_ones():
    # Lan-DeMets Pocock-type spending, two equally spaced looks, two-sided alpha 0.05: 2.157 and 2.201
    assert [round(c, 3) for c in boundaries("pocock", 0.5, ALPHA)] == [2.157, 2.201]


def t_to_z(x: np.ndarray, axis: int = 1) -> np.ndarray:
    """Each row's paired t statistic mapped to the standard normal by its own t distribution (df = n - 1)."""
    n = x.shape[axis]
    t = x.mean(axis) / (x.std(axis, ddof=1) / math.sqrt(n))
    return np.where(t > 0, -special.ndtri(special.stdtr(n - 1, -t)), special.ndtri(special.stdtr(n - 1, t)))


def power_by_hand(delta: float, sd: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """The paired t-test's power from the noncentral t (scipy.special.nctdtr), vectorised over SDs."""
    critical = special.stdtrit(n - 1, 1 - alpha / 2)
    lam = delta * math.sqrt(n) / sd
    return 1 - np.nan_to_num(special.nctdtr(n - 1, lam, critical)) + np.nan_to_num(special.nctdtr(n - 1, lam, -critical))


def simulate(rule: str, n1: int, n_max: int, threshold: float, reps: int, seed: int):
    """``reps`` sized experiments on null data (true difference 0, SD 1): the seeds each second look takes
    (the smallest n in [n1 + 2, n_max] with 80 % power at the threshold from the first look's SD, at the second
    boundary's nominal level), and whether either look rejects 0 (two-sided)."""
    rng = np.random.default_rng(seed)
    c1, c2 = boundaries(rule, n1 / n_max, ALPHA)
    d = rng.normal(0.0, 1.0, size=(reps, n_max))
    s1 = d[:, :n1].std(1, ddof=1)
    # the power falls as the SD rises: n suffices below the SD at which its power is 0.8 (root by brentq)
    level = 2 * sps.norm.sf(c2)
    largest_sd = {n: optimize.brentq(lambda sd, n=n: power_by_hand(threshold, np.array([sd]), n, level)[0] - 0.8,
                                     1e-3, 100.0, xtol=1e-13) for n in range(n1 + 2, n_max + 1)}
    need = np.full(reps, n_max)
    for n in range(n_max, n1 + 1, -1):
        need = np.where(s1 <= largest_sd[n], n, need)
    z1 = t_to_z(d[:, :n1])
    w1 = math.sqrt(n1 / n_max)
    combined = np.zeros(reps)
    for n in np.unique(need):
        rows = need == n
        combined[rows] = w1 * z1[rows] + math.sqrt(1 - w1 * w1) * t_to_z(d[rows, n1:n])
    first = np.abs(z1) >= c1
    return d, need, z1, first, first | (np.abs(combined) >= c2)


@pytest.mark.parametrize("rule", RULES)
def test_the_two_looks_together_reject_a_true_null_at_alpha_on_simulated_data(rule):
    """40,000 sized experiments whose true difference is 0: the first look sizes the second from its SD (from
    5 to 10 seeds here), and the two looks together reject 0 in 5 % of them (4.6 standard errors either side)."""
    d, need, _, first, rejected = simulate(rule, 3, 10, 1.5, 40_000, seed=22)
    assert len(np.unique(need)) >= 5  # the SD really moves the second look's size
    assert rejected.mean() == pytest.approx(ALPHA, abs=0.005)
    assert first.mean() == pytest.approx(spent_by_hand(rule, 0.3), abs=0.0025 if rule == "pocock" else 0.0005)


def test_the_simulation_takes_the_decisions_the_verdict_takes():
    """The Monte Carlo above models the production looks: on 150 of its experiments the verdict's first look
    sizes the same second look and both looks cross (or not) as the simulation says."""
    spec = {"arms": {"a": {"algo": "grpo"}, "b": {"algo": "rppb"}}, "seeds": {"n": "auto", "min": 3, "max": 10},
            "criterion": {"metric": "train/loss", "at": "last_k", "baseline": "a", "treatment": "b", "threshold": 1.5}}
    experiment = parse_experiment(spec)
    d, need, z1, first, rejected = simulate("obrien-fleming", 3, 10, 1.5, 150, seed=5)
    for i in range(150):
        look = sized_look(experiment.sizing, experiment.criterion, {s + 1: float(d[i, s]) for s in range(10)}, ALPHA)
        record = look.record
        assert record["looks"][0]["required_seeds"] == need[i]
        assert record["looks"][0]["z"] == pytest.approx(z1[i], rel=1e-9, abs=1e-12)
        crossed = any(look["crossed"] for look in record["looks"])
        assert crossed == rejected[i]


def test_the_seeds_the_threshold_needs_reach_80_percent_power_in_simulation():
    """required_seeds at δ/σ = 0.9: the paired t-test at that n rejects at least 80 % of 100,000 simulated designs
    whose true difference is the threshold, and at one seed fewer it does not."""
    n = required_seeds(1.0, 0.9, ALPHA, 0.8, 2, 50)
    rng = np.random.default_rng(3)

    def simulated_power(size: int) -> float:
        x = rng.normal(0.9, 1.0, size=(100_000, size))
        t = x.mean(1) / (x.std(1, ddof=1) / math.sqrt(size))
        return float((2 * special.stdtr(size - 1, -np.abs(t)) < ALPHA).mean())

    assert simulated_power(n) >= 0.8 - 0.005
    assert simulated_power(n - 1) < 0.8 - 0.005
    assert required_seeds(0.0, 0.9, ALPHA, 0.8, 5, 10) == 5 and required_seeds(50.0, 0.9, ALPHA, 0.8, 5, 10) == 10


# ---- the verdict of a sized experiment, through the build and the audit -------------------------------------

BASE = {1: 0.50, 2: 0.52, 3: 0.48, 4: 0.51, 5: 0.49, 6: 0.50}
SPEC = experiment_yaml(seeds={"n": "auto", "min": 3, "max": 6, "spending": "obrien-fleming"},
                       criterion={"inconclusive_below_points": 2})


def sized_experiment(tmp_path: Path, differences: dict[int, int]) -> Path:
    return paired_experiment(tmp_path, SPEC, BASE, differences)


def needed_by_hand(sd: float, alpha: float) -> int:
    """The smallest n in [5, 6] whose paired t-test detects 4 points with 80 % power (scipy.stats.nct), else 6."""
    for n in (5, 6):
        c = sps.t.ppf(1 - alpha / 2, n - 1)
        lam = 4 * math.sqrt(n) / sd
        if sps.nct.sf(c, n - 1, lam) + sps.nct.cdf(-c, n - 1, lam) >= 0.8:
            return n
    return 6


def test_the_first_look_sizes_the_second_and_waits_for_it(tmp_path):
    bag = build_bundle(sized_experiment(tmp_path, {1: 4, 2: -3, 3: 1}), figures=False).bundle_dir
    verdict = json.loads((bag / "data" / "verdict.json").read_text())
    sizing = verdict["sizing"]
    c1, c2 = sizing["boundaries"]
    assert 2 * sps.norm.sf(c1) == pytest.approx(spent_by_hand("obrien-fleming", 0.5), rel=1e-9)
    assert sizing["rule"] == "obrien-fleming" and sizing["weights"] == pytest.approx([math.sqrt(0.5)] * 2)
    assert sizing["waves"] == [3, 3] and sizing["resized"] is True
    (first,) = sizing["looks"]
    assert first["z"] == pytest.approx(z_by_hand([4, -3, 1]), rel=1e-7)
    assert first["required_seeds"] == needed_by_hand(np.std([4, -3, 1], ddof=1), 2 * sps.norm.sf(c2))
    assert (verdict["verdict"], verdict["rule"]) == ("INCONCLUSIVE", "next-wave-pending")
    assert sizing["look"] == 1 and first["decision"] == "continue" and not sizing["stopped_early"]
    assert sizing["next_wave"] == [4, first["required_seeds"]]
    assert verdict["seeds"] == [1, 2, 3] and verdict["seeds_missing"] == []
    report = (bag / "data" / "report.md").read_text()
    assert "Seeds in waves (`seeds: {n: auto, min: 3, max: 6}`), registered before any seed ran" in report
    assert verdict_line(verdict, "b").startswith("verdict: INCONCLUSIVE by rule next-wave-pending")
    assert audit_bundle(bag) == []
    # probe.json prices the design at its most (max seeds) and its first look; an edited first look is caught
    probe = json.loads((bag / "data" / "stages" / "probe" / "probe.json").read_text())
    assert (probe["budget"]["runs"], probe["budget"]["first_look"]["runs"]) == (12, 6)  # 2 arms x 6, x 3 seeds
    edited = Path(shutil.copytree(bag, tmp_path / "edited"))
    path = edited / "data" / "stages" / "probe" / "probe.json"
    probe["budget"]["first_look"]["cpu_hours"] = 0.001
    path.write_text(json.dumps(probe, indent=2, sort_keys=True) + "\n")
    reseal_bag(edited)
    assert any(str(f).startswith("data/stages/probe/probe.json: budget.first_look.cpu_hours: recorded 0.001")
               for f in audit_bundle(edited))


def test_the_second_look_combines_both_stages_and_the_audit_recomputes_it(tmp_path):
    d = {1: 4, 2: -3, 3: 1, 4: 9, 5: 10, 6: 8}
    bag = build_bundle(sized_experiment(tmp_path, d), figures=False).bundle_dir
    verdict = json.loads((bag / "data" / "verdict.json").read_text())
    sizing = verdict["sizing"]
    first, second = sizing["looks"]
    need = first["required_seeds"]
    assert need == 6  # SD 3.5 of the first look's differences needs more seeds than the design allows
    z1, z2 = z_by_hand([4, -3, 1]), z_by_hand([9, 10, 8])
    combined = math.sqrt(0.5) * z1 + math.sqrt(0.5) * z2
    assert second["z_stage"] == pytest.approx(z2, rel=1e-7)
    assert second["z"] == pytest.approx(combined, rel=1e-7)
    assert combined >= sizing["boundaries"][1] and second["crossed"] and sizing["look"] == 2
    assert second["decision"] == "final"
    assert np.mean(list(d.values())) >= 4
    assert (verdict["verdict"], verdict["rule"]) == ("VALIDATED", "threshold")
    assert verdict["seeds"] == [1, 2, 3, 4, 5, 6]
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bag)], cwd=REPO, capture_output=True,
                             text=True, timeout=300)
    assert audited.returncode == 0, audited.stdout
    edited = Path(shutil.copytree(bag, tmp_path / "edited"))
    record = json.loads((edited / "data" / "verdict.json").read_text())
    record["sizing"]["boundaries"][1] = 1.5  # a looser second boundary
    record["sizing"]["looks"][0]["required_seeds"] = 5
    (edited / "data" / "verdict.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    reseal_bag(edited)
    reasons = [str(f) for f in audit_bundle(edited)]
    assert any(r.startswith("data/verdict.json: does not recompute: sizing.boundaries[1]: recorded 1.5") for r in reasons)
    assert ("data/verdict.json: does not recompute: sizing.looks[0].required_seeds: recorded 5, recomputed 6"
            in reasons), reasons


def test_a_second_look_that_does_not_cross_its_boundary_is_not_validated(tmp_path):
    # the same first look; the second stage's differences reach the threshold on average but vary: Z below c2
    bag = build_bundle(sized_experiment(tmp_path, {1: 4, 2: -3, 3: 1, 4: 16, 5: -2, 6: 12}), figures=False).bundle_dir
    verdict = json.loads((bag / "data" / "verdict.json").read_text())
    combined = math.sqrt(0.5) * (z_by_hand([4, -3, 1]) + z_by_hand([16, -2, 12]))
    assert combined < verdict["sizing"]["boundaries"][1]
    assert (verdict["verdict"], verdict["rule"]) == ("INCONCLUSIVE", "threshold-within-noise")
    assert "look 2's combined Z" in verdict["reason"]


@pytest.mark.parametrize(("seeds", "message"), [
    ({"n": 5, "min": 3, "max": 6}, "seeds: n is 5; write n: auto for a sized design, or list the seeds"),
    ({"n": "auto", "min": 2, "max": 6}, "seeds: min is 2; the first look needs at least 3 seeds"),
    ({"n": "auto", "min": 3, "max": 4}, "seeds: max is 4; it must be at least min + 2 = 5"),
    ({"n": "auto", "min": 3, "max": 6, "spending": "haybittle"}, "seeds: spending 'haybittle' is not a rule; choose "
                                                                 "obrien-fleming or pocock"),
    ({"n": "auto", "min": 3}, "seeds: max must be an integer, not None"),
    ({"n": "auto", "min": 3, "max": 6, "looks": 3}, "seeds: unknown key 'looks'"),
    ({"n": 10, "waves": [3, 3, 4]}, "seeds: n is 10; write n: auto for waves, or list the seeds"),
    ({"n": "auto", "waves": [3, 1, 4]}, "seeds: wave 2 adds 1 seed(s); each wave after the first adds at least 2"),
    ({"n": "auto", "waves": [2, 3, 4]}, "seeds: the first wave has 2 seed(s); the first look needs at least 3"),
    ({"n": "auto", "waves": [10]}, "seeds: waves has 1 wave(s); give 2 to 10"),
    ({"n": "auto", "waves": "3,3,4"}, "seeds: waves must be a list of the seeds each wave adds"),
    ({"n": "auto", "waves": [3, 3], "min": 3}, "seeds: give waves or min and max, not both"),
    ({"n": "auto", "waves": [3, 3], "spending": "lan-demets"}, "seeds: spending 'lan-demets' is not a rule; choose "
                                                               "obrien-fleming or pocock"),
    ({"n": "auto", "waves": [3, 3], "futility": "low"}, "seeds: futility is 'low'; give the Z below which"),
])
def test_a_bad_sized_design_is_one_line_naming_the_fix(seeds, message):
    spec = yaml.safe_load(SPEC)
    spec["seeds"] = seeds
    with pytest.raises(VerdictError) as caught:
        parse_experiment(spec)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_sized_design_with_several_treatments_is_refused():
    spec = yaml.safe_load(SPEC)
    spec["arms"]["ent"] = {"algo": "rpp"}
    spec["criterion"]["treatment"] = ["sc", "ent"]
    with pytest.raises(VerdictError, match="^seeds: n: auto sizes one comparison"):
        parse_experiment(spec)


def test_a_first_look_whose_differences_tie_never_stops_the_design_and_spends_no_later_wave():
    """Three seeds 5 points apart each (SD 0): Z₁ would be infinite and cross any boundary, yet tied differences
    support no test (``claims.tied_evaluations``), so wave 1 gives no stage statistic, and every later look's Z
    combines wave 1's: no look can decide. The design stops there without a test, naming the wave, and plans no
    second wave (before: look 1 'crossed' and waited for a second look that could never have a Z)."""
    from evidence.statistics import claims

    spec = {"arms": {"a": {"algo": "grpo"}, "b": {"algo": "rpp"}}, "seeds": {"n": "auto", "min": 3, "max": 10},
            "criterion": {"metric": "eval/pass@1", "baseline": "a", "treatment": "b", "threshold_points": 4}}
    experiment = parse_experiment(spec)
    tied = {1: 5.0, 2: 5.0, 3: 5.0}

    def missing(seeds):
        found = tuple(tied[s] for s in seeds)  # its evaluation-noise interval known: a point, as the differences
        return claims.shortfalls(claims.PairedDesign(found, 1.0, 25, (("question", (5.0, 5.0)),)), 0.95)

    for given in (None, missing):  # the differences' own rules, or the evaluation's
        look = sized_look(experiment.sizing, experiment.criterion, tied, ALPHA, given)
        first = look.record["looks"][0]
        assert (first["decision"], first["crossed"], first["z"], first["z_stage"]) == ("stop-no-test", False, None, None)
        assert look.record["next_wave"] is None and look.pending is None and look.test[0] is False
        assert look.without.startswith("wave 1 (seeds 1..3) gives no test of its own (tied evaluations)")
