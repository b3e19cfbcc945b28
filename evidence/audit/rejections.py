"""Cherry-picking: a job the index rejects whose bundled evidence passes every gate the bundle can re-check.

A rejection the bundle shows (a gate failing on a file it carries: a metrics log short of its steps, a response
that does not re-score, a subset that is not its pinned split's) is confirmed. One resting only on what the bundle
does not carry is taken as the build states it, and said in a note per job, which ``audit --strict`` counts as a
finding: a link in the job's evidence (never followed, never carried: the build reads nothing more of such a job), a
file of the run missing from the bundle, artifacts.csv's listing of the checkpoint and TensorBoard files (never
carried), job.json's record of leftovers after the job (the launcher's observation, which nothing carried re-checks) or
of the run's records' digests at the job's end (the bundle carries them sanitised),
a malformed command record, records that disagree (a run cut short in one record and complete in the others; job.json
naming another algorithm or seed than run.json, the index and the directory), or no runs/<job>/ at all. Deleting a
valid run's file, editing one record, or planting a link, is how it would be hidden."""

from __future__ import annotations

from pathlib import Path

from evidence.audit.evaluations import bundled_evaluation, final_checkpoint_of
from evidence.audit.runs import bundled_records
from evidence.dataset import BundleData
from evidence.evaluation.judge import EVAL_KINDS
from evidence.fileio import JSONError, read_csv, read_json
from evidence.gates.artifacts import EVIDENCE_LINK
from evidence.gates.record_judge import REJECTED, bundle_view, judge_records
from evidence.problems import Problem
from facts import checkpoint_name
from facts.files import (
    BUNDLE_RUNS_DIR,
    CHECKPOINTS_DIR,
    COMMAND_PUBLIC_RECORD,
    EVAL_RECORD,
    INDEX_TABLE,
    METRICS_LOG,
    RUN_RECORD,
    WEIGHTS_FILE,
    payload_relpath,
    run_relpath,
)


def _still_rejected(data_dir: Path, data: BundleData, row: dict, majority: tuple | None, artifacts: set[tuple[str, str]],
                    shared_checks: dict) -> tuple[list[str], list[str]]:
    """(gates the bundle shows failing, gates failing only for what the bundle does not carry) of ``row``'s job: the
    bundled metrics log, run.json, eval.json, its responses re-scored and its subset cut again from the pinned split,
    the shared initial evaluation it references, job.json and command.public.json are evidence it carries (a gate
    failing on one present is shown); a missing one of those, artifacts.csv's listing (the checkpoints and
    TensorBoard files are never carried) and a link (never followed) are not."""
    job, algo, seed, n = row["job"], row["algo"], int(row["seed"]), data.n_updates
    if _link_incident(data, job):
        return [], [EVIDENCE_LINK]  # a link the bundle cannot show (it never carries one): the incident names the file
    records = bundled_records(data_dir, job, algo, seed, n, REJECTED, arm=row.get("arm") or algo, artifacts=artifacts,
                              build_reason=row.get("reason", ""), eval_go_past=UNSHOWN_GATES,
                              evaluation=lambda r, summary: bundled_evaluation(
                                  data_dir, job, summary, r.run_summary, _argv(r), final_checkpoint_of(r.run_summary, n),
                                  shared_checks))
    failures = judge_records(records)
    shown, unshown = bundle_view(records, failures)
    summary = records.eval_summary
    entries = [summary.get(kind) if isinstance(summary, dict) else None for kind in EVAL_KINDS]
    if "eval-checkpoint" not in shown and all(isinstance(e, dict) for e in entries) and majority is not None \
            and _identity(entries[1]) != majority:  # the sweep's rule: the majority's frozen subset
        shown.append("eval-subset")
    log = records.metrics
    completed = _completion_claims(log, records.run_summary, entries[1], artifacts, job, n)
    clean_but_short = "metrics" not in shown or log.valid_steps == len(log.records)  # a bad value is no short run
    if shown and set(shown) <= STEP_GATES and completed and clean_but_short:
        # a run cut short in one record and complete in another: which one was edited, the bundle cannot say
        return [], unshown + [f"{gate} (while {', '.join(completed)} say it completed)" for gate in shown]
    return shown, unshown


def _argv(records):
    """command.public.json's argv, what the evaluation's setting is judged against (None: it has none)."""
    try:
        command = read_json(records.job_dir / COMMAND_PUBLIC_RECORD)
    except JSONError:
        return None
    return command.get("argv") if isinstance(command, dict) else None


# the gates a run cut short fails; each of its records says how far it got
STEP_GATES = {"metrics", "run", "eval-record", "eval-entries", "eval-checkpoint"}
# the evaluation's gate the bundle cannot show: run.json's setting against its command, either may be the edited one
UNSHOWN_GATES = ("eval-setting",)


def _completion_claims(log, run_summary, final, artifacts: set[tuple[str, str]], job: str, n: int) -> list[str]:
    """The carried records that say the run completed all ``n`` updates: its metrics log (every step valid),
    run.json (steps_completed), eval.json (the final evaluation of the last checkpoint), artifacts.csv (that
    checkpoint listed)."""
    claims = []
    if not log.violations and log.valid_steps == n:
        claims.append(METRICS_LOG)
    if isinstance(run_summary, dict) and run_summary.get("steps_completed") == n:
        claims.append(RUN_RECORD)
    if isinstance(final, dict) and final.get("checkpoint") == checkpoint_name(n):
        claims.append(EVAL_RECORD)
    if (job, run_relpath(CHECKPOINTS_DIR, checkpoint_name(n), WEIGHTS_FILE)) in artifacts:
        claims.append("artifacts.csv")
    return claims


def _link_incident(data: BundleData, job: str) -> dict | None:
    """The automatic ``evidence-link`` incident of ``job`` (its title names the linked files), or None."""
    return next((r for r in data.incidents
                 if r["job"] == job and r["kind"] == EVIDENCE_LINK and r.get("source") == "automatic"), None)


def _unshown_note(data: BundleData, row: dict, unshown: list[str]) -> str:
    """The note for a rejection the bundle cannot show: what it rests on, as the build stated it."""
    job, link = row["job"], _link_incident(data, row["job"])
    if link is not None:
        why = f"for a link in its evidence, which the bundle cannot show (its incident: {link['title'][:160]})"
    elif not unshown:
        why = f"({row['reason'][:120]}) and the bundle carries none of its evidence"
    elif any("while " in gate for gate in unshown):  # the records that disagree (_still_rejected)
        why = f"({row['reason'][:120]}) on records that disagree ({'; '.join(unshown)})"
    else:
        why = f"({row['reason'][:120]}) on evidence the bundle does not carry or cannot re-check ({', '.join(unshown)})"
    return f"rejection: {job} is rejected {why}: not re-derived, the rejection is as the build states it"


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
        if row["accepted"] == "yes" or excluded:
            continue
        if not (data_dir / BUNDLE_RUNS_DIR / row["job"]).is_dir():
            if notes is not None:
                notes.append(_unshown_note(data, row, []))
            continue
        shown, unshown = _still_rejected(data_dir, data, row, majority, artifacts, shared_checks)
        if not shown and unshown and notes is not None:
            notes.append(_unshown_note(data, row, unshown))
        if not shown and not unshown:
            findings.append(Problem(payload_relpath(INDEX_TABLE), f"{row['job']} is rejected ({row['reason'][:80]}) but its "
                                                      "bundled evidence passes every gate: a valid run left out"))
    return findings
