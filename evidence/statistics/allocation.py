"""Where the next unit of compute should go: from a pair's variance components (``evidence.statistics.components``)
and the measured costs, the cheapest number of seeds S, questions P and responses per question k that detects the
smallest difference δ the user cares about with 80 % power (scipy's noncentral t, imported on first use).

The variance of the paired difference of two arms' pass@1 in the crossed design (seeds crossed with questions,
k responses per cell, every seed of both arms on the same questions; components of the difference):

    Var(D̄) = σ²_seed/S + σ²_question/P + σ²_sq/(S·P) + σ²_response/(S·P·k)

and the test it is planned for is the crossed t-test D̄/√V̂ with Satterthwaite's ν, from the expected mean squares of
the planned design (σ²_c = σ²_sq + σ²_response/k):

    E MS_seed = k·(σ²_c + P·σ²_seed),  E MS_question = k·(σ²_c + S·σ²_question),  E MS_sq = k·σ²_c
    ν = (E MS_seed + E MS_question − E MS_sq)² / (E MS_seed²/(S−1) + E MS_question²/(P−1) + E MS_sq²/((S−1)(P−1)))

The power approximation (as for crossed designs of participants and stimuli, Westfall, Kenny & Judd 2014): the
statistic follows the noncentral t with ν df and noncentrality λ = δ/√Var(D̄), so
power = 1 − F(t_c; ν, λ) + F(−t_c; ν, λ), t_c = t_{1−α/2, ν} (``power.t_power``).

The cost of a design, in the seconds the sweep measured (``Costs``): both arms train S seeds and evaluate each
``evaluations`` times on P·k responses:

    cost(S, P, k) = 2·S·(c_seed + evaluations·c_response·P·k)

The search: every S in [``MIN_SEEDS``, ``MAX_SEEDS``] (3: the fewest the report's claims accept) and k in
``K_CHOICES``, the fewest P in [2, ``MAX_QUESTIONS``] reaching the power (by bisection: Var(D̄) falls and ν rises
with P), the cheapest of them (ties: fewer seeds, then fewer responses). The components are the truncated estimates of
one sweep: the advice is as good as they are, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evidence.statistics.components import Components
from evidence.statistics.power import MDE_POWER, t_power

MIN_SEEDS = 3  # claims.MIN_INFERENCE_SEEDS: no inference from fewer
MAX_SEEDS = 64
K_CHOICES = (1, 2, 4, 8, 16, 32)
MAX_QUESTIONS = 20_000
ARMS_PER_PAIR = 2
# The smallest difference (a rate: 0.05 = 5 points) planned for when neither the build nor an experiment spec states one.
DEFAULT_SMALLEST_DIFFERENCE = 0.05


@dataclass(frozen=True)
class Costs:
    """Seconds of one job not spent evaluating (``seed``), of one evaluated response (``response``), and how many
    evaluations of the P·k final responses one job makes (``evaluations``)."""

    seed: float
    response: float
    evaluations: float = 1.0


@dataclass(frozen=True)
class Design:
    """One allocation: seeds per arm, questions, responses per question, its power at δ and its cost (seconds)."""

    seeds: int
    questions: int
    k: int
    power: float
    cost: float


def variance(c: Components, seeds: int, questions: int, k: int) -> float:
    """Var(D̄) of the planned design from the (truncated) components."""
    return c.seed / seeds + c.question / questions + c.interaction / (seeds * questions) \
        + c.response / (seeds * questions * k)


def planned_df(c: Components, seeds: int, questions: int, k: int) -> float | None:
    """Satterthwaite's ν from the planned design's expected mean squares (module docstring); None when S or P < 2."""
    if seeds < 2 or questions < 2:
        return None
    within = c.interaction + c.response / k
    ms_s, ms_q, ms_sq = k * (within + questions * c.seed), k * (within + seeds * c.question), k * within
    combined = ms_s + ms_q - ms_sq
    denominator = ms_s ** 2 / (seeds - 1) + ms_q ** 2 / (questions - 1) + ms_sq ** 2 / ((seeds - 1) * (questions - 1))
    return combined * combined / denominator if combined > 0 and denominator > 0 else None


def design_power(c: Components, delta: float, seeds: int, questions: int, k: int, alpha: float) -> float | None:
    """The power of the crossed t-test against δ (module docstring); None when the design has no variance or no df."""
    var, df = variance(c, seeds, questions, k), planned_df(c, seeds, questions, k)
    if var <= 0 or df is None:
        return None
    return t_power(abs(delta) / math.sqrt(var), df, alpha)


def cost(costs: Costs, seeds: int, questions: int, k: int) -> float:
    """2·S·(c_seed + evaluations·c_response·P·k)."""
    return ARMS_PER_PAIR * seeds * (costs.seed + costs.evaluations * costs.response * questions * k)


def _design(c, costs, delta, seeds, questions, k, alpha) -> Design | None:
    power = design_power(c, delta, seeds, questions, k, alpha)
    return None if power is None else Design(seeds, questions, k, power, cost(costs, seeds, questions, k))


def fewest_questions(c: Components, delta: float, seeds: int, k: int, alpha: float, power: float = MDE_POWER,
                     max_questions: int = MAX_QUESTIONS) -> int | None:
    """The fewest P in [2, max_questions] whose design reaches ``power`` (bisection); None when even the most do not."""
    def enough(p: int) -> bool:
        got = design_power(c, delta, seeds, p, k, alpha)
        return got is not None and got >= power

    if not enough(max_questions):
        return None
    low, high = 1, max_questions  # enough(high), not known at low (P = 1 is no design)
    while high - low > 1:
        middle = (low + high) // 2
        if middle >= 2 and enough(middle):
            high = middle
        else:
            low = middle
    return high


def fewest_seeds(c: Components, delta: float, questions: int, k: int, alpha: float, power: float = MDE_POWER,
                 max_seeds: int = MAX_SEEDS) -> int | None:
    """The fewest S in [``MIN_SEEDS``, max_seeds] whose design, at P and k as they are, reaches ``power``."""
    for seeds in range(MIN_SEEDS, max_seeds + 1):
        got = design_power(c, delta, seeds, questions, k, alpha)
        if got is not None and got >= power:
            return seeds
    return None


def _powers(c: Components, delta: float, seeds, questions, k, alpha: float):
    """``design_power`` over arrays of designs at once (numpy and scipy.special broadcast; NaN where a design has no
    variance or no df, and a CDF value scipy returned as NaN for an underflowed tail taken as 0, as ``t_power``)."""
    import numpy as np
    from scipy import special

    s, p, k = (np.asarray(v, dtype=np.float64) for v in (seeds, questions, k))
    var = c.seed / s + c.question / p + c.interaction / (s * p) + c.response / (s * p * k)
    within = c.interaction + c.response / k
    ms_s, ms_q, ms_sq = k * (within + p * c.seed), k * (within + s * c.question), k * within
    combined = ms_s + ms_q - ms_sq
    denominator = ms_s ** 2 / (s - 1) + ms_q ** 2 / (p - 1) + ms_sq ** 2 / ((s - 1) * (p - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where((combined > 0) & (denominator > 0), combined * combined / denominator, np.nan)
        lam = np.where(var > 0, abs(delta) / np.sqrt(np.where(var > 0, var, 1.0)), np.nan)
        critical = special.stdtrit(df, 1 - alpha / 2)
        upper = np.nan_to_num(special.nctdtr(df, lam, critical), nan=0.0)
        lower = np.nan_to_num(special.nctdtr(df, lam, -critical), nan=0.0)
    return np.where(np.isnan(df) | np.isnan(lam), np.nan, 1 - upper + lower)


def _fewest_questions_grid(c: Components, delta: float, alpha: float, power: float):
    """For every (S, k) of the search grid, the fewest P in [2, ``MAX_QUESTIONS``] reaching ``power`` (a vectorised
    bisection, as ``fewest_questions``), 0 where even ``MAX_QUESTIONS`` do not: (seeds, ks, questions) arrays."""
    import numpy as np

    seeds, ks = (a.ravel() for a in np.meshgrid(np.arange(MIN_SEEDS, MAX_SEEDS + 1), np.array(K_CHOICES),
                                                  indexing="ij"))
    reach = _powers(c, delta, seeds, np.full(seeds.shape, MAX_QUESTIONS), ks, alpha) >= power
    low, high = np.ones(seeds.shape, dtype=np.int64), np.full(seeds.shape, MAX_QUESTIONS, dtype=np.int64)
    while np.any(high - low > 1):
        middle = (low + high) // 2
        ok = (middle >= 2) & (_powers(c, delta, seeds, np.maximum(middle, 2), ks, alpha) >= power)
        moving = high - low > 1
        high = np.where(moving & ok, middle, high)
        low = np.where(moving & ~ok, middle, low)
    return seeds, ks, np.where(reach, high, 0)


@dataclass(frozen=True)
class Advice:
    """The current design, the cheapest one reaching the power, and the cheapest by more seeds alone (P and k as
    they are) and by more questions alone (S and k as they are); None where none in range reaches it."""

    delta: float
    current: Design | None
    cheapest: Design | None
    seeds_only: Design | None
    questions_only: Design | None


def advise(c: Components, costs: Costs, delta: float, alpha: float, power: float = MDE_POWER) -> Advice:
    """The allocation (module docstring) for a pair whose components ``c`` were estimated at its current design
    (``c.n_seeds``, ``c.n_questions``, ``c.k``)."""
    seeds, ks, questions = _fewest_questions_grid(c, delta, alpha, power)
    reached = [(cost(costs, int(s), int(p), int(k)), int(s), int(k), int(p))
               for s, k, p in zip(seeds, ks, questions) if p > 0]
    best = None
    if reached:
        _, s, k, p = min(reached)  # the cheapest; ties: fewer seeds, then fewer responses
        best = _design(c, costs, delta, s, p, k, alpha)
    s0, p0, k0 = c.n_seeds, c.n_questions, c.k
    more_seeds = fewest_seeds(c, delta, p0, k0, alpha, power)
    more_questions = fewest_questions(c, delta, s0, k0, alpha, power)
    return Advice(delta, _design(c, costs, delta, s0, p0, k0, alpha), best,
                  None if more_seeds is None else _design(c, costs, delta, more_seeds, p0, k0, alpha),
                  None if more_questions is None else _design(c, costs, delta, s0, more_questions, k0, alpha))
