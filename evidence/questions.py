"""The question as the unit the evaluation samples (issue 32 §2): the tables and the report section built on
``evidence.statistics.paired_questions``, ``.components``, ``.allocation`` and ``.wilson``, from each accepted run's
final responses per question (``BundleData.final_prompts``, read from the bundle's carried ``eval/final.jsonl``), so
that the audit, recomputing every table from the same files, names any edited number.

Tables: ``question_differences`` (each pair's question-level paired difference of final eval pass@1, its
question-clustered SE and interval), ``variance_components`` (per arm and per pair: seed, question, seed x question and
response components, the intraclass correlation, the design effect, the crossed interval), ``allocation`` (per pair:
the cheapest seeds x questions x responses reaching 80 % power at the smallest difference that matters, against more
seeds alone and more questions alone), ``eval_intervals`` (each run's pass@j with its Wilson interval), and
``eval_questions`` (each run's correct and evaluated responses per question: the data the others read).
"""

from __future__ import annotations

from dataclasses import dataclass

from evidence.dataset import BundleData
from evidence.statistics import allocation, components, crossed, headline, paired_questions, wilson
from evidence.statistics.power import MDE_POWER
from evidence.tables import (
    Table,
    accepted_runs,
    arm_header,
    arm_pairs,
    arms,
    display,
    experiment_spec,
    fmt,
    fmt_interval,
    fmt_signed,
    job_id,
    prompt_values,
    seeds,
    series,
)
from facts.metrics import STEP_S_KEY, eval_tag

PASS_AT_J = (1, 2, 4)  # the pass@j columns eval.csv keeps
SMALLEST_DIFFERENCE_SETTING = "smallest_difference_points"  # evidence.json, when the build was given one
POINTS = 100.0


# ---- the blocks: seeds x questions of correct counts -------------------------------------------------------

def _counts(data: BundleData, arm: str, seed: int) -> dict[int, tuple[int, int]] | None:
    return data.final_prompts.get((arm, seed))


def common_seeds(data: BundleData, arm_list: list[str]) -> list[int]:
    """The seeds (grid order) at which every arm of ``arm_list`` has final responses, all over the same two or more
    questions (those of the first such run)."""
    out, questions = [], None
    for s in seeds(data):
        found = [_counts(data, a, s) for a in arm_list]
        if any(not f for f in found):
            continue
        keys = {frozenset(f) for f in found}
        if len(keys) != 1 or len(found[0]) < 2 or (questions is not None and keys != {questions}):
            continue
        questions = next(iter(keys))
        out.append(s)
    return out


@dataclass(frozen=True)
class Block:
    """An arm's S x P correct counts and response counts at ``seeds`` (questions by row index, ascending)."""

    seeds: list[int]
    questions: list[int]
    correct: list[list[int]]
    responses: list[list[int]]

    @property
    def k(self) -> int | None:
        """The responses per question when every cell has the same number, else None (an unbalanced design)."""
        found = {n for row in self.responses for n in row}
        return found.pop() if len(found) == 1 else None

    @property
    def rates(self) -> list[list[float]]:
        return [[c / n for c, n in zip(cr, nr)] for cr, nr in zip(self.correct, self.responses)]


def block(data: BundleData, arm: str, seeds_: list[int]) -> Block | None:
    if not seeds_:
        return None
    questions = sorted(_counts(data, arm, seeds_[0]))
    rows = [[_counts(data, arm, s)[i] for i in questions] for s in seeds_]
    return Block(seeds_, questions, [[c for c, _ in r] for r in rows], [[n for _, n in r] for r in rows])


def _one_question(data: BundleData, arm_list: list[str]) -> str:
    """Why no seed has responses on two or more questions when the evaluation has one question (a seed with final
    responses on a single question is never a common seed): said as the reason, not as "0 seeds"; "" otherwise."""
    sizes = {len(found) for s in seeds(data) for a in arm_list if (found := _counts(data, a, s))}
    return "1 evaluation question: fewer than 2 (no question-level noise to estimate)" if sizes == {1} else ""


