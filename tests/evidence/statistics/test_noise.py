"""The evaluation's own noise apart from the seeds' spread (issue 22, section 3): each run's pass@1 standard error
clustered by prompt, the crossed bootstrap over seeds and prompts and the question-clustered t-interval (every seed
is evaluated on the same prompts), and the rule that says which of the two holds a comparison's precision.

References written here: the SE by a float64 loop over the prompts; its coverage of a simulated population of
prompts of differing difficulty (and the responses-as-independent SE's failure there); the bootstrap's draws
replayed by plain loops and its distribution against the crossed bootstrap's exact mean and variance (and a simulation
of the crossed design, where the nested "seeds, then prompts" bootstrap under-covers); the question interval with
scipy; and, for what the build writes, each run's own responses file read here.
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
from scipy import stats as sps

from benchmarks.synthetic_sweep import N_PROMPTS, K, make_sweep
from evidence import audit_bundle
from evidence.statistics import crossed, noise
from facts.repo import REPO_ROOT
from tests.evidence.bundle_tables import edit_cell, rows
from tests.sweeps import reseal_bag

REPO = REPO_ROOT


def reference_se(rates: list[float]) -> float:
    """Float64 loop: the prompts' pass rates' sample SD (ddof=1) over √P."""
    p = len(rates)
    mean = 0.0
    for r in rates:
        mean += r
    mean /= p
    ss = 0.0
    for r in rates:
        ss += (r - mean) ** 2
    return math.sqrt(ss / (p - 1)) / math.sqrt(p)


def test_the_eval_se_is_the_sd_of_the_prompts_pass_rates_over_root_p():
    rng = np.random.default_rng(3)
    for p in (2, 5, 25, 200):
        rates = list(rng.integers(0, K + 1, p) / K)
        assert noise.eval_standard_error(rates) == pytest.approx(reference_se(rates), rel=1e-12)
        other = list(rng.integers(0, K + 1, p) / K)
        diffs = [a - b for a, b in zip(rates, other)]
        assert noise.paired_eval_standard_error(rates, other) == pytest.approx(reference_se(diffs), rel=1e-12)
    assert noise.eval_standard_error([0.5]) is None
    assert noise.eval_standard_error([0.25, 0.25, 0.25]) == 0.0


def test_the_clustered_se_covers_the_population_pass_rate_and_the_responses_as_independent_se_does_not():
    """Prompts differ in difficulty (true rates ~ Beta(0.3, 0.3), mean 0.5): 4,000 evaluations of 50 prompts x 4
    responses. pass@1 ± 1.96·SE covers the population's pass rate ~95 % of the time with the SE clustered by
    prompt; √(p(1 − p)/(P·k)), which treats the 200 responses as independent, covers it far less often."""
    rng = np.random.default_rng(22)
    reps, p, k = 4000, 50, 4
    truth = rng.beta(0.3, 0.3, (reps, p))
    rates = rng.binomial(k, truth) / k
    covered = naive_covered = 0
    for row in rates:
        estimate = row.mean()
        se = noise.eval_standard_error(list(row))
        naive = math.sqrt(estimate * (1 - estimate) / (p * k))
        covered += abs(estimate - 0.5) <= 1.96 * se
        naive_covered += abs(estimate - 0.5) <= 1.96 * naive
    assert 0.93 <= covered / reps <= 0.965
    assert naive_covered / reps < 0.85


def test_the_rule_compares_the_seeds_variance_with_the_mean_squared_se():
    assert noise.seed_variance([0.40, 0.50, 0.60]) == pytest.approx(0.01, rel=1e-12)
    assert noise.eval_noise_variance([0.1, 0.2]) == pytest.approx((0.01 + 0.04) / 2, rel=1e-12)
    assert noise.spread_source(0.01, 0.005) == noise.SEEDS_EXCEED
    assert noise.spread_source(0.005, 0.01) == noise.WITHIN_NOISE
    assert noise.spread_source(0.01, 0.01) == noise.WITHIN_NOISE  # not larger: no more than the evaluation gives
    assert noise.spread_source(0.0, 0.0) == noise.NO_SPREAD
    assert noise.spread_source(None, 0.01) == noise.TOO_FEW
    assert noise.seed_variance([0.4]) is None and noise.eval_noise_variance([]) is None


def replayed_means(rates: list[list[float]], n_resamples: int, seed: int) -> list[float]:
    """The documented draws replayed with plain loops: S seed indices per resample, then P prompt indices per
    resample shared by every drawn seed (one chunk: the matrices here are small), each resample's mean summed value
    by value."""
    rng = np.random.default_rng(seed)
    s, p = len(rates), len(rates[0])
    seeds, prompts = rng.integers(0, s, (n_resamples, s)), rng.integers(0, p, (n_resamples, p))
    means = []
    for b in range(n_resamples):
        total = 0.0
        for j in range(s):
            for i in range(p):
                total += rates[int(seeds[b, j])][int(prompts[b, i])]
        means.append(total / (s * p))
    return means


def reference_question_interval(rates: list[list[float]], level: float = 0.95) -> tuple[float, float]:
    """scipy: the t-interval (df = P − 1) of the per-prompt means over the seeds."""
    q = np.asarray(rates, dtype=np.float64).mean(axis=0)
    return tuple(sps.t.interval(level, q.size - 1, loc=q.mean(), scale=sps.sem(q)))


def test_the_crossed_bootstrap_replays_its_recorded_draws():
    rates = (np.random.default_rng(1).integers(0, K + 1, (3, 7)) / K).tolist()
    means = replayed_means(rates, 500, 22)
    assert crossed.crossed_means(rates, 500, 22) == pytest.approx(means, rel=1e-12)
    low, high = crossed.crossed_interval(rates, 0.95, 500, 22)
    assert (low, high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), rel=1e-12)
    assert crossed.crossed_interval([rates[0]], 0.95) is None  # one seed: nothing to resample
    assert crossed.crossed_interval([[0.5], [0.25]], 0.95) is None  # one prompt


def test_the_crossed_bootstrap_has_the_crossed_designs_exact_mean_and_variance():
    """Seeds and prompts drawn independently, the prompts once for all seeds: with x_si = μ + a_s + b_i + e_si (the
    two-way decomposition, a and b centred, e with zero row and column means), E[T*] = μ and
    Var[T*] = mean(a²)/S + mean(b²)/P + mean(e²)/(S·P). A nested bootstrap's prompt term would be mean(b²)/(S·P)."""
    rng = np.random.default_rng(5)
    rates = rng.binomial(K, rng.beta(0.5, 0.5, 40)[None, :].repeat(6, 0)) / K
    rates[0] = np.clip(rates[0] + 0.25, 0, 1)  # one seed well apart from the others
    mu = rates.mean()
    a, b = rates.mean(axis=1) - mu, rates.mean(axis=0) - mu
    e = rates - mu - a[:, None] - b[None, :]
    s, p = rates.shape
    variance = np.mean(a ** 2) / s + np.mean(b ** 2) / p + np.mean(e ** 2) / (s * p)
    draws = crossed.crossed_means(rates, 20000, 7)
    assert draws.mean() == pytest.approx(mu, abs=4 * math.sqrt(variance / 20000))
    assert draws.var() == pytest.approx(variance, rel=0.05)  # 20,000 draws: ~1 % sampling error of a variance


