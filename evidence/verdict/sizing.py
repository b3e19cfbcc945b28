"""Seeds in waves at the verdict (``seeds: {n: auto, waves: [...]}``, or the two-look ``{n: auto, min, max}``): which
seeds each look reads, whether its boundary is crossed, what the design decides there, and the record of every look
in ``verdict.json``.

Wave k's seeds are ``M_{k−1}+1..M_k`` (M_k: the planned seeds through wave k). Look k reads waves 1..k and tests
Z_k, the fixed-weight combination of each wave's own paired t statistic mapped to a standard normal
(``evidence.statistics.waves``: how the stage statistics are formed), against its boundary c_k. At an interim look
(k < K) the design stops when the rule allows it: Z_k ≥ c_k with the mean difference of its seeds at the threshold
(efficacy), Z_k ≤ −c_k (the treatment worse), or Z_k below the spec's futility bound (futility), and never on a design that supports no test of 0
(``claims.shortfalls``, e.g. tied evaluations); otherwise the verdict waits for wave k + 1 (``WAVE_PENDING``), which
the launcher then runs. The last look tests Z_K ≥ c_K. The looks' test replaces "the t-interval's low end > 0" in
the rule (``evidence.verdict.rule.decide``); the rest of the rule is unchanged, so a futility stop is FAILED or
INCONCLUSIVE by the mean difference as any test that does not tell the difference from 0.

An upward crossing whose mean is below the threshold goes on to the next wave (it could never be VALIDATED there);
``evidence.statistics.waves``' operating characteristics stop at every crossing. A VALIDATED verdict needs an
upward crossing at the look it stops, after no downward crossing (the design stops there), so the first look that
crossed crossed upward: under the null its probability is at most the stated upward type I error.

A look takes place once its wave has run. A wave whose own differences give no stage statistic (fewer than two
paired seeds, its jobs rejected; differences tied by the evaluation's grid, ``claims.tied_evaluations``: its t
would be ±∞) leaves every look from it on without a Z: the design cannot decide (``NO_TEST``; the verdict is
INCONCLUSIVE by rule ``WAVE_WITHOUT_TEST``, naming the wave) and no further wave runs, the first wave's included; a
look's Z that is not finite never crosses. A later wave whose seeds have not all run is the next wave. The two-look sized design sizes its second
wave from its first look: N = ``required_seeds`` for the threshold at 80 % power (at least min + 2, at most max),
and the second look reads seeds min+1..N.

Each look's record: its seeds, the SD of its wave's differences, the stage and combined Z, its boundary, whether it
was crossed, whether its Z is below the futility bound, what the design decided there, and what its wave cost
(the jobs of its seeds, both arms: their measured CPU- and GPU-hours).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from evidence.problems import VerdictError
from evidence.statistics import claims, descriptive
from evidence.statistics.sequential import nominal_alpha, required_seeds, stage_z
from evidence.statistics.waves import boundaries, combine, detectable_effect, operating, weights
from evidence.verdict.rule import THRESHOLD_SLACK
from study.spec import Criterion, Sizing

WAVE_PENDING = "next-wave-pending"  # the rule's name while a look neither stops nor decides: the next wave runs
WAVE_WITHOUT_TEST = "wave-without-test"  # the rule's name when a wave gives no stage statistic: no look can decide
WAVE_RULES = ("tied-evaluations",)  # the claims rules a wave's own differences must pass for its stage statistic
METHOD = ("looks after each wave of seeds, each wave's paired t statistic mapped to a standard normal by its own t "
          "distribution and combined with fixed weights (inverse normal method, Lehmacher and Wassmer 1999); "
          "two-sided boundaries from the Lan-DeMets spending function by recursive numerical integration (Armitage, "
          "McPherson and Rowe 1969)")
# What the design decided at a look.
CONTINUE, EFFICACY, WORSE, FUTILITY, FINAL, PENDING = ("continue", "stop-efficacy", "stop-worse", "stop-futility",
                                                       "final", "pending")
NO_TEST = "stop-no-test"  # a wave without a stage statistic: the design cannot decide


@dataclass(frozen=True)
class Look:
    """What the verdict reads at a sized design's current look."""

    seeds: list[int]  # the paired seeds the rule decides on
    design: list[int]  # the seeds this look's design runs (1..M_k)
    test: tuple[bool, str]  # (told from 0, why not in words): the rule's test of 0 at this look
    pending: str | None  # why the verdict waits for the next wave; None when this look decides
    record: dict
    without: str | None = None  # why the design cannot decide (a wave without a test of its own); None when it can