def _why_no_components(b: Block | None) -> str:
    if b is None or len(b.seeds) < 2:
        return f"{0 if b is None else len(b.seeds)} seed(s) with responses on the same questions: fewer than 2"
    if b.k is None:
        return "responses per question differ: an unbalanced design has no closed form"
    return f"k = {b.k} response(s) per question: fewer than 2" if b.k < 2 else ""


# ---- the question-level paired difference ------------------------------------------------------------------

def question_differences_table(data: BundleData) -> Table:
    """Per pair, on final eval pass@1 over the seeds both arms have on the same questions
    (``paired_questions.question_difference``)."""
    rows, md = [], []
    for a, b in arm_pairs(data):
        common = common_seeds(data, [a, b])
        ba, bb = block(data, a, common), block(data, b, common)
        found = paired_questions.question_difference(ba.rates, bb.rates, data.ci_level) if ba and bb else None
        who = f"{display(data, a)} − {display(data, b)}"
        if found is None:
            rows.append([headline.HEADLINE_METRIC, a, b, len(common), None, None, None, None, None, None, None, None,
                         ""])
            md.append([who, str(len(common)), "—", "—", "—", "—", "—", "—"])
            continue
        withheld = crossed.no_interval_words(found.missing)  # tied question differences: no interval, said so
        rows.append([headline.HEADLINE_METRIC, a, b, found.n_seeds, found.n_questions, found.mean, found.se, found.df,
                     found.low, found.high, found.unpaired_se, found.correlation, withheld])
        interval = None if found.low is None else (found.low, found.high)
        md.append([who, str(found.n_seeds), str(found.n_questions), fmt_signed(found.mean),
                   "—" if withheld else fmt(found.se, 4), withheld or fmt_interval(interval),
                   fmt(found.unpaired_se, 4), fmt(found.correlation, 2)])
    level = f"{data.ci_level * 100:g}%"
    return Table("question_differences",
                 ("metric", "a", "b", "n_seeds", "n_questions", "mean", "se", "df", "low", "high", "unpaired_se",
                  "correlation", "no_interval"), rows,
                 ("Comparison (a − b)", "Seeds", "Questions", "Mean difference", "SE (clustered by question)",
                  f"Paired {level} t-interval", "SE if unpaired", "r(a, b) over questions"), md)


# ---- variance components ---------------------------------------------------------------------------------------

def _components_of(data: BundleData, a: str, b: str) -> tuple[components.Components | None, str, list[int]]:
    """An arm's (b empty) or a pair's components on final eval pass@1, why there are none, and the seeds read."""
    common = common_seeds(data, [a] if not b else [a, b])
    ba = block(data, a, common)
    bb = block(data, b, common) if b else None
    why = _one_question(data, [a] if not b else [a, b]) if not common else ""
    why = why or _why_no_components(ba) or (_why_no_components(bb) if b else "")
    if not why and b and ba.k != bb.k:
        why = "the two arms drew different numbers of responses per question"
    if why:
        return None, why, common
    found = components.pair_components(ba.correct, bb.correct, ba.k) if b else components.arm_components(ba.correct, ba.k)
    return found, "", common


def _cells(data: BundleData, a: str, b: str, common: list[int]) -> list[list[float]]:
    """The S x P cell rates of arm ``a`` (b empty) or the cell differences a − b: the values the crossed interval's
    V̂ reads."""
    ra = block(data, a, common).rates
    if not b:
        return ra
    rb = block(data, b, common).rates
    return [[x - y for x, y in zip(row_a, row_b)] for row_a, row_b in zip(ra, rb)]


COMPONENT_COLUMNS = ("metric", "a", "b", "n_seeds", "n_questions", "k", "mean", "ms_seed", "ms_question",
                     "ms_seed_x_question", "ms_response", "var_seed", "var_question", "var_seed_x_question",
                     "var_response", "icc_question", "design_effect", "var_mean", "se_mean", "df", "low", "high", "none",
                     "no_interval")


