"""What a pair may claim in an experiment whose seeds run in waves (issue 32, sections 1 and 3, adversarial finding:
an interim look's headline claimed a difference the design had not found): ``claims.sequential_design`` on each kind
of look, and a simulation of null designs, every sealed look's headline built from that look's data, whose rate of
claiming a difference is held to the design's type I error. The design's decisions come from
``evidence.verdict.sizing`` (tested against published boundaries and its own simulation in test_verdict_waves.py);
the fixed-sample claim the old headline made is computed beside it, to show the simulation tells the two apart."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evidence.statistics import claims
from evidence.statistics.claims import (
    DIFFERS,
    NO_CLAIM,
    NO_DIFFERENCE,
    PairedDesign,
    SequentialLook,
    paired_claim,
)
from evidence.statistics.headline import Pair, headline_sentence
from evidence.verdict import parse_experiment
from evidence.verdict.sizing import current_look, sized_look

LEVEL = 0.95
# The tester's design: O'Brien-Fleming boundaries over waves of 3, 3 and 4 seeds, no futility bound, and a threshold of
# 0 so that every upward crossing stops the design (the most looks a null design can turn into claims).
SPEC = """\
arms:
  isp: {algo: grpo}
  sc: {algo: rppb}
seeds: {n: auto, waves: [3, 3, 4], spending: obrien_fleming}
criterion:
  metric: eval/pass@1
  at: final
  baseline: isp
  treatment: sc
  threshold_points: 0
"""
EXPERIMENT = parse_experiment(SPEC)


def claimed(differences: list[float], look: SequentialLook | None, tested: bool = True) -> claims.PairClaim:
    return claims.sequential_design(paired_claim(PairedDesign(tuple(differences)), LEVEL), look, tested)


def look_of(differences: dict[int, float]):
    return sized_look(EXPERIMENT.sizing, EXPERIMENT.criterion, differences, 1 - LEVEL,
                      lambda seeds: claims.shortfalls(PairedDesign(tuple(differences[s] for s in seeds)), LEVEL))


def test_the_testers_interim_look_claims_nothing_and_says_what_the_design_waits_for():
    """Look 1 of waves [3, 3, 4] on differences 5, 6, 7 points: Z = 2.61 inside its boundary 3.578; the fixed-sample
    t-interval excludes 0, yet the pair may claim nothing until the design decides."""
    d = {1: 5.0, 2: 6.0, 3: 7.0}
    look = look_of(d)
    assert look.pending is not None and look.record["decision"] == "pending"
    assert paired_claim(PairedDesign(tuple(d.values())), LEVEL).kind == DIFFERS  # what the old headline said
    now = current_look(look.record)
    assert (now.look, now.looks, now.decided, now.next_wave) == (1, 3, False, (4, 6))
    claim = claimed(list(d.values()), now)
    assert claim.kind == NO_CLAIM and claim.interval is None and claim.mde is None and claim.holds is None
    assert claim.missing[0].rule == "sequential-pending"
    sentence = headline_sentence(["sc", "isp"], [Pair("sc", "isp", claim)], LEVEL)
    assert sentence == ("On eval pass@1, sc − isp has a design in waves that has not decided yet (look 1 of 3: Z = "
                        "2.61, boundary ±3.578): no interval; run wave 2 (seeds 4..6) of the design.")
    # the conservative choice: every other pair and metric of the experiment is withheld alike while it runs
    assert claimed([1.0, 2.0, 3.0], now, tested=False).kind == NO_CLAIM


def test_a_decided_design_is_stated_as_it_decided_never_as_a_fixed_sample_claim_that_contradicts_it():
    stop = {1: 9.0, 2: 10.0, 3: 11.0, 4: 9.0, 5: 10.0, 6: 11.0}
    now = current_look(look_of(stop).record)
    assert (now.decided, now.crossed, now.how) == (True, 1, "stopped for efficacy")
    claim = claimed(list(stop.values()), now)
    assert claim.kind == DIFFERS and claim.interval is None and claim.sequential == now
    assert "the difference holds by the design in waves (look 2 of 3, stopped for efficacy: Z = " in headline_sentence(
        ["sc", "isp"], [Pair("sc", "isp", claim)], LEVEL)
    # read as baseline − treatment, the same decision turned around
    assert now.oriented(-1).crossed == -1 and now.oriented(-1).z == pytest.approx(-now.z)
    # the last look inside its boundary: no difference detected by the design, though the fixed-sample t-interval
    # of the same ten seeds excludes 0
    final = {1: 1.0, 2: 4.0, 3: 0.0, 4: 2.0, 5: 3.0, 6: 1.5, 7: -0.5, 8: -0.5, 9: 0.5, 10: 1.5}
    record = look_of(final).record
    assert record["decision"] == "final" and record["looks"][-1]["z"] < record["looks"][-1]["boundary"]
    assert paired_claim(PairedDesign(tuple(final.values())), LEVEL).kind == DIFFERS
    claim = claimed(list(final.values()), current_look(record))
    assert claim.kind == NO_DIFFERENCE and claim.interval is None
    assert headline_sentence(["sc", "isp"], [Pair("sc", "isp", claim)], LEVEL).startswith(
        "On eval pass@1, no difference detected between sc and isp by the design in waves (look 3 of 3, the last look")
    # a pair the design does not test keeps the fixed-sample rules once it has decided; no design: as before
    assert claimed(list(final.values()), current_look(record), tested=False).kind == DIFFERS
    assert claimed(list(final.values()), None).kind == DIFFERS
    # a design with a shortfall claims nothing, whatever it decided
    assert claimed([2.0, 2.0, 2.0], now).kind == NO_CLAIM


def test_null_designs_claim_a_difference_at_some_sealed_look_no_more_often_than_the_designs_type_i_error():
    """2,000 designs under the null (each seed's difference N(0, 3²) points): the launcher seals a bundle at every
    look until the design decides; a look's headline is built from that look's data (its sized look, the pair's claim,
    the sentence). The rate at which any of a design's headlines claims a difference is within 3 simulation SEs of
    the design's two-sided type I error at most; the fixed-sample claim at the same looks exceeds that bound."""
    rng = np.random.default_rng(32)
    reps, ends = 2000, (3, 6, 10)
    said = naive = 0
    alpha = None
    for _ in range(reps):
        d = rng.normal(0.0, 3.0, 10)
        any_said = any_naive = False
        for end in ends:
            have = {s: float(d[s - 1]) for s in range(1, end + 1)}
            look = look_of(have)
            now = current_look(look.record)
            alpha = look.record["claims"]["type_i_error"]
            values = [have[s] for s in look.seeds]
            claim = claimed(values, now)
            sentence = headline_sentence(["sc", "isp"], [Pair("sc", "isp", claim)], LEVEL)
            assert (claim.kind == DIFFERS) == ("holds" in sentence) and "interval [" not in sentence
            any_said |= claim.kind == DIFFERS
            any_naive |= paired_claim(PairedDesign(tuple(values)), LEVEL).kind == DIFFERS
            if look.pending is None:
                assert now.decided
                break
        said += any_said
        naive += any_naive
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps)
    assert alpha == pytest.approx(0.049, abs=0.002)
    assert said / reps <= bound, (said / reps, alpha)
    assert naive / reps > bound, (naive / reps, alpha)
