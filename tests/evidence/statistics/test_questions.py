"""Issue 32 §2, the question as the unit the evaluation samples: each statistic of ``evidence.statistics``'
``paired_questions``, ``components``, ``allocation`` and ``wilson`` against an independent computation written here —
statsmodels' clustered OLS, a brute-force float64 ANOVA over every response, statsmodels' MixedLM (REML), a simulation
of the crossed design, scipy's noncentral t, statsmodels' Wilson interval."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from evidence.statistics import allocation, components, paired_questions, wilson

# ---- the question-level paired difference: statsmodels' OLS on a constant, clustered by question -----------------


@pytest.mark.parametrize(("n_seeds", "n_questions", "seed"), [(1, 5, 0), (3, 20, 1), (5, 60, 2), (2, 2, 3)])
def test_the_question_clustered_difference_is_statsmodels_clustered_ols(n_seeds, n_questions, seed):
    import statsmodels.api as sm

    rng = np.random.default_rng(seed)
    a, b = rng.uniform(size=(n_seeds, n_questions)), rng.uniform(size=(n_seeds, n_questions))
    found = paired_questions.question_difference(a, b, 0.95)
    d = (a - b).ravel()  # row-major: seed s, question i at s·P + i
    groups = np.tile(np.arange(n_questions), n_seeds)
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    assert found.mean == pytest.approx(fit.params[0], abs=1e-14)
    assert found.se == pytest.approx(fit.bse[0], rel=1e-12)
    assert found.df == fit.df_resid_inference == n_questions - 1
    assert (found.low, found.high) == pytest.approx(tuple(fit.conf_int(0.05)[0]), rel=1e-12)
    qa, qb = a.mean(axis=0), b.mean(axis=0)
    assert found.unpaired_se == pytest.approx(math.sqrt((qa.var(ddof=1) + qb.var(ddof=1)) / n_questions), rel=1e-12)
    assert found.correlation == pytest.approx(sps.pearsonr(qa, qb)[0], rel=1e-10)


def test_one_question_has_a_mean_and_nothing_else_and_no_spread_is_a_point():
    one = paired_questions.question_difference([[0.5], [0.25]], [[0.25], [0.25]])
    assert (one.mean, one.se, one.df, one.low, one.unpaired_se) == (0.125, None, None, None, None)
    tied = paired_questions.question_difference([[0.5, 0.75]], [[0.25, 0.5]])
    # tied question differences: no interval (claims' tied-evaluations rule), never the point [0.25, 0.25]
    assert (tied.mean, tied.se, tied.low, tied.high) == (0.25, 0.0, None, None)
    assert tied.missing.rule == "tied-evaluations"
    assert paired_questions.question_difference([[0.5, 0.5]], [[0.5]]) is None  # not the same questions


# ---- variance components: brute-force ANOVA over every response ---------------------------------------------------

def brute_force_anova(y) -> dict[str, float]:
    """The two-way crossed random-effects ANOVA with replication written out over every response y[s][i][r] with
    math.fsum in float64: sums of squares, mean squares, the expected-mean-squares solution truncated at 0."""
    n_s, n_q, k = len(y), len(y[0]), len(y[0][0])
    cell = [[math.fsum(y[s][i]) / k for i in range(n_q)] for s in range(n_s)]
    seed = [math.fsum(cell[s]) / n_q for s in range(n_s)]
    question = [math.fsum(cell[s][i] for s in range(n_s)) / n_s for i in range(n_q)]
    grand = math.fsum(seed) / n_s
    ss_s = k * n_q * math.fsum((m - grand) ** 2 for m in seed)
    ss_q = k * n_s * math.fsum((m - grand) ** 2 for m in question)
    ss_sq = k * math.fsum((cell[s][i] - seed[s] - question[i] + grand) ** 2 for s in range(n_s) for i in range(n_q))
    ss_e = math.fsum((v - cell[s][i]) ** 2 for s in range(n_s) for i in range(n_q) for v in y[s][i])
    ms_s, ms_q = ss_s / (n_s - 1), ss_q / (n_q - 1)
    ms_sq, ms_e = ss_sq / ((n_s - 1) * (n_q - 1)), ss_e / (n_s * n_q * (k - 1))
    return {"mean": grand, "ms_seed": ms_s, "ms_question": ms_q, "ms_interaction": ms_sq, "ms_response": ms_e,
            "seed": max(0.0, (ms_s - ms_sq) / (k * n_q)), "question": max(0.0, (ms_q - ms_sq) / (k * n_s)),
            "interaction": max(0.0, (ms_sq - ms_e) / k), "response": ms_e}


def crossed_draw(rng, n_s, n_q, k, seed_var, question_var, interaction_var, response_var, mu=0.0):
    a = rng.normal(0, math.sqrt(seed_var), (n_s, 1, 1))
    b = rng.normal(0, math.sqrt(question_var), (1, n_q, 1))
    ab = rng.normal(0, math.sqrt(interaction_var), (n_s, n_q, 1))
    return mu + a + b + ab + rng.normal(0, math.sqrt(response_var), (n_s, n_q, k))


def _same(found: components.Components, want: dict[str, float]):
    for name, value in want.items():
        assert getattr(found, name) == pytest.approx(value, rel=1e-10, abs=1e-14), name


@pytest.mark.parametrize(("shape", "truth", "seed"), [
    ((4, 12, 3), (0.3, 0.8, 0.2, 1.0), 0),
    ((2, 5, 2), (0.0, 0.0, 0.0, 1.0), 1),  # no effects: most estimates negative, truncated at 0
    ((6, 30, 8), (0.05, 0.5, 0.0, 0.25), 2),
])
def test_components_are_the_brute_force_anova_of_every_response(shape, truth, seed):
    y = crossed_draw(np.random.default_rng(seed), *shape, *truth)
    cell = y.mean(axis=2)
    within = float(((y - cell[:, :, None]) ** 2).sum()) / (shape[0] * shape[1] * (shape[2] - 1))
    found = components.crossed_components(cell, within, shape[2])
    _same(found, brute_force_anova(y.tolist()))
    assert all(v >= 0 for v in found.variances)


def test_binary_counts_give_the_anova_of_the_0_1_responses_and_a_pair_that_of_the_difference():
    rng = np.random.default_rng(7)
    n_s, n_q, k = 3, 15, 4
    p = np.clip(rng.uniform(0.1, 0.9, n_q)[None, :] + rng.normal(0, 0.1, (n_s, n_q)), 0, 1)
    ya = (rng.uniform(size=(n_s, n_q, k)) < p[:, :, None]).astype(float)
    yb = (rng.uniform(size=(n_s, n_q, k)) < np.clip(p + 0.1, 0, 1)[:, :, None]).astype(float)
    _same(components.arm_components(ya.sum(axis=2), k), brute_force_anova(ya.tolist()))
    pair = components.pair_components(ya.sum(axis=2), yb.sum(axis=2), k)
    # The difference: the brute-force ANOVA of the per-cell differences, its within-cell mean square the two arms'
    # summed (each arm's responses independent of the other's).
    d = (ya - yb).tolist()  # the response-level difference has the same cell means; only its within part differs
    want = brute_force_anova(d)
    want_within = brute_force_anova(ya.tolist())["ms_response"] + brute_force_anova(yb.tolist())["ms_response"]
    for name in ("mean", "ms_seed", "ms_question", "ms_interaction"):
        assert getattr(pair, name) == pytest.approx(want[name], rel=1e-10, abs=1e-14)
    assert pair.ms_response == pytest.approx(want_within, rel=1e-12)
    assert pair.interaction == pytest.approx(max(0.0, (want["ms_interaction"] - want_within) / k), abs=1e-14)


def test_components_are_statsmodels_mixedlm_reml_on_a_balanced_design():
    """Balanced and every component positive: REML's estimates are the ANOVA's (Searle et al. 1992 §6.7)."""
    import pandas as pd
    import statsmodels.formula.api as smf

    n_s, n_q, k = 5, 30, 4
    y = crossed_draw(np.random.default_rng(5), n_s, n_q, k, 0.3, 0.8, 0.4, 1.0, mu=1.0)
    cell = y.mean(axis=2)
    found = components.crossed_components(cell, float(((y - cell[:, :, None]) ** 2).sum()) / (n_s * n_q * (k - 1)), k)
    s, q, _ = np.meshgrid(range(n_s), range(n_q), range(k), indexing="ij")
    frame = pd.DataFrame({"y": y.ravel(), "s": s.ravel(), "q": q.ravel(), "g": 1})
    frame["sq"] = frame.s * 1000 + frame.q
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = smf.mixedlm("y ~ 1", frame, groups="g", re_formula="0",
                          vc_formula={"s": "0 + C(s)", "q": "0 + C(q)", "sq": "0 + C(sq)"}).fit(reml=True)
    by_name = dict(zip(fit.model.exog_vc.names, fit.vcomp))
    assert found.seed == pytest.approx(by_name["s"], rel=2e-3)
    assert found.question == pytest.approx(by_name["q"], rel=2e-3)
    assert found.interaction == pytest.approx(by_name["sq"], rel=2e-3)
    assert found.response == pytest.approx(fit.scale, rel=2e-3)


def test_the_grand_means_variance_its_estimate_and_the_design_effect_by_simulation():
    """Var(ȳ) = σ²_s/S + σ²_q/P + σ²_sq/(SP) + σ²_e/(SPk): the simulated variance of the grand mean over 4,000
    designs equals it, the mean of V̂ does too, and the design effect is Var(ȳ)·SPk/σ²_total."""
    rng = np.random.default_rng(11)
    n_s, n_q, k, truth = 4, 10, 3, (0.2, 0.5, 0.3, 1.0)
    means, estimates = [], []
    for _ in range(4000):
        y = crossed_draw(rng, n_s, n_q, k, *truth)
        cell = y.mean(axis=2)
        found = components.crossed_components(cell, float(((y - cell[:, :, None]) ** 2).sum()) / (n_s * n_q * (k - 1)), k)
        means.append(found.mean)
        estimates.append(found.var_mean)
    var = truth[0] / n_s + truth[1] / n_q + truth[2] / (n_s * n_q) + truth[3] / (n_s * n_q * k)
    assert np.var(means, ddof=1) == pytest.approx(var, rel=0.06)  # SE of a variance from 4,000 draws: ~2.2 %
    assert np.mean(estimates) == pytest.approx(var, rel=0.04)
    exact = components.Components(n_s, n_q, k, 0.0, 0, 0, 0, 0, *truth)
    assert exact.design_effect == pytest.approx(var * n_s * n_q * k / sum(truth), rel=1e-12)
    assert exact.icc_question == pytest.approx(truth[1] / sum(truth))
    one_seed = components.Components(1, n_q, k, 0.0, 0, 0, 0, 0, 0.0, 0.5, 0.3, 1.0)
    rho_cell = 0.8 / 1.8
    assert one_seed.design_effect == pytest.approx(1 + (k - 1) * rho_cell, rel=1e-12)  # Kish


def test_too_small_a_design_has_no_components():
    assert components.crossed_components([[0.5, 0.5]], 0.1, 4) is None  # one seed
    assert components.crossed_components([[0.5], [0.5]], 0.1, 4) is None  # one question
    assert components.arm_components([[1, 0], [0, 1]], 1) is None  # k = 1


# ---- Wilson ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("count", "nobs"), [(0, 10), (10, 10), (3, 17), (50, 100), (1, 400), (2.5, 7.3), (0, 2.2)])
@pytest.mark.parametrize("level", [0.95, 0.9])
def test_wilson_is_statsmodels_wilson(count, nobs, level):
    from statsmodels.stats.proportion import proportion_confint

    low, high = wilson.wilson_interval(count / nobs, nobs, level)
    want = proportion_confint(count, nobs, alpha=1 - level, method="wilson")
    assert (low, high) == pytest.approx(want, abs=1e-12)


def test_a_runs_interval_uses_the_question_clustered_effective_n():
    from statsmodels.stats.proportion import proportion_confint

    rates = [0.0, 0.25, 1.0, 0.5, 0.75, 0.25, 0.0, 1.0]  # k = 4
    n_eff, low, high = wilson.run_interval(rates, 1, 4, 0.95)
    p = float(np.mean(rates))
    se = float(np.std(rates, ddof=1)) / math.sqrt(len(rates))
    assert n_eff == pytest.approx(min(p * (1 - p) / se ** 2, 32), rel=1e-12)
    assert (low, high) == pytest.approx(proportion_confint(p * n_eff, n_eff, method="wilson"), abs=1e-12)
    assert wilson.run_interval([0.0] * 8, 1, 4, 0.95)[0] == 8  # p̂ = 0: each question one trial
    assert wilson.run_interval([0.5] * 8, 1, 4, 0.95)[0] == 32  # no spread: the responses' nominal n
    assert wilson.run_interval([1.0] * 8, 4, 4, 0.95)[1:] == pytest.approx(
        proportion_confint(8, 8, method="wilson"), abs=1e-12)
    assert wilson.run_interval([0.5] * 8, 4, 2, 0.95) is None  # pass@4 from 2 responses


# ---- allocation ---------------------------------------------------------------------------------------------

TRUTH = dict(seed=0.0005, question=0.01, interaction=0.002, response=0.45)  # a pair's difference of pass@1


def truth_components(n_seeds=3, n_questions=25, k=4, **change) -> components.Components:
    return components.Components(n_seeds, n_questions, k, 0.0, 0, 0, 0, 0, **{**TRUTH, **change})


def reference_power(c, delta, n_s, n_q, k, alpha=0.05) -> float:
    """The seed-level paired t-test's power (the report's test: S − 1 df) with scipy.stats' noncentral t, the
    questions' shared shift b ~ N(0, σ²_question/P) integrated out by the trapezoid rule on 4,001 points over ±10 SD
    (a CDF value scipy gives as NaN, an underflowed tail, taken as 0): a seed's difference has SD
    σ_d = √(σ²_seed + σ²_sq/P + σ²_response/(Pk)) over the seeds, and λ = √S·(δ + b)/σ_d."""
    sd = math.sqrt(c.seed + c.interaction / n_q + c.response / (n_q * k))
    crit = sps.t.ppf(1 - alpha / 2, n_s - 1)

    def power(shift):
        lam = math.sqrt(n_s) * np.asarray(shift, dtype=np.float64) / sd
        return np.nan_to_num(sps.nct.sf(crit, n_s - 1, lam)) + np.nan_to_num(sps.nct.cdf(-crit, n_s - 1, lam))

    spread = math.sqrt(c.question / n_q)
    if spread == 0:
        return float(power(delta))
    b = np.linspace(-10 * spread, 10 * spread, 4001)
    return float(np.trapezoid(power(delta + b) * sps.norm.pdf(b, 0, spread), b))


def simulated_power(c, delta, n_s, n_q, k, reps=4000, seed=0, alpha=0.05) -> float:
    """The share of simulated crossed designs (normal effects of seed, question, seed x question, each cell the mean
    of k normal responses) in which the report's test — the seed-level paired t on the per-seed differences (the mean
    over the questions), S − 1 df — rejects δ = 0: the test the allocation plans for, run on data it never saw."""
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, reps, 500):
        n = min(500, reps - start)
        cell = (delta + rng.normal(0, math.sqrt(c.seed), (n, n_s, 1)) + rng.normal(0, math.sqrt(c.question), (n, 1, n_q))
                + rng.normal(0, math.sqrt(c.interaction), (n, n_s, n_q))
                + rng.normal(0, math.sqrt(c.response / k), (n, n_s, n_q)))
        d = cell.mean(axis=2)  # each seed's paired difference
        t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n_s))
        hits += int(np.sum(np.abs(t) > sps.t.ppf(1 - alpha / 2, n_s - 1)))
    return hits / reps


@pytest.mark.parametrize(("n_s", "n_q", "k"), [(3, 25, 4), (5, 300, 1), (10, 40, 8)])
def test_the_planned_power_is_the_seed_level_paired_t_from_scipys_noncentral_t(n_s, n_q, k):
    c = truth_components()
    assert allocation.design_power(c, 0.05, n_s, n_q, k, 0.05) == pytest.approx(
        reference_power(c, 0.05, n_s, n_q, k), rel=1e-7)
    want = TRUTH["seed"] + TRUTH["interaction"] / n_q + TRUTH["response"] / (n_q * k)  # no question component
    assert allocation.seed_variance(c, n_q, k) == pytest.approx(want, rel=1e-12)
    # Without a question component: exactly the paired t's power (power.paired_t_power's noncentral t).
    from evidence.statistics.power import paired_t_power

    flat = truth_components(question=0.0)
    assert allocation.design_power(flat, 0.05, n_s, n_q, k, 0.05) == pytest.approx(
        paired_t_power(0.05, math.sqrt(allocation.seed_variance(flat, n_q, k)), n_s, 0.05), rel=1e-10)
    # Fewer than 3 seeds: no test, so no power (claims' too-few-seeds rule).
    assert allocation.design_power(c, 0.05, 2, n_q, k, 0.05) is None


def test_the_advised_design_has_80_percent_power_with_the_test_the_report_makes():
    """The adversarial case: components of a pair with a question component (0.0444) and response noise (0.3708), no
    seed component; the crossed test's plan advised 3 seeds x 488 questions x 2, where the seed-level paired t has 63 %
    power. The advice now reaches 80 % by a simulation of that test (20,000 designs: SE 0.0028) and by scipy."""
    c = components.Components(3, 100, 4, 0.0, 0, 0, 0, 0, seed=0.0, question=0.0444360, interaction=0.0,
                              response=0.3708333)
    best = allocation.advise(c, allocation.Costs(3900.0, 0.5), 0.05, 0.05).cheapest
    s, p, k = best.seeds, best.questions, best.k
    assert reference_power(c, 0.05, s, p, k) >= 0.8 > reference_power(c, 0.05, s, p - 1, k)
    assert simulated_power(c, 0.05, s, p, k, reps=20_000, seed=1) >= 0.8 - 3 * math.sqrt(0.8 * 0.2 / 20_000)
    # The crossed plan's 3 x 488 x 2 falls short with this test, by simulation and by scipy.
    short = reference_power(c, 0.05, 3, 488, 2)
    assert short < 0.65  # 0.637 at δ alone (scipy's nct), a little less over the questions' shift
    assert simulated_power(c, 0.05, 3, 488, 2, reps=20_000, seed=2) == pytest.approx(short, abs=0.012)


def test_the_cheapest_design_reaches_80_percent_power_by_simulation_and_nothing_cheaper_does():
    c, costs = truth_components(), allocation.Costs(seed=3600.0, response=1.0)
    advice = allocation.advise(c, costs, 0.05, 0.05)
    best = advice.cheapest
    assert best.power >= 0.8 > reference_power(c, 0.05, best.seeds, best.questions - 1, best.k)
    assert best.cost == 2 * best.seeds * (3600.0 + best.questions * best.k)
    # The simulation: 4,000 designs of the advised size, their seed-level paired t-tests (binomial SE of 0.8: 0.0063).
    assert simulated_power(c, 0.05, best.seeds, best.questions, best.k) == pytest.approx(0.8, abs=0.03)
    # No cheaper design on a grid of seeds, k and questions (scipy's power) reaches 80 %.
    for n_s in range(3, 30):
        for k in allocation.K_CHOICES:
            for n_q in (*range(2, 100, 7), *range(100, 3000, 37)):
                if allocation.cost(costs, n_s, n_q, k) < best.cost:
                    assert reference_power(c, 0.05, n_s, n_q, k) < 0.8, (n_s, n_q, k)


def test_questions_that_vary_more_than_seeds_say_more_questions_not_more_seeds_as_numbers():
    from evidence.questions import advice_sentence

    c = truth_components(n_seeds=5, n_questions=30, k=4)
    advice = allocation.advise(c, allocation.Costs(seed=3600.0, response=1.0), 0.05, 0.05)
    assert advice.cheapest.seeds <= 5 < 30 < advice.cheapest.questions
    sentence = advice_sentence("A − B", advice, 0.05, "the experiment's threshold")
    assert sentence.endswith(f"more seeds alone would need {advice.seeds_only.seeds} at 30 questions "
                             f"({advice.seeds_only.cost / 3600:.3g} h)).") if advice.seeds_only else \
        sentence.endswith(f"no number of seeds up to {allocation.MAX_SEEDS} reaches it at 30 questions).")
    assert ": more questions, not more seeds (" in sentence
    # Seeds that vary more than questions, and cheap seeds: the advice turns.
    seedy = truth_components(n_seeds=3, n_questions=400, k=4, seed=0.004, question=0.0001)
    turned = allocation.advise(seedy, allocation.Costs(seed=60.0, response=1.0), 0.05, 0.05)
    assert turned.cheapest.seeds > 3 and turned.cheapest.questions <= 400
    assert advice_sentence("A − B", turned, 0.05, "x").endswith(": more seeds, not more questions.")


def test_every_row_of_every_question_table_has_its_columns_whatever_the_design(tmp_path):
    """One seed per arm (no components, no allocation) and a full 3 x 3 sweep: each row as long as its header."""
    from benchmarks.synthetic_sweep import make_sweep
    from evidence.dataset import load_bundle_data
    from evidence.questions import question_tables
    from evidence.seal.bundle import build_bundle

    for seeds in ((42,), (42, 1234, 2026)):
        sweep = make_sweep(tmp_path / f"s{len(seeds)}", seeds=seeds)
        result = build_bundle(sweep, figures=False)
        for table in question_tables(load_bundle_data(result.bundle_dir / "data")):
            assert table.csv_rows, table.name
            assert all(len(row) == len(table.csv_columns) for row in table.csv_rows), table.name
            assert all(len(row) == len(table.md_columns) for row in table.md_rows), table.name


# ---- the audit: an edited number of the question tables is a finding ----------------------------------------------

def _edit_cell(path, column: str, change, line: int = 1) -> str:
    lines = path.read_text().splitlines()
    header, cells = lines[0].split(","), lines[line].split(",")
    where = header.index(column)
    cells[where] = change(cells[where])
    lines[line] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    return cells[where]


@pytest.mark.parametrize(("table", "column", "change"), [
    ("variance_components", "var_question", lambda v: repr(float(v) * 0.5)),
    ("allocation", "cheapest_seeds", lambda v: str(int(v) - 1)),
    ("eval_questions", "correct", lambda v: str(int(v) + 1)),
])
def test_an_edited_question_statistic_in_a_resealed_bundle_is_a_finding(bundle_copy, table, column, change):
    from evidence import audit_bundle
    from tests.sweeps import reseal_bag

    path = bundle_copy / "data" / "tables" / f"{table}.csv"
    edited = _edit_cell(path, column, change)
    reseal_bag(bundle_copy)
    (finding,) = audit_bundle(bundle_copy)
    assert finding.file == f"data/tables/{table}.csv"
    assert finding.reason.startswith(f"line 2, column {column}: {edited!r} does not recompute")


# ---- the smallest difference: the build's setting, else the experiment's threshold, else the default ---------------

def test_the_builds_smallest_difference_reaches_the_allocation_and_the_audit_holds_it(sweep):
    import subprocess
    import sys

    from evidence import audit_bundle
    from evidence.dataset import load_bundle_data
    from evidence.questions import smallest_difference

    build = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures",
                            "--smallest-difference", "4"], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    data = sweep / "bundle" / "data"
    assert json_of(data / "evidence.json")["smallest_difference_points"] == 4
    rows = csv_rows(data / "tables" / "allocation.csv")
    assert {(r["delta"], r["delta_source"]) for r in rows} == {("0.04", "set by the build's --smallest-difference")}
    assert "to detect 4 points (set by the build's --smallest-difference) at 80% power" in \
        (data / "report.md").read_text()
    assert audit_bundle(sweep / "bundle") == []
    loaded = load_bundle_data(data)
    loaded.settings.pop("smallest_difference_points")
    assert smallest_difference(loaded) == (allocation.DEFAULT_SMALLEST_DIFFERENCE, "the default: no threshold stated")
    loaded.experiment = EXPERIMENT
    assert smallest_difference(loaded) == pytest.approx((0.03, "the experiment's threshold"))


EXPERIMENT = """\
title: the threshold as the allocation's default
hypothesis: rpp reaches at least 3 points more eval pass@1 than grpo
arms:
  control: {algo: grpo}
  treated: {algo: rpp}
