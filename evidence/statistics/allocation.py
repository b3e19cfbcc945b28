"""Where the next unit of compute should go: from a pair's variance components (``evidence.statistics.components``)
and the measured costs, the cheapest number of seeds S, questions P and responses per question k that detects the
smallest difference δ the user cares about with 80 % power (scipy's noncentral t, imported on first use).

The test planned for is the one the report makes: the headline, the verdict and their claims
(``claims.paired_claim``) decide by the seed-level paired t-test, t = d̄/(s_d/√S) with S − 1 df, on the per-seed
differences d_s of the two arms' pass@1 (each the mean over the P questions of the seed's k-response cell
differences). In the crossed design (seeds crossed with questions, every seed of both arms on the same questions;
components of the per-cell difference: seed a_s, question b_i, seed × question, response), a seed's difference is

    d_s = δ + b̄ + a_s + (1/P)·Σ_i (ab)_{s,i} + (1/(P·k))·Σ_{i,r} e_{s,i,r},   b̄ = (1/P)·Σ_i b_i,

so the seed-to-seed variance the test's s_d estimates is

    σ²_d = σ²_seed + σ²_seed×question/P + σ²_response/(P·k),

and the question main effect is not in it: b̄ is shared by every seed (every seed answers the same questions), it
moves the difference the seeds measure, δ + b̄, not their spread. Given the questions drawn, t follows the noncentral
t with S − 1 df and noncentrality λ = √S·(δ + b̄)/σ_d; over the draws of P questions b̄ ~ N(0, σ²_question/P), so

    power(S, P, k) = E_b̄[1 − F(t_c; S − 1, λ) + F(−t_c; S − 1, λ)],   t_c = t_{1−α/2, S−1}

(F the noncentral t CDF, ``power.t_power``; the expectation by Gauss–Hermite quadrature with ``QUADRATURE_NODES``
nodes; without a question component, exactly the noncentral t's power). It is the paired t's power at δ when the
question component is 0, and a little less than it at a power of 80 % when it is not (the power curve is concave
there). A crossed t-test with Satterthwaite's df, which counts b̄ in its variance, would promise a power the report's
test does not have (adversarial finding: "80 %" at 3 seeds x 488 questions x 2 that the seed-level t reaches 63 % of
the time). No design of fewer than ``MIN_SEEDS`` (3) seeds is planned or said to reach any power: the claims' rule
(``claims.too_few_seeds``) allows no test from it.

The cost of a design, in the seconds the sweep measured (``Costs``): both arms train S seeds and evaluate each
``evaluations`` times on P·k responses:

    cost(S, P, k) = 2·S·(c_seed + evaluations·c_response·P·k)

The search: every S in [``MIN_SEEDS``, ``MAX_SEEDS``] and k in ``K_CHOICES``, the fewest P in [2, ``MAX_QUESTIONS``]
reaching the power (by bisection: σ²_d and b̄'s spread fall with P), the cheapest of them (ties: fewer seeds, then
fewer responses). The components are the truncated estimates of one sweep: the advice is as good as they are, and
says so.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from evidence.statistics.components import Components
from evidence.statistics.power import MDE_POWER

MIN_SEEDS = 3  # claims.MIN_INFERENCE_SEEDS: no inference from fewer
QUADRATURE_NODES = 32  # Gauss–Hermite nodes of the expectation over the questions' shared effect
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
    """One allocation: seeds per arm, questions, responses per question, its power at δ and its cost (seconds);
    ``power`` None where the design supports no test (fewer than ``MIN_SEEDS`` seeds, or no variance)."""

    seeds: int
    questions: int
    k: int
    power: float | None
    cost: float


def seed_variance(c: Components, questions: int, k: int) -> float:
    """σ²_d = σ²_seed + σ²_seed×question/P + σ²_response/(P·k): the variance of one seed's paired difference over
    the seeds, at P questions (the question main effect is shared by every seed: module docstring)."""
    return c.seed + c.interaction / questions + c.response / (questions * k)


def design_power(c: Components, delta: float, seeds: int, questions: int, k: int, alpha: float) -> float | None:
    """The power of the seed-level paired t-test (S − 1 df) against δ, averaged over the questions' shared effect
    (module docstring); None with fewer than ``MIN_SEEDS`` seeds (no test), fewer than 2 questions, or no variance."""
    found = _powers(c, delta, [seeds], [questions], [k], alpha)[0]
    return None if found != found else float(found)  # NaN: no test


def cost(costs: Costs, seeds: int, questions: int, k: int) -> float:
    """2·S·(c_seed + evaluations·c_response·P·k)."""
    return ARMS_PER_PAIR * seeds * (costs.seed + costs.evaluations * costs.response * questions * k)


def _design(c, costs, delta, seeds, questions, k, alpha) -> Design:
    """The design with its power (None: no test) and cost."""
    return Design(seeds, questions, k, design_power(c, delta, seeds, questions, k, alpha),
                  cost(costs, seeds, questions, k))


def fewest_questions(c: Components, delta: float, seeds: int, k: int, alpha: float, power: float = MDE_POWER,
                     max_questions: int = MAX_QUESTIONS) -> int | None:
    """The fewest P in [2, max_questions] whose design reaches ``power`` (bisection); None when even the most do not
    (or S < ``MIN_SEEDS``: no test)."""
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


@functools.cache
def _quadrature():
    """The probabilists' Gauss–Hermite nodes and weights (normalised to sum 1) of ``QUADRATURE_NODES`` points: an
    eigenvalue problem, a millisecond a call, where a search makes thousands of calls."""
    import numpy as np

    nodes, weights = np.polynomial.hermite_e.hermegauss(QUADRATURE_NODES)
    weights = weights / weights.sum()
    nodes.flags.writeable = weights.flags.writeable = False  # shared by every call
    return nodes, weights


def _powers(c: Components, delta: float, seeds, questions, k, alpha: float):
    """``design_power`` over arrays of designs at once (numpy and scipy.special broadcast; NaN where a design has
    fewer than ``MIN_SEEDS`` seeds, fewer than 2 questions or no variance, and a CDF value scipy returned as NaN for
    an underflowed tail taken as 0, as ``power.t_power``). The expectation over b̄ ~ N(0, σ²_question/P): with the
    probabilists' Gauss–Hermite nodes x_j and weights w_j (normalised to sum 1), Σ_j w_j·power(δ + x_j·σ_q/√P)."""
    import numpy as np
    from scipy import special

    s, p, k = (np.asarray(v, dtype=np.float64)[..., None] for v in (seeds, questions, k))
    nodes, weights = _quadrature()
    sd = np.sqrt(c.seed + c.interaction / p + c.response / (p * k))
    valid = (s >= MIN_SEEDS) & (p >= 2) & (sd > 0)
    df = np.where(valid, s - 1, 1.0)
    # Without a question component every node's shift is δ itself: one node's CDFs stand for all of them (the
    # noncentral t CDF is nearly all of the cost), and the weighted sum is the same sum of the same numbers.
    shift = delta + (nodes if c.question > 0 else nodes[:1]) * math.sqrt(c.question) / np.sqrt(p)
    lam = np.sqrt(s) * shift / np.where(valid, sd, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        critical = special.stdtrit(df, 1 - alpha / 2)
        upper = np.nan_to_num(special.nctdtr(df, lam, critical), nan=0.0)
        lower = np.nan_to_num(special.nctdtr(df, lam, -critical), nan=0.0)
    at_nodes = np.broadcast_to(1 - upper + lower, (*upper.shape[:-1], QUADRATURE_NODES))
    power = (at_nodes * weights).sum(axis=-1)
    return np.where(valid[..., 0], power, np.nan)


def _fewest_questions_of(c: Components, delta: float, seeds, ks, alpha: float, power: float):
    """For each design (S, k) of the arrays ``seeds`` and ``ks``, the fewest P in [2, ``MAX_QUESTIONS``] reaching
    ``power`` (a vectorised bisection, as ``fewest_questions``), 0 where even ``MAX_QUESTIONS`` do not."""
    import numpy as np

    reach = _powers(c, delta, seeds, np.full(seeds.shape, MAX_QUESTIONS), ks, alpha) >= power
    low, high = np.ones(seeds.shape, dtype=np.int64), np.full(seeds.shape, MAX_QUESTIONS, dtype=np.int64)
    while np.any(high - low > 1):
        middle = (low + high) // 2
        ok = (middle >= 2) & (_powers(c, delta, seeds, np.maximum(middle, 2), ks, alpha) >= power)
        moving = high - low > 1
        high = np.where(moving & ok, middle, high)
        low = np.where(moving & ~ok, middle, low)
    return np.where(reach, high, 0)


# Designs searched at once (one vectorised bisection) while a cheaper one may remain.
SEARCH_CHUNK = 32


def _cheapest(c: Components, costs: Costs, delta: float, alpha: float, power: float) -> tuple[int, int, int] | None:
    """(S, k, P) of the cheapest design of the search grid reaching ``power`` (ties: fewer seeds, then fewer
    responses), or None. The power rises with S (more degrees of freedom, a larger noncentrality at every node), so
    no design of k responses needs fewer questions than ``MAX_SEEDS`` seeds do (P_min(k)), and one ``MAX_SEEDS`` seeds
    cannot reach at any P, none can; cost(S, P_min(k), k) bounds a design's cost from below. The designs are
    searched in the order of that bound, a chunk at a time, until the next bound exceeds the cheapest found: the same
    design as searching every one (a design left out costs more than it), at a fraction of the noncentral t CDFs."""
    import numpy as np

    ks = np.array(K_CHOICES)
    floor = dict(zip(K_CHOICES, _fewest_questions_of(c, delta, np.full(ks.shape, MAX_SEEDS), ks, alpha, power)))
    order = sorted((cost(costs, s, int(floor[k]), k), s, k) for s in range(MIN_SEEDS, MAX_SEEDS + 1) for k in K_CHOICES
                   if floor[k] > 0)
    best = None
    for start in range(0, len(order), SEARCH_CHUNK):
        chunk = order[start:start + SEARCH_CHUNK]
        if best is not None and chunk[0][0] > best[0]:
            break
        seeds, chunk_ks = np.array([s for _, s, _ in chunk]), np.array([k for _, _, k in chunk])
        for s, k, p in zip(seeds, chunk_ks, _fewest_questions_of(c, delta, seeds, chunk_ks, alpha, power)):
            if p > 0:
                best = min(best or (math.inf,), (cost(costs, int(s), int(p), int(k)), int(s), int(k), int(p)))
    return None if best is None else best[1:]


@dataclass(frozen=True)
class Advice:
    """The current design (its power None when it supports no test: fewer than ``MIN_SEEDS`` seeds), the cheapest one
    reaching the power, and the cheapest by more seeds alone (P and k as they are) and by more questions alone (S and
    k as they are); None where none in range reaches it."""

    delta: float
    current: Design | None
    cheapest: Design | None
    seeds_only: Design | None
    questions_only: Design | None


@functools.lru_cache(maxsize=64)
def advise(c: Components, costs: Costs, delta: float, alpha: float, power: float = MDE_POWER) -> Advice:
    """The allocation (module docstring) for a pair whose components ``c`` were estimated at its current design
    (``c.n_seeds``, ``c.n_questions``, ``c.k``). Kept per its (frozen) inputs: the build's table and its report
    section, and the audit's, ask for the same pair's advice (about a second each on this 2-core machine)."""
    found = _cheapest(c, costs, delta, alpha, power)
    best = None if found is None else _design(c, costs, delta, found[0], found[2], found[1], alpha)
    s0, p0, k0 = c.n_seeds, c.n_questions, c.k
    more_seeds = fewest_seeds(c, delta, p0, k0, alpha, power)
    more_questions = fewest_questions(c, delta, s0, k0, alpha, power)
    return Advice(delta, _design(c, costs, delta, s0, p0, k0, alpha) if p0 >= 1 else None, best,
                  None if more_seeds is None else _design(c, costs, delta, more_seeds, p0, k0, alpha),
                  None if more_questions is None else _design(c, costs, delta, s0, more_questions, k0, alpha))