def test_the_crossed_bootstrap_draws_chunk_by_chunk_as_documented():
    """50 seeds x 1,000 prompts: 83 resamples fit in a chunk, so 200 are drawn as 83, 83 and 34, each chunk's seed
    draws before its prompt draws; replayed here one resample at a time."""
    rates = np.random.default_rng(9).integers(0, K + 1, (50, 1000)) / K
    chunk = crossed.CHUNK_VALUES // rates.size
    assert chunk == 83
    rng, expected = np.random.default_rng(4), []
    for size in (83, 83, 34):
        seeds, prompts = rng.integers(0, 50, (size, 50)), rng.integers(0, 1000, (size, 1000))
        expected += [rates[seeds[b][:, None], prompts[b][None, :]].mean() for b in range(size)]
    assert crossed.crossed_means(rates, 200, 4) == pytest.approx(expected, rel=1e-12)


def test_the_question_interval_is_scipys_t_interval_of_the_per_prompt_means():
    rng = np.random.default_rng(11)
    for shape in ((1, 2), (3, 25), (5, 7)):
        rates = (rng.integers(0, K + 1, shape) / K).tolist()
        if np.ptp(np.mean(rates, axis=0)) == 0:
            continue
        assert crossed.question_interval(rates, 0.95) == pytest.approx(reference_question_interval(rates), rel=1e-12)
        assert crossed.question_interval(rates, 0.9) == pytest.approx(reference_question_interval(rates, 0.9),
                                                                        rel=1e-12)
    assert crossed.question_interval([[0.5], [0.25]]) is None  # one prompt
    assert crossed.question_interval([[0.25, 0.25], [0.5, 0.5]]) is None  # no spread between questions: no interval
    assert crossed.question_shortfall([[0.25, 0.25], [0.5, 0.5]]).rule == "tied-evaluations"
    assert crossed.crossed_interval([[0.25, 0.25], [0.25, 0.25]]) is None  # every value tied: no interval