seeds: [42, 1234, 2026]
criterion:
  metric: eval/pass@1
  at: final
  baseline: control
  treatment: treated
  threshold_points: 3
"""


def json_of(path):
    import json

    return json.loads(path.read_text())


def csv_rows(path) -> list[dict[str, str]]:
    import csv

    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_design_that_already_reaches_the_power_says_so():
    from evidence.questions import advice_sentence

    c = truth_components(n_seeds=10, n_questions=2000, k=4)
    advice = allocation.advise(c, allocation.Costs(seed=3600.0, response=1.0), 0.05, 0.05)
    assert advice.current.power >= 0.8 and advice.cheapest.cost < advice.current.cost
    best = advice.cheapest
    assert advice_sentence("A − B", advice, 0.05, "x").endswith(
        f"has > 99.9% power: it reaches it; a cheaper design that also does is {best.seeds} seeds × {best.questions} "
        f"questions × {best.k} response(s) per question ({best.cost / 3600:.3g} h, power 80%).")
    # The design as run, the cheapest in the search: it already reaches it.
    as_run = allocation.Advice(0.05, best, best, None, None)
    assert advice_sentence("A − B", as_run, 0.05, "x").endswith(": the design as run already reaches it.")


# ---- tied evaluations: no interval anywhere the bundle shows one (issue 32 §1 through §2's tables) -------------------

@pytest.fixture(scope="module")
def tied_bundle(tmp_path_factory):
    """Every question 2/4 correct in grpo and 3/4 in rpp at each of 3 seeds: every per-question, per-seed and per-cell
    difference is +0.25, the evaluation's granularity, though each cell's responses are binomial noise (adversarial
    finding: the question table said [0.2500, 0.2500] while the headline refused an interval)."""
    from benchmarks.synthetic_sweep import make_sweep
    from evidence.seal.bundle import build_bundle

    sweep = make_sweep(tmp_path_factory.mktemp("tied"), algos=("grpo", "rpp"), seeds=(1, 2, 3),
                       final_counts=lambda arm, seed: [3] * 25 if arm == "rpp" else [2] * 25)
    return build_bundle(sweep, figures=False).bundle_dir


TIED_WORDS = "tied evaluations: no interval; run more evaluation prompts"


def test_tied_evaluations_give_no_interval_in_the_question_tables_the_noise_table_or_the_report(tied_bundle):
    import subprocess
    import sys

    data = tied_bundle / "data"
    report = (data / "report.md").read_text()
    assert "tied evaluations: no interval" in report.splitlines()[2]  # the headline's refusal, as before
    # The reference: every question's difference is 3/4 − 2/4 at every seed, so s_q = 0 (a point, no interval).
    (row,) = [r for r in csv_rows(data / "tables" / "question_differences.csv") if r["a"] == "rpp"]
    assert float(row["mean"]) == 0.25 and float(row["se"]) == 0.0
    assert (row["low"], row["high"], row["no_interval"]) == ("", "", TIED_WORDS)
    section = report[report.index("## Questions as the unit"):]
    line = next(x for x in section.splitlines() if x.startswith("| REINFORCE++ − GRPO | 3 | 25 | +0.2500"))
    assert TIED_WORDS in line and "[0.2500, 0.2500]" not in line
    # The crossed interval of the pair's components: every cell difference 0.25, V̂ = 0.
    (pair,) = [r for r in csv_rows(data / "tables" / "variance_components.csv") if r["b"]]
    assert (pair["low"], pair["high"], pair["no_interval"]) == ("", "", TIED_WORDS)
    # eval_noise: the pair's crossed bootstrap and question-clustered intervals, and each arm's (every cell 2/4, 3/4).
    for r in csv_rows(data / "tables" / "eval_noise.csv"):
        assert r["cb_low"] == r["cb_high"] == r["q_low"] == r["q_high"] == "", r
        assert r["cb_no_interval"] == r["q_no_interval"] == TIED_WORDS
    noise = report[report.index("## Evaluation noise and seed variance"):report.index("## Questions as the unit")]
    assert "[0.2500, 0.2500]" not in noise and noise.count(TIED_WORDS) == 2 * 3
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(tied_bundle)], capture_output=True,
                             text=True, timeout=600)
    assert audited.returncode == 0, audited.stdout[-3000:] + audited.stderr[-3000:]


def test_two_seeds_are_never_said_to_reach_the_power():
    """claims' too-few-seeds rule: a 2-seed design as run supports no test, whatever its components (here its seed
    component truncated to 0); the sentence says so and gives the cheapest design that would reach the power, never
    "already reaches it" or a power for the design as run (adversarial finding: "2 seeds … has 100% power")."""
    from evidence.questions import advice_sentence

    c = components.Components(2, 500, 4, 0.0, 0, 0, 0, 0, seed=0.0, question=0.02, interaction=0.0, response=0.45)
    advice = allocation.advise(c, allocation.Costs(3000.0, 0.5), 0.2, 0.05)
    assert advice.current.power is None and advice.current.cost == 2 * 2 * (3000.0 + 0.5 * 500 * 4)
    best = advice.cheapest
    assert best.seeds >= 3 and reference_power(c, 0.2, best.seeds, best.questions, best.k) >= 0.8
    sentence = advice_sentence("b − a", advice, 0.2, "set")
    assert "already reaches" not in sentence and "% power;" not in sentence.split("the cheapest")[0]
    assert ", the design as run (2 seeds × 500 questions × 4, 4.44 h) has fewer than 3 seeds: it supports no test; " \
           f"the cheapest design that reaches it is {best.seeds} seeds × {best.questions} questions × {best.k} " \
           f"response(s) per question ({best.cost / 3600:.3g} h, power " in sentence


@pytest.mark.parametrize(("power", "said"), [(0.99996, "> 99.9%"), (1.0, "> 99.9%"), (0.9993, "> 99.9%"),
                                             (0.9986, "99.9%"), (0.996, "99.6%"), (0.994, "99%"), (0.8, "80%")])
def test_a_power_near_one_is_never_said_to_be_100_percent(power, said):
    from evidence.questions import power_words

    assert power_words(power) == said


def test_a_one_question_evaluation_says_it_has_one_question(tmp_path):
    """Three seeds evaluated on one question: no components or allocation, and the reason is the one question, not
    "0 seed(s) with responses on the same questions"."""
    from benchmarks.synthetic_sweep import make_sweep
    from evidence.seal.bundle import build_bundle

    sweep = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=(1, 2, 3), n_prompts=1,
                       final_counts=lambda arm, seed: [seed % 4])
    data = build_bundle(sweep, figures=False).bundle_dir / "data"
    why = "1 evaluation question: fewer than 2 (no question-level noise to estimate)"
    assert {r["none"] for r in csv_rows(data / "tables" / "variance_components.csv")} == {why}
    assert {r["none"] for r in csv_rows(data / "tables" / "allocation.csv")} == {why}
    assert "0 seed(s)" not in (data / "report.md").read_text()


def test_the_costs_leave_out_a_shared_initial_evaluation_and_count_every_evaluation(tied_bundle):
    """Each run records, in run.json, a shared initial evaluation (reused: 0.02 s for 100 responses) and one of its
    own at step 10 (40 s, 100 responses); its final evaluation has 100 responses. By hand: c_response = 40/100 (the
    shared one left out), 2 evaluations of P·k per job (the final and the step-10 one), c_seed = elapsed − 0.4·200."""
    from evidence.dataset import load_bundle_data
    from evidence.questions import measured_costs

    data = load_bundle_data(tied_bundle / "data")
    for run in data.runs:
        data.runs[run]["eval_during_training"] = {"every": 5, "evaluations": [
            {"step": 0, "seconds": 0.02, "summary": {"n_responses": 100, "shared": {"path": "x", "key": "k"}}},
            {"step": 10, "seconds": 40.0, "summary": {"n_responses": 100}}]}
    elapsed = [float(data.index_row(a, s)["elapsed_s"]) for a in ("grpo", "rpp") for s in (1, 2, 3)]
    finals = {int(data.index_row(a, s)["eval_responses_final"]) for a in ("grpo", "rpp") for s in (1, 2, 3)}
    assert finals == {100}
    costs = measured_costs(data, ["grpo", "rpp"])
    assert costs.response == pytest.approx(40.0 / 100, rel=1e-12)
    assert costs.evaluations == pytest.approx(2.0, rel=1e-12)
    assert costs.seed == pytest.approx(sum(max(0.0, e - 0.4 * 200) for e in elapsed) / 6, rel=1e-12)
    # the cost of the design as run is then what the runs took: 2·S·(c_seed + 2·c_response·P·k)
    assert allocation.cost(costs, 3, 25, 4) == pytest.approx(2 * 3 * (costs.seed + 2 * 0.4 * 100), rel=1e-12)