def variance_components_table(data: BundleData) -> Table:
    """Per arm and per pair on final eval pass@1: the mean squares, the truncated ANOVA components, ρ_question, the
    design effect and the crossed interval ȳ ± t_ν·√V̂ (``evidence.statistics.components``)."""
    rows, md = [], []
    level = data.ci_level
    who_list = [(a, "") for a in arms(data)] + list(arm_pairs(data))
    for a, b in who_list:
        found, why, common = _components_of(data, a, b)
        who = display(data, a) if not b else f"{display(data, a)} − {display(data, b)}"
        if found is None:
            rows.append([headline.HEADLINE_METRIC, a, b, len(common)] + [None] * (len(COMPONENT_COLUMNS) - 6) +
                        [why, ""])
            md.append([who, str(len(common)), "—", "—", "—", "—", "—", "—", "—", "—", f"none ({why})"])
            continue
        se, df = found.se_mean, found.df
        # every cell's rate (an arm's) or difference (a pair's) tied: V̂ = 0 and no interval (claims' rule, said so)
        withheld = crossed.no_interval_words(crossed.tied(_cells(data, a, b, common)))
        interval = paired_questions.t_interval(found.mean, se, None if df is None else df, level) \
            if se and not withheld else None
        low, high = interval or (None, None)
        rows.append([headline.HEADLINE_METRIC, a, b, found.n_seeds, found.n_questions, found.k, found.mean,
                     found.ms_seed, found.ms_question, found.ms_interaction, found.ms_response,
                     *found.variances, found.icc_question, found.design_effect, found.var_mean, se, df, low, high, "",
                     withheld])
        md.append([who, str(found.n_seeds), str(found.n_questions), str(found.k),
                   *(fmt(v, 5) for v in found.variances), fmt(found.icc_question, 3), fmt(found.design_effect, 2),
                   withheld or ("—" if interval is None else f"{fmt_signed(found.mean) if b else fmt(found.mean, 4)} "
                                f"{fmt_interval(interval)} (ν = {df:.1f})")])
    return Table("variance_components", COMPONENT_COLUMNS, rows,
                 (f"{arm_header(data)} or comparison (a − b)", "Seeds", "Questions", "k", "σ²_seed", "σ²_question",
                  "σ²_seed×question", "σ²_response", "ρ_question", "Design effect",
                  f"Crossed {level * 100:g}% t-interval"), md)


# ---- allocation ----------------------------------------------------------------------------------------------

def smallest_difference(data: BundleData) -> tuple[float, str]:
    """The smallest difference of final eval pass@1 (a rate) the allocation plans for, and where it comes from: the
    build's setting (``--smallest-difference``, in points), else the experiment spec's threshold when its criterion is
    final eval pass@1, else ``allocation.DEFAULT_SMALLEST_DIFFERENCE``."""
    stated = data.settings.get(SMALLEST_DIFFERENCE_SETTING)
    if isinstance(stated, int | float) and not isinstance(stated, bool) and stated > 0:
        return float(stated) / POINTS, "set by the build's --smallest-difference"
    spec = experiment_spec(data)
    if spec is not None and spec.criterion.measure.metric == eval_tag("pass@1") and spec.criterion.threshold > 0:
        return spec.criterion.threshold / spec.criterion.scale, "the experiment's threshold"
    return allocation.DEFAULT_SMALLEST_DIFFERENCE, "the default: no threshold stated"


def _number(text: str) -> float | None:
    try:
        return float(text) if text != "" else None
    except ValueError:
        return None


def _own_evaluations(run: dict) -> list[tuple[float, int, int]]:
    """The evaluations during training the run made itself (run.json's ``eval_during_training``): each one's seconds,
    responses and step. A shared initial evaluation (its summary names the ``shared`` file) is left out, computed or
    reused: a reuse costs the run ~0 s for its responses, and the one that computed it cannot be told apart in
    run.json (adversarial finding: a reused one halved c_response)."""
    block_ = run.get("eval_during_training") if isinstance(run, dict) else None
    out = []
    for e in (block_ or {}).get("evaluations", []) if isinstance(block_, dict) else []:
        summary = e.get("summary") if isinstance(e, dict) else None
        n = summary.get("n_responses") if isinstance(summary, dict) else None
        if isinstance(summary, dict) and summary.get("shared"):
            continue
        if isinstance(e.get("seconds"), int | float) and isinstance(n, int) and n > 0:
            out.append((float(e["seconds"]), n, e.get("step")))
    return out


