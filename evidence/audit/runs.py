"""The runs: every accepted run's metrics log passes the validator again and ``steps.csv`` / ``eval.csv``
carry exactly its records; every rank of a run of several reported every step and agrees with it; the
shared initial evaluations are the ones the runs reference; every incident of a run's attempt history
and every rejection has its record in ``incidents.csv``."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from evidence.dataset import EVAL_COLUMNS, EVAL_ID_COLUMNS, BundleData
from evidence.evaluation.shared import shared_initial_dir
from evidence.fileio import JSONError, read_csv, read_json
from evidence.gates.incidents import OPEN, history_incidents, load_user_incidents
from evidence.gates.record_judge import ACCEPTED, JobRecords, judge_records
from evidence.problems import IncidentsFileError, Problem, capped
from facts import EVAL_RECORD, INITIAL_EVAL_DIR, JOB_RUN_DIR
from facts.files import (
    BUNDLE_RUNS_DIR,
    EVAL_TABLE,
    INCIDENTS_FILE,
    INCIDENTS_TABLE,
    INDEX_TABLE,
    JOB_RECORD,
    LOGS_DIR,
    METRICS_LOG,
    STEPS_TABLE,
    TRAINER_LOG,
    bundle_run_dir,
    bundle_run_relpath,
    payload_relpath,
)
from facts.metrics import parse_eval_line


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    try:
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=0)
    except OverflowError:  # an integer no float holds: the metrics validator reports it
        return a == b


def _stray_rows(data_dir: Path, data: BundleData) -> list[Problem]:
    """Rows of steps.csv / eval.csv that belong to no accepted run."""
    problems, accepted = [], set(data.accepted)
    for name in (STEPS_TABLE, EVAL_TABLE):
        _, rows = read_csv(data_dir / name)
        strays = sorted({f"{r.get('arm') or r['algo']}-{r['seed']}" for r in rows
                         if (r.get("arm") or r["algo"], int(r["seed"])) not in accepted})
        problems += [Problem(f"data/{name}", f"rows of {job}, which the index does not accept") for job in strays]
    return problems


def bundled_records(data_dir: Path, job: str, algo: str, seed: int, n_updates: int, caller: str, **more) -> JobRecords:
    """A bundled job's records as the judge of a job's records reads them (``evidence.gates.record_judge``), from
    its copy ``runs/<job>/`` (job.json and the run's files side by side): findings name them relative to the bag
    (``data/runs/<job>/...``); the checkpoint and TensorBoard files are not carried (artifacts.csv lists them)."""
    run = bundle_run_dir(data_dir, job)
    return JobRecords(caller=caller, algo=algo, seed=seed, n_updates=n_updates, job_dir=run, run_dir=run,
                      run_prefix=bundle_run_relpath(job, ""), root=data_dir.parent, job=job,
                      artifacts=more.pop("artifacts", set()), **more)


def _check_records(data_dir: Path, data: BundleData, arm: str, seed: int) -> list[Problem]:
    """The run's records judged again by the gates of ``evidence.gates.record_judge.RECORD_GATES`` the audit of an
    accepted job re-runs (job.json, the metrics log re-validates, run.json, the ledger, the ranks), and steps.csv holds exactly its
    metrics log's records (the log's violations capped, as every finding of one file)."""
    job = f"{arm}-{seed}"
    records = bundled_records(data_dir, job, data.arm_algo(arm), seed, data.n_updates, ACCEPTED, arm=arm)
    failures = judge_records(records)
    log, rel = records.metrics, bundle_run_relpath(job, METRICS_LOG)
    csv_records = {r["step"]: r for r in data.steps.get((arm, seed), [])}
    mismatches = []
    if len(csv_records) != len(log.records):
        mismatches.append(Problem(payload_relpath(STEPS_TABLE), f"{len(csv_records)} rows of {job}, its metrics log has {len(log.records)}"))
    for record in log.records:
        row = csv_records.get(record["step"])
        keys = set(record) | {k for k, v in (row or {}).items() if v is not None}
        if row is None or any(not _close(record.get(k), row.get(k)) for k in keys - {"step"}):
            mismatches.append(Problem(payload_relpath(STEPS_TABLE), f"{job} step {record['step']} differs from {rel}"))
    metrics = [f for f in failures if f.gate == "metrics"]
    named = [replace(p, file=_copy_named(job, p.file)) for f in failures if f.gate != "metrics" for p in f.problems]
    return capped(list(metrics[0].problems) if metrics else []) + capped(mismatches) + named


def _copy_named(job: str, file: str) -> str:
    """A gate's file as the bundle's copy names it: ``job.json`` and ``run/<name>`` (a job directory's names, as the
    build's gates give them) -> ``data/runs/<job>/<name>``; a name already the bundle's stays."""
    if file == JOB_RECORD or file.startswith(f"{JOB_RUN_DIR}/"):
        return bundle_run_relpath(job, file.removeprefix(f"{JOB_RUN_DIR}/"))
    return file


def _check_eval(data_dir: Path, data: BundleData, arm: str, seed: int, referenced: set[str]) -> list[Problem]:
    """eval.csv's rows of the run are its eval.json's entries (its shared initial control is judged with the rest of
    its evaluation, by the evaluations check)."""
    job = f"{arm}-{seed}"
    try:
        summary = read_json(data_dir / BUNDLE_RUNS_DIR / job / EVAL_RECORD)
    except JSONError as exc:
        return [Problem(bundle_run_relpath(job, EVAL_RECORD), str(exc))]
    problems = []
    for kind in ("initial", "final"):
        row = data.evals.get((arm, seed), {}).get(kind)
        entry = summary.get(kind) if isinstance(summary, dict) else None
        if row is None or not isinstance(entry, dict):
            problems.append(Problem(payload_relpath(EVAL_TABLE), f"{job} {kind}: missing row or eval.json entry"))
            continue
        shared_dir = shared_initial_dir(entry)
        if kind == "initial" and shared_dir is not None:
            referenced.add(shared_dir)
        if (row.get("initial_eval") or None) != shared_dir:
            problems.append(Problem(payload_relpath(EVAL_TABLE), f"{job} {kind} initial_eval differs from {bundle_run_relpath(job, EVAL_RECORD)}"))
        for column in EVAL_COLUMNS[len(EVAL_ID_COLUMNS):]:
            if column == "initial_eval":
                continue
            if str(entry.get(column)).lower() != str(row.get(column)).lower() and not (
                    isinstance(entry.get(column), (int, float)) and _close(entry.get(column), row.get(column))):
                problems.append(Problem(payload_relpath(EVAL_TABLE), f"{job} {kind} {column} differs from {bundle_run_relpath(job, EVAL_RECORD)}"))
    return problems


def _stray_initial_evals(data_dir: Path, referenced: set[str]) -> list[Problem]:
    """A shared initial evaluation that no bundled run references.

    A rejected run's evidence is bundled too, and its eval.json may be the only reference (a sweep
    whose every run was rejected); only a directory no bundled run names is a stray."""
    for eval_record in sorted((data_dir / BUNDLE_RUNS_DIR).glob(f"*/{EVAL_RECORD}")):
        try:
            entry = read_json(eval_record)
        except JSONError:
            continue  # an accepted run's unreadable eval.json is reported above; a rejected one's is its reason
        if isinstance(entry, dict) and (shared_dir := shared_initial_dir(entry.get("initial"))) is not None:
            referenced.add(shared_dir)
    return [Problem(f"data/{INITIAL_EVAL_DIR}/{stray.name}", "no bundled run references this initial evaluation")
            for stray in sorted(p for p in (data_dir / INITIAL_EVAL_DIR).glob("*") if p.is_dir())
            if f"{INITIAL_EVAL_DIR}/{stray.name}" not in referenced]


def _check_incidents(data_dir: Path, data: BundleData) -> list[Problem]:
    """Every incident of a job's attempt history, and every rejected job, has its incidents.csv record."""
    problems = []
    recorded = {(r["job"], r["kind"], r["title"]) for r in data.incidents}
    for row in data.index:
        for kind, _, title, _, _ in history_incidents(data_dir / BUNDLE_RUNS_DIR / row["job"]):
            if (row["job"], kind, title) not in recorded:
                problems.append(Problem(payload_relpath(INCIDENTS_TABLE), f"{row['job']}: {kind} incident {title!r} of its "
                                        "attempt history is missing"))
    with_incident = {r["job"] for r in data.incidents}
    problems += [Problem(payload_relpath(INCIDENTS_TABLE), f"rejected job {r['job']} has no incident record")
                 for r in data.index if r["accepted"] != "yes" and r["job"] not in with_incident]
    return problems


