"""``python -m evidence compare``'s lines on the question as the evaluation's unit (issue 32 §2): two comparable inputs
evaluated their runs on the same frozen questions, so each arm they share is compared B − A question by question —
the question-level paired difference of final eval pass@1 with its question-clustered interval
(``statistics.paired_questions``), the variance components of the difference over the seeds both ran
(``statistics.components``) and the allocation that would detect the smallest difference that matters at 80 % power
(``statistics.allocation``), as the report's section computes them for two arms of one sweep (``evidence.questions``).
"""

from __future__ import annotations

from evidence.dataset import BundleData
from evidence.questions import (
    POINTS,
    Block,
    advice_sentence,
    block,
    measured_costs,
    smallest_difference,
)
from evidence.statistics import allocation, components, crossed, paired_questions


def _common_seeds(a: BundleData, b: BundleData, arm: str) -> list[int]:
    """The seeds at which ``arm`` has final responses in both inputs, all over the same two or more questions."""
    out, questions = [], None
    for s in a.sweep.get("seeds", []):
        ca, cb = a.final_prompts.get((arm, s)), b.final_prompts.get((arm, s))
        if not ca or not cb or set(ca) != set(cb) or len(ca) < 2 or (questions is not None and set(ca) != questions):
            continue
        questions = set(ca)
        out.append(s)
    return out


def _costs(a: BundleData, b: BundleData, arm: str) -> allocation.Costs | None:
    """The two inputs' measured costs of ``arm`` (``questions.measured_costs``), averaged."""
    found = [c for c in (measured_costs(a, [arm]), measured_costs(b, [arm])) if c is not None]
    if not found:
        return None
    return allocation.Costs(sum(c.seed for c in found) / len(found), sum(c.response for c in found) / len(found),
                            sum(c.evaluations for c in found) / len(found))


def _components(ba: Block, bb: Block) -> components.Components | None:
    k = ba.k
    if k is None or k != bb.k or len(ba.seeds) < 2:
        return None
    return components.pair_components(bb.correct, ba.correct, k)


def question_lines(a: BundleData, b: BundleData, arms: list[str], delta: float | None = None) -> list[str]:
    """The markdown lines under the comparison's table: per shared arm, B − A by question, its components and the
    allocation (``delta``, a rate: the smallest difference that matters; default A's, ``questions.smallest_difference``).
    No line for an arm without final responses on the same questions in both."""
    source = "--smallest-difference" if delta is not None else None
    if delta is None:
        delta, source = smallest_difference(a)
    level = a.ci_level
    out = []
    for arm in arms:
        seeds = _common_seeds(a, b, arm)
        if not seeds:
            continue
        ba, bb = block(a, arm, seeds), block(b, arm, seeds)
        found = paired_questions.question_difference(bb.rates, ba.rates, level)
        if found is None or found.se is None:
            continue
        # tied question differences: no SE or interval shown, the claims' words instead (crossed.question_shortfall)
        said = crossed.no_interval_words(found.missing) if found.missing is not None else (
            f"SE {found.se * POINTS:.2f} clustered by question, {level * 100:g}% paired interval "
            f"[{found.low * POINTS:+.2f}, {found.high * POINTS:+.2f}]")
        line = (f"- {arm}: by question, B − A on final eval pass@1 is {found.mean * POINTS:+.2f} points over "
                f"{found.n_questions} questions and {found.n_seeds} seed(s) ({said}; "
                f"unpaired SE {found.unpaired_se * POINTS:.2f})")
        c = _components(ba, bb)
        if c is None:
            out.append(line + "; no variance components (fewer than 2 seeds, or responses per question differ).")
            continue
        out.append(line + f"; components of the difference: seed {c.seed:.3g}, question {c.question:.3g}, "
                          f"seed×question {c.interaction:.3g}, response {c.response:.3g} (ρ_question "
                          f"{'—' if c.icc_question is None else f'{c.icc_question:.3f}'}, design effect "
                          f"{'—' if c.design_effect is None else f'{c.design_effect:.2f}'}).")
        costs = _costs(a, b, arm)
        if costs is None or c.total == 0:
            out.append(f"  {arm}: no allocation ({'no run records its seconds' if costs is None else 'no noise measured'}).")
            continue
        advice = allocation.advise(c, costs, delta, 1 - level)
        out.append("  " + advice_sentence(f"{arm} (B − A)", advice, delta, source).removeprefix("- "))
    if out:
        out = ["", "Questions as the unit (both inputs evaluated the same frozen questions; B − A per question, "
                   "clustered by question; variance components by the crossed ANOVA; allocation for the cheapest "
                   "seeds × questions × responses at 80% power — `evidence.statistics`):", *out]
    return out
