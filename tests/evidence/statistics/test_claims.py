"""What a paired comparison may claim (issue 32, section 1): each rule of ``evidence.statistics.claims`` on a table of
degenerate designs, and every statistic it states against an independent computation written here (scipy's
t-interval, the MDE by integrating the power over the SD's chi-square, statsmodels' ``ttost_paired`` for TOST and
``multipletests`` for Holm, the crossed bootstrap replayed with plain loops, scipy's question-clustered t-interval).

The same designs through the report, the launcher's summary, the verdict and the audit: test_evidence_claims_sweeps.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

from benchmarks.synthetic_sweep import N_PROMPTS, K
from evidence.statistics import claims, crossed, family
from evidence.statistics.claims import (
    DIFFERS,
    NO_CLAIM,
    NO_DIFFERENCE,
    PairedDesign,
    paired_claim,
    shortfalls,
)
from evidence.statistics.headline import Pair, headline_sentence
from tests.evidence.statistics.test_noise import reference_question_interval, reference_se, replayed_means
from tests.evidence.statistics.test_power import independent_mde

STEP = 1 / 64  # 16 prompts x 4 responses: the issue's evaluation
NOISE = crossed.CROSSED_NOISE


def agreeing(d) -> tuple:
    """Evaluation-noise intervals that agree with the seeds' (scipy's t-interval of ``d`` under both names): a design
    whose evaluation noise is known and says what the seeds say."""
    d = np.asarray(d, dtype=np.float64)
    interval = tuple(sps.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=sps.sem(d))) if len(d) > 1 and np.std(d) > 0 else \
        (float(d.mean()), float(d.mean()))
    return ((crossed.CROSSED_NOISE, interval), (crossed.QUESTION_NOISE, interval))


def evaluated(d, step=0.01, n_prompts=25, noise=None) -> PairedDesign:
    """An evaluation's design: its noise ``agreeing`` with the seeds unless given."""
    return PairedDesign(tuple(d), step, n_prompts, agreeing(d) if noise is None and len(d) >= 1 else (noise or ()))


def adversary_block() -> list[list[float]]:
    """Adversarial finding F9's sweep: 3 seeds x 25 prompts x 4 responses, control solves the even prompts 4/4 and
    the odd 0/4 on every seed; treated the same plus 1/4 on prompt 1 (every seed) and 1/4 on prompt 3 (seeds 2, 3).
    Per seed, the per-prompt pass@1 differences treated − control."""
    return [[(1 / K if i == 1 or (i == 3 and seed > 1) else 0.0) for i in range(N_PROMPTS)] for seed in (1, 2, 3)]


def adversary_design() -> PairedDesign:
    """F9's design as the evidence forms it, every number from the block here: the crossed bootstrap replayed with
    loops, scipy's question-clustered t-interval."""
    block = adversary_block()
    d = tuple(sum(row) / N_PROMPTS for row in block)
    cb = tuple(np.quantile(replayed_means(block, 2000, 22), [0.025, 0.975]))
    return PairedDesign(d, 1 / (N_PROMPTS * K), N_PROMPTS, ((crossed.CROSSED_NOISE, cb),
                                                             (crossed.QUESTION_NOISE, reference_question_interval(block))))