def _check_eval_line(data_dir: Path, arm: str, seed: int) -> list[Problem]:
    """The trainer's own log line of its evaluations (``facts.metrics.eval_line``, in logs/trainer.log) states
    the pass@k values eval.json summarises, to the line's 4 decimals (the last such line: the final attempt's)."""
    job = f"{arm}-{seed}"
    log = data_dir / BUNDLE_RUNS_DIR / job / LOGS_DIR / TRAINER_LOG
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines() if log.is_file() else []
        summary = read_json(data_dir / BUNDLE_RUNS_DIR / job / EVAL_RECORD)
    except (OSError, JSONError):
        return []  # _check_eval names an unreadable eval.json
    parsed = [(n, p) for n, line in enumerate(lines, start=1) if (p := parse_eval_line(line)) is not None]
    if not parsed or not isinstance(summary, dict):
        return []
    number, (checkpoint, final, initial) = parsed[-1]
    problems = []
    for kind, logged in (("final", final), ("initial", initial)):
        entry = summary.get(kind) if isinstance(summary.get(kind), dict) else {}
        for key, text in sorted(logged.items()):
            value = entry.get(key)
            shown = f"{value:.4f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)
            if shown != text:
                problems.append(Problem(bundle_run_relpath(job, f"{LOGS_DIR}/{TRAINER_LOG}"),
                                        f"the trainer logged {kind} {key}={text}, eval.json states {shown}",
                                        f"line {number}"))
    return problems


