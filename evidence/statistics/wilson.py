"""The Wilson score interval of one run's pass@j, with the evaluation's clustering by question counted through the
effective sample size (Wilson 1927; Korn & Graubard 1998, "Confidence intervals for proportions with small expected
number of positive counts estimated from survey data"). The normal-approximation interval p̂ ± z·SE collapses to a
point at p̂ = 0 or 1 and leaves [0, 1] near them; Wilson's does neither. scipy.special's normal quantile, imported on
first use.

The interval, for a proportion p̂ from n trials and z = Φ⁻¹((1 + level)/2):

    (p̂ + z²/(2n) ± z·√(p̂(1 − p̂)/n + z²/(4n²))) / (1 + z²/n)

The effective n. A run's pass@j is the mean over its P questions of each question's unbiased pass@j; its responses
are not independent trials (a question's responses share its difficulty), so n is the number of independent trials
the evaluation is worth: n_eff = p̂(1 − p̂)/SE², SE = s/√P the SE clustered by question (s the SD of the questions'
values, ddof=1; ``noise.eval_standard_error``), capped at the nominal n = P·⌊k/j⌋ (the disjoint j-response draws the
responses hold: P·k for pass@1). Where p̂(1 − p̂)/SE² is undefined (p̂ = 0 or 1: no response, or every one, correct;
or no spread across questions) n_eff = P when p̂ is 0 or 1 (the most clustered case: each question one trial) and the
nominal n otherwise (every question alike: the responses are the only noise).
"""

from __future__ import annotations

import math


def wilson_interval(p: float, n: float, level: float) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion ``p`` from ``n`` (> 0, any real) trials; None when n ≤ 0."""
    if n <= 0:
        return None
    from scipy import special  # imported on first use: scipy is slow to import

    z = float(special.ndtri((1 + level) / 2))
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def effective_n(p: float, se: float | None, n_questions: int, nominal: int) -> float:
    """n_eff = min(p̂(1 − p̂)/SE², nominal); P at p̂ = 0 or 1; the nominal n without spread (module docstring)."""
    if p <= 0 or p >= 1:
        return float(n_questions)
    if se is None or se == 0:
        return float(nominal)
    return min(p * (1 - p) / (se * se), float(nominal))


def run_interval(per_question, j: int, k: int, level: float) -> tuple[float, float, float] | None:
    """A run's pass@j (the mean of its questions' values), n_eff and the Wilson interval's (low, high) as
    ``(n_eff, low, high)``; None with no question or fewer than j responses per question."""
    values = [float(v) for v in per_question]
    if not values or k < j:
        return None
    from evidence.statistics import descriptive
    from evidence.statistics.noise import eval_standard_error

    p = descriptive.mean(values)
    n = effective_n(p, eval_standard_error(values), len(values), len(values) * (k // j))
    low, high = wilson_interval(p, n, level)
    return n, low, high