# (case, design, the rules it falls short of): the degenerate designs of the issue, each as the rules see it.
DEGENERATE = [
    ("issue's class: 2 seeds, tied differences", evaluated((2 * STEP, 2 * STEP), STEP, 16),
     ["too-few-seeds", "tied-evaluations"]),
    ("SD 0: three seeds tied", evaluated((0.03, 0.03, 0.03)), ["tied-evaluations"]),
    ("SD 0 up to float rounding", evaluated((0.53 - 0.5, 0.62 - 0.59, 0.81 - 0.78)), ["tied-evaluations"]),
    ("n = 1", evaluated((0.03,)), ["too-few-seeds"]),
    ("n = 2 with spread", evaluated((0.01, 0.05)), ["too-few-seeds"]),
    ("all-equal responses", evaluated((0.0, 0.0, 0.0)), ["tied-evaluations"]),
    ("one arm rejected: no seed in both arms", evaluated(()), ["too-few-seeds"]),
    ("a single prompt", evaluated((0.25, 0.5, 0.5), 0.25, 1, noise=()), ["single-prompt"]),
    ("near-tied: 12 of 13 seeds tie, one a step off", evaluated((0.03,) * 12 + (0.04,)), ["tied-evaluations"]),
    ("the evaluation's noise includes 0", evaluated((0.04, 0.05, 0.06), noise=((NOISE, (0.0, 0.09)),)),
     ["noise-contradicts"]),
    ("a training metric tied (no grid known)", PairedDesign((0.2, 0.2, 0.2)), ["tied-evaluations"]),
    ("an evaluation metric without its noise (a graded reward's mean)", PairedDesign((0.02, 0.06, 0.03), None, 25),
     ["unchecked-noise"]),
    ("adversarial F9: 1, 2, 2 responses of 100, the same prompts", adversary_design(),
     ["noise-contradicts"]),
]
SOUND = [
    ("3 seeds that differ", evaluated((0.02, 0.06, 0.03))),
    ("one value a step off among 3 (SD h/sqrt 3, above the grid's rounding)", evaluated((0.05, 0.06, 0.06))),
    ("the noise interval agrees", evaluated((0.04, 0.05, 0.06), noise=((NOISE, (0.01, 0.09)),))),
    ("the seeds' interval includes 0: nothing to contradict", evaluated((-0.02, 0.05, 0.01),
                                                                        noise=((NOISE, (-0.1, 0.1)),))),
    ("a training metric that differs", PairedDesign((0.02, 0.06, 0.03))),
]


@pytest.mark.parametrize("case, design, rules", DEGENERATE, ids=[c for c, _, _ in DEGENERATE])
def test_a_degenerate_design_may_claim_nothing_and_says_what_it_misses(case, design, rules):
    found = shortfalls(design, 0.95)
    assert [s.rule for s in found] == rules
    claim = paired_claim(design, 0.95, p_holm=0.0001, margin=0.5)
    assert claim.kind == NO_CLAIM and claim.missing == found
    # nothing inferential: no interval, no MDE, no Holm verdict, no equivalence
    assert (claim.interval, claim.mde, claim.holds, claim.equivalence) == (None, None, None, None)


@pytest.mark.parametrize("case, design", SOUND, ids=[c for c, _ in SOUND])
def test_a_sound_design_lacks_nothing(case, design):
    assert shortfalls(design, 0.95) == ()
    assert paired_claim(design, 0.95).kind in (DIFFERS, NO_DIFFERENCE)


def test_the_premises_of_the_degenerate_table_hold_independently():
    """What each degenerate case stands for, computed without the rules: the tied SDs are 0 (or within the grid's
    rounding h/√12), the noise case's seed interval excludes 0."""
    for _, design, rules in DEGENERATE:
        d = np.asarray(design.differences, dtype=np.float64)
        if "tied-evaluations" in rules:
            assert len(d) >= 2 and np.std(d, ddof=1) <= (design.step or 0) / math.sqrt(12) + 1e-12
        if "noise-contradicts" in rules:
            low, _ = sps.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=sps.sem(d))
            assert low > 0 and design.noise[0][1][0] <= 0  # the seeds alone would claim a difference
    assert np.std([0.05, 0.06, 0.06], ddof=1) > 0.01 / math.sqrt(12)  # the sound lattice case is above it


def test_the_adversarys_case_is_within_the_evaluations_noise_by_every_crossed_measure():
    """F9 as the finding computed it: the seeds' interval excludes 0, while the crossed bootstrap ([0, 0.043]) and the
    question-clustered t-interval ([−0.77, +4.10] points) include it; s² (3.33e-05) ≤ σ²_eval (0.000161), the
    report's "within the eval's noise"."""
    design = adversary_design()
    d = np.asarray(design.differences)
    assert d * 100 == pytest.approx([1, 2, 2])
    assert sps.t.interval(0.95, 2, loc=d.mean(), scale=sps.sem(d))[0] > 0
    (_, cb), (_, q) = design.noise
    assert cb[0] <= 0 < cb[1] and 0.040 < cb[1] < 0.045
    assert 100 * np.array(q) == pytest.approx([-0.77, 4.10], abs=0.01)
    assert np.var(d, ddof=1) == pytest.approx(3.33e-05, rel=2e-3)
    assert sum(reference_se(row) ** 2 for row in adversary_block()) / 3 == pytest.approx(0.000161, rel=1e-2)


