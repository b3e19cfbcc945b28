"""Incident records: every rejection or anomaly, its evidence boundary, and its resolution.

Automatic incidents come from the evidence (a rejected or missing job, an all-zero eval reward,
a scheduler state that disagrees with complete evidence, a commit mismatch). Users add
resolutions, manual exclusions and incidents that no job file shows (a failed preflight, a
smoke allocation) in ``<sweep_dir>/incidents.yaml``; the bundle keeps that file.

``incidents.yaml`` schema (every key optional; unknown keys are errors)::

    resolutions:                 # attach a resolution to automatic incidents
      - job: grpo-42             # required: <algo>-<seed> of a grid cell
        kind: scheduler-state    # optional: only incidents of this kind (default: all of the job)
        resolution: "..."        # required
    exclusions:                  # manual exclusions: the job is rejected whatever its evidence says
      - job: rpp-1234            # required
        reason: "..."            # required
    incidents:                   # incidents that no job file records
      - title: "..."             # required
        evidence: "..."          # required: the evidence boundary (what did run / exist)
        resolution: "..."        # required
        job: rppb-2026           # optional

Automatic kinds: ``missing-job``, ``rejected``, ``all-zero-eval-reward``, ``evidence-link`` (a link, or a file that
is not a regular one, in the job's evidence: never followed, so the job is rejected naming it), ``manual-exclusion``,
``scheduler-state``, ``commit-mismatch``, ``all-zero-train-reward``, ``not-reproduced`` (a certificate job of
``certify=true`` that does not reproduce its original), ``identical-groups`` (steps whose share of rollout groups
with K identical responses passed ``facts.engines.IDENTICAL_GROUPS_BOUND``: ``evidence.gates.record_judge.rollout_diversity``);
user incidents are ``user``.

A job's history is part of its evidence even after a successful re-run: every earlier attempt
(``attempts/<n>/job.json``: cancelled, failed, timed out, node failure, ...) is an
``earlier-attempt`` incident, and every stop inside an attempt that the job runtime recorded in
``job.json``'s ``history`` (time-limit or preemption warning, then requeue) a ``requeue`` incident,
or the event's own ``kind`` (``node-failure``: Slurm requeued the task after its node failed).
The bundle keeps those records (``runs/<job>/attempts/``), so the audit recomputes them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from evidence.evaluation.judge import ALL_ZERO_EVAL
from evidence.fileio import JSONError, read_json
from evidence.gates.artifacts import EVIDENCE_LINK
from evidence.gates.index import JobEvidence
from evidence.problems import IncidentsFileError
from facts import checkpoint_name, run_dir_of_job, sweep_job_dir
from facts.failures import failure_cause
from facts.files import ATTEMPTS_DIR, INCIDENTS_FILE, JOB_RECORD, RESUMED_FROM_FIELD, RUN_RECORD

# Earlier attempts of a job, kept by the launcher when it re-runs a rejected job.
OPEN = "open"
EXCLUDED = "excluded from every aggregate"
INCIDENT_COLUMNS = ("id", "job", "job_id", "kind", "source", "title", "evidence_boundary", "action", "resolution")

_SCHEMA = {
    "resolutions": ({"job", "resolution"}, {"kind"}),
    "exclusions": ({"job", "reason"}, set()),
    "incidents": ({"title", "evidence", "resolution"}, {"job"}),
}


@dataclass(frozen=True)
class Incident:
    """One row of incidents.csv."""

    id: str
    job: str
    job_id: str
    kind: str
    source: str  # "automatic" or "incidents.yaml"
    title: str
    evidence_boundary: str
    action: str
    resolution: str

    def row(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class UserIncidents:
    """The parsed ``incidents.yaml``."""

    resolutions: tuple[dict, ...] = ()
    exclusions: tuple[dict, ...] = ()
    incidents: tuple[dict, ...] = ()

    @property
    def excluded_jobs(self) -> dict[str, str]:
        return {e["job"]: e["reason"] for e in self.exclusions}


def load_user_incidents(sweep_dir: str | Path, grid: set[str]) -> UserIncidents:
    """Read and check ``incidents.yaml`` (absent file: nothing). ``grid`` is the set of job names."""
    path = Path(sweep_dir) / INCIDENTS_FILE
    if not path.is_file():
        return UserIncidents()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise IncidentsFileError(f"{INCIDENTS_FILE}: not readable YAML ({exc.__class__.__name__})") from None
    if data is None:
        return UserIncidents()
    if not isinstance(data, dict):
        raise IncidentsFileError(f"{INCIDENTS_FILE}: top level must be a mapping")
    unknown = set(data) - set(_SCHEMA)
    if unknown:
        raise IncidentsFileError(f"{INCIDENTS_FILE}: unknown section {sorted(unknown)[0]!r}")
    parsed = {}
    for section, (required, optional) in _SCHEMA.items():
        entries = data.get(section) or []
        if not isinstance(entries, list):
            raise IncidentsFileError(f"{INCIDENTS_FILE}: {section} must be a list")
        for i, entry in enumerate(entries):
            where = f"{INCIDENTS_FILE}: {section}[{i}]"
            if not isinstance(entry, dict):
                raise IncidentsFileError(f"{where}: must be a mapping")
            if set(entry) - required - optional:
                raise IncidentsFileError(f"{where}: unknown key {sorted(set(entry) - required - optional)[0]!r}")
            if required - set(entry):
                raise IncidentsFileError(f"{where}: missing key {sorted(required - set(entry))[0]!r}")
            for key, value in entry.items():
                if not isinstance(value, str) or not value.strip():
                    raise IncidentsFileError(f"{where}: {key} must be a non-empty string")
            if "job" in entry and entry["job"] not in grid:
                raise IncidentsFileError(f"{where}: job {entry['job']!r} is not in the sweep grid")
        parsed[section] = tuple({k: v.strip() for k, v in e.items()} for e in entries)
    return UserIncidents(**parsed)


def _automatic(evidence: JobEvidence) -> list[tuple[str, str, str]]:
    """(kind, title, action) of every incident one job's evidence implies."""
    found = []
    if not evidence.present:
        return [("missing-job", "Job directory missing", EXCLUDED)]
    if evidence.exclusion:
        found.append(("manual-exclusion", f"Manually excluded: {evidence.exclusion}", EXCLUDED))
    zero = [f for f in evidence.failures if f.kind == ALL_ZERO_EVAL]
    links = [f for f in evidence.failures if f.kind == EVIDENCE_LINK]
    other = [f for f in evidence.failures if f.kind not in (ALL_ZERO_EVAL, EVIDENCE_LINK)]
    if zero:
        title = "; ".join(f.reason for f in zero)
        found.append(("all-zero-eval-reward", title[:1].upper() + title[1:], EXCLUDED))
    if links:  # each file named: the bundle does not carry it (a link is never followed)
        shown = "; ".join(str(f) for f in links[:3]) + (f"; (+{len(links) - 3} more)" if len(links) > 3 else "")
        found.append((EVIDENCE_LINK, f"Rejected: {shown}", EXCLUDED))
    if other:
        shown = "; ".join(str(f) for f in other[:3]) + (f"; (+{len(other) - 3} more)" if len(other) > 3 else "")
        if cause := failure_cause(evidence.job_record, evidence.job):  # what the runtime or scheduler recorded
            shown = f"job failed: {cause}; {shown}"
        found.append(("rejected", f"Rejected: {shown}", EXCLUDED))
    for anomaly in evidence.anomalies:
        action = "accepted on evidence; reported" if evidence.accepted else EXCLUDED
        if anomaly.kind == "scheduler-state":
            title = f"Job reported {anomaly.reason}"
            if evidence.accepted:
                title += f" after all {evidence.n_updates} updates"
                action = "accepted on evidence; scheduler state reported as is"
        else:
            title = anomaly.reason[:1].upper() + anomaly.reason[1:]
        found.append((anomaly.kind, title, action))
    return found


