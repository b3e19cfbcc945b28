"""``python -m evidence compare A B [C ...]``: seed 002's before/after table, or a table across sweeps.

Inputs are sweep directories (their built ``bundle/`` when present, else the jobs evaluated in
memory; nothing is written), bundle directories, or bundle archives. Two inputs: per measure and per
arm present in both, A, B, B/A, the change in % (and in points for rates), and B − A paired by
training seed when both ran the same seeds (mean ± SD, t-interval; beside it the minimum detectable
effect and the paired bootstrap interval, ``evidence.statistics`` as in the report's paired table), else
unpaired (Welch), said once under the table. More than two: one row per measure and arm, one column per
input (mean ± SD, n), each after the first with its difference from the first. Only accepted runs count,
as in every other table.

Held to the audit's standards: an archive is opened by the audit's reader (every member header
checked before anything is extracted), a bundle's bag must verify (bagit: every manifest digest)
and its ``sweep.json`` be a sweep's, and inputs that ran differently are refused unless ``--force``,
naming each difference (``COMPARABLE``: workload, steps, evaluation subset and sampling, and each
shared arm's trainer). Every refusal is one line (``CompareError``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evidence.dataset import EVAL_FLOAT_COLUMNS, BundleData, csv_text
from evidence.fileio import JSONError
from evidence.measures import arm_values
from evidence.problems import CompareError, LoadError
from evidence.statistics import MDE_POWER, claims, descriptive, minimum_detectable_effect
from evidence.statistics.resampling import (
    BOOTSTRAP_METHOD,
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    paired_bootstrap_interval,
)
from evidence.tables import arms as arm_order
from evidence.tables import final_evaluations, per_prompt_j, trainer_of
from evidence.tools.load import read_evidence
from facts.files import SWEEP_RECORD
from facts.metrics import GRAD_NORM_KEY, LOSS_KEY, RAW_REWARD_KEY, eval_tag
from facts.trainers import PROOFGRID_TRAINER
from study.measure import EVAL_PREFIX, LAST_K, POINTS_PER_UNIT, Measure, parse_measure

DEFAULT_METRICS = (LOSS_KEY, GRAD_NORM_KEY, RAW_REWARD_KEY, eval_tag("pass@1"))
COLUMNS = ("metric", "at", "last_k", "arm", "n_a", "n_b", "a_mean", "a_sd", "b_mean", "b_sd", "ratio_b_over_a",
           "change_pct", "change_points", "pairing", "n_pairs", "diff_mean", "diff_sd", "ci_low", "ci_high",
           "mde", "boot_low", "boot_high", "boot_method", "boot_resamples", "boot_seed", "diff_units", "note")


@dataclass
class Side:
    """One input: a short name for the table and its evidence."""

    name: str
    data: BundleData
    audited: list = field(default_factory=list)  # the audit's findings on a bundle input (compared with --force)


# ---- loading ---------------------------------------------------------------------------------

# What a bundle's files may raise when they are not what a build writes (a resealed sweep.json, CSV or
# evidence.json): one line naming the input, never a traceback.
READ_ERRORS = (JSONError, OSError, KeyError, ValueError, TypeError, AttributeError, OverflowError, IndexError)


def load_side(path: str | Path, last_k: int, label: str = "") -> Side:
    """Evidence of a sweep directory, a bundle directory or a bundle archive, verified as the audit
    verifies it (``read_evidence(verify=True)``); ``CompareError`` (one line, starting with ``label``)."""
    lead = f"{label}: " if label else ""
    try:
        name, data, _ = read_evidence(path, last_k, verify=True)
        side = Side(name, data)
        _readable(side)
    except LoadError as exc:
        raise CompareError(f"{lead}{exc}") from None
    except READ_ERRORS as exc:
        raise CompareError(f"{lead}{path}: cannot read its evidence ({exc.__class__.__name__}: {exc})") from None
    return side


def audit_inputs(paths, labels: list[str], sides: list[Side], force: bool) -> None:
    """Each bundle input held to the audit (``evidence.audit``): one whose audit has findings is refused
    (one line naming each such input, its first findings and the audit to run) unless ``force``; forced,
    its findings are kept on its side and said under the table."""
    from evidence.audit import (  # the audit's checks: re-scoring, statistics, records
        audit_input,
        refused_input,
    )

    refused = []
    for path, label, side in zip(paths, labels, sides):
        bundle, side.audited = audit_input(path)
        if side.audited:
            refused.append(refused_input(label, bundle, side.audited))
    if refused and not force:
        raise CompareError(" | ".join(refused) + " (--force compares them anyway)")


def _readable(side: Side) -> None:
    """Read what a comparison reads of an input besides its runs (its facts, its settings, its
    description), so that a record no build writes fails here, naming the input."""
    for read in COMPARABLE.values():
        read(side.data)
    for arm in side.data.arms:
        trainer_of(side.data, arm)
    float(side.data.ci_level)
    _describe("", side)


def logged_metrics(data: BundleData) -> set[str]:
    """The training metrics an input's accepted runs log (steps.csv's columns, or the records' keys)."""
    return set(data.step_keys) | {k for records in data.steps.values() for r in records for k in r if k != "step"}