def _step_zero(run: dict) -> bool:
    """Whether run.json's evaluations during training include the initial checkpoint's (step 0), shared or not."""
    block_ = run.get("eval_during_training") if isinstance(run, dict) else None
    found = (block_ or {}).get("evaluations", []) if isinstance(block_, dict) else []
    return any(isinstance(e, dict) and e.get("step") == 0 for e in found)


def _eval_seconds(run: dict) -> tuple[float, int]:
    """The seconds and responses of the evaluations the run measured itself (``_own_evaluations``); (0, 0) without
    them."""
    own = _own_evaluations(run)
    return sum(e[0] for e in own), sum(e[1] for e in own)


def measured_costs(data: BundleData, arm_list: list[str]) -> allocation.Costs | None:
    """The costs the allocation weighs, from the accepted runs of ``arm_list`` (in wall seconds of a job):

    c_response = Σ measured evaluation seconds / Σ their responses, where run.json records its own evaluations'
    seconds (``_own_evaluations``: a shared initial evaluation is not one); else Σ (elapsed_s − Σ_steps
    perf/step_s) / Σ (eval_responses_initial + eval_responses_final) (index.csv, steps.csv, the initial responses only
    where the run evaluated its initial checkpoint itself, not read a shared evaluation: everything of a job that is
    not a training step, counted as evaluation — an upper bound);
    evaluations = Σ evaluated responses / Σ eval_responses_final over the runs: how many evaluations of the final's
    P·k responses a job makes (the final, its own evaluations during training, its own initial one);
    c_seed = mean over the runs of elapsed_s − c_response·(its evaluated responses) (training and start-up: what a
    seed costs whatever its evaluation's size). None without a run that has both."""
    runs = [(a, s) for a in arm_list for s in accepted_runs(data, a)]
    measured = [_eval_seconds(data.runs.get(r, {})) for r in runs]
    rest_s, rest_n, rows = 0.0, 0, []
    for (a, s) in runs:
        row = data.index_row(a, s)
        elapsed, final = _number(row.get("elapsed_s", "")), _number(row.get("eval_responses_final", ""))
        shared = data.evals.get((a, s), {}).get("initial", {}).get("initial_eval")  # another job's evaluation
        initial = 0.0 if shared else _number(row.get("eval_responses_initial", "")) or 0.0
        steps = series(data, a, s, STEP_S_KEY)
        if elapsed is None or not final:
            continue
        record = data.runs.get((a, s), {})
        # the initial evaluation is the step-0 entry of run.json's when the run evaluated during training (counted
        # there when its own, not at all when shared), else index.csv's initial responses when not shared
        during = sum(n for _, n, _ in _own_evaluations(record)) + (0.0 if _step_zero(record) else initial)
        rows.append((elapsed, final, final + during))
        if steps is not None:
            rest_s, rest_n = rest_s + max(0.0, elapsed - sum(steps)), rest_n + final + initial
    seconds, responses = sum(m[0] for m in measured), sum(m[1] for m in measured)
    per_response = seconds / responses if responses else (rest_s / rest_n if rest_n else None)
    if per_response is None or not rows:
        return None
    per_seed = sum(max(0.0, elapsed - per_response * evaluated) for elapsed, _, evaluated in rows) / len(rows)
    evaluations = sum(r[2] for r in rows) / sum(r[1] for r in rows)
    return allocation.Costs(per_seed, per_response, evaluations)


def _design_cells(d: allocation.Design | None) -> list:
    return [None] * 5 if d is None else [d.seeds, d.questions, d.k, d.power, d.cost]


