"""The one judge of an evaluation: a table of named gates (``GATES``) that the build's eval gate
(``evidence.gates.artifacts.check_eval``, reading a job's run directory) and the audit (``evidence.audit``,
reading a bundle's copies) both run through ``judge_evaluation``. A new attack on an evaluation is one more
gate here, with a docstring stating its rule; the callers only gather an ``Evaluation`` (where its files are and
what it is judged against) and read the failures.

Gates run in the table's order, by scope: the ``record`` gates on eval.json as a whole, the ``entry`` gates on
each of its entries (``initial``, then ``final``), then the ``evaluation`` gates on the two together. A gate runs
only when the gates it ``requires`` passed (an entry gate: for its entry; otherwise for every entry): the rules
an evaluation is held to stay in one place, and what one cannot be judged without (a subset file that is not
the pinned one re-scores nothing) is stated once too.

Each gate returns the project's one problem shape (``evidence.problems.Problem``), of kind ``eval`` unless it
names its own (``ALL_ZERO_EVAL``: seed 000's rationale-label incident, grouped on its own). The facts the gates
apply (the estimator, the frozen subset's form, which statistics no evaluation can have, what makes a shared
evaluation sound) are ``facts.evaluation``'s: the trainer applies them too.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path

from evidence.evaluation.rescore import RESPONSES_MISSING, read_subset, rescored_problems, statistics_problems
from evidence.evaluation.rewards import rescoring
from evidence.evaluation.shared import check_shared_reference, shared_initial_dir
from evidence.evaluation.subset_source import check_subset, declared_difference, subset_source
from evidence.problems import Problem
from facts import EVAL_RECORD, INITIAL_EVAL_RESPONSES, JOB_RUN_DIR, JOBS_DIR
from facts.bundle_layout import fits
from facts.evaluation import PASS_AT

EVAL_KINDS = ("initial", "final")
EVAL_NUMBER_KEYS = ("pass@1", "truncation", "mean_length", "mean_reward")
EVAL_INT_KEYS = ("n_prompts", "k", "n_responses", "eval_seed")
EVAL_FRACTION_KEYS = ("pass@1", "pass@2", "pass@4", "truncation")
CONTROL_KEYS = ("n_prompts", "k", "eval_seed", "subset_sha256")  # what the control and the final share
# Kinds of failed gate; incidents group by these.
EVAL_KIND = "eval"
ALL_ZERO_EVAL = "all-zero-eval-reward"


@dataclass
class Evaluation:
    """One run's evaluation as its judge reads it, gathered by the build (from the job's run directory) or the
    audit (from a bundle's copies): eval.json's record, what it is judged against, where its files are and how a
    finding names each of them."""

    record: object  # eval.json, parsed
    record_file: str  # how a finding names eval.json
    run_record: object  # run.json, parsed (None: unreadable, its own gate says so)
    run_record_file: str
    argv: object  # command.public.json's argv (None: unreadable)
    final_checkpoint: str | None  # the checkpoint the final evaluation must be of (None: not known)
    responses: Callable[[str], tuple[Path, str]]  # an entry kind -> (its own responses file, its name)
    subset: Callable[[object], tuple[Path | None, str]]  # a subset_sha256 -> (the frozen subset file, its name)
    shared_root: Path | None  # where initial_eval/ lives (a sweep, a bundle's data/); None: the run is in no sweep
    shared_prefix: str = ""  # what a finding puts before a shared evaluation's path (relative to shared_root)
    shared_checks: dict = field(default_factory=dict)  # each shared evaluation read and re-scored once per caller
    expected_responses: int | None = None  # the responses every entry must have (the sweep's plan), if known
    record_error: str | None = None  # why eval.json could not be read
    notes: list[str] | None = None  # where a reward not re-derived is said, once (the audit's notes)
    labels: dict | None = field(default=None, init=False)  # the pinned subset's labels (``eval-subset-pinned``)


@dataclass(frozen=True)
class Gate:
    """A named rule an evaluation is held to: ``check`` returns the problems it finds (its docstring states the
    rule), on ``scope`` ``record`` (``check(evaluation)``), ``entry`` (``check(evaluation, kind, entry)`` for
    each of ``EVAL_KINDS``) or ``evaluation`` (``check(evaluation)``, both entries being objects)."""

    name: str
    check: Callable[..., list[Problem]]
    scope: str
    requires: tuple[str, ...] = ()

    @property
    def rule(self) -> str:
        return inspect.getdoc(self.check) or ""


@dataclass(frozen=True)
class Failure:
    """A gate that failed, and the problems it found (entry gates: one failure per entry)."""

    gate: str
    problems: tuple[Problem, ...]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ---- the gates ------------------------------------------------------------------------------------------

def record_is_an_object(ev: Evaluation) -> list[Problem]:
    """eval.json reads as a JSON object."""
    if ev.record_error is not None:
        return [Problem(ev.record_file, ev.record_error)]
    return [] if isinstance(ev.record, dict) else [Problem(ev.record_file, "not a JSON object")]


def entry_is_present(ev: Evaluation, kind: str, entry) -> list[Problem]:
    """eval.json has an ``initial`` (the initial-checkpoint control) and a ``final`` entry, each an object."""
    return [] if isinstance(entry, dict) else [Problem(ev.record_file, f"no {kind!r} checkpoint entry")]


def fields_are_well_typed(ev: Evaluation, kind: str, entry: dict) -> list[Problem]:
    """An entry's fields: integer counts, finite numbers (pass@j for each j <= k), fractions in [0, 1], a subset
    digest and the all-zero flag."""
    reasons = []
    for key in EVAL_INT_KEYS:
        value = entry.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            reasons.append(f"{kind}.{key} is not an integer")
    k_samples = entry.get("k") if isinstance(entry.get("k"), int) else 0
    for key in EVAL_NUMBER_KEYS + tuple(f"pass@{j}" for j in PASS_AT if 1 < j <= k_samples):
        if not _is_number(entry.get(key)):
            reasons.append(f"{kind}.{key} is not a finite number")
    for key in EVAL_FRACTION_KEYS:
        if key in entry and _is_number(entry[key]) and not 0 <= entry[key] <= 1:
            reasons.append(f"{kind}.{key} is outside [0, 1]")
    if not isinstance(entry.get("subset_sha256"), str) or not entry.get("subset_sha256"):
        reasons.append(f"{kind}.subset_sha256 missing")
    if not isinstance(entry.get("all_zero_reward"), bool):
        reasons.append(f"{kind}.all_zero_reward is not a boolean")
    return [Problem(ev.record_file, reason) for reason in reasons]


def shared_control_is_sound(ev: Evaluation, kind: str, entry: dict) -> list[Problem]:
    """An initial entry that references a shared initial evaluation (``shared``): the run is in a sweep, and
    ``evidence.evaluation.shared.check_shared_reference`` holds (the shared evaluation is there with the SHA256
    and key referenced, sound, computed by a job of the sweep and read by every reader as it is now; it is this
    run's control, and the entry's numbers are its summary). Its own problems are named under its file."""
    if kind != "initial" or "shared" not in entry:
        return []
    if ev.shared_root is None:
        return [Problem(ev.record_file, f"initial.shared: the run directory is not in a sweep (<sweep>/{JOBS_DIR}/<job>/"
                                        f"{JOB_RUN_DIR}), where its shared initial evaluation lives; validate the job "
                                        "inside its sweep")]
    found = check_shared_reference(ev.shared_root, entry, ev.run_record, ev.shared_checks)
    return ([Problem(f"{ev.shared_prefix}{found.shared_file}", reason) for reason in found.of_shared]
            + [Problem(ev.record_file, reason) for reason in found.of_run])


def responses_are_counted(ev: Evaluation, kind: str, entry: dict) -> list[Problem]:
    """``n_responses`` is positive, ``n_prompts x k``, and the number the sweep planned (when known)."""
    n, n_prompts, k = entry.get("n_responses"), entry.get("n_prompts"), entry.get("k")
    if not all(isinstance(v, int) for v in (n, n_prompts, k)):
        return []  # eval-fields names it
    reasons = []
    if n <= 0:
        reasons.append(f"{kind}: no responses")
    elif n != n_prompts * k:
        reasons.append(f"{kind}.n_responses {n} != n_prompts {n_prompts} x k {k}")
    if ev.expected_responses is not None and n != ev.expected_responses:
        reasons.append(f"{kind}.n_responses {n}, expected {ev.expected_responses}")
    return [Problem(ev.record_file, reason) for reason in reasons]


def statistics_are_possible(ev: Evaluation, kind: str, entry: dict) -> list[Problem]:
    """No statistic of the entry is one no evaluation can report (``facts.evaluation.STATISTIC_RULES``)."""
    return statistics_problems(entry, ev.record_file, kind)


def checkpoint_is_the_evaluated_one(ev: Evaluation, kind: str, entry: dict) -> list[Problem]:
    """The initial entry evaluates ``initial``, the final one the run's final checkpoint (when known)."""
    want = "initial" if kind == "initial" else ev.final_checkpoint
    if want is not None and entry.get("checkpoint") != want:
        return [Problem(ev.record_file, f"{kind}.checkpoint is {entry.get('checkpoint')!r}, expected {want!r}")]
    return []


def final_reward_is_not_all_zero(ev: Evaluation, kind: str, entry: dict) -> list[Problem]:
    """The final evaluation's reward is not all zero (its quality metrics would be unusable: seed 000's label
    incident). A weak base model may honestly score 0 on the initial control: that is an anomaly, not a gate."""
    if kind == "final" and (entry.get("all_zero_reward") is True or entry.get("mean_reward") == 0):
        return [Problem(ev.record_file, f"all-zero eval reward on the {kind} checkpoint; quality metrics unusable",
                        kind=ALL_ZERO_EVAL)]
    return []


def control_is_identically_evaluated(ev: Evaluation) -> list[Problem]:
    """The initial control and the final evaluation share prompts, samples, eval seed and frozen subset."""
    initial, final = ev.record["initial"], ev.record["final"]
    return [Problem(ev.record_file, f"initial and final differ in {key}: the control is not identically evaluated")
            for key in CONTROL_KEYS if initial.get(key) != final.get(key)]


def subset_is_the_pinned_one(ev: Evaluation) -> list[Problem]:
    """The frozen subset file hashes to the final summary's ``subset_sha256`` and reads as a subset (its labels
    are what every response is re-scored against)."""
    digest = ev.record["final"].get("subset_sha256")
    path, name = ev.subset(digest)
    if path is None:
        return [Problem(name, f"subset_sha256 {digest!r} is not a SHA256 hex digest")]
    ev.labels, why = read_subset(path, digest)
    return [] if ev.labels is not None else [Problem(name, why)]


def setting_is_declared(ev: Evaluation) -> list[Problem]:
    """run.json evaluates on the split, rows and reward its workload and command declare
    (``evidence.evaluation.subset_source.declared_difference``)."""
    source = subset_source(ev.run_record) if isinstance(ev.run_record, dict) else None
    if source is None:
        return []  # run.json's gate names an unreadable record
    declared = declared_difference(source, ev.run_record, ev.argv)[0]
    return [] if declared is None else [Problem(ev.run_record_file, declared)]


def subset_is_cut_from_its_split(ev: Evaluation) -> list[Problem]:
    """The frozen subset is the one cut again from the test split run.json pins, where the split with its pinned
    bytes is at hand (``evidence.evaluation.subset_source.check_subset``; the first differing row named)."""
    source = subset_source(ev.run_record) if isinstance(ev.run_record, dict) else None
    if source is None:
        return []
    path, name = ev.subset(ev.record["final"].get("subset_sha256"))
    try:
        stated = path.read_bytes()
    except OSError:
        return []  # eval-subset-pinned has named it
    difference = check_subset(stated, source)[0]
    return [Problem(name, f"{difference}: {source.describe()}")] if difference else []


def responses_rescore(ev: Evaluation) -> list[Problem]:
    """Every response of the final and the initial evaluation re-scored with the run's reward against the pinned
    subset's labels, and each summary's statistics recomputed from the re-scored rewards
    (``evidence.evaluation.rescore``): a shared initial evaluation's responses against its own summary, once per
    ``shared_checks`` (its problems named under its own files). A user's reward the reviewer did not pass is not
    re-derived (``evidence.evaluation.rewards``)."""
    problems = []
    own = _scorer(ev, ev.run_record, ev.run_record_file)
    for kind in EVAL_KINDS:
        entry = ev.record[kind]
        shared_dir = shared_initial_dir(entry) if kind == "initial" else None
        scorer = own
        if shared_dir is None:
            path, name = ev.responses(kind)
            summary_file = ev.record_file
        elif ev.shared_root is None or not fits("key12", Path(shared_dir).name):
            continue  # eval-shared has said where its shared evaluation must be
        else:
            name = f"{ev.shared_prefix}{shared_dir}/{INITIAL_EVAL_RESPONSES}"
            path, summary_file = ev.shared_root / shared_dir / INITIAL_EVAL_RESPONSES, \
                f"{ev.shared_prefix}{shared_dir}/{EVAL_RECORD}"
        cached = path if shared_dir is not None else None  # keyed by its file, as check_shared_reference's
        if cached in ev.shared_checks:
            problems += ev.shared_checks[cached]
            continue
        stated = {k: v for k, v in entry.items() if k != "shared"}
        if cached is not None:  # the shared file's own summary: the run's copy of it is eval-shared's
            shared = ev.shared_checks.get(ev.shared_root / shared_dir / EVAL_RECORD)
            if shared is not None and shared.summary is not None:
                stated = shared.summary
            record = shared.record if shared is not None else None
            scorer = _scorer(ev, record.get("identity") if isinstance(record, dict) else None, summary_file)
        if scorer is None:
            continue  # not re-derived without the reviewer's function: the audit says so
        try:
            found = rescored_problems(stated, path.read_bytes(), ev.labels, name, summary_file, kind, scorer)
        except OSError:
            found = [Problem(name, RESPONSES_MISSING)]
        if cached is not None:
            ev.shared_checks[cached] = found
        problems += found
    return problems


def _scorer(ev: Evaluation, record, where: str):
    """The reward ``record`` (a run.json, a shared evaluation's identity) re-scores with; None, and its note in
    ``ev.notes`` (once), when it is a user's function the reviewer did not pass."""
    found = rescoring(record, where)
    if found.note is not None and ev.notes is not None and found.note not in ev.notes:
        ev.notes.append(found.note)
    return found.scorer


PINNED, SETTING, DERIVED = "eval-subset-pinned", "eval-setting", "eval-subset-derived"

GATES: list[Gate] = [
    Gate("eval-record", record_is_an_object, "record"),
    Gate("eval-entries", entry_is_present, "entry"),
    Gate("eval-fields", fields_are_well_typed, "entry", ("eval-entries",)),
    Gate("eval-shared", shared_control_is_sound, "entry", ("eval-entries",)),
    Gate("eval-responses", responses_are_counted, "entry", ("eval-entries",)),
    Gate("eval-statistics", statistics_are_possible, "entry", ("eval-entries",)),
    Gate("eval-checkpoint", checkpoint_is_the_evaluated_one, "entry", ("eval-entries",)),
    Gate("eval-all-zero", final_reward_is_not_all_zero, "entry", ("eval-entries",)),
    Gate("eval-control", control_is_identically_evaluated, "evaluation", ("eval-entries",)),
    Gate(PINNED, subset_is_the_pinned_one, "evaluation", ("eval-entries",)),
    Gate(SETTING, setting_is_declared, "evaluation", ("eval-entries", PINNED)),
    Gate(DERIVED, subset_is_cut_from_its_split, "evaluation", ("eval-entries", PINNED, SETTING)),
    Gate("eval-rescored", responses_rescore, "evaluation", ("eval-entries", PINNED, SETTING, DERIVED)),
]
"""The gates of an evaluation, in the order they run (a list, so a test can add one for its own duration)."""


def gate_names() -> list[str]:
    """The names of ``GATES``, in order: what the build and the audit judge an evaluation by."""
    return [gate.name for gate in GATES]


def judge_evaluation(ev: Evaluation, go_past: Collection[str] = (), elsewhere: Collection[str] = ()
                     ) -> list[Failure]:
    """Every gate of ``GATES`` that ``ev`` fails, in order, each with its problems (module docstring).
    ``go_past``: gates whose failure does not stop the gates that require them (the audit's rejections check
    passes the one the bundle cannot show, ``eval-setting``: the record or the command may be the edited one,
    and what follows it is still judged). ``elsewhere``: gates the caller reports in a check of its own (the
    audit's subsets check judges a bundle's subset once per file, naming its runs): not run, and stopping
    nothing."""
    failures: list[Failure] = []
    failed: set[str] = set()

    def run(gate: Gate, *args) -> None:
        if gate.name in elsewhere or any(name in failed for name in gate.requires):
            return
        problems = gate.check(ev, *args)
        if problems:
            failures.append(Failure(gate.name, tuple(p if p.kind else replace(p, kind=EVAL_KIND) for p in problems)))
            if gate.name not in go_past:
                failed.add(gate.name if gate.scope != "entry" else f"{gate.name}:{args[0]}")

    def entry_failed(kind: str) -> set[str]:  # the entry gates that failed for this entry, by name
        return {name.partition(":")[0] for name in failed if name.endswith(f":{kind}")}

    for gate in (g for g in GATES if g.scope == "record"):
        run(gate)
    if failed:
        return failures
    for kind in EVAL_KINDS:
        for gate in (g for g in GATES if g.scope == "entry"):
            if not entry_failed(kind) & set(gate.requires):
                run(gate, kind, ev.record.get(kind))
    failed |= {name.partition(":")[0] for name in failed}  # an entry gate failed for one entry: for the evaluation
    for gate in (g for g in GATES if g.scope == "evaluation"):
        run(gate)
    return failures


def evaluation_problems(ev: Evaluation) -> list[Problem]:
    """The problems of every gate ``ev`` fails, in order: what rejects a job in the build."""
    return [problem for failure in judge_evaluation(ev) for problem in failure.problems]
