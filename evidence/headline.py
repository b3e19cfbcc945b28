"""The report's answer in one sentence, generated from the paired intervals of the headline metric."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# The metric the headline states, with its words: final-checkpoint pass@1, a rate shown in points.
HEADLINE_METRIC, HEADLINE_WORDS, POINTS = "eval_final_pass@1", "eval pass@1", 100


@dataclass(frozen=True)
class Pair:
    """One paired comparison as the headline reads it: a − b, in the metric's units (a rate)."""

    a: str
    b: str
    n: int
    mean: float | None
    interval: tuple[float, float] | None
    mde: float | None
    p_holm: float | None = None  # with three arms or more: the Holm-adjusted p-value across the family


def _points(value: float) -> str:
    text = f"{value * POINTS:+.1f}"
    return text[1:] if text in ("+0.0", "-0.0") else text


def _seeds(pairs: Sequence[Pair]) -> str:
    low, high = min(p.n for p in pairs), max(p.n for p in pairs)
    return f"{low} seeds" if low == high else f"{low}–{high} seeds"


def _design(pairs: Sequence[Pair]) -> str:
    """What the design can detect: the largest minimum detectable effect of the pairs (every pair detects it)."""
    mde = max(p.mde for p in pairs if p.mde is not None)
    every = " in every pair" if len(pairs) > 1 else ""
    return f"{_seeds(pairs)}; this design detects differences of {mde * POINTS:.1f} points or more{every}"


def headline_sentence(arms: Sequence[str], pairs: Sequence[Pair], level: float, alpha: float) -> str:
    """The result on the headline metric from the pairs' ``level`` t-intervals of the paired differences.

    No pair: one arm, nothing compared. No interval (fewer than two paired seeds): said so. Every interval
    includes 0: no arm differs, with the seeds and the largest minimum detectable effect. Otherwise each pair
    whose interval excludes 0 with its mean and interval (and, in a family, whether Holm's adjusted p stays
    at or below α), then that every other interval includes 0.
    """
    pct = f"{level * 100:g} %"
    if not pairs:
        return f"Only {', '.join(arms) or 'no arm'} ran: there is no paired comparison on {HEADLINE_WORDS} to state."
    measured = [p for p in pairs if p.interval is not None]
    if not measured:
        return (f"No paired comparison on {HEADLINE_WORDS} has two seeds accepted in both arms: no {pct} interval "
                f"of the paired differences exists.")
    apart = [p for p in measured if p.interval[0] > 0 or p.interval[1] < 0]
    if not apart:
        if len(measured) == 1:
            (p,) = measured
            return (f"{p.a} does not differ from {p.b} on {HEADLINE_WORDS}: the {pct} interval of the paired "
                    f"differences, [{_points(p.interval[0])}, {_points(p.interval[1])}] points, includes 0 "
                    f"({_design(measured)}).")
        baselines = {p.b for p in measured}
        who = f"No arm differs from {baselines.pop()}" if len(baselines) == 1 else "No two arms differ"
        return (f"{who} on {HEADLINE_WORDS}: every {pct} interval of the {len(measured)} paired differences "
                f"includes 0 ({_design(measured)}).")
    parts = []
    for p in apart:
        text = (f"{p.a} − {p.b} is {_points(p.mean)} points ({pct} interval [{_points(p.interval[0])}, "
                f"{_points(p.interval[1])}]")
        if p.p_holm is not None:
            held = "holds" if p.p_holm <= alpha else "does not hold"
            shown = "< 0.001" if p.p_holm < 0.001 else f"{p.p_holm:.3f}"
            text += f"; {held} after Holm's correction across the {len(measured)} pairs, adjusted p {shown}"
        parts.append(text + ")")
    rest = "; every other interval includes 0" if len(apart) < len(measured) else ""
    return f"On {HEADLINE_WORDS}, {'; '.join(parts)}{rest} ({_design(measured)})."