def allocation_rows(data: BundleData) -> list[tuple[str, str, allocation.Advice | None, allocation.Costs | None, str]]:
    """Per pair: its advice, its costs and why there is none (``allocation.advise`` on its components)."""
    delta, _ = smallest_difference(data)
    out = []
    for a, b in arm_pairs(data):
        found, why, _ = _components_of(data, a, b)
        costs = measured_costs(data, [a, b])
        if found is not None and costs is None:
            why = "no run records its elapsed seconds and evaluated responses"
        if found is not None and found.total == 0:
            found, why = None, "every component is 0: no noise measured to plan against"
        advice = allocation.advise(found, costs, delta, 1 - data.ci_level) if found is not None and costs else None
        out.append((a, b, advice, costs, why))
    return out


def allocation_table(data: BundleData) -> Table:
    delta, source = smallest_difference(data)
    rows, md = [], []
    for a, b, advice, costs, why in allocation_rows(data):
        head = [headline.HEADLINE_METRIC, a, b, delta, source, 1 - data.ci_level, MDE_POWER,
                None if costs is None else costs.seed, None if costs is None else costs.response,
                None if costs is None else costs.evaluations]
        if advice is None:
            rows.append(head + [None] * 20 + [why])
            continue
        rows.append(head + [*_design_cells(advice.current), *_design_cells(advice.cheapest),
                            *_design_cells(advice.seeds_only), *_design_cells(advice.questions_only), ""])
        md.append([f"{display(data, a)} − {display(data, b)}", _design_text(advice.current),
                   _design_text(advice.cheapest), _design_text(advice.seeds_only),
                   _design_text(advice.questions_only)])
    cols = ("metric", "a", "b", "delta", "delta_source", "alpha", "target_power", "seed_seconds", "response_seconds",
            "evaluations")
    for name in ("current", "cheapest", "seeds_only", "questions_only"):
        cols += tuple(f"{name}_{c}" for c in ("seeds", "questions", "k", "power", "cost_s"))
    return Table("allocation", cols + ("none",), rows,
                 ("Comparison (a − b)", "As run", f"Cheapest at {MDE_POWER * 100:g}% power", "More seeds only",
                  "More questions only"), md)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h"


def _design_text(d: allocation.Design | None) -> str:
    if d is None:
        return "none in range"
    if d.power is None:
        return (f"{d.seeds} seeds × {d.questions} questions × {d.k}: no test (fewer than {allocation.MIN_SEEDS} "
                f"seeds), {_hours(d.cost)}")
    return f"{d.seeds} seeds × {d.questions} questions × {d.k}: power {power_words(d.power)}, {_hours(d.cost)}"


# ---- a single run's pass@j: Wilson -----------------------------------------------------------------------------

def eval_intervals_table(data: BundleData) -> Table:
    """Per accepted run with final responses, its pass@j (j ≤ k, the columns eval.csv keeps) from its questions, the
    effective n and the Wilson interval (``evidence.statistics.wilson``)."""
    rows, md = [], []
    for a in arms(data):
        for s in seeds(data):
            counts = _counts(data, a, s)
            if not counts:
                continue
            ks = {n for _, n in counts.values()}
            k = min(ks)
            cells = []
            for j in PASS_AT_J:
                values = prompt_values(data, a, s, j) if k >= j else None
                found = wilson.run_interval(list(values.values()), j, k, data.ci_level) if values else None
                p = sum(values.values()) / len(values) if values and found else None
                n_eff, low, high = found if found else (None, None, None)
                rows.append([a, s, job_id(data, a, s), j, len(counts), k if len(ks) == 1 else None, p, n_eff, low,
                             high])
                cells.append("—" if p is None else f"{fmt(p, 4)} {fmt_interval((low, high))}")
            md.append([display(data, a), str(s), str(len(counts)), *cells])
    level = f"{data.ci_level * 100:g}%"
    return Table("eval_intervals",
                 ("arm", "seed", "job_id", "j", "n_questions", "k", "pass_at_j", "n_eff", "wilson_low", "wilson_high"),
                 rows, (arm_header(data), "Seed", "Questions",
                        *(f"pass@{j} (Wilson {level})" for j in PASS_AT_J)), md)


