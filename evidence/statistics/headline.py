"""The report's answer in one sentence, in words, from what each pair may claim (``evidence.statistics.claims``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evidence.statistics.claims import (
    DIFFERS,
    MIN_INFERENCE_SEEDS,
    NO_CLAIM,
    NO_DIFFERENCE,
    PairClaim,
    Shortfall,
    missing_parts,
)

# The metric the headline states, with its words: final-checkpoint pass@1, a rate shown in points.
HEADLINE_METRIC, HEADLINE_WORDS, POINTS = "eval_final_pass@1", "eval pass@1", 100


@dataclass(frozen=True)
class Pair:
    """One paired comparison as the headline reads it: a − b by their report names, and what it may claim
    (``claims.paired_claim``, in the metric's units: a rate)."""

    a: str
    b: str
    claim: PairClaim
    family: int = 0  # the pairs of its Holm family (with three arms or more), else 0
    untested: int = 0  # of them, the pairs that may claim nothing (counted as never rejected)


def _points(value: float) -> str:
    text = f"{value * POINTS:+.1f}"
    return text[1:] if text in ("+0.0", "-0.0") else text


def _interval(interval: tuple[float, float]) -> str:
    return f"[{_points(interval[0])}, {_points(interval[1])}]"


def _seeds(pairs: Sequence[Pair]) -> str:
    low, high = min(p.claim.n for p in pairs), max(p.claim.n for p in pairs)
    return f"{low} seeds" if low == high else f"{low}–{high} seeds"


def _design(pairs: Sequence[Pair]) -> str:
    """What the design can detect: the largest minimum detectable effect of the pairs (every pair detects it)."""
    mde = max(p.claim.mde for p in pairs)
    every = " in every pair" if len(pairs) > 1 else ""
    return (f"{_seeds(pairs)}; this design detects differences of {mde * POINTS:.1f} points or more{every} at "
            f"{pairs[0].claim.power * 100:g} % power")


def _missing(pairs: Sequence[Pair]) -> tuple[str, str]:
    """What the pairs without a claim miss, rule by rule (a rule some pairs miss says in how many), and what
    would supply it: ``claims.missing_parts`` over the pairs together."""
    by_rule: dict[str, list[Shortfall]] = {}
    for p in pairs:
        for s in p.claim.missing:
            by_rule.setdefault(s.rule, []).append(s)
    merged = []
    for found in by_rule.values():
        first, whats = found[0], {s.what for s in found}
        if len(whats) == 1:
            what = first.what
        elif first.rule == "too-few-seeds":
            what = _seeds([p for p in pairs if p.claim.n < MIN_INFERENCE_SEEDS])
        else:  # the same rule in other numbers: its words without them
            what = " or ".join(sorted({w.split(" (")[0] for w in whats}, reverse=True))
        if len(found) < len(pairs):
            what += f" in {len(found)} of them"
        merged.append(Shortfall(first.rule, what, first.remedy))
    return missing_parts(merged)


def _names(pairs: Sequence[Pair]) -> str:
    return ", ".join(f"{p.a} − {p.b}" for p in pairs)


def _without_claim(pairs: Sequence[Pair]) -> str:
    """The pairs that may claim nothing, named (a few) or counted, with what they miss."""
    who = _names(pairs) if len(pairs) <= 2 else f"the other {len(pairs)} pairs"
    said, remedy = _missing(pairs)
    return f"no interval for {who} ({said}; {remedy})"


def _equivalence(pairs: Sequence[Pair]) -> str | None:
    """TOST against the declared margin, for each pair tested: equivalent or not shown, with its interval."""
    tested = [p for p in pairs if p.claim.equivalence is not None]
    if not tested:
        return None
    first = tested[0].claim.equivalence
    parts = []
    for p in tested:
        e = p.claim.equivalence
        shown = "p < 0.001" if e.p_value < 0.001 else f"p {e.p_value:.3f}"
        said = "equivalent" if e.equivalent else "not shown equivalent"
        who = f"{p.a} − {p.b} " if len(pairs) > 1 else ""
        parts.append(f"{who}{said} ({e.level * 100:g} % interval {_interval(e.interval)}, {shown})")
    return f"by TOST against the declared margin of ±{first.margin * POINTS:.1f} points, {'; '.join(parts)}"


def _by_design(p: Pair) -> str:
    """What a design in waves decided of the pair (``claims.sequential_design``): the difference holds by its
    boundary, or no difference detected by it; never a fixed-sample interval beside it."""
    look = p.claim.sequential
    z = "—" if look.z is None else f"{look.z:.3g}"
    where = (f"look {look.look} of {look.looks}, {look.how}: Z = {z}, boundary ±{look.boundary:.4g}"
             + ("" if look.type_i_error is None else f"; the design's type I error {look.type_i_error * 100:.1f} %"))
    if p.claim.kind == DIFFERS:
        return (f"{p.a} − {p.b} is {_points(p.claim.mean)} points over {p.claim.n} seeds, and the difference holds by "
                f"the design in waves ({where})")
    return (f"no difference detected between {p.a} and {p.b} by the design in waves ({where}; {p.claim.n} seeds, "
            f"mean difference {_points(p.claim.mean)} points)")


def headline_sentence(arms: Sequence[str], pairs: Sequence[Pair], level: float) -> str:
    """The result on the headline metric, as the pairs' claims allow; a pair whose claim states an experiment's
    design in waves (``claims.sequential_design``) first, in the design's words (``_by_design``), the others as
    ``fixed_sample_sentence`` says them."""
    designed = [p for p in pairs if p.claim.sequential is not None]
    if not designed:
        return fixed_sample_sentence(arms, pairs, level)
    text = f"On {HEADLINE_WORDS}, " + "; ".join(_by_design(p) for p in designed)
    others = [p for p in pairs if p.claim.sequential is None]
    if others:
        text += "; the other pairs, outside the design: " + fixed_sample_sentence(arms, others, level)
    return text + ("" if text.endswith(".") else ".")


def fixed_sample_sentence(arms: Sequence[str], pairs: Sequence[Pair], level: float) -> str:
    """The result on the headline metric, as the pairs' claims (``claims.paired_claim`` at ``level``) allow.

    No pair: one arm, nothing compared. No pair may claim anything: what is missing and what would supply it.
    Otherwise the pairs that differ, each with its mean, interval and (in a family) Holm's verdict; "no
    difference detected" for the rest (never "no difference"), always with the seeds and the largest minimum
    detectable effect at 80 % power; TOST's equivalence where the spec declares a margin; and the pairs that
    may claim nothing, with what they miss.
    """
    pct = f"{level * 100:g} %"
    if not pairs:
        return f"Only {', '.join(arms) or 'no arm'} ran: there is no paired comparison on {HEADLINE_WORDS} to state."
    claimed = [p for p in pairs if p.claim.kind != NO_CLAIM]
    silent = [p for p in pairs if p.claim.kind == NO_CLAIM]
    if not claimed:
        who = f"{pairs[0].a} − {pairs[0].b} has" if len(pairs) == 1 else f"the {len(pairs)} paired comparisons have"
        said, remedy = _missing(pairs)
        return f"On {HEADLINE_WORDS}, {who} {said}: no interval; {remedy}."
    apart = [p for p in claimed if p.claim.kind == DIFFERS]
    alike = [p for p in claimed if p.claim.kind == NO_DIFFERENCE]
    if not apart and len(claimed) == 1:
        (p,) = claimed
        text = (f"No difference detected between {p.a} and {p.b} on {HEADLINE_WORDS}: the {pct} interval of the "
                f"paired differences, {_interval(p.claim.interval)} points, includes 0 ({_design(claimed)})")
    elif not apart:
        text = (f"No difference detected on {HEADLINE_WORDS}: every {pct} interval of the {len(claimed)} paired "
                f"differences includes 0 ({_design(claimed)})")
    else:
        parts = []
        for p in apart:
            part = f"{p.a} − {p.b} is {_points(p.claim.mean)} points ({pct} interval {_interval(p.claim.interval)}"
            if p.claim.p_holm is not None:
                held = "holds" if p.claim.holds else "does not hold"
                shown = "< 0.001" if p.claim.p_holm < 0.001 else f"{p.claim.p_holm:.3f}"
                untested = (f" ({p.untested} of them untestable, counted as not rejected)" if p.untested else "")
                part += f"; {held} after Holm's correction across the {p.family} pairs{untested}, adjusted p {shown}"
            parts.append(part + ")")
        rest = f"; no difference detected in the other {len(alike)} pair{'s' if len(alike) > 1 else ''}" if alike else ""
        text = f"On {HEADLINE_WORDS}, {'; '.join(parts)}{rest} ({_design(claimed)})"
    equivalence = _equivalence(claimed)
    if equivalence:
        text += f"; {equivalence}"
    if silent:
        text += f"; {_without_claim(silent)}"
    return text + "."