def check_metrics(measures: list[Measure], requested: list[str], sides: list[Side]) -> None:
    """A requested training metric that no input logs is refused, naming the ones they do."""
    logged = set().union(*(logged_metrics(side.data) for side in sides))
    for measure in measures:
        if measure.metric in requested and not measure.is_eval and measure.metric not in logged:
            known = [EVAL_PREFIX + c for c in EVAL_FLOAT_COLUMNS] + sorted(logged)
            raise CompareError(f"--metric {measure.metric}: no input logs it; known: {', '.join(known)}")


def _evidence_roots(path: Path) -> list[Path]:
    """What an input's evidence is, none of which ``--csv`` may name: the input itself, and the sweep
    directory that holds it (a sweep's ``bundle/`` or ``bundle.tar.gz``, with the archive's sidecars)."""
    path = path.resolve()
    roots = [path]
    archive = path if path.is_file() else path.with_name(path.name + ".tar.gz")  # a bundle's archive beside it
    roots += [archive, *(archive.with_name(archive.name + suffix) for suffix in (".sha256", ".intoto.jsonl"))]
    if (path.parent / SWEEP_RECORD).is_file():
        roots.append(path.parent)
    return roots


def csv_target(csv_path: str | Path, inputs=(), force: bool = False) -> Path:
    """Where ``--csv`` writes, checked before anything is read: a file in an existing directory that is
    not an input, lies in no input's bundle or sweep directory (never, not even with ``force``), and is
    not an existing file unless ``force``."""
    path = Path(csv_path)
    if path.is_dir():
        raise CompareError(f"--csv {path}: is a directory; name the file to write (such as {path / 'compare.csv'})")
    if not path.parent.is_dir():
        raise CompareError(f"--csv {path}: no directory {path.parent} to write it in")
    resolved = path.resolve()
    for given in inputs:
        for root in _evidence_roots(Path(given)):
            if resolved == root or root in resolved.parents:
                what = "is" if resolved == Path(given).resolve() else f"is {root} or in it, the evidence of"
                raise CompareError(f"--csv {path}: {what} the input {given}; the comparison never overwrites "
                                   "evidence: write it elsewhere (such as ./compare.csv)")
    if path.exists() and not force:
        raise CompareError(f"--csv {path}: the file exists; name a new file, or --force to replace it")
    return path


# ---- what makes inputs comparable ----------------------------------------------------------------

def _evaluations(data: BundleData, fields: tuple[str, ...]) -> tuple[tuple, str]:
    """The distinct values of ``fields`` over the accepted runs' evaluations: a key and how to show it."""
    found = sorted({tuple(str(entry.get(f)) for f in fields) for run in data.accepted
                    for entry in data.evals.get(run, {}).values()})
    shown = " | ".join(", ".join(f"{f} {v[:12] if f == 'subset_sha256' else v}" for f, v in zip(fields, values))
                       for values in found)
    return tuple(found), shown or "no evaluation"