def test_what_is_missing_is_one_generated_clause():
    found = shortfalls(evaluated((2 * STEP, 2 * STEP), STEP, 16), 0.95)
    assert claims.missing_sentence(found) == (
        "2 seeds and tied evaluations: no interval; run ≥ 3 seeds or more evaluation prompts")
    assert claims.missing_sentence(shortfalls(PairedDesign(()), 0.95), "no test of 0") == (
        "no seed accepted in both arms: no test of 0; run ≥ 3 seeds")
    assert claims.missing_sentence(shortfalls(PairedDesign((0.02, 0.06, 0.03), None, 25), 0.95)) == (
        "no evaluation-noise interval of this metric: no interval; run an evaluation that keeps its responses, on "
        "pass@j or a binary reward's mean")


@pytest.mark.parametrize("d", [(0.02, 0.06, 0.03), (0.1, -0.04, 0.03, 0.08), (0.05, 0.07, 0.04, 0.06, 0.08)])
def test_a_claim_states_scipys_t_interval_and_the_mde_at_80_percent_power(d):
    claim = paired_claim(evaluated(d), 0.95)
    low, high = sps.t.interval(0.95, len(d) - 1, loc=np.mean(d), scale=sps.sem(d))
    assert claim.interval == pytest.approx((low, high), rel=1e-10)
    assert claim.kind == (DIFFERS if low > 0 or high < 0 else NO_DIFFERENCE)
    assert claim.power == 0.8 and claim.mde == pytest.approx(independent_mde(list(d)), rel=1e-7)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("margin, alpha", [(0.05, 0.05), (0.02, 0.05), (0.1, 0.1)])
def test_tost_is_statsmodels_ttost_paired(seed, margin, alpha):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 12))
    baseline = rng.uniform(0.3, 0.7, n)
    treatment = baseline + rng.normal(rng.uniform(-0.04, 0.04), 0.03, n)
    p, lower, upper = ttost_paired(treatment, baseline, -margin, margin)
    e = claims.tost(list(treatment - baseline), margin, alpha)
    assert e.p_value == pytest.approx(p, rel=1e-9, abs=1e-15)
    assert e.p_value == pytest.approx(max(lower[1], upper[1]), rel=1e-9, abs=1e-15)
    assert e.equivalent == (p < alpha)
    d = treatment - baseline
    low, high = sps.t.interval(1 - 2 * alpha, n - 1, loc=d.mean(), scale=sps.sem(d))
    assert e.interval == pytest.approx((low, high), rel=1e-10) and e.level == pytest.approx(1 - 2 * alpha)
    assert e.equivalent == (-margin < low and high < margin)  # the (1 − 2α) interval inside the margin


def test_equivalence_is_claimed_only_against_a_declared_margin():
    design = evaluated((0.01, 0.0, -0.01))
    assert paired_claim(design, 0.95).equivalence is None
    e = paired_claim(design, 0.95, margin=0.05).equivalence
    p, _, _ = ttost_paired(np.array([0.51, 0.52, 0.47]), np.array([0.50, 0.52, 0.48]), -0.05, 0.05)
    assert e.equivalent and e.p_value == pytest.approx(p, rel=1e-9)
    assert not paired_claim(design, 0.95, margin=0.01).equivalence.equivalent


def test_holms_verdict_holds_at_or_below_alpha_and_only_where_a_difference_is_claimed():
    design = evaluated((0.05, 0.06, 0.04))
    assert paired_claim(design, 0.95, p_holm=0.05).holds is True
    assert paired_claim(design, 0.95, p_holm=0.0501).holds is False
    assert paired_claim(PairedDesign((-0.02, 0.05, 0.01)), 0.95, p_holm=0.01).holds is None  # no difference claimed


def test_the_design_in_points_is_the_same_design():
    design = PairedDesign((0.04, 0.05, 0.06), 0.01, 25, ((NOISE, (0.0, 0.09)),))
    scaled = design.scaled(100)
    assert scaled.differences == pytest.approx((4, 5, 6)) and scaled.step == pytest.approx(1)
    assert scaled.noise[0][1] == pytest.approx((0, 9))
    assert [s.what for s in shortfalls(scaled, 0.95)] == [s.what for s in shortfalls(design, 0.95)]


