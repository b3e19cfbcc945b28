"""A sized design's looks at the verdict (``seeds: {n: auto, min, max, spending}``): which seeds each look reads, the
seeds the second look needs, whether a look's boundary is crossed, and the record of it all in ``verdict.json``.

Seeds 1..min are the first look. Its paired differences size the design: N = ``required_seeds`` for the threshold at
80 % power (at least min + 2, at most max). The verdict stops at the first look only when the rule allows it: the
first look's statistic crosses its spending rule's boundary upward (Z₁ ≥ c₁) and its mean difference reaches the
threshold; otherwise it waits for the second look (seeds min+1..N), which tests the inverse normal combination of
the two stages against c₂ (``evidence.statistics.sequential``). The looks' test replaces "the t-interval's low end
> 0" in the rule (``evidence.verdict.rule.decide``); the rest of the rule is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from evidence.statistics import claims, descriptive
from evidence.statistics.sequential import Weights, boundaries, nominal_alpha, required_seeds, stage_z
from evidence.verdict.rule import THRESHOLD_SLACK
from study.spec import Criterion, Sizing

SECOND_LOOK_PENDING = "second-look-pending"  # the rule's name while the first look neither stops nor decides
METHOD = ("two looks, each stage's paired t statistic mapped to a standard normal by its own t distribution and "
          "combined with fixed weights (inverse normal method, Lehmacher and Wassmer 1999); boundaries from the "
          "Lan-DeMets spending function")


@dataclass(frozen=True)
class Look:
    """What the verdict reads at a sized design's current look."""

    seeds: list[int]  # the paired seeds the rule decides on
    design: list[int]  # the seeds this look's design runs (1..min, or 1..N)
    test: tuple[bool, str]  # (told from 0, why not in words): the rule's test of 0 at this look
    pending: str | None  # why the verdict waits for the second look; None when this look decides
    record: dict


def _finite(z: float | None) -> float | None:
    """A statistic as ``verdict.json`` holds it: None where it is infinite (differences without spread)."""
    return None if z is None or abs(z) == float("inf") else z


def sized_look(sizing: Sizing, criterion: Criterion, differences: Mapping[int, float], alpha: float,
               missing: Callable[[list[int]], tuple[claims.Shortfall, ...]] = lambda seeds: ()) -> Look:
    """The current look of a sized design, from the paired differences by seed (in the criterion's units).

    ``missing(seeds)``: what the design of those seeds lacks for a test of 0 (``claims.shortfalls``); a first
    look that lacks anything never stops the design (its boundary crossed by tied differences is no evidence).
    """
    c1, c2 = boundaries(sizing.spending, sizing.information_fraction, alpha)
    weights = Weights.planned(sizing.min, sizing.max)
    first = sorted(s for s in differences if s <= sizing.min)
    first_d = [differences[s] for s in first]
    need = required_seeds(descriptive.sample_sd(first_d), criterion.threshold, nominal_alpha(c2), sizing.power,
                          sizing.min + 2, sizing.max)
    z1 = stage_z(first_d)
    crossed1 = z1 is not None and abs(z1) >= c1
    reached = crossed1 and z1 > 0 and descriptive.mean(first_d) >= criterion.threshold - THRESHOLD_SLACK
    lacking = missing(first) if reached else ()
    stop = reached and not lacking
    second = sorted(s for s in differences if sizing.min < s <= need)
    z2 = stage_z([differences[s] for s in second]) if not stop else None
    combined = weights.combine(z1, z2) if z1 is not None and z2 is not None else None
    record = {
        "rule": sizing.spending, "method": METHOD, "alpha": alpha, "power": sizing.power,
        "min": sizing.min, "max": sizing.max, "information_fraction": sizing.information_fraction,
        "weights": [weights.first, weights.second], "boundaries": [c1, c2],
        "nominal_alpha": [nominal_alpha(c1), nominal_alpha(c2)],
        "first_look": {"seeds": first, "sd": descriptive.sample_sd(first_d), "z": _finite(z1), "crossed": crossed1,
                       "required_seeds": need},
        "second_look": None if stop or not second else {
            "seeds": second, "z_stage": _finite(z2), "z": _finite(combined),
            "crossed": combined is not None and abs(combined) >= c2},
        "look": 1 if stop or combined is None else 2, "stopped_early": stop,
        "seeds_outside_design": sorted(s for s in differences if s > (sizing.min if stop else need)),
    }
    if stop:
        return Look(first, list(range(1, sizing.min + 1)), (True, ""), None, record)
    if combined is None:
        first_said = (f"the first look ({len(first)} seeds) supports no test of 0 ({claims.missing_parts(lacking)[0]})"
                      if lacking else f"the first look ({len(first)} seeds) does not cross its boundary upward (Z = "
                      + ("—" if z1 is None else f"{z1:.3g}") + f", boundary {c1:.4g}) with a mean difference at the "
                      "threshold")
        why = (f"{first_said}; the second look needs seeds {sizing.min + 1}..{need}, at least two of them paired "
               f"(it has {len(second)})")
        return Look(first, list(range(1, sizing.min + 1)), (False, why), why, record)
    return Look(first + second, list(range(1, need + 1)),
                (combined >= c2, f"the second look's combined Z {combined:.3g} does not cross its boundary {c2:.4g}"),
                None, record)