# Each fact two inputs' numbers must share to be compared: its name, and its key and shown value.
COMPARABLE = {
    "workload": lambda data: (str(data.sweep.get("workload")), repr(data.sweep.get("workload"))),
    "steps": lambda data: (data.n_updates, str(data.n_updates)),
    "eval subset": lambda data: _evaluations(data, ("subset_sha256", "n_prompts")),
    "eval sampling": lambda data: (tuple(sorted(_sampling(data).items())),
                                   ", ".join(f"{f} {v}" for f, v in _sampling(data).items()) or "no evaluation"),
}
# The evaluation settings a run's config records that are not its sampling's identity: how often it evaluates
# during training (the final numbers do not depend on it), and the subset's size (fact "eval subset").
_NOT_SAMPLING = {"every", "n_prompts", "k", "seed"}  # k and the seed: read from the evaluations themselves


def _sampling(data: BundleData) -> dict[str, str]:
    """What determines an input's evaluation numbers besides its subset: k and the evaluation seed its
    evaluations state, and every setting of its runs' ``workload.eval`` (temperature, top_k, top_p, the
    response length, ...); each field's distinct values over the accepted runs, joined."""
    values: dict[str, set[str]] = {}
    for run in data.accepted:
        for entry in data.evals.get(run, {}).values():
            for name in ("k", "eval_seed"):
                values.setdefault(name, set()).add(str(entry.get(name)))
        config = (data.runs.get(run) or {}).get("config") or {}
        settings = (config.get("workload") or {}).get("eval") if isinstance(config, dict) else None
        for name, value in (settings or {}).items() if isinstance(settings, dict) else ():
            if name not in _NOT_SAMPLING:
                values.setdefault(str(name), set()).add(str(value))
    return {name: "|".join(sorted(found)) for name, found in values.items()}


def _labels(sides: list[Side]) -> list[str]:
    return ["A", "B"] if len(sides) == 2 else [side.name for side in sides]


def differences(sides: list[Side], arms: list[str]) -> list[str]:
    """Every fact of ``COMPARABLE`` the inputs differ in, and every arm of ``arms`` whose trainer
    differs, each as ``fact (A value; B value)``."""
    labels, found = _labels(sides), []
    for fact, read in COMPARABLE.items():
        values = [read(side.data) for side in sides]
        if len({key for key, _ in values}) > 1 and fact == "eval sampling":  # only the fields that differ
            fields = [dict(key) for key, _ in values]
            differ = [f for f in dict.fromkeys(f for each in fields for f in each)
                      if len({each.get(f, "—") for each in fields}) > 1]
            found.append(f"{fact} ({'; '.join(label + ' ' + ', '.join(f'{f} {each.get(f, chr(8212))}' for f in differ) for label, each in zip(labels, fields))})")
        elif len({key for key, _ in values}) > 1:
            found.append(f"{fact} ({'; '.join(f'{label} {shown}' for label, (_, shown) in zip(labels, values))})")
    by_trainers: dict[str, list[str]] = {}  # arms whose trainers differ alike are named together
    for arm in arms:
        trainers = [(label, trainer_of(side.data, arm) or PROOFGRID_TRAINER)
                    for label, side in zip(labels, sides) if arm in side.data.arms]
        if len({trainer for _, trainer in trainers}) > 1:
            by_trainers.setdefault("; ".join(f"{label} {t}" for label, t in trainers), []).append(arm)
    found += [f"the trainer of {', '.join(named)} ({shown})" for shown, named in by_trainers.items()]
    return found


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# ---- the comparison ------------------------------------------------------------------------------

def ratio(a: float | None, b: float | None) -> float | None:
    """B/A of the across-seed means, only when both are positive: for negative values a ratio reads
    against the change (A −0.1, B −0.18 gives 1.8x while B is lower by 80 % of |A|), and across a
    sign change it has no meaning. None otherwise (B − A still says it)."""
    return None if a is None or b is None or a <= 0 or b <= 0 else b / a