def _claimed(d, step=0.01, noise=None, p_holm=None, margin=None):
    return paired_claim(evaluated(d, step, noise=noise), 0.95, p_holm, margin)


def test_the_issues_sweep_of_six_pairs_with_two_seeds_says_what_is_missing_not_a_difference():
    """``-m algo=grpo,rpp seed=1,2 workload.lr=1e-4,3e-4 workload.eval.n_prompts=16``: 4 arms, 6 pairs of 2 seeds;
    three pairs' differences tie on the grid of 1/64 (the issue's "+3.1 points, [+3.1, +3.1]")."""
    arms = ["grpo-lr1e-4", "grpo-lr3e-4", "rpp-lr1e-4", "rpp-lr3e-4"]
    tied = (2 * STEP, 2 * STEP)
    pairs = [Pair(a, b, _claimed(tied if i % 2 else (STEP, 3 * STEP), STEP, p_holm=0.0001), 6)
             for i, (a, b) in enumerate([(arms[1], arms[0]), (arms[2], arms[0]), (arms[3], arms[0]),
                                         (arms[2], arms[1]), (arms[3], arms[1]), (arms[3], arms[2])])]
    assert headline_sentence(arms, pairs, 0.95) == (
        "On eval pass@1, the 6 paired comparisons have 2 seeds and tied evaluations in 3 of them: no interval; "
        "run ≥ 3 seeds or more evaluation prompts.")
    one = [Pair("rpp-lr3e-4", "grpo-lr3e-4", _claimed(tied, STEP))]
    assert headline_sentence(arms[1::2], one, 0.95) == (
        "On eval pass@1, rpp-lr3e-4 − grpo-lr3e-4 has 2 seeds and tied evaluations: no interval; run ≥ 3 seeds or "
        "more evaluation prompts.")


def test_no_difference_detected_always_with_the_mde_at_80_percent_power():
    d = [-0.073, 0.01, 0.03]
    low, high = sps.t.interval(0.95, 2, loc=np.mean(d), scale=sps.sem(d))
    mde = independent_mde(d)
    sentence = headline_sentence(["A", "B"], [Pair("B", "A", _claimed(d))], 0.95)
    assert sentence == (f"No difference detected between B and A on eval pass@1: the 95 % interval of the paired "
                        f"differences, [{100 * low:+.1f}, {100 * high:+.1f}] points, includes 0 (3 seeds; this design "
                        f"detects differences of {100 * mde:.1f} points or more at 80 % power).")
    assert not any(words in sentence for words in ("does not differ", "differs", "no two arms differ"))


def test_a_declared_margin_adds_tosts_verdict_and_interval_to_the_sentence():
    d = [0.01, 0.0, -0.01]
    p, _, _ = ttost_paired(np.array(d), np.zeros(3), -0.05, 0.05)
    low, high = sps.t.interval(0.9, 2, loc=np.mean(d), scale=sps.sem(d))
    sentence = headline_sentence(["A", "B"], [Pair("B", "A", _claimed(d, margin=0.05))], 0.95)
    assert sentence.endswith(f"; by TOST against the declared margin of ±5.0 points, equivalent (90 % interval "
                             f"[{100 * low:+.1f}, {100 * high:+.1f}], p {p:.3f}).")


def test_pairs_that_differ_those_that_do_not_and_those_that_may_claim_nothing_in_one_sentence():
    pairs = [Pair("B", "A", _claimed([0.05, 0.06, 0.07], p_holm=0.004), 3),
             Pair("C", "A", _claimed([-0.02, 0.05, 0.01], p_holm=0.9), 3),
             Pair("C", "B", _claimed([0.03, 0.03, 0.03], p_holm=0.0), 3)]
    low, high = sps.t.interval(0.95, 2, loc=0.06, scale=sps.sem([0.05, 0.06, 0.07]))
    mde = max(independent_mde([0.05, 0.06, 0.07]), independent_mde([-0.02, 0.05, 0.01]))
    assert headline_sentence(["A", "B", "C"], pairs, 0.95) == (
        f"On eval pass@1, B − A is +6.0 points (95 % interval [{100 * low:+.1f}, {100 * high:+.1f}]; holds after "
        f"Holm's correction across the 3 pairs, adjusted p 0.004); no difference detected in the other 1 pair (3 "
        f"seeds; this design detects differences of {100 * mde:.1f} points or more in every pair at 80 % power); "
        f"no interval for C − B (tied evaluations; run more evaluation prompts).")


