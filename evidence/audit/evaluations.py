"""The evaluations re-derived: every accepted run's evaluation judged by the table of gates the build judged it by
(``evidence.evaluation.judge``: its eval.json's fields and statistics, its shared initial control, its responses
re-scored), on the bundle's copies; every shared initial evaluation of the bundle (and of each earlier stage's)
re-scored response by response against the frozen subset the bundle
carries (``data/eval_subset/<subset12>.json``, its SHA256 the summaries' pinned ``subset_sha256``), each summary's
statistics recomputed from the re-scored rewards, and every stored summary (``eval.json`` entries, ``eval.csv``
rows, the shared evaluations' records, an experiment's ``verdict.json`` per-run values) held to the statistics an
evaluation can have. Each run's responses are re-scored with its own recorded reward (``evidence.evaluation.rewards``): a
user's function only when the reviewer passed it (``--reward``) with the recorded source; else one note."""

from __future__ import annotations

from pathlib import Path

from evidence.dataset import BundleData
from evidence.evaluation.judge import Evaluation, judge_evaluation
from evidence.evaluation.rescore import RESPONSES_MISSING, read_subset, rescored_problems, statistics_problems
from evidence.evaluation.rewards import recorded_reward, rescoring
from evidence.fileio import JSONError, read_json
from evidence.gates.artifacts import final_model_of
from evidence.problems import Problem, VerdictError
from facts import checkpoint_name
from facts.bundle_layout import fits
from facts.evaluation import impossible_value
from facts.files import (
    BUNDLE_PAYLOAD,
    BUNDLE_RUNS_DIR,
    COMMAND_PUBLIC_RECORD,
    EVAL_RECORD,
    EVAL_RESPONSES_DIR,
    EVAL_TABLE,
    INITIAL_EVAL_DIR,
    INITIAL_EVAL_RESPONSES,
    RUN_RECORD,
    STAGES_DIR,
    VERDICT_FILE,
    bundle_subset_relpath,
    eval_responses_name,
)
from facts.reward import is_user_reward
from study.measure import EVAL_PREFIX
from study.spec import parse_experiment


class _Payload:
    """One payload root (``data/`` or ``data/stages/<stage>/``): where its files are, how findings name them,
    and each subset and shared evaluation it has read (once)."""

    def __init__(self, root: Path, prefix: str, notes: list[str] | None = None):
        self.root, self.prefix, self.notes = root, prefix, notes
        self.subsets: dict[str, tuple[dict | None, list[Problem]]] = {}
        self.shared_done: set[str] = set()
        self.shared_checks: dict = {}  # the judge's reading of each shared evaluation, once

    def name(self, rel: str) -> str:
        return f"{self.prefix}/{rel}"

    def scorer(self, record, rel: str):
        """The reward ``record`` (a run.json, a shared evaluation's identity) re-scores with; None, and its note
        (once), when it is a user's function the reviewer did not pass."""
        found = rescoring(record, self.name(rel))
        if found.note is not None and self.notes is not None and found.note not in self.notes:
            self.notes.append(found.note)
        return found.scorer

    def labels(self, digest) -> tuple[dict | None, list[Problem]]:
        """The labels of the subset with this SHA256; its problem the first time it is asked for."""
        key = str(digest)
        if key in self.subsets:
            return self.subsets[key][0], []
        if not isinstance(digest, str) or not fits("subset12", digest[:12]) or len(digest) != 64:
            labels, why, rel = None, f"subset_sha256 {digest!r} is not a SHA256 hex digest", EVAL_TABLE
        else:
            rel = bundle_subset_relpath(digest)
            labels, why = read_subset(self.root / rel, digest)
        problems = [] if why is None else [Problem(self.name(rel), why)]
        self.subsets[key] = (labels, problems)
        return labels, problems


def _responses(payload: _Payload, rel: str) -> tuple[bytes | None, list[Problem]]:
    try:
        return (payload.root / rel).read_bytes(), []
    except OSError:
        return None, [Problem(payload.name(rel), RESPONSES_MISSING)]