def change_pct(a: float | None, b: float | None) -> float | None:
    """Relative change (B − A) / |A| · 100, its sign that of B − A (002: pass@1 0.444 -> 0.386 is −13 %;
    a loss −0.1 -> −0.18 is −80 %: lower by 80 % of |A|). None when A is 0 or A and B differ in sign,
    where a percentage of |A| says nothing (read B − A)."""
    if a is None or b is None or a == 0 or a * b < 0:
        return None
    return (b - a) / abs(a) * 100


def sign_change(a: float | None, b: float | None) -> bool:
    """Whether A and B lie on opposite sides of 0 (no ratio or % then)."""
    return a is not None and b is not None and a * b < 0


def compare_arm(measure: Measure, arm: str, a: BundleData, b: BundleData) -> dict:
    """One table row: the measure of ``arm`` in A and in B, and B − A by seed where the seeds match.
    ``notes`` lists what a reader must know about the row (the CSV's ``note`` joins them with "; ")."""
    values_a, values_b = arm_values(a, measure, arm), arm_values(b, measure, arm)
    sum_a, sum_b = descriptive.across_seeds(list(values_a.values())), descriptive.across_seeds(list(values_b.values()))
    scale = POINTS_PER_UNIT if measure.is_rate else 1.0
    row = {"metric": measure.metric, "at": measure.at, "last_k": measure.last_k if measure.at == LAST_K else None,
           "arm": arm, "n_a": sum_a.n, "n_b": sum_b.n, "a_mean": sum_a.mean, "a_sd": sum_a.sd,
           "b_mean": sum_b.mean, "b_sd": sum_b.sd, "ratio_b_over_a": ratio(sum_a.mean, sum_b.mean),
           "change_pct": change_pct(sum_a.mean, sum_b.mean),
           "change_points": None if not measure.is_rate or sum_a.n == 0 or sum_b.n == 0
           else (sum_b.mean - sum_a.mean) * POINTS_PER_UNIT,
           "diff_units": "points" if measure.is_rate else "units", "pairing": "", "n_pairs": 0,
           "diff_mean": None, "diff_sd": None, "ci_low": None, "ci_high": None, "mde": None, "boot_low": None,
           "boot_high": None, "boot_method": None, "boot_resamples": None, "boot_seed": None}
    notes = row["notes"] = []
    if not values_a or not values_b:
        side, data = ("A", a) if not values_a else ("B", b)
        logs = measure.is_eval or measure.metric in logged_metrics(data)
        notes.append(f"no accepted run in {side}" if logs or not data.accepted else f"{side} does not log {measure.metric}")
    elif set(values_a) == set(values_b):
        paired = descriptive.paired_difference({s: scale * v for s, v in values_b.items()},
                                         {s: scale * v for s, v in values_a.items()}, a.ci_level)
        row.update(pairing="paired", n_pairs=paired.summary.n, diff_mean=paired.summary.mean,
                   diff_sd=paired.summary.sd)
        grid = _evaluation_grid(measure, arm, a, b, scale)
        withheld = _withheld(list(paired.by_seed.values()), *grid)
        if paired.interval and not withheld:
            row["ci_low"], row["ci_high"] = paired.interval
            row.update(_beside_the_interval(list(paired.by_seed.values()), paired.summary, a.ci_level))
        elif paired.interval:
            notes.append(withheld)
        else:
            notes.append("one seed: no SD or interval")
    else:
        welch = descriptive.welch_difference([scale * v for v in values_a.values()],
                                       [scale * v for v in values_b.values()], a.ci_level)
        row.update(pairing="unpaired", diff_mean=welch.mean)
        found = claims.unpaired_shortfalls([scale * v for v in values_a.values()], [scale * v for v in values_b.values()],
                                           *_evaluation_grid(measure, arm, a, b, scale))  # all in the row's units
        if welch.interval and not found:
            row["ci_low"], row["ci_high"] = welch.interval
        seeds = f"seeds differ (A {', '.join(map(str, values_a))}; B {', '.join(map(str, values_b))}): unpaired"
        notes.append(f"{seeds}; {claims.missing_sentence(found)}" if found else f"{seeds}, Welch interval")
    if sign_change(sum_a.mean, sum_b.mean):
        notes.append("A and B differ in sign: no B/A or %; read B − A")
    row["note"] = "; ".join(notes)
    return row


