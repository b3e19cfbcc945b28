"""Several pairs compared on one metric, as one family: paired t p-values, Holm's step-down, Bonferroni intervals."""

from __future__ import annotations

import math
from collections.abc import Sequence

from evidence.statistics import descriptive


def paired_t_p_value(differences: Sequence[float]) -> float | None:
    """Two-sided p-value of the paired t-test of mean 0: t = d̄ / (s/√n), p = 2·(1 − F_t(|t|; n − 1)).

    None when n < 2 (no SD); with no spread, 0 for a non-zero mean and 1 for a zero one.
    """
    sd = descriptive.sample_sd(differences)
    if sd is None:
        return None
    mean = descriptive.mean(differences)
    if sd == 0:
        return 0.0 if mean != 0 else 1.0
    from scipy import special  # imported on first use: scipy is slow to import

    t = mean / (sd / math.sqrt(len(differences)))
    return float(2 * special.stdtr(len(differences) - 1, -abs(t)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order.

    With p_(1) ≤ … ≤ p_(m) sorted: p̃_(i) = max_{j ≤ i} min(1, (m − j + 1)·p_(j)). H_(i) is rejected at
    family-wise level α exactly when p̃_(i) ≤ α (Holm 1979).
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def family_level(level: float, m: int) -> float:
    """The per-pair confidence level of Bonferroni's simultaneous intervals: 1 − (1 − level)/m, so that all m
    intervals cover their differences together with probability at least ``level``."""
    return 1 - (1 - level) / m


def family_interval(differences: Sequence[float], level: float, m: int) -> tuple[float, float] | None:
    """One pair's Bonferroni simultaneous interval: the t-interval at ``family_level(level, m)``.

    Consistent with Holm in one direction: an interval that excludes 0 means Holm rejects that pair (Holm's
    p̃ ≤ m·p); Holm may reject a pair whose interval still includes 0.
    """
    return descriptive.t_interval(differences, family_level(level, m))