def _check_user_incidents(data_dir: Path, data: BundleData) -> list[Problem]:
    """What the build derives from the bundled incidents.yaml, re-derived: its incidents are incidents.csv's
    ``incidents.yaml`` rows (in order), its exclusions are index.csv's rejections by incidents.yaml, and each
    resolution is attached to an automatic incident of its job. So the file a reviewer reads cannot disagree
    with the tables, and one added to a bundle built without it is a finding."""
    table, yaml_file = payload_relpath(INCIDENTS_TABLE), payload_relpath(INCIDENTS_FILE)
    try:
        user = load_user_incidents(data_dir, {r["job"] for r in data.index})
    except IncidentsFileError as exc:
        return [Problem(yaml_file, f"not a valid incidents file ({exc})")]
    problems = []
    stated = [(r["job"], r["title"], r["evidence_boundary"], r["resolution"])
              for r in data.incidents if r.get("source") == INCIDENTS_FILE]
    derived = [(e.get("job", ""), e["title"], e["evidence"], e["resolution"]) for e in user.incidents]
    for row in [r for r in stated if r not in derived]:
        problems.append(Problem(table, f"incident {row[1]!r} (source {INCIDENTS_FILE}) is not in the bundled "
                                       f"{INCIDENTS_FILE}"))
    for row in [r for r in derived if r not in stated]:
        problems.append(Problem(yaml_file, f"incident {row[1]!r} (job {row[0] or '-'}, evidence {row[2]!r}, "
                                           f"resolution {row[3]!r}) has no incidents.csv record; the build writes one"))
    if not problems and stated != derived:
        problems.append(Problem(table, f"its {INCIDENTS_FILE} incidents are not in the file's order"))
    excluded = user.excluded_jobs
    for row in data.index:
        marker = "excluded by incidents.yaml"
        reason = excluded.get(row["job"])
        if reason is not None and (row["accepted"] == "yes" or f"{marker}: {reason}" not in row["reason"]):
            problems.append(Problem(payload_relpath(INDEX_TABLE), f"{row['job']}: {INCIDENTS_FILE} excludes it "
                                    f"({reason!r}) but index.csv records accepted={row['accepted']}, reason "
                                    f"{row['reason']!r}", kind="rejection"))
        elif reason is None and marker in row["reason"]:
            problems.append(Problem(payload_relpath(INDEX_TABLE), f"{row['job']}: rejected as {row['reason']!r}, "
                                    f"but the bundled {INCIDENTS_FILE} does not exclude it", kind="rejection"))
    automatic = [r for r in data.incidents if r.get("source") == "automatic"]
    for entry in user.resolutions:
        rows = [r for r in automatic if r["job"] == entry["job"] and r["kind"] == entry.get("kind", r["kind"])
                and r["resolution"] not in (OPEN, "the job was accepted afterwards")]
        if not any(entry["resolution"] in r["resolution"].split("; ") for r in rows):
            what = f"{entry['job']}" + (f" ({entry['kind']})" if "kind" in entry else "")
            problems.append(Problem(yaml_file, f"resolution {entry['resolution']!r} of {what} resolves no incident "
                                               f"of incidents.csv (the build attaches it to that job's automatic "
                                               f"incidents)"))
    return problems


def check_runs(data_dir: Path, data: BundleData) -> list[Problem]:
    """Every accepted run re-validates, and steps.csv / eval.csv carry exactly its records (its evaluation is
    judged by the evaluations check, ``evidence.audit.evaluations``)."""
    referenced: set[str] = set()  # the shared initial evaluations a bundled run references
    problems = _stray_rows(data_dir, data)
    for arm, seed in data.accepted:
        problems += _check_records(data_dir, data, arm, seed)
        problems += _check_eval(data_dir, data, arm, seed, referenced)
        problems += _check_eval_line(data_dir, arm, seed)
    problems += _stray_initial_evals(data_dir, referenced)
    return problems + _check_incidents(data_dir, data) + _check_user_incidents(data_dir, data)