def eval_questions_table(data: BundleData) -> Table:
    """Each accepted run's final evaluation per question: correct and evaluated responses (the CSV only)."""
    rows = [[a, s, job_id(data, a, s), i, c, n]
            for a in arms(data) for s in seeds(data) if (counts := _counts(data, a, s))
            for i, (c, n) in sorted(counts.items())]
    return Table("eval_questions", ("arm", "seed", "job_id", "question", "correct", "responses"), rows, (), [])


def question_tables(data: BundleData) -> list[Table]:
    """The tables of this module, in the report's order."""
    return [question_differences_table(data), variance_components_table(data), allocation_table(data),
            eval_intervals_table(data), eval_questions_table(data)]


# ---- the report's section ------------------------------------------------------------------------------------

def power_words(power: float) -> str:
    """A power in words: whole percents, "> 99.9%" above 0.999 (never "100%": no finite design is certain), one
    decimal between 99.5 % and 99.9 %."""
    if power > 0.999:
        return "> 99.9%"
    return f"{power * 100:.1f}%" if power * 100 >= 99.5 else f"{power * 100:.0f}%"


def _design_words(d: allocation.Design) -> str:
    return f"{d.seeds} seeds × {d.questions} questions × {d.k}, {_hours(d.cost)}"


def advice_sentence(who: str, advice: allocation.Advice, delta: float, source: str) -> str:
    """What an allocation says in words, every number from it: the power as run (for the seed-level paired t-test
    the report decides by), the cheapest design that reaches the power, and the comparison that makes "more questions,
    not more seeds" (or the reverse) a number. A design as run of fewer than ``allocation.MIN_SEEDS`` seeds supports
    no test (``claims.too_few_seeds``): it is said so, never given a power; a design that costs more than the one as
    run is never called the cheapest without saying why the one as run does not do."""
    current, best = advice.current, advice.cheapest
    text = (f"- {who}: to detect {delta * POINTS:g} points ({source}) at {MDE_POWER * 100:g}% power with the "
            f"seed-level paired t-test ({allocation.MIN_SEEDS} seeds or more, S − 1 df)")
    untestable = current is not None and current.power is None
    reaches = current is not None and current.power is not None and current.power >= MDE_POWER
    if untestable:
        text += (f", the design as run ({_design_words(current)}) has fewer than {allocation.MIN_SEEDS} seeds: it "
                 f"supports no test")
    elif current is not None:
        text += f", the design as run ({_design_words(current)}) has {power_words(current.power)} power"
    if best is None:
        return text + (f"; no design up to {allocation.MAX_SEEDS} seeds, {allocation.MAX_QUESTIONS} questions and "
                       f"{max(allocation.K_CHOICES)} responses per question reaches it.")
    best_words = (f"{best.seeds} seeds × {best.questions} questions × {best.k} response(s) per question "
                  f"({_hours(best.cost)}, power {power_words(best.power)})")
    if reaches:
        if best.cost < current.cost:
            return text + f": it reaches it; a cheaper design that also does is {best_words}."
        return text + ": the design as run already reaches it."
    text += f"; the cheapest design that reaches it is {best_words}"
    if current is None or untestable:
        return text + "."
    more_seeds = advice.seeds_only
    seeds_words = (f"more seeds alone would need {more_seeds.seeds} at {current.questions} questions "
                   f"({_hours(more_seeds.cost)})" if more_seeds is not None else
                   f"no number of seeds up to {allocation.MAX_SEEDS} reaches it at {current.questions} questions")
    if best.seeds <= current.seeds and best.questions > current.questions:
        return text + f": more questions, not more seeds ({seeds_words})."
    if best.questions <= current.questions and best.seeds > current.seeds:
        return text + ": more seeds, not more questions."
    return text + f" ({seeds_words})."