def _check_shared(payload: _Payload, shared_dir: str) -> list[Problem]:
    """A shared initial evaluation, once: its record's statistics possible, its responses re-scored."""
    if shared_dir in payload.shared_done or not fits("key12", Path(shared_dir).name):
        return []
    payload.shared_done.add(shared_dir)
    record_rel = f"{shared_dir}/{EVAL_RECORD}"
    try:
        record = read_json(payload.root / record_rel)
        summary = record["initial"]
        if not isinstance(summary, dict):
            raise TypeError
    except (JSONError, KeyError, TypeError):
        return []  # the runs check reports an unreadable or missing shared evaluation
    problems = statistics_problems(summary, payload.name(record_rel), "initial")
    labels, problems_of_subset = payload.labels(summary.get("subset_sha256"))
    responses_rel = f"{shared_dir}/{INITIAL_EVAL_RESPONSES}"
    responses, missing = _responses(payload, responses_rel)
    if labels is None or responses is None:
        return problems + problems_of_subset + missing
    scorer = payload.scorer(record.get("identity") if isinstance(record, dict) else None, record_rel)
    if scorer is None:
        return problems
    return problems + rescored_problems(summary, responses, labels, payload.name(responses_rel),
                                        payload.name(record_rel), "initial", scorer)


# The gates the subsets check judges once per subset file (naming its runs, saying in a note what it cannot
# re-derive) with the same functions: the evaluations check leaves them to it.
SUBSET_GATES = ("eval-setting", "eval-subset-derived")


def _check_run(payload: _Payload, job: str, n_updates: int) -> list[Problem]:
    """An accepted run's evaluation judged by the table of gates the build judged it by
    (``evidence.evaluation.judge``), on the bundle's copies (``bundled_evaluation``); but ``SUBSET_GATES``."""
    run = payload.root / BUNDLE_RUNS_DIR / job
    try:
        record = read_json(run / EVAL_RECORD)
    except JSONError:
        return []  # the runs check reports it
    run_record = read_bundled(run / RUN_RECORD)  # unreadable: the runs check reports it
    command = read_bundled(run / COMMAND_PUBLIC_RECORD)
    evaluation = bundled_evaluation(payload.root, job, record, run_record,
                                    command.get("argv") if isinstance(command, dict) else None,
                                    final_checkpoint_of(run_record, n_updates), payload.shared_checks, payload.prefix,
                                    payload.notes)
    return [p for failure in judge_evaluation(evaluation, elsewhere=SUBSET_GATES) for p in failure.problems]


def _check_payload(payload: _Payload, data: BundleData) -> list[Problem]:
    problems = []
    for (arm, seed), kinds in sorted(data.evals.items()):
        # a user's reward may be graded (its eval.json entries say graded_reward; eval.csv has no such column)
        graded = is_user_reward(recorded_reward(data.runs.get((arm, seed)))["name"])
        for kind, row in sorted(kinds.items()):
            row = {**row, "graded_reward": True} if graded else row
            problems += statistics_problems(row, payload.name(EVAL_TABLE), f"{arm}-{seed} {kind}")
    for row in data.index:
        if row.get("accepted") == "yes":
            problems += _check_run(payload, row["job"], data.n_updates)
    for directory in sorted((payload.root / INITIAL_EVAL_DIR).glob("*")):  # one no accepted run references too
        if directory.is_dir():
            problems += _check_shared(payload, f"{INITIAL_EVAL_DIR}/{directory.name}")
    return _once(problems)


def _once(problems: list[Problem]) -> list[Problem]:
    """Each finding once: a shared evaluation's or a subset's is found again by each run that reads it."""
    seen, found = set(), []
    for problem in problems:
        if (problem.file, problem.where, problem.reason) not in seen:
            seen.add((problem.file, problem.where, problem.reason))
            found.append(problem)
    return found


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_verdict_values(data_dir: Path, data: BundleData) -> list[Problem]:
    """``verdict.json``'s per-run values held to the statistics an evaluation can have, as eval.json's are: with
    an eval criterion, each ``per_seed[i].baseline`` / ``.treatment`` (in the criterion's units) is that
    statistic of the role's run, an evaluation of its eval.csv ``n_prompts`` x ``k`` (``impossible_value``).
    Whether the values are the runs' is the verdict's recomputation (``evidence.verdict.recompute``)."""
    rel = f"{BUNDLE_PAYLOAD}/{VERDICT_FILE}"
    if data.experiment is None or not (data_dir / VERDICT_FILE).is_file():
        return []
    try:
        recorded, criterion = read_json(data_dir / VERDICT_FILE), parse_experiment(data.experiment).criterion
    except (JSONError, VerdictError, TypeError, ValueError):
        return []  # the verdict's recomputation reports an unreadable verdict or spec
    if not criterion.measure.is_eval or not isinstance(recorded, dict) or not isinstance(recorded.get("arms"), dict):
        return []
    name, unit = criterion.measure.metric.removeprefix(EVAL_PREFIX), " points" if criterion.units == "points" else ""
    problems = []
    for i, row in enumerate(recorded.get("per_seed") if isinstance(recorded.get("per_seed"), list) else []):
        for role in ("baseline", "treatment"):
            arm = recorded["arms"].get(role, {}).get("arm") if isinstance(recorded["arms"].get(role), dict) else None
            seed, value = (row.get("seed"), row.get(role)) if isinstance(row, dict) else (None, None)
            entry = data.evals.get((arm, seed), {}).get("final") if isinstance(seed, int) else None
            if entry is None or not _number(value):
                continue  # no such run, or not a number: the recomputation names the field
            rate = value / criterion.scale if criterion.scale == 1 else round(value / criterion.scale, 12)
            problems += [Problem(rel, f"{value!r}{unit}: {reason}", f"per_seed[{i}].{role} ({arm}-{seed} final)")
                         for reason in impossible_value(name, rate, entry.get("n_prompts"), entry.get("k"))]
    return problems


