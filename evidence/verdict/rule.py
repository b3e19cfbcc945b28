"""The pre-registered rule: per-seed paired differences against the criterion's threshold, band and collapse check.

``decide`` is pure (per-seed values and each arm's mean curve in, an ``Outcome`` out); the verdict
record and the audit's recomputation both call it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from evidence.statistics import claims, descriptive
from facts.states import FAILED, INCONCLUSIVE, VALIDATED
from study.spec import Criterion

# A mean difference within this of the threshold reaches it: exact decimal inputs lose a few ulps.
THRESHOLD_SLACK = 1e-9


@dataclass(frozen=True)
class CollapseCheck:
    """An arm's mean curve over the paired seeds: its peak, its final value and the drop between (in units)."""

    peak: float
    final: float
    drop: float
    collapsed: bool


def collapse_check(curve: Sequence[float], limit: float) -> CollapseCheck:
    """Drop from the arm's own peak = max(curve) − curve[-1]; collapsed when the drop exceeds ``limit``."""
    peak, final = max(curve), curve[-1]
    return CollapseCheck(peak, final, peak - final, peak - final > limit)


def mean_curve(curves: Sequence[Sequence[float]]) -> list[float]:
    """Point-wise mean over seeds of equally long curves (aligned at their ends if lengths differ)."""
    length = min(len(c) for c in curves)
    return [descriptive.mean([c[len(c) - length + i] for c in curves]) for i in range(length)]


@dataclass
class Outcome:
    """What the rule decided, and every number it used (differences in the criterion's units)."""

    verdict: str
    rule: str
    reason: str
    by_seed: dict[int, tuple[float, float, float]]  # seed -> (baseline, treatment, treatment − baseline)
    summary: descriptive.Summary
    interval: tuple[float, float] | None
    collapse: dict[str, CollapseCheck] = field(default_factory=dict)
    missing: tuple[claims.Shortfall, ...] = ()  # what the design lacks for a test of 0 (claims.shortfalls)


