"""What a paired comparison may claim, one rule per function: the one judge the report's headline, its tables,
the experiment verdict and (recomputing them) the audit all call; the launcher prints what they wrote.

A comparison is a ``PairedDesign``: the per-seed paired differences a − b, and what the evaluation says of them
beside the seeds (the smallest step the metric moves in, how many prompts were evaluated, the evaluation-noise
intervals of the same difference by name: the crossed bootstrap's and the question-clustered paired t-interval,
``evidence.statistics.crossed``). Each rule
returns the ``Shortfall`` it finds (what is missing, and what would supply it) or None; ``shortfalls`` applies
them all, in order. No inferential statement (an interval presented as evidence, a p-value, a Holm verdict, an
equivalence) is made from a design with a shortfall: ``missing_sentence`` says what is missing instead, and
``paired_claim`` decides, from the design alone, which of "differs", "no difference detected" (always with the
smallest difference the design detects at 80 % power, ``power.MDE_POWER``) or no claim a pair may state, and
whether it is equivalent by TOST against a declared margin; ``family_p_value`` what a pair brings to a Holm
family. Pure: numbers in, records out (it reads no file).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from evidence.statistics import descriptive
from evidence.statistics.family import paired_t_p_value
from evidence.statistics.power import MDE_POWER, minimum_detectable_effect

# What ``paired_claim`` decides a pair may state.
DIFFERS, NO_DIFFERENCE, NO_CLAIM = "differs", "no difference detected", "no claim"
# The fewest paired seeds behind an inferential claim.
MIN_INFERENCE_SEEDS = 3
# A spread this small relative to the differences' size is zero: what float rounding leaves of tied differences.
ROUNDING = 1e-9


@dataclass(frozen=True)
class PairedDesign:
    """One paired comparison as the rules read it, every number in the same units (a rate, or points).

    ``differences``: d_s = a_s − b_s over the seeds both arms have. ``step``: the smallest change the metric
    can show (``evaluation_step``; None when the metric has no grid, a training mean). ``n_prompts``: the
    prompts each evaluation scored (None for a metric that is no evaluation). ``noise``: the evaluation-noise
    intervals of the same mean difference, ``(name, (low, high))`` at the seed interval's level (none: the
    evaluation's noise of this metric is unknown, ``unchecked_noise``).
    """

    differences: tuple[float, ...]
    step: float | None = None
    n_prompts: int | None = None
    noise: tuple[tuple[str, tuple[float, float]], ...] = ()

    @property
    def n(self) -> int:
        return len(self.differences)

    @property
    def mean(self) -> float | None:
        return descriptive.mean(self.differences) if self.differences else None

    @property
    def sd(self) -> float | None:
        return descriptive.sample_sd(self.differences)

    def scaled(self, factor: float) -> PairedDesign:
        """The same design in units ``factor`` times as large (a rate's points: 100)."""
        return PairedDesign(tuple(factor * d for d in self.differences),
                            None if self.step is None else factor * self.step, self.n_prompts,
                            tuple((name, (factor * lo, factor * hi)) for name, (lo, hi) in self.noise))


# A comparison the evaluation says nothing of beside the seeds (a training metric's), before its differences.
NO_EVALUATION = PairedDesign(())


@dataclass(frozen=True)
class Shortfall:
    """What one rule finds missing: ``rule`` its name, ``what`` in words ("2 seeds"), ``remedy`` what supplies
    it ("≥ 3 seeds"), in the words of the sentence that says so (``missing_sentence``); no number in a unit, so
    that the headline (a rate) and the verdict (its points) say it alike."""

    rule: str
    what: str
    remedy: str


def evaluation_step(n_prompts: int, k: int, j: int = 1) -> float:
    """The grid of an evaluation's pass@j: 1/(P·C(k, j)) for P prompts × k responses each (pass@1: 1/(P·k)).

    One prompt's unbiased pass@j is 1 − C(k − c, j)/C(k, j) = (C(k, j) − C(k − c, j))/C(k, j), an integer over
    C(k, j) (c its correct responses), so pass@j = (1/P)·Σ_i of them is an integer over P·C(k, j): every value,
    and every difference of two evaluations of the same size, is a multiple of 1/(P·C(k, j)). A binary reward's
    mean is pass@1 (each response 0 or 1): its grid is 1/(P·k), j = 1.
    """
    return 1.0 / (n_prompts * math.comb(k, j))


# ---- the rules: each returns what it finds missing, or None ----------------------------------------

def too_few_seeds(design: PairedDesign) -> Shortfall | None:
    """Rule: an inferential claim needs at least ``MIN_INFERENCE_SEEDS`` (3) paired seeds.

    With two, the t-interval rests on one degree of freedom (t_{0.975, 1} = 12.7) and its SD on a single
    difference of differences: two seeds that happen to agree make it as narrow as they like.
    """
    if design.n >= MIN_INFERENCE_SEEDS:
        return None
    what = "no seed accepted in both arms" if design.n == 0 else f"{design.n} seed{'s' if design.n > 1 else ''}"
    return Shortfall("too-few-seeds", what, f"≥ {MIN_INFERENCE_SEEDS} seeds")


def tied_evaluations(design: PairedDesign) -> Shortfall | None:
    """Rule: the SD s of the paired differences must exceed what the evaluation's granularity explains.

    It does not when s is zero (up to float rounding: s ≤ 1e-9·max(1, max_s |d_s|)): the seeds' differences tie,
    the t-interval d̄ ± t·s/√n collapses to a point, and its p-value to 0, whatever the evaluation's noise. Nor
    when the evaluation has a grid (``step`` h = 1/(P·k)) and s ≤ h/√12: no more spread than rounding one
    value to the grid gives (the SD of a uniform rounding error, Sheppard's correction), so s measures the
    grid, not the seeds. (The smallest non-zero SD of n values on the grid is h/√n, so with 12 seeds or fewer
    only exact ties fall under the second clause.) Needs two seeds (an SD).
    """
    sd = design.sd
    if sd is None:
        return None
    tie = _tie(sd, max(1.0, max(abs(d) for d in design.differences)), design.step)
    if tie == "tied":
        return Shortfall("tied-evaluations", "tied evaluations", "more evaluation prompts")
    if tie == "near-tied":
        return Shortfall("tied-evaluations", "near-tied evaluations (an SD within the rounding of the evaluation's "
                                             "grid)", "more evaluation prompts")
    return None


def _tie(sd: float, scale: float, step: float | None) -> str | None:
    """``tied_evaluations``' two clauses of an SD: "tied" (zero up to float rounding at ``scale``), "near-tied"
    (within the rounding of the evaluation's grid, step/√12), or None."""
    if sd <= ROUNDING * scale:
        return "tied"
    if step is not None and sd <= step / math.sqrt(12):
        return "near-tied"
    return None


def single_prompt(design: PairedDesign) -> Shortfall | None:
    """Rule: an evaluation of fewer than two prompts has no measurable noise of its own (its prompt-level SE
    and the evaluation-noise interval need two), so no seed-level interval of it can be checked against it."""
    if design.n_prompts is None or design.n_prompts >= 2:
        return None
    return Shortfall("single-prompt", f"{design.n_prompts} evaluation prompt", "more evaluation prompts")


def excludes_zero(interval: tuple[float, float]) -> int:
    """+1 when the interval lies above 0, −1 below it, 0 when it includes 0."""
    return 1 if interval[0] > 0 else -1 if interval[1] < 0 else 0


def unchecked_noise(design: PairedDesign) -> Shortfall | None:
    """Rule: a claim on an evaluation's metric needs that metric's own evaluation-noise intervals.

    The seeds' interval counts the seeds' spread only; every seed was evaluated on the same frozen prompts, so
    which prompts were drawn moves every seed's value alike and is invisible to it. A metric whose per-prompt
    values the evidence cannot form (a graded reward's mean, the truncated share, the mean length, an
    evaluation without its responses) has no such interval to check the seeds' against: no claim on it. An
    evaluation of one prompt is ``single_prompt``'s; a design without a paired seed ``too_few_seeds``'.
    """
    if design.n_prompts is None or design.n_prompts < 2 or design.n == 0 or design.noise:
        return None
    return Shortfall("unchecked-noise", "no evaluation-noise interval of this metric",
                     "an evaluation that keeps its responses, on pass@j or a binary reward's mean")


def noise_contradicts(design: PairedDesign, level: float) -> Shortfall | None:
    """Rule: a seed-level interval that excludes 0 must not be contradicted by an evaluation-noise interval.

    The seed-level t-interval (``level``) counts the seeds' spread only; the evaluation-noise intervals of the
    same difference count the prompts drawn as well, once for all seeds as the design drew them (the crossed
    bootstrap over seeds and prompts, and the question-clustered paired t-interval: ``evidence.statistics.crossed``).
    When the first excludes 0 and any of the second includes 0 (or lies on the other side), the difference is
    within what evaluating on other prompts could give: the seeds' interval is not evidence of a difference.
    Tied differences have no seed-level interval to contradict (a point, which ``tied_evaluations`` names).
    """
    interval = descriptive.t_interval(list(design.differences), level)
    if interval is None or not excludes_zero(interval) or tied_evaluations(design) is not None:
        return None
    against = [name for name, noise in design.noise if excludes_zero(noise) != excludes_zero(interval)]
    if not against:
        return None
    what = "an evaluation-noise interval that includes 0" if len(against) == 1 else \
        f"{len(against)} evaluation-noise intervals that include 0"
    return Shortfall("noise-contradicts", f"{what} ({'; '.join(against)})", "more evaluation prompts")


RULES = (too_few_seeds, tied_evaluations, single_prompt, unchecked_noise)  # each reads the design alone
LEVEL_RULES = (noise_contradicts,)  # each reads the seed interval at a level too


def shortfalls(design: PairedDesign, level: float) -> tuple[Shortfall, ...]:
    """Every rule's finding, in the rules' order (empty: the design supports an inferential claim)."""
    found = [rule(design) for rule in RULES] + [rule(design, level) for rule in LEVEL_RULES]
    return tuple(s for s in found if s is not None)


def unpaired_shortfalls(a: Sequence[float], b: Sequence[float], step: float | None = None,
                        n_prompts: int | None = None) -> tuple[Shortfall, ...]:
    """Rule: an unpaired (Welch) interval of two arms run on different seeds needs ``MIN_INFERENCE_SEEDS`` seeds in
    each arm (its degrees of freedom rest on the smaller: two seeds give one, and an SD from one difference), values
    that do not all tie (both arms' SDs zero up to rounding, or within the rounding of the evaluation's grid
    ``step``, h/√12: the standard error measures the grid, not the seeds), and an evaluation of at least two
    prompts (``n_prompts``; ``single_prompt``). What ``too_few_seeds``, ``tied_evaluations`` and ``single_prompt``
    say of a paired design, said of each arm."""
    found = []
    fewest = min(len(a), len(b))
    if fewest < MIN_INFERENCE_SEEDS:
        side = "A" if len(a) == fewest else "B"
        found.append(Shortfall("too-few-seeds", f"{side} has {fewest} seed{'s' if fewest != 1 else ''}",
                               f"≥ {MIN_INFERENCE_SEEDS} seeds in each"))
    sds = [descriptive.sample_sd(list(values)) for values in (a, b)]
    scale = max(1.0, *(abs(v) for v in (*a, *b)))
    ties = {None if sd is None else _tie(sd, scale, step) for sd in sds}
    if ties == {"tied"}:
        found.append(Shortfall("tied-evaluations", "tied values in both arms", "more evaluation prompts"))
    elif ties <= {"tied", "near-tied"}:
        found.append(Shortfall("tied-evaluations", "near-tied values in both arms (SDs within the rounding of the "
                                                   "evaluation's grid)", "more evaluation prompts"))
    if (prompt := single_prompt(PairedDesign((), n_prompts=n_prompts))) is not None:
        found.append(prompt)
    return tuple(found)


def family_p_value(design: PairedDesign, level: float) -> float:
    """Rule: what a pair brings to a Holm family: its paired t p-value (``family.paired_t_p_value``) when the
    design supports a claim, else 1.

    A pair with a shortfall may claim nothing: its p-value is undefined (tied differences would give 0, the first
    rejection of the step-down, and correct every other pair for m − 1 instead of m; adversarial finding F7). At 1
    it is never rejected and the family keeps its size m: the others are corrected as strictly as if it had been
    tested. No p (fewer than two seeds) is 1 too.
    """
    p = paired_t_p_value(design.differences) if not shortfalls(design, level) else None
    return 1.0 if p is None else p


def missing_parts(found: Sequence[Shortfall]) -> tuple[str, str]:
    """What is missing ("2 seeds and tied evaluations") and what would supply it ("run ≥ 3 seeds or more
    evaluation prompts"), each in words."""
    whats = [s.what for s in found]
    said = whats[0] if len(whats) == 1 else ", ".join(whats[:-1]) + f" and {whats[-1]}"
    return said, "run " + " or ".join(dict.fromkeys(s.remedy for s in found))


def missing_sentence(found: Sequence[Shortfall], withheld: str = "no interval") -> str:
    """What is missing, what is withheld for it, and what would supply it, as one clause:
    "2 seeds and tied evaluations: no interval; run ≥ 3 seeds or more evaluation prompts"."""
    said, remedy = missing_parts(found)
    return f"{said}: {withheld}; {remedy}"


# ---- equivalence ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Equivalence:
    """TOST of |mean difference| < ``margin``: its p-value, the (1 − 2α) t-interval and the decision."""

    margin: float
    alpha: float
    p_value: float
    interval: tuple[float, float]
    equivalent: bool

    @property
    def level(self) -> float:
        return 1 - 2 * self.alpha


def tost(differences: Sequence[float], margin: float, alpha: float) -> Equivalence:
    """Rule: equivalence within ±``margin`` is claimed only by two one-sided paired t-tests (TOST, Schuirmann 1987).

    With d̄, s (ddof=1), n and se = s/√n: H₀⁻: μ ≤ −m is rejected by t₁ = (d̄ + m)/se, p₁ = 1 − F(t₁; n − 1);
    H₀⁺: μ ≥ m by t₂ = (d̄ − m)/se, p₂ = F(t₂; n − 1); p = max(p₁, p₂), and the pair is equivalent when
    p < α, exactly when the (1 − 2α) t-interval d̄ ± t_{1−α, n−1}·se lies inside (−m, m). Needs n ≥ 2 and s > 0
    (``paired_claim`` calls it only for a design without a shortfall).
    """
    from scipy import special  # imported on first use: scipy is slow to import

    n, mean, sd = len(differences), descriptive.mean(differences), descriptive.sample_sd(differences)
    se = sd / math.sqrt(n)
    p_lower = float(special.stdtr(n - 1, -(mean + margin) / se))
    p_upper = float(special.stdtr(n - 1, (mean - margin) / se))
    p = max(p_lower, p_upper)
    interval = descriptive.t_interval(list(differences), 1 - 2 * alpha)
    return Equivalence(margin, alpha, p, interval, p < alpha)


# ---- the claim ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SequentialLook:
    """Where an experiment's design in waves stands (``verdict.json``'s ``sizing``: ``evidence.verdict.sizing``), as
    ``sequential_design`` reads it: its current ``look`` of ``looks`` (K), that look's combined ``z`` and
    ``boundary``, whether the design has ``decided`` there, and, once it has, ``crossed``: +1 the deciding look
    crossed its boundary upward (treatment − baseline), −1 downward, 0 not at all; ``how`` it decided in words
    ("stopped for efficacy", "the last look"); ``next_wave`` the seeds the design waits for (None once decided);
    ``type_i_error`` its two-sided type I error as registered."""

    look: int
    looks: int
    z: float | None
    boundary: float | None
    decided: bool
    crossed: int = 0
    how: str = ""
    next_wave: tuple[int, int] | None = None
    type_i_error: float | None = None

    def oriented(self, sign: int) -> SequentialLook:
        """The same look read as baseline − treatment (``sign`` −1): its Z and crossing turned around."""
        return self if sign > 0 else replace(self, z=None if self.z is None else -self.z, crossed=-self.crossed)


@dataclass(frozen=True)
class PairClaim:
    """What one pair may state: ``kind`` (``DIFFERS``, ``NO_DIFFERENCE``, ``NO_CLAIM``) and its numbers.

    ``interval`` (the seed-level t-interval) and ``mde`` (at ``power``) only where a claim is made;
    ``holds``: Holm's verdict in a family (adjusted p ≤ α), None outside one or without a claim;
    ``equivalence``: TOST against a declared margin, None without one or without a claim.
    """

    kind: str
    n: int
    mean: float | None
    interval: tuple[float, float] | None = None
    mde: float | None = None
    power: float = MDE_POWER
    missing: tuple[Shortfall, ...] = ()
    p_holm: float | None = None
    holds: bool | None = None
    equivalence: Equivalence | None = None
    sequential: SequentialLook | None = None  # the design in waves whose decision this claim states


def holm_holds(p_holm: float, alpha: float) -> bool:
    """Rule: in a family, a pair's difference holds when its Holm-adjusted p-value is at most α."""
    return p_holm <= alpha


def paired_claim(design: PairedDesign, level: float, p_holm: float | None = None,
                 margin: float | None = None) -> PairClaim:
    """What the pair may claim at the interval's ``level`` (α = 1 − level).

    A shortfall (``shortfalls``): ``NO_CLAIM``, with what is missing and nothing inferential (no interval, no
    MDE, no Holm verdict, no equivalence). Otherwise the t-interval: excluding 0, ``DIFFERS`` (in a family with
    Holm's verdict, ``holm_holds``); including it, ``NO_DIFFERENCE``, never "no difference": the smallest true
    difference the design detects with 80 % power in the two-sided paired t-test at α (``power``) says what
    could still hide. With a declared ``margin``, TOST (``tost``) at α says whether the pair is equivalent.
    """
    missing = shortfalls(design, level)
    if missing:
        return PairClaim(NO_CLAIM, design.n, design.mean, missing=missing)
    alpha = 1 - level
    interval = descriptive.t_interval(list(design.differences), level)
    mde = minimum_detectable_effect(design.sd, design.n, alpha, MDE_POWER)
    equivalence = tost(design.differences, margin, alpha) if margin is not None else None
    kind = DIFFERS if excludes_zero(interval) else NO_DIFFERENCE
    holds = holm_holds(p_holm, alpha) if p_holm is not None and kind == DIFFERS else None
    return PairClaim(kind, design.n, design.mean, interval, mde, MDE_POWER, (), p_holm, holds, equivalence)


def _statistic(look: SequentialLook) -> str:
    z = "—" if look.z is None else f"{look.z:.3g}"
    return f"Z = {z}, boundary ±{look.boundary:.4g}" if look.boundary is not None else f"Z = {z}"


def sequential_design(claim: PairClaim, look: SequentialLook | None, tested: bool) -> PairClaim:
    """Rule: in an experiment whose seeds run in waves (a sequential design of K looks, ``evidence.verdict.sizing``),
    a pair claims only what the design has decided; ``tested``: the pair is the criterion's, on its metric.

    While the design has not decided (an interim look inside its boundaries, or a wave still to run), no pair of
    the experiment, on any metric, claims anything from the seeds: ``NO_CLAIM``, with the shortfall
    "sequential-pending" naming the look and the wave it waits for. A fixed-sample interval, test, Holm verdict or
    equivalence read at every look rejects a true null far more often than the design's type I error (the same
    seeds looked at K times: 11.7 % of null designs of waves [3, 3, 4] against the design's 4.9 %). The
    restriction covers the pairs and metrics the design does not test too (the conservative choice: they come from
    the same seeds, looked at as often). Once the design has decided, the criterion's pair on the criterion's
    metric states the design's decision and nothing else: ``DIFFERS`` when the deciding look crossed its boundary
    (a stop for efficacy, or for the treatment being worse, or the last look crossing), ``NO_DIFFERENCE`` when it
    did not (a stop for futility, or the last look inside its boundary); no fixed-sample interval, MDE, Holm
    verdict or TOST, which ignore the looks and could contradict the design. A design with a shortfall still claims
    nothing (``shortfalls``), nor one whose deciding look has no finite Z (a wave of tied differences); every other
    pair keeps the fixed-sample rules once the design has decided.
    No design in waves (``look`` None): the claim as it is.
    """
    if look is None:
        return claim
    if not look.decided:
        wave = ("the design's next wave" if look.next_wave is None else
                f"wave {look.look + 1} (seeds {look.next_wave[0]}..{look.next_wave[1]}) of the design")
        at = f"look {look.look} of {look.looks}: {_statistic(look)}" if look.look else f"none of its {look.looks} looks taken"
        pending = Shortfall("sequential-pending", f"a design in waves that has not decided yet ({at})",
                            wave)
        return PairClaim(NO_CLAIM, claim.n, claim.mean, missing=(pending, *claim.missing))
    if not tested or claim.kind == NO_CLAIM:
        return claim
    if look.z is None:  # a deciding look without a finite Z (a wave without spread): no decision to state
        return PairClaim(NO_CLAIM, claim.n, claim.mean, missing=(Shortfall(
            "sequential-no-statistic", f"a design in waves whose deciding look has no finite Z (look {look.look} of "
            f"{look.looks})", "more evaluation prompts"),))
    return PairClaim(DIFFERS if look.crossed else NO_DIFFERENCE, claim.n, claim.mean, sequential=look)