def _evaluation_grid(measure: Measure, arm: str, a: BundleData, b: BundleData,
                     scale: float) -> tuple[float | None, int | None]:
    """What the claims' rules read of an evaluation measure over both inputs' final evaluations of ``arm``, in the
    row's units: its coarsest grid (``claims.evaluation_step``, for a column the responses give per prompt:
    pass@j, a binary reward's mean) and the fewest prompts an evaluation scored; (None, None) for a training
    metric. (Two inputs' evaluations are not one block of questions: their evaluation noise is not checked.)"""
    if not measure.is_eval:
        return None, None
    name = measure.metric.removeprefix(EVAL_PREFIX)
    finals, j = [], None
    for data in (a, b):
        runs = [r for r in data.evals if r[0] == arm]
        finals += final_evaluations(data, runs)
        j = j or per_prompt_j(data, name, runs)
    n_prompts = min((int(e["n_prompts"]) for e in finals), default=None)
    if j is None or not finals or any(int(e["k"]) < j for e in finals):
        return None, n_prompts
    return scale * max(claims.evaluation_step(int(e["n_prompts"]), int(e["k"]), j) for e in finals), n_prompts


def _withheld(differences: list[float], step: float | None = None, n_prompts: int | None = None) -> str:
    """What the claims' rules find missing for a paired interval of ``differences`` (``claims.too_few_seeds``,
    ``claims.tied_evaluations``: fewer than 3 seeds, tied differences), in their words, or "" when the interval (and
    the MDE and bootstrap interval beside it) may be shown: "tied evaluations: no interval; run more evaluation
    prompts" instead of a point [25, 25] (issue 32 §1)."""
    design = claims.PairedDesign(tuple(differences), step, n_prompts)
    found = [s for s in (claims.too_few_seeds(design), claims.tied_evaluations(design), claims.single_prompt(design))
             if s is not None]
    return claims.missing_sentence(found) if found else ""


def _beside_the_interval(differences: list[float], summary: descriptive.Summary, level: float) -> dict:
    """What the report's paired table gives beside a t-interval (``evidence.statistics``): the minimum detectable
    effect at 80 % power and α = 1 − ``level`` from the differences' SD and n, and the paired bootstrap interval
    (resampling the seeds with their pairs), its method, resamples and seed."""
    low, high = paired_bootstrap_interval(differences, level)
    return {"mde": minimum_detectable_effect(summary.sd, summary.n, 1 - level, MDE_POWER), "boot_low": low,
            "boot_high": high, "boot_method": BOOTSTRAP_METHOD, "boot_resamples": BOOTSTRAP_RESAMPLES,
            "boot_seed": BOOTSTRAP_SEED}


def _check_comparable(sides: list[Side], arms: list[str], force: bool) -> list[str]:
    """The differences that make the inputs incomparable (``differences``): refused unless ``force``,
    returned (to be said with the table) when forced."""
    found = differences(sides, arms)
    if found and not force:
        who = "A and B" if len(sides) == 2 else "the inputs"
        raise CompareError(f"{who} differ in {_listed(found)}: not comparable (--force compares them anyway)")
    return found


def compare(a: Side, b: Side, measures: list[Measure], force: bool = False) -> list[dict]:
    """Every (measure, common arm) row; refuses incomparable inputs or no common arm unless ``force``."""
    common = [arm for arm in arm_order(a.data) if arm in b.data.arms]
    _check_comparable([a, b], common, force)
    if not common and not force:
        raise CompareError(f"no arm in both (A: {', '.join(a.data.arms)}; B: {', '.join(b.data.arms)}); "
                           f"--force prints the empty comparison")
    return [compare_arm(m, arm, a.data, b.data) for m in measures for arm in common]