def _finite(z: float | None) -> float | None:
    """A statistic as ``verdict.json`` holds it: None where it is infinite (differences without spread)."""
    return None if z is None or abs(z) == float("inf") else z


def design_record(sizing: Sizing, alpha: float) -> dict:
    """The design as registered before any seed runs: its waves, rule, weights, boundaries, and what it claims (the
    two-sided type I error with its futility bound obeyed, and the standardized difference δ/σ its looks tell from 0
    upward with ``power``; none for a resized design, whose second wave's size is the first look's choice)."""
    bounds = check_design(sizing, alpha)
    null = operating(sizing.spending, sizing.waves, alpha, sizing.futility, 0.0)
    return {
        "rule": sizing.spending, "method": METHOD, "alpha": alpha, "power": sizing.power,
        "waves": list(sizing.waves), "resized": sizing.resized, "min": sizing.min, "max": sizing.max,
        "futility": sizing.futility, "information_fractions": list(sizing.fractions),
        "weights": list(weights(sizing.waves)), "boundaries": list(bounds),
        "nominal_alpha": [nominal_alpha(c) for c in bounds],
        "claims": {"type_i_error": null.rejects, "type_i_error_upward": sum(null.up),
                   "detectable_effect_sd": None if sizing.resized else detectable_effect(
                       sizing.spending, sizing.waves, alpha, sizing.futility, sizing.power)},
    }


def check_design(sizing: Sizing, alpha: float) -> tuple[float, ...]:
    """The design's boundaries, once it is one the looks can run (else ``VerdictError``, one line): every boundary
    finite (a first wave so small a share of the design that its look spends less α than a float holds has none), and
    a futility bound below every interim look's boundary (at or above one, every design would stop at that look)."""
    bounds = boundaries(sizing.spending, sizing.fractions, alpha)
    if not all(math.isfinite(c) for c in bounds):
        raise VerdictError(f"seeds: waves {list(sizing.waves)} give look 1 (the first wave's "
                           f"{sizing.fractions[0]:.2g} of the design) no finite {sizing.spending} boundary; make the "
                           f"first wave a larger share of the design (e.g. fewer seeds in the later waves)")
    if sizing.futility is not None:
        for k, c in enumerate(bounds[:-1]):
            if sizing.futility >= c:
                raise VerdictError(f"seeds: futility {sizing.futility:g} is at or above look {k + 1}'s boundary {c:.4g} "
                                   f"({sizing.spending}, α {alpha:.2g}): every design would stop at look {k + 1}; give "
                                   f"a bound below {min(bounds[:-1]):.4g} (e.g. futility: 0), or drop it")
    return bounds