def _record(path: Path) -> dict:
    try:
        value = read_json(path)
    except JSONError:
        return {}
    return value if isinstance(value, dict) else {}


def _event_title(event: dict) -> str:
    at = f" at step {event['at_step']}" if isinstance(event.get("at_step"), int) else ""
    saved = ", checkpointed" if event.get("checkpointed") else ""
    return f"{event.get('event', 'stop')}{at}{saved}: {event.get('action', 'stopped')}"


_UNRECORDED = object()  # a run.json without ``resumed_from`` (an older run, another trainer, none written)


def _resumed_from(run_dir: Path):
    """The ``resumed_from`` of the run.json in ``run_dir``: a checkpoint record, None (started at step 0
    with none), or ``_UNRECORDED``."""
    record = _record(run_dir / RUN_RECORD)
    return record.get(RESUMED_FROM_FIELD, _UNRECORDED)


def restart_action(resumed, event: dict | None) -> str:
    """What the job did after an interruption, from its records: the run.json of the start that followed
    (``resumed``), else what the stop's own event recorded."""
    if isinstance(resumed, dict) and resumed.get("checkpoint"):
        return f"re-run; resumed from its checkpoint {resumed['checkpoint']} (continuing at step {resumed.get('step')})"
    if resumed is None:
        return "re-run from scratch (step 0): there was no checkpoint to resume from"
    event = event or {}
    if event.get("restart") == "from scratch":
        return "re-run from scratch (step 0): the trainer saved nothing at the stop"
    if event.get("at_step") == 0:
        return "re-run from scratch (step 0): no step was done, so there was no checkpoint"
    if event.get("checkpointed") is True and isinstance(event.get("at_step"), int):
        return f"re-run; resumed from the checkpoint it saved at the stop ({checkpoint_name(event['at_step'])})"
    return "re-run; its records do not say whether it resumed from a checkpoint"