def check_evaluations(data_dir: Path, data: BundleData, notes: list[str] | None = None,
                      shared_checks: dict | None = None) -> list[Problem]:
    """Every evaluation of the bundle and of its earlier stages re-scored, recomputed and held to the
    statistics an evaluation can have, each accepted run's judged by the build's gates, and the per-run values of an
    experiment's verdict held to those statistics (module docstring). ``shared_checks``: the audit's cache, so each
    shared initial evaluation of the bundle is read once."""
    payload = _Payload(data_dir, BUNDLE_PAYLOAD, notes)
    payload.shared_checks = payload.shared_checks if shared_checks is None else shared_checks
    problems = _check_payload(payload, data) + check_verdict_values(data_dir, data)
    for name, stage in sorted(data.stages.items()):
        problems += _check_payload(_Payload(data_dir / STAGES_DIR / name, f"{BUNDLE_PAYLOAD}/{STAGES_DIR}/{name}", notes),
                                   stage)
    return problems


def bundled_evaluation(data_dir: Path, job: str, record, run_record, argv, final_checkpoint: str | None,
                       shared_checks: dict, prefix: str = BUNDLE_PAYLOAD, notes: list[str] | None = None
                       ) -> Evaluation:
    """A bundled run's evaluation as the judge reads it (``evidence.evaluation.judge``), from the bundle's copies in
    ``data_dir`` (``data/``, or an earlier stage's ``data/stages/<stage>/``; ``prefix``: how findings name it): its
    eval.json ``record``, ``run_record`` (run.json), ``argv`` (command.public.json's), its responses under
    ``runs/<job>/eval/``, the frozen subset ``eval_subset/<subset12>.json`` the final summary pins and the shared
    initial evaluation in ``initial_eval/`` (read once per ``shared_checks``, the audit's cache). Findings name
    files relative to the bag."""
    run = f"{BUNDLE_RUNS_DIR}/{job}"

    def subset(digest) -> tuple[Path | None, str]:
        if not isinstance(digest, str) or not fits("subset12", digest[:12]) or len(digest) != 64:
            return None, f"{prefix}/{EVAL_TABLE}"
        return data_dir / bundle_subset_relpath(digest), f"{prefix}/{bundle_subset_relpath(digest)}"

    def responses(kind: str) -> tuple[Path, str]:
        rel = f"{run}/{EVAL_RESPONSES_DIR}/{eval_responses_name(kind)}"
        return data_dir / rel, f"{prefix}/{rel}"

    return Evaluation(record=record, record_file=f"{prefix}/{run}/{EVAL_RECORD}", run_record=run_record,
                      run_record_file=f"{prefix}/{run}/{RUN_RECORD}", argv=argv, final_checkpoint=final_checkpoint,
                      responses=responses, subset=subset, shared_root=data_dir, shared_prefix=f"{prefix}/",
                      shared_checks=shared_checks, notes=notes)


def read_bundled(path: Path):
    """A bundled JSON record, or None when it is missing or does not parse (its own check names it)."""
    try:
        return read_json(path)
    except JSONError:
        return None


def final_checkpoint_of(run_record, n_updates: int) -> str:
    """The checkpoint a run's final evaluation must be of, as the build takes it: run.json's ``final_model`` (a
    trainer that is not proofgrid's), else the last update's."""
    return final_model_of(run_record) or checkpoint_name(n_updates)
