"""Cherry-picking: a job the index rejects whose bundled evidence passes every gate the bundle can re-check.

A job rejected for a link in its evidence (an ``evidence-link`` incident naming the file) is taken as rejected: the
bundle never carries a link (it is never followed), so the gate cannot be re-checked here, as artifacts.csv's listing
of the checkpoint and TensorBoard files the bundle does not carry is taken as the build states it. The build reads
nothing more of such a job (no responses, no artifacts), so nothing in the bundle can confirm or refute the
rejection: the audit says so in a note per job, which ``audit --strict`` counts as a finding (a forged link incident,
with the files the build would not have copied removed, is how a valid run would be hidden)."""

from __future__ import annotations

from pathlib import Path

from evidence.artifacts import (
    EVIDENCE_LINK,
    check_cleanup,
    check_run_summary,
    check_shared_reference,
    checkpoint_name,
)
from evidence.audit.evaluations import run_evaluation_problems
from evidence.dataset import BundleData, read_csv
from evidence.fileio import JSONError, read_json
from evidence.metrics_log import validate_metrics
from evidence.problems import Problem
from facts.files import (
    BUNDLE_RUNS_DIR,
    CHECKPOINTS_DIR,
    COMMAND_PUBLIC_RECORD,
    EVAL_RECORD,
    INDEX_TABLE,
    JOB_RECORD,
    METRICS_LOG,
    TENSORBOARD_DIR,
    TENSORBOARD_EVENTS,
    WEIGHTS_FILE,
    payload_relpath,
    run_relpath,
)


def _still_rejected(data_dir: Path, data: BundleData, row: dict, majority: tuple | None, artifacts: set[tuple[str, str]],
                    shared_checks: dict) -> list[str]:
    """The gates that still reject ``row``'s job on the evidence the bundle carries (the bundled
    metrics log, run.json, eval.json, its responses re-scored, the shared initial evaluation it references, job.json,
    command.public.json, and artifacts.csv's listing)."""
    job, algo, seed, n = row["job"], row["algo"], int(row["seed"]), data.n_updates
    run = data_dir / BUNDLE_RUNS_DIR / job
    if _link_incident(data, job):
        return [EVIDENCE_LINK]  # a link the bundle cannot show (it never carries one): the incident names the file
    log = validate_metrics(run / METRICS_LOG, algo, n)
    failures = ["metrics"] if log.violations or log.valid_steps != n else []
    run_summary, run_failures = check_run_summary(run, algo, seed, n)
    failures += ["run"] if run_failures else []
    try:
        record, summary, command = (read_json(run / name) for name in (JOB_RECORD, EVAL_RECORD, COMMAND_PUBLIC_RECORD))
    except JSONError:
        return failures + ["unreadable record"]
    if not isinstance(record, dict) or check_cleanup(record) or (record.get("algo"), record.get("seed")) != (algo, seed):
        failures.append("job")
    if not isinstance(command, dict) or not isinstance(command.get("argv"), list):
        failures.append("command")
    entries = [summary.get(kind) if isinstance(summary, dict) else None for kind in ("initial", "final")]
    if not all(isinstance(e, dict) for e in entries) or entries[1].get("checkpoint") != checkpoint_name(n):
        failures.append("eval")
    elif majority is not None and _identity(entries[1]) != majority:
        failures.append("eval-subset")
    if isinstance(entries[0], dict) and "shared" in entries[0]:
        found = check_shared_reference(data_dir, entries[0], run_summary, shared_checks)
        if found.of_shared or found.of_run:
            failures.append("eval-shared")
    if run_evaluation_problems(data_dir, job):  # responses that do not re-score, impossible statistics
        failures.append("eval-rescored")
    if (job, run_relpath(CHECKPOINTS_DIR, checkpoint_name(n), WEIGHTS_FILE)) not in artifacts:
        failures.append("checkpoint")
    if not any(j == job and p.startswith(run_relpath(TENSORBOARD_DIR, TENSORBOARD_EVENTS.rstrip("*"))) for j, p in artifacts):
        failures.append("tensorboard")
    return failures


def _link_incident(data: BundleData, job: str) -> dict | None:
    """The automatic ``evidence-link`` incident of ``job`` (its title names the linked files), or None."""
    return next((r for r in data.incidents
                 if r["job"] == job and r["kind"] == EVIDENCE_LINK and r.get("source") == "automatic"), None)


def _identity(entry: dict) -> tuple:
    return tuple(entry.get(k) for k in ("subset_sha256", "eval_seed", "n_prompts", "k"))


def check_rejections(data_dir: Path, data: BundleData, shared_checks: dict | None = None,
                     notes: list[str] | None = None) -> list[Problem]:
    """A job the index rejects (other than by incidents.yaml) whose bundled evidence passes every gate
    the bundle can re-check was left out of the comparison although valid: cherry-picking. A job rejected for a
    link is a note (module docstring) appended to ``notes``.
    ``shared_checks``: the audit's cache, so each shared initial evaluation is read once."""
    findings: list[Problem] = []
    _, artifact_rows = read_csv(data_dir / "artifacts.csv")
    artifacts = {(r["job"], r["path"]) for r in artifact_rows if r.get("bytes", "0") not in ("", "0")}
    identities = [_identity(data.evals[run]["final"]) for run in data.accepted if "final" in data.evals.get(run, {})]
    majority = max(set(identities), key=identities.count) if identities else None
    shared_checks = {} if shared_checks is None else shared_checks
    for row in data.index:
        excluded = row["reason"].startswith("excluded by incidents.yaml")
        if row["accepted"] == "yes" or excluded or not (data_dir / BUNDLE_RUNS_DIR / row["job"]).is_dir():
            continue
        still = _still_rejected(data_dir, data, row, majority, artifacts, shared_checks)
        if still == [EVIDENCE_LINK] and notes is not None:
            notes.append(f"rejection: {row['job']} is rejected for a link in its evidence, which the bundle cannot "
                         f"show (its incident: {_link_incident(data, row['job'])['title'][:160]}): not re-derived, "
                         "the rejection is as the build states it")
        if not still:
            findings.append(Problem(payload_relpath(INDEX_TABLE), f"{row['job']} is rejected ({row['reason'][:80]}) but its "
                                                      "bundled evidence passes every gate: a valid run left out"))
    return findings