def shared_arms(sides: list[Side]) -> list[str]:
    """Arms that at least two inputs ran: the first input's in its order, then each later one's new arms."""
    seen: list[str] = []
    for side in sides:
        seen += [arm for arm in arm_order(side.data) if arm not in seen]
    return [arm for arm in seen if sum(arm in side.data.arms for side in sides) >= 2]


def compare_many(sides: list[Side], measures: list[Measure], force: bool = False) -> list[dict]:
    """Rows of the table across inputs: one per (measure, arm, input), each with its difference from
    the first input (in points for rates) and the change in % by the same rule as ``change_pct``."""
    arms = shared_arms(sides)
    _check_comparable(sides, arms, force)
    if not arms and not force:
        listed = "; ".join(f"{side.name}: {', '.join(side.data.arms)}" for side in sides)
        raise CompareError(f"no arm in two inputs or more ({listed}); --force prints the empty comparison")
    rows = []
    for measure in measures:
        scale = POINTS_PER_UNIT if measure.is_rate else 1.0
        for arm in arms:
            summaries = [descriptive.across_seeds(list(arm_values(side.data, measure, arm).values()))
                         if arm in side.data.arms else descriptive.Summary(0, None, None) for side in sides]
            first = summaries[0].mean
            for number, (side, summary) in enumerate(zip(sides, summaries), start=1):
                later = number > 1 and first is not None and summary.mean is not None
                rows.append({
                    "metric": measure.metric, "at": measure.at,
                    "last_k": measure.last_k if measure.at == LAST_K else None, "arm": arm, "input": number,
                    "name": side.name, "n": summary.n, "mean": summary.mean, "sd": summary.sd,
                    "diff_vs_first": (summary.mean - first) * scale if later else None,
                    "diff_units": "points" if measure.is_rate else "units",
                    "change_pct_vs_first": change_pct(first, summary.mean) if later else None,
                    "notes": [] if arm in side.data.arms else ["arm not in this input"]})
                rows[-1]["note"] = "; ".join(rows[-1]["notes"])
    return rows


# ---- output ----------------------------------------------------------------------------------------

def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _interval(low: float | None, high: float | None) -> str:
    """In significant figures as the means are (fixed decimals print [0.0000, 0.0000] for a loss of 1e-6)."""
    return "—" if low is None else f"[{_num(low)}, {_num(high)}]"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.4g}"


def _metric_label(row: dict) -> str:
    return f"{row['metric']} (final)" if row["at"] == "final" else f"{row['metric']} (last-{row['last_k']} mean)"


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


class _Notes:
    """Footnotes said once under the table, each cell naming its number ([1])."""

    def __init__(self):
        self.texts: list[str] = []

    def mark(self, texts: list[str]) -> str:
        for text in texts:
            if text not in self.texts:
                self.texts.append(text)
        return "".join(f" [{self.texts.index(text) + 1}]" for text in texts)

    def lines(self) -> list[str]:
        return [f"[{number}] {text}" for number, text in enumerate(self.texts, start=1)]


LEGEND = ("B/A: ratio of the across-seed means, shown when both are positive. Change: (B − A) / |A| in %, "
          "its sign that of B − A (−80 % = B lower by 80 % of |A|, for a negative loss: more negative), "
          "not shown when A is 0 or A and B differ in sign; in points (100 × the difference) for rates. "
          "B − A: per seed when both ran the same seeds (paired: mean ± SD, t-interval), else the "
          "difference of the means (unpaired, Welch interval). Paired only: MDE, the smallest true B − A a "
          f"two-sided paired t-test at α = 1 − the interval's level detects with {MDE_POWER * 100:g} % power "
          "(noncentral t, from the differences' SD and n), and the bootstrap interval, resampling the seeds with "
          f"their pairs ({BOOTSTRAP_RESAMPLES} resamples, {BOOTSTRAP_METHOD}, seed {BOOTSTRAP_SEED}), in B − A's units. "
          "None of the three from fewer than 3 paired seeds or tied differences, and no Welch interval from fewer "
          "than 3 seeds in an arm or values tied in both (the report's claims rules): the row's note says what is "
          "missing.")
