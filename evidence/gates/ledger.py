"""A run's data ledger (``facts.ledger_format``): across every resume and requeue, the run consumed exactly its planned
training rows, in order, ran every step once, and its metrics log is the one its trainer recorded.

Read in file order, a start line at step ``r`` supersedes the lines of steps ``r`` on (a resumed process runs them
again); the lines that remain are the run's steps. Each is held to the chain (``facts.ledger_format.chain`` of the step
before it: an edited, reordered or inserted line breaks it), to the plan (the chain the process's plan gives at that
step: rows that are not the planned ones, or not in the planned order), and to ``metrics.jsonl`` (the digest of the
values the step logged: a metrics log copied from another run, or edited, differs). Every process must have planned
the run ``run.json`` declares (a training split or order changed on resume plans other rows) and carry the same job
nonce (one job's processes); a resume past a step nobody ran skips it; a completed run ran steps ``0 .. n - 1`` and
its last chain is its plan's. The build's gate (``evidence.gates.index``) and the audit (``evidence.audit.runs``, and the
certificates' run check) call ``check_ledger``; the certificates read each job's start lines (``read_ledger``) as
evidence of which processes wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evidence.problems import Problem, capped
from facts import RUN_RECORD, loads_strict
from facts.data_parallel_ranks import step_digest
from facts.files import DATA_LEDGER
from facts.ledger_format import LEDGER_FIELD, START, chain, genesis
from facts.states import RUN_COMPLETED
from facts.sweep_plan import JOB_NONCE_FIELD

KIND = "ledger"
DECLARED = ("plan_sha256", "n_steps", "rows_per_step", "train_sha256")  # run.json's declaration each start repeats


@dataclass
class Ledger:
    """A ledger as read: its start lines (line number, record) and its effective steps (step -> the line number and
    record of the line that stands for it: the last process's that ran it), and what is malformed in it."""

    starts: list[tuple[int, dict]] = field(default_factory=list)
    steps: dict[int, tuple[int, dict]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def ran(self) -> list[dict]:
        """The step records of steps 0, 1, ... up to the first step no process ran."""
        out = []
        while len(out) in self.steps:
            out.append(self.steps[len(out)][1])
        return out


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _step_line_problem(record: dict, rows_per_step) -> str | None:
    rows = record.get("rows")
    if not isinstance(rows, list) or not all(_is_int(r) and r >= 0 for r in rows):
        return "not a step record: rows must be a list of row indices"
    if _is_int(rows_per_step) and len(rows) != rows_per_step:
        return f"{len(rows)} rows, but the run takes {rows_per_step} per step"
    if not all(isinstance(record.get(k), str) for k in ("rows_sha256", "chain", "metrics")):
        return "not a step record: rows_sha256, chain and metrics must be digests"
    return None


def read_ledger(path: Path, rel: str, declared: dict | None = None) -> Ledger:
    """The ledger at ``path`` (``rel`` names it in a problem), its steps resolved across resumes; ``declared`` is
    run.json's ``data_ledger`` (the rows per step and the split the chain starts from)."""
    declared = declared or {}
    ledger = Ledger()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        ledger.problems.append(Problem(rel, f"missing or unreadable, but {RUN_RECORD} declares the run's data "
                                            f"ledger ({LEDGER_FIELD})", kind=KIND))
        return ledger
    add = ledger.problems.append
    expected = 0  # the step the current process runs next
    for number, line in enumerate(lines, start=1):
        where = f"line {number}"
        try:
            record = loads_strict(line)
        except ValueError:
            add(Problem(rel, "not valid JSON", where=where, kind=KIND))
            continue
        if not isinstance(record, dict):
            add(Problem(rel, "not a start or step record", where=where, kind=KIND))
            continue
        if START in record:
            start = record[START]
            resumed = start.get("resumed_from") if isinstance(start, dict) else None
            if not _is_int(resumed) or resumed < 0:
                add(Problem(rel, "not a start record: resumed_from must be a step", where=where, kind=KIND))
                continue
            if not ledger.starts and resumed != 0:
                add(Problem(rel, f"the first process starts at step {resumed}: {_span(0, resumed)} is recorded by "
                                 "no process", where=where, kind=KIND))
            elif resumed > (done := len(ledger.ran())):
                add(Problem(rel, f"a process resumed at step {resumed}, but {_span(done, resumed)} never ran (no "
                                 "process recorded it): a skipped step", where=where, kind=KIND))
            ledger.starts.append((number, start))
            ledger.steps = {s: v for s, v in ledger.steps.items() if s < resumed}
            expected = resumed
            continue
        if not ledger.starts:
            add(Problem(rel, "a step before any process's start line", where=where, kind=KIND))
            continue
        step = record.get("step")
        if not _is_int(step):
            add(Problem(rel, "not a start or step record", where=where, kind=KIND))
            continue
        if step != expected:
            add(Problem(rel, f"step {step} where step {expected} was next (a skipped, repeated or reordered step)",
                        where=where, kind=KIND))
            continue
        if (bad := _step_line_problem(record, declared.get("rows_per_step"))) is not None:
            add(Problem(rel, bad, where=f"{where}, step {step}", kind=KIND))
            continue
        expected = step + 1
        before = ledger.steps.get(step - 1)
        previous = before[1]["chain"] if before else genesis(declared.get("train_sha256")) if step == 0 else None
        if previous is not None and record["chain"] != chain(previous, step, record["rows"], record["rows_sha256"]):
            add(Problem(rel, "its chain does not follow from the steps before it (a line edited, reordered or "
                             "inserted)", where=f"{where}, step {step}", kind=KIND))
        elif record.get("plan") != record["chain"]:
            add(Problem(rel, f"consumed rows {record['rows']} that are not the planned ones (the plan's chain there "
                             f"is {str(record.get('plan'))[:12]}, the rows consumed give {record['chain'][:12]}): "
                             "other rows, or another order", where=f"{where}, step {step}", kind=KIND))
        ledger.steps[step] = (number, record)
    return ledger


def check_ledger(records_dir: Path, run_summary: dict | None, metrics: list[dict], prefix: str = "run/",
                 name: str = DATA_LEDGER) -> list[Problem]:
    """Problems with the data ledger of one run: ``records_dir`` holds it (``prefix`` is how a problem names that
    directory: ``run/`` in a job, ``data/runs/<job>/`` in a bundle), ``run_summary`` is its run.json, ``metrics``
    its metrics log's records. A run whose run.json declares no ledger (another trainer's, an older run) has none."""
    declared = (run_summary or {}).get(LEDGER_FIELD)
    if declared is None:
        return []
    rel = f"{prefix}{name}"
    if not isinstance(declared, dict) or not isinstance(declared.get("plan_sha256"), str) \
            or not _is_int(declared.get("n_steps")) or not _is_int(declared.get("rows_per_step")):
        return [Problem(f"{prefix}{RUN_RECORD}", f"{LEDGER_FIELD} is not a ledger's declaration (file, plan_sha256, "
                                                 "n_steps, rows_per_step, train_sha256)", kind=KIND)]
    ledger = read_ledger(records_dir / name, rel, declared)
    problems = list(ledger.problems)
    if not ledger.starts:  # no process recorded at all (missing, unreadable): nothing more to compare
        return capped(problems or [Problem(rel, "records no trainer process", kind=KIND)])
    nonces = {start.get(JOB_NONCE_FIELD) for _, start in ledger.starts}
    if len(nonces) > 1:
        problems.append(Problem(rel, f"its processes carry {len(nonces)} job nonces: lines of another job's ledger",
                                kind=KIND))
    for number, start in ledger.starts:
        for key in DECLARED:
            if start.get(key) != declared.get(key):
                what = ("it planned other rows than the run (its training split, or their order, changed on resume)"
                        if key != "n_steps" else "it planned another run length")
                problems.append(Problem(rel, f"the process started at step {start.get('resumed_from')} has {key} "
                                             f"{_short(start.get(key))}, {RUN_RECORD}'s is {_short(declared.get(key))}: "
                                             f"{what}", where=f"line {number}", kind=KIND))
    ran = ledger.ran()
    for step in sorted(s for s in ledger.steps if s >= len(ran)):
        problems.append(Problem(rel, f"records step {step} after a step no process ran", kind=KIND))
    logged = {r["step"]: r for r in metrics if _is_int(r.get("step"))}
    for step, record in sorted(logged.items()):
        if step not in ledger.steps:
            problems.append(Problem(rel, f"records no rows consumed for step {step}, which metrics.jsonl logs",
                                    kind=KIND))
        elif ledger.steps[step][1]["metrics"] != step_digest(record):
            problems.append(Problem(rel, "metrics.jsonl's line is not the values this run's trainer logged at that step "
                                         "(the ledger's digest differs: another run's metrics log, or an edited one)",
                                    where=f"step {step}", kind=KIND))
    for step in sorted(ledger.steps):
        if step not in logged:
            problems.append(Problem(rel, f"records step {step}, which metrics.jsonl does not log", kind=KIND))
    if (run_summary or {}).get("status") == RUN_COMPLETED:
        n = declared["n_steps"]
        if len(ran) != n:
            problems.append(Problem(rel, f"{RUN_RECORD} says completed, but the ledger's processes ran "
                                         f"{len(ran)} of its {n} steps: {_span(len(ran), n)} never ran"
                                    if len(ran) < n else f"records {len(ran)} steps of a run of {n}", kind=KIND))
        elif ran and ran[-1]["chain"] != declared["plan_sha256"]:
            problems.append(Problem(rel, f"the rows the run consumed give chain {ran[-1]['chain'][:12]}, its plan "
                                         f"{declared['plan_sha256'][:12]}: it did not consume its planned rows",
                                    kind=KIND))
    return capped(problems)


def _span(first: int, end: int) -> str:
    """``step 4`` or ``steps 4..6``: the steps ``first .. end - 1``."""
    return f"step {first}" if end - first == 1 else f"steps {first}..{end - 1}"


def _short(value) -> str:
    return value[:12] if isinstance(value, str) and len(value) == 64 else repr(value)