def sized_look(sizing: Sizing, criterion: Criterion, differences: Mapping[int, float], alpha: float,
               missing: Callable[[list[int]], tuple[claims.Shortfall, ...]] | None = None,
               cost: Callable[[list[int]], dict | None] = lambda seeds: None,
               listed: Collection[int] | None = None) -> Look:
    """The current look of a design in waves, from the paired differences by seed (in the criterion's units).

    ``missing(seeds)``: what the design of those seeds lacks for a test of 0 (``claims.shortfalls``; None: the
    differences' own, without an evaluation's grid); a look that lacks anything never stops the design (a boundary
    crossed by tied differences is no evidence), and a wave whose own differences lack what its stage statistic
    needs (``wave_lacks``) gives none: no look from it on has a Z, so the design cannot decide (``NO_TEST``, the
    verdict's rule ``WAVE_WITHOUT_TEST``) and plans no further wave. ``cost(seeds)``: what the jobs of a wave's
    planned seeds cost (``record.wave_cost``: measured hours), recorded with each look. ``listed``: the seeds whose
    jobs the bundle lists, accepted or not (None: the seeds with a difference); a later wave with fewer than two paired
    seeds has not run (the verdict waits for it) unless every one of its seeds is listed: one that ran is never
    planned again.
    """
    if missing is None:
        def missing(seeds: list[int]) -> tuple[claims.Shortfall, ...]:
            return claims.shortfalls(claims.PairedDesign(tuple(differences[s] for s in seeds)), 1 - alpha)
    ran = set(differences) if listed is None else set(listed) | set(differences)
    record = design_record(sizing, alpha)
    bounds, last = record["boundaries"], len(sizing.waves) - 1
    ends = list(sizing.ends)
    looks: list[dict] = []
    stages: list[float] = []
    read: list[int] = []
    decision, test, pending, without = PENDING, (False, ""), None, None
    lacking_said: str | None = None  # what the previous look's design lacked for a test of 0
    for k, c in enumerate(bounds):
        start = ends[k - 1] if k else 0
        wave = sorted(s for s in differences if start < s <= ends[k])
        if k and len(wave) < 2 and not all(s in ran for s in range(start + 1, ends[k] + 1)):  # the wave has not run
            said = _why_not(looks[-1], bounds[k - 1], lacking_said)
            pending = (f"{said}; look {k + 1} needs seeds {start + 1}..{ends[k]}, at least two of them paired (it has "
                       f"{len(wave)})")
            test = (False, pending)
            record["next_wave"] = [start + 1, ends[k]]
            break
        values = [differences[s] for s in wave]
        lacks = wave_lacks(values, missing(wave) if len(wave) >= 2 else ())
        stage = stage_z(values) if lacks is None else None
        if stage is not None and not math.isfinite(stage):
            lacks, stage = "its paired t statistic is not finite", None
        read += wave
        mean = descriptive.mean([differences[s] for s in read]) if read else None
        if lacks is not None:  # no stage statistic: every look from this one on lacks a Z
            without = (f"wave {k + 1} (seeds {start + 1}..{ends[k]}) gives no test of its own ({lacks}); every look "
                       f"from look {k + 1} on combines it, so no look of the design can decide, and no further wave "
                       f"runs")
            looks.append({"look": k + 1, "seeds": wave, "sd": descriptive.sample_sd(values), "mean": mean,
                          "z_stage": None, "z": None, "boundary": c, "crossed": False, "futile": False,
                          "cost": cost(list(range(start + 1, ends[k] + 1))), "why": without, "decision": NO_TEST})
            decision, test = NO_TEST, (False, without)
            break
        stages.append(stage)
        z = combine(sizing.waves, stages)
        finite = math.isfinite(z)
        crossed = finite and abs(z) >= c
        futile = sizing.futility is not None and k < last and finite and z < sizing.futility
        look = {"look": k + 1, "seeds": wave, "sd": descriptive.sample_sd(values), "mean": mean,
                "z_stage": _finite(stage), "z": _finite(z), "boundary": c, "crossed": crossed, "futile": futile,
                "cost": cost(list(range(start + 1, ends[k] + 1))), "why": None}
        looks.append(look)
        if k == 0 and sizing.resized:  # the two-look sized design: the first look sizes the second wave
            look["required_seeds"] = required_seeds(descriptive.sample_sd(values), criterion.threshold,
                                                    nominal_alpha(bounds[1]), sizing.power, sizing.min + 2, sizing.max)
            ends[1] = look["required_seeds"]
        if k == last:
            look["decision"] = decision = FINAL
            lacking = missing(read) if crossed and z > 0 else ()
            if lacking:
                look["why"] = f"the look's design supports no test of 0 ({claims.missing_parts(lacking)[0]})"
            test = (crossed and z > 0 and not lacking,
                    look["why"] or f"look {k + 1}'s combined Z {z:.3g} does not cross its boundary {c:.4g}")
            break
        reached = crossed and z > 0 and mean >= criterion.threshold - THRESHOLD_SLACK
        worse = crossed and z < 0
        lacking = missing(read) if reached or worse or futile else ()
        lacking_said = claims.missing_parts(lacking)[0] if lacking else None
        if lacking:
            look["why"] = f"the look's design supports no test of 0 ({lacking_said}): it stops nothing"
        if reached and not lacking:
            look["decision"] = decision = EFFICACY
            test = (True, "")
            break
        if worse and not lacking:
            look["decision"] = decision = WORSE
            test = (False, f"look {k + 1}'s combined Z {z:.3g} crosses its boundary downward: the treatment is worse, "
                           "and the design stopped")
            break
        if futile and not lacking:
            look["decision"] = decision = FUTILITY
            test = (False, f"look {k + 1}'s combined Z {z:.3g} is below the futility bound {sizing.futility:g}: the "
                           "design stopped for futility")
            break
        look["decision"] = CONTINUE
    end = ends[len(looks) - 1] if looks else ends[0]  # the last seed of the design through the looks taken
    record.setdefault("next_wave", None)
    reach = record["next_wave"][1] if record["next_wave"] else end  # the seeds the design reads, or runs next
    record.update({
        "looks": looks, "look": len(looks), "decision": decision,
        "stopped_early": decision in (EFFICACY, WORSE, FUTILITY, NO_TEST) and len(looks) < len(bounds),
        "design_seeds": end,
        # a seed no look of this design reads: outside 1..max, or past the look that ended the design
        "seeds_outside_design": sorted(s for s in differences
                                       if s < 1 or s > (sizing.max if record["next_wave"] else end)),
        # a later wave's seed that ran before the wave the design runs next: read at its own look
        "seeds_ahead": sorted(s for s in differences if record["next_wave"] and reach < s <= sizing.max),
    })
    return Look(read, list(range(1, end + 1)), test, pending, record, without)


