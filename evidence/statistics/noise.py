"""An evaluation's own sampling error: the standard error of its pass@1, clustered by prompt."""

from __future__ import annotations

import math
from collections.abc import Sequence

from evidence import stats


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
    return None if len(rates) < 2 else stats.sample_sd(list(rates)) / math.sqrt(len(rates))


def paired_eval_standard_error(rates_a: Sequence[float], rates_b: Sequence[float]) -> float | None:
    """Standard error of a difference of two evaluations' pass@1 on the same prompts, clustered by prompt:
    ``eval_standard_error`` of the per-prompt differences d_i = p_{a,i} − p_{b,i} (``rates_a`` and
    ``rates_b`` in the same prompt order), s_d/√P, which keeps what the two share (each prompt's difficulty)."""
    return eval_standard_error([a - b for a, b in zip(rates_a, rates_b, strict=True)])