LEGEND_MANY = ("Each input after the first: mean ± SD (n), then its difference from the first input (in points "
               "for rates) and the change (B − A) / |A| in %, shown when both have the same sign.")


def _describe(label: str, side: Side) -> str:
    sweep = side.data.sweep
    return (f"- {label}: {side.name}: workload {sweep.get('workload', '—')}, commit "
            f"{str(sweep.get('source_commit') or '—')[:12]}, seeds {', '.join(map(str, sweep.get('seeds', [])))}, "
            f"{len(side.data.accepted)} accepted run(s)"
            + (f"; compared with --force although its audit has {len(side.audited)} finding(s), first: "
               f"{side.audited[0]}" if side.audited else ""))


def _one_sided(a: Side, b: Side) -> list[str]:
    """The arms that only one input ran: named, so that a row missing from the table is not a surprise."""
    lines = []
    for label, side, other in (("A", a, b), ("B", b, a)):
        alone = [arm for arm in arm_order(side.data) if arm not in other.data.arms]
        if alone:
            lines.append(f"- not compared (only in {label}): {', '.join(alone)}")
    return lines


def _forced(found: list[str]) -> list[str]:
    return [f"- compared with --force although they differ in {_listed(found)}"] if found else []


def markdown(a: Side, b: Side, rows: list[dict], level: float, forced: list[str] = ()) -> str:
    """The table as markdown: one line per (measure, arm); notes shared by rows are said once below."""
    out = [f"# Compare A = {a.name} -> B = {b.name}\n", _describe("A", a), _describe("B", b), *_forced(forced),
           *_one_sided(a, b), ""]
    if not rows:
        out.append("_No arm in both inputs: nothing to compare._")
        return "\n".join(out) + "\n"
    out.append(f"| Metric | Arm | A | B | B/A | Change | B − A (mean ± SD) | {level * 100:g}% t-interval | "
               f"MDE ({MDE_POWER * 100:g}% power) | Bootstrap {level * 100:g}% interval | Pairing |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    notes = _Notes()
    for r in rows:
        change = "—" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%"
        if r["change_points"] is not None:
            change += f" ({r['change_points']:+.2f} points)"
        units = " points" if r["diff_units"] == "points" else ""
        diff = "—" if r["diff_mean"] is None else _signed(r["diff_mean"]) + (
            f" ± {r['diff_sd']:.4g}" if r["diff_sd"] is not None else "") + units
        interval = _interval(r["ci_low"], r["ci_high"])
        pairing = f"{r['pairing']} (n={r['n_pairs']})" if r["pairing"] == "paired" else r["pairing"] or "—"
        pairing += notes.mark(r["notes"])
        out.append(_md_row([_metric_label(r), r["arm"], _num(r["a_mean"]), _num(r["b_mean"]),
                            "—" if r["ratio_b_over_a"] is None else f"{r['ratio_b_over_a']:.3g}x", change, diff,
                            interval, _num(r["mde"]), _interval(r["boot_low"], r["boot_high"]), pairing]))
    out += ["", LEGEND, *([""] + notes.lines() if notes.texts else [])]
    return "\n".join(out) + "\n"


def _many_cell(row: dict) -> str:
    if row["mean"] is None:
        return "—"
    text = _num(row["mean"]) + (f" ± {row['sd']:.4g}" if row["sd"] is not None else "") + f" (n={row['n']})"
    if row["diff_vs_first"] is not None:
        units = " points" if row["diff_units"] == "points" else ""
        change = "" if row["change_pct_vs_first"] is None else f", {row['change_pct_vs_first']:+.1f}%"
        text += f"; {_signed(row['diff_vs_first'])}{units}{change}"
    return text


def markdown_many(sides: list[Side], rows: list[dict], forced: list[str] = ()) -> str:
    """The table across inputs: one line per (measure, arm), one column per input."""
    out = [f"# Compare {len(sides)} inputs (differences from input 1)\n",
           *(_describe(str(number), side) for number, side in enumerate(sides, start=1)), *_forced(forced), ""]
    if not rows:
        out.append("_No arm in two inputs or more: nothing to compare._")
        return "\n".join(out) + "\n"
    out.append(_md_row(["Metric", "Arm", *(f"{n}: {side.name}" for n, side in enumerate(sides, start=1))]))
    out.append("|" + "|".join("---" for _ in range(len(sides) + 2)) + "|")
    notes = _Notes()
    for start in range(0, len(rows), len(sides)):
        group = rows[start:start + len(sides)]
        out.append(_md_row([_metric_label(group[0]), group[0]["arm"],
                            *(_many_cell(r) + notes.mark(r["notes"]) for r in group)]))
    out += ["", LEGEND_MANY, *([""] + notes.lines() if notes.texts else [])]
    return "\n".join(out) + "\n"


COLUMNS_MANY = ("metric", "at", "last_k", "arm", "input", "name", "n", "mean", "sd", "diff_vs_first", "diff_units",
                "change_pct_vs_first", "note")


def compare_paths(path_a, path_b, metrics: list[str] | None = None, last_k: int = descriptive.DEFAULT_LAST_K,
                  force: bool = False, csv_path: str | Path | None = None, more=(),
                  smallest_difference: float | None = None) -> str:
    """Load, compare, write the CSV if asked; returns the markdown. With ``more`` paths beyond A and B,
    the table across all of them; with two, beneath the table the question-level lines
    (``evidence.question_compare``: ``smallest_difference`` in points, else A's). Raises ``CompareError`` (one line)."""
    names = list(dict.fromkeys(list(DEFAULT_METRICS) + list(metrics or [])))
    try:
        measures = [parse_measure(name, None, None if name.startswith(EVAL_PREFIX) else last_k) for name in names]
    except ValueError as exc:
        raise CompareError(f"--metric: {exc}") from None
    paths = (path_a, path_b, *more)
    target = None if csv_path is None else csv_target(csv_path, paths, force)
    labels = ["A", "B"] if len(paths) == 2 else [f"input {n}" for n in range(1, len(paths) + 1)]
    sides = [load_side(path, last_k, label) for path, label in zip(paths, labels)]
    audit_inputs(paths, labels, sides, force)
    check_metrics(measures, list(metrics or []), sides)
    try:
        if len(sides) == 2:
            rows = compare(sides[0], sides[1], measures, force)
            forced = differences(sides, [arm for arm in arm_order(sides[0].data) if arm in sides[1].data.arms])
            text, columns = markdown(sides[0], sides[1], rows, sides[0].data.ci_level, forced), COLUMNS
            from evidence.tools.question_compare import (
                question_lines,  # the question as the unit: above the tables
            )

            text += "".join(line + "\n" for line in question_lines(
                sides[0].data, sides[1].data, [arm for arm in arm_order(sides[0].data) if arm in sides[1].data.arms],
                None if smallest_difference is None else smallest_difference / POINTS_PER_UNIT))
        else:
            rows = compare_many(sides, measures, force)
            text, columns = markdown_many(sides, rows, differences(sides, shared_arms(sides))), COLUMNS_MANY
    except READ_ERRORS as exc:  # runs' records no build writes
        raise CompareError(f"cannot compare the inputs' runs ({exc.__class__.__name__}: {exc}); audit them "
                           "with `python -m evidence audit`") from None
    if target is not None:
        try:
            target.write_text(csv_text(columns, rows), encoding="utf-8")
        except OSError as exc:
            raise CompareError(f"--csv {target}: cannot write it ({exc.strerror or exc.__class__.__name__})") from None
    return text