def history_incidents(run_dir: str | Path) -> list[tuple[str, str, str, str, str]]:
    """``(kind, job_id, title, evidence_boundary, action)`` of every earlier attempt and recorded stop of
    one job, oldest first. ``run_dir`` is a job directory or its copy in a bundle (``runs/<job>``): both
    hold ``job.json`` and ``attempts/<n>/job.json``. The action says how the job went on: the run.json
    an attempt left (``attempts/<n>/run/``, the current ``run/``) records where its last start began,
    which follows the attempt's last stop, or the earlier attempt before it when it has none."""
    run_dir = Path(run_dir)
    attempts = sorted((p for p in (run_dir / ATTEMPTS_DIR).glob("*") if p.name.isdigit()), key=lambda p: int(p.name)) \
        if (run_dir / ATTEMPTS_DIR).is_dir() else []
    found = []
    tries = [(p.name, p, _record(p / JOB_RECORD)) for p in attempts] + [(None, run_dir, _record(run_dir / JOB_RECORD))]
    for number, (label, directory, record) in enumerate(tries):
        job_id = str(record.get("job_id") or "")
        events = [e for e in record.get("history") or [] if isinstance(e, dict)]
        last_start = _resumed_from(run_dir_of_job(directory))
        for i, event in enumerate(events):
            found.append((str(event.get("kind") or "requeue"), str(event.get("job_id") or job_id), _event_title(event),
                          f"job {event.get('job_id') or job_id}, restart {event.get('restart_count', 0)}",
                          restart_action(last_start if i == len(events) - 1 else _UNRECORDED, event)))
        if label is not None:
            failure = f": {record['failure']}" if record.get("failure") else ""
            _, following, next_record = tries[number + 1]
            next_start = _UNRECORDED if next_record.get("history") else _resumed_from(run_dir_of_job(following))
            found.append(("earlier-attempt", job_id,
                          f"Attempt {label} ended {record.get('state', 'UNKNOWN')} (exit {record.get('exit_code')}){failure}",
                          f"{ATTEMPTS_DIR}/{label}/: job {job_id or '—'}, kept in the bundle", restart_action(next_start, None)))
    return found


def derive_incidents(evidences: list[JobEvidence], user: UserIncidents, sweep_dir: str | Path | None = None,
                     certificates: list[dict] = ()) -> list[Incident]:
    """Every incident of the sweep, numbered in job order, user-only incidents last. With
    ``sweep_dir``, each job's earlier attempts and recorded stops come first in its rows. ``certificates``:
    the failed reproducibility certificates' rows (``evidence.gates.certificate_jobs.certificate_incidents``), after the jobs'."""
    rows: list[dict] = []
    for evidence in evidences:
        if sweep_dir is not None and evidence.present:
            for kind, job_id, title, boundary, action in history_incidents(sweep_job_dir(sweep_dir, evidence.job)):
                rows.append({
                    "job": evidence.job, "job_id": job_id, "kind": kind, "source": "automatic", "title": title,
                    "evidence_boundary": boundary, "action": action,
                    "resolution": "the job was accepted afterwards" if evidence.accepted else OPEN,
                })
        for kind, title, action in _automatic(evidence):
            resolutions = [
                r["resolution"] for r in user.resolutions
                if r["job"] == evidence.job and r.get("kind", kind) == kind
            ]
            rows.append({
                "job": evidence.job, "job_id": evidence.job_id, "kind": kind, "source": "automatic",
                "title": title, "evidence_boundary": evidence.evidence_boundary(), "action": action,
                "resolution": "; ".join(resolutions) or OPEN,
            })
    rows += [{**row, "resolution": OPEN} for row in certificates]
    by_job = {e.job: e for e in evidences}
    for entry in user.incidents:
        job = entry.get("job", "")
        rows.append({
            "job": job, "job_id": by_job[job].job_id if job in by_job else "", "kind": "user",
            "source": INCIDENTS_FILE, "title": entry["title"], "evidence_boundary": entry["evidence"],
            "action": "recorded", "resolution": entry["resolution"],
        })
    width = max(2, len(str(len(rows))))
    return [Incident(id=f"I{i:0{width}d}", **row) for i, row in enumerate(rows, start=1)]
