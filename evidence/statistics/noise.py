"""An evaluation's own sampling error, and whether the seeds' spread exceeds it (numpy only: on the build's path)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from evidence.statistics import descriptive


def eval_standard_error(rates: Sequence[float]) -> float | None:
    """Standard error of an evaluation's pass@1, clustered by prompt.

    pass@1 = p̄ = (1/P)·Σ_i p_i, p_i = c_i/k_i the share of prompt i's k_i responses that are correct (the
    unbiased pass@1 of one prompt). The k responses of one prompt are not independent draws from the
    population of prompts (they share its difficulty), so the prompts are the independent units:
    SE = s_p/√P with s_p² = Σ_i (p_i − p̄)²/(P − 1) (ddof=1). It counts both sources of the evaluation's
    error, which prompts were drawn and which responses each drew; the responses-as-independent SE
    √(p̄(1 − p̄)/(P·k)) leaves out the first and understates it whenever prompts differ in difficulty.
    None when P < 2.
    """
    return None if len(rates) < 2 else descriptive.sample_sd(list(rates)) / math.sqrt(len(rates))


def paired_eval_standard_error(rates_a: Sequence[float], rates_b: Sequence[float]) -> float | None:
    """Standard error of a difference of two evaluations' pass@1 on the same prompts, clustered by prompt:
    ``eval_standard_error`` of the per-prompt differences d_i = p_{a,i} − p_{b,i} (``rates_a`` and
    ``rates_b`` in the same prompt order), s_d/√P, which keeps what the two share (each prompt's difficulty)."""
    return eval_standard_error([a - b for a, b in zip(rates_a, rates_b, strict=True)])


# What the rule below concludes, as the eval_noise table records it.
SEEDS_EXCEED, WITHIN_NOISE, NO_SPREAD, TOO_FEW = "seeds", "evaluation", "none", "n<2"


def seed_variance(values: Sequence[float]) -> float | None:
    """The seeds' variance of a per-seed value: s² = Σ_s (x_s − x̄)²/(n − 1) (ddof=1); None when n < 2."""
    sd = descriptive.sample_sd(list(values))
    return None if sd is None else sd * sd


def eval_noise_variance(standard_errors: Sequence[float]) -> float | None:
    """The variance the evaluation alone gives a per-seed value: the mean over seeds of its squared SE,
    σ²_eval = (1/n)·Σ_s SE_s²; None without an SE."""
    return None if not standard_errors else sum(se * se for se in standard_errors) / len(standard_errors)


def spread_source(seed_var: float | None, eval_var: float | None) -> str:
    """The rule: the seeds' spread exceeds the evaluation's noise when s²_seeds > σ²_eval.

    σ²_eval is the variance a per-seed pass@1 would show if the seeds did not differ at all and each were
    evaluated again on a fresh draw of P prompts x k responses, so s²_seeds ≤ σ²_eval means the seeds
    differ no more than re-evaluating one checkpoint would make them: the comparison's precision is then
    held by the evaluation, and more prompts (σ²_eval shrinks as 1/P) help it, more seeds do not. Returns
    ``SEEDS_EXCEED``, ``WITHIN_NOISE``, ``NO_SPREAD`` (both 0) or ``TOO_FEW`` (fewer than two seeds).
    """
    if seed_var is None or eval_var is None:
        return TOO_FEW
    if seed_var == 0 and eval_var == 0:
        return NO_SPREAD
    return SEEDS_EXCEED if seed_var > eval_var else WITHIN_NOISE