def wave_lacks(values: list[float], found: tuple[claims.Shortfall, ...]) -> str | None:
    """What a wave's own paired differences lack for its stage statistic (a paired t of its seeds alone), in words, or
    None: two paired seeds (its t has n − 1 degrees of freedom), and differences whose spread is more than the
    evaluation's rounding (``claims.tied_evaluations`` among ``found``, the rules' findings on the wave's seeds: a tied
    wave's t is ±∞, or as large as float rounding makes it). The other rules read the look's whole design
    (``missing`` of its seeds), and fewer than 3 seeds is a look's shortfall, never a later wave's (a wave of 2 is
    a valid stage)."""
    if len(values) < 2:
        return (f"{len(values)} paired seed{'' if len(values) == 1 else 's'}; its paired t statistic needs two"
                if values else "no paired seed; its paired t statistic needs two")
    tied = [s for s in found if s.rule in WAVE_RULES]
    return claims.missing_parts(tied)[0] if tied else None


def _why_not(look: dict, boundary: float, lacking: str | None) -> str:
    """Why the look before a pending wave did not stop the design, in words."""
    head = f"look {look['look']} ({len(look['seeds'])} seeds of its wave)"
    if lacking:
        return f"{head} supports no test of 0 ({lacking})"
    z = "—" if look["z"] is None else f"{look['z']:.3g}"
    return (f"{head} does not cross its boundary upward (Z = {z}, boundary {boundary:.4g}) with a mean difference at "
            f"the threshold")


_HOW = {EFFICACY: "stopped for efficacy", WORSE: "stopped with the treatment worse", FUTILITY: "stopped for futility",
        FINAL: "the last look"}


def current_look(record: Mapping) -> claims.SequentialLook:
    """What the design has decided, from its ``verdict.json`` record (``sized_look``'s ``record``, the ``sizing``
    block): the look it stands at, and, once it has decided (a stop, or the last look), whether the deciding look
    crossed its boundary and which way (treatment − baseline), as ``claims.sequential_design`` reads it."""
    looks, decision = record["looks"], record["decision"]
    last = looks[-1] if looks else {}
    z, c = last.get("z"), last.get("boundary")
    crossed = 0
    if decision == EFFICACY:
        crossed = 1
    elif decision == WORSE:
        crossed = -1
    elif decision == FINAL and z is not None and c is not None and abs(z) >= c:
        crossed = 1 if z > 0 else -1
    wave = record.get("next_wave")
    return claims.SequentialLook(len(looks), len(record["waves"]), z, c, decision != PENDING, crossed,
                                 _HOW.get(decision, ""), tuple(wave) if wave else None,
                                 (record.get("claims") or {}).get("type_i_error"))