def decide(criterion: Criterion, baseline: Mapping[int, float], treatment: Mapping[int, float],
           baseline_curve: Sequence[float] = (), treatment_curve: Sequence[float] = (),
           level: float = descriptive.CI_LEVEL, min_seeds: int = 2, test: tuple[bool, str] | None = None,
           evaluation: claims.PairedDesign = claims.NO_EVALUATION) -> Outcome:
    """The pre-registered rule, on raw metric values by seed and each arm's mean curve.

    d_s = scale · (treatment_s − baseline_s) over the seeds both arms have (scale 100 for points);
    mean ± SD (ddof=1) and the t-interval with df = n − 1. In order:
    fewer than ``min_seeds`` (at least 2) paired seeds -> INCONCLUSIVE (too-few-seeds);
    the baseline's drop from its own peak > collapse drop while the treatment's is not -> VALIDATED (collapse);
    with ci_excludes_zero, a design that may claim nothing (``claims.shortfalls`` of the differences with
    ``evaluation``'s grid, prompts and noise intervals, in the criterion's units: fewer than 3 seeds, tied
    evaluations, one prompt, a metric without its noise check, a contradicting noise interval, seeds within the
    evaluation's noise) -> INCONCLUSIVE (no-inference), whatever the mean: a refutation needs the same inference
    as a validation;
    mean d >= threshold -> VALIDATED (threshold), unless ci_excludes_zero and the interval reaches 0 ->
    INCONCLUSIVE (threshold-within-noise);
    mean d >= inconclusive_below -> INCONCLUSIVE (inconclusive-band); otherwise FAILED (below-threshold).
    ``test`` replaces "the interval's low end > 0" where the design tests 0 another way: (told from 0, why not in
    words): in a family, Holm's adjusted p < α and mean d > 0 (``holm_test``); in a sized design, the look's
    boundary crossed upward (``evidence.verdict.sizing``).
    """
    scale, unit = criterion.scale, " points" if criterion.units == "points" else ""
    seeds = [s for s in baseline if s in treatment]
    by_seed = {s: (scale * baseline[s], scale * treatment[s], scale * (treatment[s] - baseline[s])) for s in seeds}
    diffs = [by_seed[s][2] for s in seeds]
    summary, interval = descriptive.across_seeds(diffs), descriptive.t_interval(diffs, level)
    collapse: dict[str, CollapseCheck] = {}
    if criterion.collapse_drop is not None and baseline_curve and treatment_curve:
        collapse = {"baseline": collapse_check([scale * v for v in baseline_curve], criterion.collapse_drop),
                    "treatment": collapse_check([scale * v for v in treatment_curve], criterion.collapse_drop)}

    missing = claims.shortfalls(replace(evaluation, differences=tuple(diffs)), level)

    def outcome(verdict: str, rule: str, reason: str) -> Outcome:
        return Outcome(verdict, rule, reason, by_seed, summary, interval, collapse, missing)

    if len(seeds) < max(min_seeds, 2):
        return outcome(INCONCLUSIVE, "too-few-seeds",
                       f"{len(seeds)} seed(s) with both arms accepted; the verdict needs at least {max(min_seeds, 2)}")
    mean, low = summary.mean, interval[0]
    shown = (f"mean difference {mean:+.4g}{unit} (n={len(seeds)}; {claims.missing_sentence(missing)})" if missing
             else f"mean difference {mean:+.4g}{unit} (95% t-interval [{interval[0]:+.4g}, {interval[1]:+.4g}], "
                  f"n={len(seeds)})")
    if collapse and collapse["baseline"].collapsed and not collapse["treatment"].collapsed:
        return outcome(VALIDATED, "collapse",
                       f"the baseline dropped {collapse['baseline'].drop:.4g}{unit} from its peak (limit "
                       f"{criterion.collapse_drop:g}), the treatment {collapse['treatment'].drop:.4g}{unit}; {shown}")
    if criterion.ci_excludes_zero and missing:
        reached = "reaches" if mean >= criterion.threshold - THRESHOLD_SLACK else "is below"
        return outcome(INCONCLUSIVE, "no-inference",
                       f"{shown} {reached} the threshold {criterion.threshold:g}{unit}, but the design supports no "
                       f"test of 0 in either direction")
    if mean >= criterion.threshold - THRESHOLD_SLACK:
        if criterion.ci_excludes_zero and test is not None and not test[0]:
            return outcome(INCONCLUSIVE, "threshold-within-noise",
                           f"{shown} reaches the threshold {criterion.threshold:g}{unit} but {test[1]}")
        if criterion.ci_excludes_zero and test is None and low <= 0:
            return outcome(INCONCLUSIVE, "threshold-within-noise",
                           f"{shown} reaches the threshold {criterion.threshold:g}{unit} but the interval includes 0")
        return outcome(VALIDATED, "threshold", f"{shown} >= threshold {criterion.threshold:g}{unit}")
    if criterion.inconclusive_below is not None and mean >= criterion.inconclusive_below - THRESHOLD_SLACK:
        return outcome(INCONCLUSIVE, "inconclusive-band",
                       f"{shown} is between {criterion.inconclusive_below:g} and {criterion.threshold:g}{unit}")
    floor = criterion.inconclusive_below if criterion.inconclusive_below is not None else criterion.threshold
    against = collapse and collapse["treatment"].collapsed and not collapse["baseline"].collapsed
    return outcome(FAILED, "below-threshold", f"{shown} < {floor:g}{unit}, "
                   + ("and the treatment collapsed where the baseline did not" if against else "with no collapse difference"))


def holm_test(adjusted_p: float, alpha: float, mean: float | None) -> tuple[bool, str]:
    """A family's test of 0 for one treatment: told from 0 when its Holm-adjusted p < α and mean d > 0."""
    return (adjusted_p < alpha and mean is not None and mean > 0,
            f"its Holm-adjusted p {adjusted_p:.3g} is not below the family-wise α {alpha:g}")


def under_powered(outcome: Outcome, criterion: Criterion) -> bool:
    """A FAILED verdict whose interval still reaches the threshold (high end >= threshold): the design could not
    tell a difference of the threshold's size from the one observed. A mark beside the verdict, never a change
    of it: the pre-registered rule decided. A design that may claim nothing (``Outcome.missing``) has no interval
    to reach it."""
    return outcome.verdict == FAILED and outcome.interval is not None and not outcome.missing \
        and outcome.interval[1] >= criterion.threshold - THRESHOLD_SLACK