def test_a_pair_that_may_claim_nothing_is_never_a_rejection_in_its_holm_family():
    """Adversarial finding F7, 3 arms x 3 seeds: grpo 0.30 on every seed, rpp 0.40 on every seed (rpp − grpo tied:
    +10 points each seed, t's p-value 0), rppb 0.60/0.70/0.80. The tied pair counts as p = 1 and the family keeps
    m = 3: statsmodels' Holm of [1, p(rppb − grpo), p(rpp − rppb)] (scipy's one-sample t p-values)."""
    grpo, rpp, rppb = np.full(3, 0.30), np.full(3, 0.40), np.array([0.60, 0.70, 0.80])
    diffs = {"rpp-grpo": rpp - grpo, "rppb-grpo": rppb - grpo, "rpp-rppb": rpp - rppb}
    designs = {k: evaluated(tuple(v)) for k, v in diffs.items()}
    p = [claims.family_p_value(designs[k], 0.95) for k in diffs]
    scipy_p = [1.0] + [sps.ttest_1samp(diffs[k], 0).pvalue for k in ("rppb-grpo", "rpp-rppb")]
    assert p == pytest.approx(scipy_p, rel=1e-9)
    adjusted = family.holm(p)
    assert adjusted == pytest.approx(multipletests(scipy_p, method="holm")[1], rel=1e-9)
    assert adjusted[1] == pytest.approx(3 * scipy_p[1], rel=1e-9) and min(adjusted) > 0.05  # nothing holds
    assert claims.family_p_value(evaluated((0.03,)), 0.95) == 1.0  # n = 1: no p-value, never a rejection
    pairs = [Pair(a, b, paired_claim(designs[f"{a}-{b}"], 0.95, q), 3, 1)
             for (a, b), q in zip([("rpp", "grpo"), ("rppb", "grpo"), ("rpp", "rppb")], adjusted)]
    sentence = headline_sentence(["grpo", "rpp", "rppb"], pairs, 0.95)
    assert sentence.count("does not hold after Holm's correction across the 3 pairs (1 of them untestable, counted "
                          "as not rejected)") == 2 and "holds after" not in sentence.replace("does not hold after", "")
    assert sentence.endswith("no interval for rpp − grpo (tied evaluations; run more evaluation prompts).")


@pytest.mark.parametrize("k, j, P", [(4, 1, 25), (4, 2, 25), (4, 4, 25), (8, 3, 10), (16, 1, 16)])
def test_the_grid_of_pass_at_j_is_one_over_p_times_k_choose_j(k, j, P):
    """Every value of pass@j over P prompts of k responses, enumerated here with exact fractions from the unbiased
    estimator 1 − C(k − c, j)/C(k, j): the smallest non-zero gap between attainable values is 1/(P·C(k, j))."""
    from fractions import Fraction

    per_prompt = sorted({1 - Fraction(math.comb(k - c, j), math.comb(k, j)) for c in range(k + 1)})
    unit = Fraction(1, math.comb(k, j))
    assert all((v / unit).denominator == 1 for v in per_prompt)  # each prompt's value is a multiple of 1/C(k, j)
    attainable = {sum(combo, Fraction(0)) / P for combo in _few_sums(per_prompt, P)}
    gaps = sorted({abs(a - b) for a in attainable for b in attainable if a != b})
    assert gaps[0] == Fraction(1, P * math.comb(k, j)) or j == k  # pass@k per prompt is 0 or 1: gap 1/P, the same
    assert claims.evaluation_step(P, k, j) == pytest.approx(1 / (P * math.comb(k, j)), rel=1e-15)


def _few_sums(values, P):
    """A handful of P-prompt evaluations: all prompts at one value, and one prompt moved to each other value."""
    for base in values:
        for other in values:
            yield [base] * (P - 1) + [other]
