"""The reproducibility certificates (``certify=true``): ``data/certificates.json`` equals its recomputation from
the certificate jobs' copies (``data/certify/``) and the runs they repeat (``data/runs/``), each difference named
by its record and value, and every failed certificate has its ``not-reproduced`` incident (an earlier stage's too)."""

from __future__ import annotations

import re
from pathlib import Path

from evidence.dataset import BundleData
from evidence.fileio import JSONError, read_json
from evidence.gates.certificate_jobs import differences, incident_title
from evidence.problems import Problem, capped
from facts.certify import NOT_REPRODUCED
from facts.files import CERTIFICATES_FILE, INCIDENTS_TABLE, STAGES_DIR, payload_relpath


def _named(where: str, recomputed: dict) -> str:
    """``certificates[1].checks...`` with the certificate job named: ``certificates[1] (grpo-7.resume).checks...``."""
    match = re.match(r"certificates\[(\d+)\]", where)
    certs = recomputed.get("certificates") or []
    if match and int(match.group(1)) < len(certs):
        return f"{match.group(0)} ({certs[int(match.group(1))]['certificate_job']}){where[match.end():]}"
    return where


def _check_one(data_dir: Path, data: BundleData, prefix: str) -> list[Problem]:
    rel = payload_relpath(*prefix.split("/"), CERTIFICATES_FILE) if prefix else payload_relpath(CERTIFICATES_FILE)
    path = data_dir / CERTIFICATES_FILE
    if data.certificates is None:
        return [Problem(rel, "present, but sweep.json's certify names no certificate job")] if path.exists() else []
    if not path.is_file():
        return [Problem(rel, "missing (sweep.json's certify names certificate jobs; the recomputation produces it)")]
    try:
        recorded = read_json(path)
    except JSONError as exc:
        return [Problem(rel, f"not readable JSON ({exc})")]
    found = [Problem(rel, f"recorded {have!r}, recomputed {want!r} from the runs' files", where=_named(where, data.certificates))
             for where, have, want in differences(recorded, data.certificates)]
    incidents = payload_relpath(*prefix.split("/"), INCIDENTS_TABLE) if prefix else payload_relpath(INCIDENTS_TABLE)
    recorded_titles = {(r.get("job"), r.get("title")) for r in data.incidents if r.get("kind") == NOT_REPRODUCED}
    failed = {(c["job"], incident_title(c)) for c in data.certificates["certificates"] if not c["reproduced"]}
    for _job, title in sorted(failed - recorded_titles):
        found.append(Problem(incidents, f"no {NOT_REPRODUCED} incident records {title!r}"))
    for job, title in sorted(recorded_titles - failed):
        found.append(Problem(incidents, f"a {NOT_REPRODUCED} incident of {job} that no recomputed certificate gives: {title!r}"))
    return capped(found)


def check_certificates(data_dir: Path, data: BundleData) -> list[Problem]:
    """certificates.json against its recomputation and incidents.csv, for the payload and each earlier stage."""
    found = _check_one(data_dir, data, "")
    for name, stage in data.stages.items():
        found += _check_one(data_dir / STAGES_DIR / name, stage, f"{STAGES_DIR}/{name}")
    return found