def replayed_nested_means(x: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """The nested ("seeds, then each seed's prompts") bootstrap the evidence used before, written here."""
    rng = np.random.default_rng(seed)
    s, p = x.shape
    seeds, prompts = rng.integers(0, s, (n_resamples, s)), rng.integers(0, p, (n_resamples, s, p))
    return x[seeds[:, :, None], prompts].mean(axis=(1, 2))


def test_in_a_crossed_design_the_crossed_intervals_cover_and_the_nested_bootstrap_does_not():
    """Simulated crossed design, as the evaluation draws it: 3 seeds share 25 prompts whose true per-prompt
    differences vary (b_i ~ N(0, 0.2²), population mean 0), each seed adds a small shift (N(0, 0.01²)) and response
    noise (N(0, 0.05²)). 400 evaluations: the crossed bootstrap and the question-clustered t-interval cover 0 at
    about 95 %; the nested bootstrap (each seed its own prompts), whose prompt term is S times too small, far less."""
    rng = np.random.default_rng(2026)
    reps, s, p = 400, 3, 25
    covered = {"crossed": 0, "question": 0, "nested": 0}
    for r in range(reps):
        x = rng.normal(0, 0.2, p)[None, :] + rng.normal(0, 0.01, (s, 1)) + rng.normal(0, 0.05, (s, p))
        lo, hi = crossed.crossed_interval(x, 0.95, 1000, r)
        covered["crossed"] += lo <= 0 <= hi
        lo, hi = crossed.question_interval(x, 0.95)
        covered["question"] += lo <= 0 <= hi
        nested = np.quantile(replayed_nested_means(x, 400, r), [0.025, 0.975])
        covered["nested"] += nested[0] <= 0 <= nested[1]
    assert 0.90 <= covered["crossed"] / reps <= 0.98, covered
    assert 0.92 <= covered["question"] / reps <= 0.98, covered
    assert covered["nested"] / reps < 0.80, covered


# ---- through python -m evidence build and audit ----------------------------------------------------

# Prompt difficulty: half the prompts are always solved, half never (SE ~0.1 at 25 prompts). GRPO's seeds move one
# sample or two (their pass@1 0.53, 0.54, 0.52: within the evaluation's noise); REINFORCE++'s seeds solve 0, 12 or all
# of the hard prompts (0.52, 0.76, 1.0: far beyond it).
EASY = [K if i % 2 == 0 else 0 for i in range(N_PROMPTS)]


def counts(arm: str, seed: int) -> list[int]:
    if arm == "grpo":
        shifted = list(EASY)
        shifted[{1: 1, 2: 3, 3: 5}[seed]] += {1: 1, 2: 2, 3: 0}[seed]
        return shifted
    solved = {1: 0, 2: 6, 3: 12}[seed]
    return [K if c == K or i // 2 < solved else 0 for i, c in enumerate(EASY)]


def run_rates(sweep: Path, arm: str, seed: int) -> dict[int, float]:
    """Per prompt: the share of the run's final responses whose reward is > 0, read from its responses file."""
    correct, total = {}, {}
    for line in (sweep / "jobs" / f"{arm}-{seed}" / "run" / "eval" / "final.jsonl").read_text().splitlines():
        record = json.loads(line)
        correct[record["index"]] = correct.get(record["index"], 0) + (record["reward"] > 0)
        total[record["index"]] = total.get(record["index"], 0) + 1
    return {i: correct[i] / total[i] for i in sorted(total)}


def sample_var(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    """A 2-arm x 3-seed sweep whose prompts differ in difficulty, built as users build it; its audit is clean."""
    root = tmp_path_factory.mktemp("noise")
    sweep = make_sweep(root, algos=("grpo", "rpp"), seeds=(1, 2, 3), final_counts=counts)
    done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert audit_bundle(sweep / "bundle") == []
    return sweep, sweep / "bundle"


def test_each_runs_eval_se_is_recomputed_from_its_own_responses(noisy):
    sweep, bag = noisy
    table = rows(bag / "data" / "tables" / "eval_se.csv")
    assert [(r["arm"], r["seed"]) for r in table] == [(a, str(s)) for a in ("grpo", "rpp") for s in (1, 2, 3)]
    for row in table:
        rates = list(run_rates(sweep, row["arm"], int(row["seed"])).values())
        assert (int(row["n_prompts"]), int(row["k"])) == (N_PROMPTS, K)
        assert float(row["pass@1"]) == pytest.approx(sum(rates) / len(rates), rel=1e-12)
        assert float(row["se"]) == pytest.approx(reference_se(rates), rel=1e-12)


def test_the_report_says_which_comparison_needs_more_prompts_and_which_more_seeds(noisy):
    sweep, bag = noisy
    table = {(r["a"], r["b"]): r for r in rows(bag / "data" / "tables" / "eval_noise.csv")}
    assert set(table) == {("grpo", ""), ("rpp", ""), ("rpp", "grpo")}
    rates = {(a, s): run_rates(sweep, a, s) for a in ("grpo", "rpp") for s in (1, 2, 3)}
    for (a, b), row in table.items():
        per_seed = [list(rates[(a, s)].values()) if not b else
                    [rates[(a, s)][i] - rates[(b, s)][i] for i in rates[(a, s)]] for s in (1, 2, 3)]
        values = [sum(r) / len(r) for r in per_seed]
        assert float(row["mean"]) == pytest.approx(sum(values) / 3, rel=1e-12)
        seed_var, eval_var = sample_var(values), sum(reference_se(r) ** 2 for r in per_seed) / 3
        assert float(row["seed_var"]) == pytest.approx(seed_var, rel=1e-9)
        assert float(row["eval_var"]) == pytest.approx(eval_var, rel=1e-12)
        assert row["spread"] == ("seeds" if seed_var > eval_var else "evaluation")
        replay = replayed_means(per_seed, int(row["cb_resamples"]), int(row["cb_seed"]))
        assert (float(row["cb_low"]), float(row["cb_high"])) == pytest.approx(
            tuple(np.quantile(replay, [0.025, 0.975])), rel=1e-12)
        assert (float(row["q_low"]), float(row["q_high"])) == pytest.approx(reference_question_interval(per_seed),
                                                                            rel=1e-12)
    assert table[("grpo", "")]["spread"] == "evaluation" and table[("rpp", "")]["spread"] == "seeds"
    report = (bag / "data" / "report.md").read_text()
    assert ("- GRPO: the seed-to-seed spread does not exceed the evaluation's noise (s² = 0.0001 against σ²_eval = "
            "0.0101): more evaluation prompts, not more seeds, is what this arm's pass@1 needs.") in report
    assert "- REINFORCE++: the seed-to-seed spread exceeds the evaluation's noise" in report
    assert "| GRPO | 1 | 25 | 0.5300 | 0.1003 |" in report  # the per-run SE table
    assert "| GRPO | 3 | 25 | 0.5300 | 0.0100 | 0.1007 | 0.01 | within the eval's noise |" in report


def test_the_audit_flags_an_edited_se_an_edited_noise_cell_and_an_edited_report_line(noisy, tmp_path):
    _, bag = noisy
    edited = Path(shutil.copytree(bag, tmp_path / "edited"))
    tables = edited / "data" / "tables"
    edit_cell(tables / "eval_se.csv", 2, "se", 0.05)
    edit_cell(tables / "eval_noise.csv", 2, "spread", "seeds")
    edit_cell(tables / "eval_noise.csv", 2, "cb_low", 0.3)
    edit_cell(tables / "eval_noise.csv", 3, "cb_seed", 7)
    edit_cell(tables / "eval_noise.csv", 4, "q_high", 0.9)
    report = edited / "data" / "report.md"
    text = report.read_text()
    line = "- GRPO: the seed-to-seed spread does not exceed the evaluation's noise"
    assert line in text
    report.write_text(text.replace(line, "- GRPO: the seed-to-seed spread exceeds the evaluation's noise"))
    reseal_bag(edited)
    reasons = [str(f) for f in audit_bundle(edited)]
    for where in ("data/tables/eval_se.csv: line 2, column se:", "data/tables/eval_noise.csv: line 2, column spread:",
                  "data/tables/eval_noise.csv: line 2, column cb_low:", "data/tables/eval_noise.csv: line 3, column cb_seed:",
                  "data/tables/eval_noise.csv: line 4, column q_high:"):
        assert any(r.startswith(where) for r in reasons), (where, reasons)
    assert any(r.startswith("data/report.md: line") and "GRPO: the seed-to-seed spread exceeds" in r
               for r in reasons), reasons


def test_a_reward_edited_in_a_runs_responses_is_caught_and_moves_its_se(noisy, tmp_path):
    """The SE is read from the bundle's responses: a response re-marked correct is the re-scoring's finding, and the
    tables built on the stored rewards no longer recompute to what was sealed."""
    _, bag = noisy
    edited = Path(shutil.copytree(bag, tmp_path / "edited"))
    responses = edited / "data" / "runs" / "grpo-2" / "eval" / "final.jsonl"
    lines = responses.read_text().splitlines()
    record = json.loads(lines[4])  # prompt 1 (a hard one), sample 0: wrong
    assert record["reward"] == 0.0
    lines[4] = json.dumps({**record, "reward": 1.0})
    responses.write_text("\n".join(lines) + "\n")
    reseal_bag(edited)
    reasons = [str(f) for f in audit_bundle(edited)]
    assert any("grpo-2/eval/final.jsonl" in r and "re-scores to 0.0" in r for r in reasons), reasons
    assert any(r.startswith("data/tables/eval_se.csv: line 3, column se:") for r in reasons), reasons