def questions_section(data: BundleData, tables: dict[str, Table]) -> str | None:
    """The report's section on the question as the unit the evaluation samples; None when no run has its final
    responses per question."""
    if not data.final_prompts:
        return None
    level = f"{data.ci_level * 100:g}%"
    delta, source = smallest_difference(data)
    out = [
        "## Questions as the unit of the evaluation\n",
        "Every arm is evaluated on the same frozen questions, so the evaluation is paired by question (Miller 2024, "
        "\"Adding Error Bars to Evals\"). Per pair on final eval pass@1, each question's difference a − b is its mean "
        "over its k responses and the seeds both arms have; the mean difference's standard error is clustered by "
        "question, s_q/√P (the CR1 sandwich of a regression on a constant, clusters = questions), and its paired "
        f"{level} interval is the t-interval with P − 1 df. Beside it, the SE the same question means would have "
        "unpaired and the arms' correlation over questions: what pairing removes (table `question_differences`):\n",
        tables["question_differences"].markdown(),
        "Variance components (seeds crossed with questions, k responses per cell; two-way random effects with "
        "replication): the ANOVA (expected-mean-squares) estimates σ²_response = MS_response, σ²_seed×question = "
        "(MS_sq − MS_response)/k, σ²_seed = (MS_seed − MS_sq)/(kP), σ²_question = (MS_question − MS_sq)/(kS), a "
        "negative estimate truncated at 0; for a pair, of the per-cell difference (its response variance the two "
        "arms' summed). ρ_question = σ²_question/σ²_total; the design effect (Pk·σ²_seed + Sk·σ²_question + "
        "kσ²_seed×question + σ²_response)/σ²_total is the variance of the mean against as many independent responses. "
        "The crossed interval is the mean ± t_ν·√V̂, V̂ = (MS_seed + MS_question − MS_sq)/(kSP) with Satterthwaite's "
        "ν: unlike the question-clustered one it also counts a seed's shift of every question alike "
        "(table `variance_components`, mean squares and V̂ in its CSV):\n",
        tables["variance_components"].markdown(),
        f"Allocation, for the test the report decides by: the seed-level paired t-test (S − 1 df) of the headline "
        f"and the verdict. A seed's difference varies over the seeds by σ²_d = σ²_seed + σ²_seed×question/P + "
        f"σ²_response/(Pk) with the pair's components; the question component is shared by every seed (all answer "
        f"the same questions), so it is not in σ²_d but shifts the difference the seeds measure by b̄ ~ N(0, "
        f"σ²_question/P). The power is the noncentral t's (λ = √S·(δ + b̄)/σ_d) averaged over b̄ (Gauss–Hermite), "
        f"no design of fewer than {allocation.MIN_SEEDS} seeds is tested; the cost 2·S·(c_seed + "
        f"evaluations·c_response·P·k) in a job's wall seconds "
        f"measured here (c_response from the runs' own evaluation seconds, a shared initial evaluation left out, "
        f"else everything of a job that is not a training step; evaluations: the responses a job evaluates over "
        f"its final evaluation's; c_seed the rest), δ = {delta * POINTS:g} points ({source}), α = "
        f"{1 - data.ci_level:g}; seeds from {allocation.MIN_SEEDS} to {allocation.MAX_SEEDS}, k in "
        f"{', '.join(map(str, allocation.K_CHOICES))}, up to {allocation.MAX_QUESTIONS} questions. The components "
        f"are one sweep's estimates: the advice is as good as they are (table `allocation`):\n",
        tables["allocation"].markdown(),
    ]
    for a, b, advice, _, why in allocation_rows(data):
        who = f"{display(data, a)} − {display(data, b)}"
        out.append(advice_sentence(who, advice, delta, source) if advice is not None else f"- {who}: no allocation "
                   f"({why}).")
    out += ["",
            f"Each run's pass@j with its Wilson {level} interval, n the effective number of independent trials "
            f"p̂(1 − p̂)/SE² (SE clustered by question; at most P·⌊k/j⌋, and P where p̂ is 0 or 1), so that an interval "
            f"near 0 or 1 neither collapses nor leaves [0, 1] (table `eval_intervals`; the per-question counts every "
            f"number of this section reads are `eval_questions`):\n",
            tables["eval_intervals"].markdown()]
    return "\n".join(out)
