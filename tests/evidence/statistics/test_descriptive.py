"""Statistics against independent references: hand arithmetic, literals, and seed 000's published numbers."""

from __future__ import annotations

import math

import pytest

from evidence.statistics import descriptive
from evidence.tables import fmt_interval, fmt_summary

# t_{0.975, 2} as widely printed (older scipy). It is off in the 11th digit: for df = 2 the quantile has
# the closed form (2p - 1) / sqrt(2 p (1 - p)), 4.30265272974946385... at p = 0.975.
T_975_DF2 = 4.302652729911275
T_975_DF2_EXACT = 0.95 / math.sqrt(2 * 0.975 * 0.025)
T_975_DF4 = 2.7764451051977987  # t_{0.975, 4}


def test_mean_and_sample_sd_by_hand():
    values = [0.5, 0.6, 0.7]
    summary = descriptive.across_seeds(values)
    assert summary.n == 3
    assert summary.mean == pytest.approx(0.6, abs=1e-15)
    # ((-0.1)^2 + 0 + 0.1^2) / (3 - 1) = 0.01 -> SD 0.1 (ddof=1, not the population 0.0816...)
    assert summary.sd == pytest.approx(0.1, abs=1e-15)


def test_t_quantiles_match_table_literals():
    assert descriptive.t_quantile(0.95, 2) == pytest.approx(T_975_DF2, rel=1e-9)
    assert descriptive.t_quantile(0.95, 2) == pytest.approx(T_975_DF2_EXACT, rel=1e-13)
    assert descriptive.t_quantile(0.95, 4) == pytest.approx(T_975_DF4, rel=1e-9)


def test_t_interval_by_hand():
    low, high = descriptive.t_interval([1.0, 2.0, 3.0])
    half = T_975_DF2_EXACT * 1.0 / math.sqrt(3)  # SD of 1,2,3 is exactly 1
    assert (low, high) == (pytest.approx(2 - half, rel=1e-12), pytest.approx(2 + half, rel=1e-12))


def test_last_k_and_all_steps_means():
    values = [float(v) for v in range(50)]
    assert descriptive.last_k_mean(values, 10) == 44.5  # steps 40..49
    assert descriptive.all_steps_mean(values) == 24.5
    assert descriptive.last_k_mean([1.0, 3.0], 10) == 2.0  # a run shorter than K uses all its steps


def test_k1_activation_by_hand():
    returns = [0.5, 0.4, 0.3, 0.2]
    raw = [0.5, 0.5, 0.5, 0.5]
    check = descriptive.k1_activation(returns, raw, k=2)
    assert check.all_steps == pytest.approx((0 - 0.1 - 0.2 - 0.3) / 4)
    assert check.last_k == pytest.approx((-0.2 - 0.3) / 2)
    assert check.final_step == pytest.approx(-0.3)


def test_seed_000_paired_difference_reproduces_the_published_row():
    # Seed 000, final-checkpoint reward / pass@1 per seed, and its published REINFORCE++ - GRPO row.
    grpo = {42: 0.6006, 1234: 0.5996, 2026: 0.6230}
    rpp = {42: 0.6016, 1234: 0.5752, 2026: 0.5830}
    diff = descriptive.paired_difference(rpp, grpo)
    assert [round(diff.by_seed[s], 4) for s in (42, 1234, 2026)] == [0.0010, -0.0244, -0.0400]
    assert diff.summary.mean == pytest.approx(-0.0212, abs=1e-4)
    assert diff.summary.sd == pytest.approx(0.0207, abs=1e-4)
    assert diff.interval[0] == pytest.approx(-0.0726, abs=1e-4)
    assert diff.interval[1] == pytest.approx(0.0303, abs=1e-4)


def test_paired_difference_uses_only_seeds_both_have():
    diff = descriptive.paired_difference({1: 0.5, 2: 0.7, 3: 0.9}, {1: 0.4, 3: 0.6})
    assert diff.by_seed == {1: pytest.approx(0.1), 3: pytest.approx(0.3)}
    assert diff.summary.n == 2
    # Independent: differences 0.1, 0.3 -> mean 0.2, SD sqrt(((-0.1)^2 + 0.1^2) / 1) = 0.1414...
    assert diff.summary.sd == pytest.approx(math.sqrt(0.02))
    half = 12.706204736174707 * math.sqrt(0.02) / math.sqrt(2)  # t_{0.975, 1}
    assert diff.interval == (pytest.approx(0.2 - half), pytest.approx(0.2 + half))


def test_one_seed_says_n_below_two_instead_of_nan():
    summary = descriptive.across_seeds([0.54])
    assert (summary.n, summary.mean, summary.sd) == (1, 0.54, None)
    assert descriptive.t_interval([0.54]) is None
    assert fmt_summary(summary, 4) == "0.5400 (n<2)"
    assert fmt_interval(None) == "n<2"
    assert fmt_summary(descriptive.across_seeds([]), 4) == "—"
    with pytest.raises(ValueError):
        descriptive.mean([])
