"""The image (``facts.containers``): every run of a sweep ran the container image its sweep pins, one for all.

Each job copy's ``job.json`` (its runtime's record: the digest it checked before the job started) and its
``run.json`` (the digest its trainer was handed inside the image) must name the digest ``sweep.json``'s
``cluster.container.digest`` pins, for the grid's copies and the certificate jobs' alike; a sweep that pins no
image has runs that name none.
"""

from __future__ import annotations

from pathlib import Path

from evidence.fileio import JSONError, read_json
from evidence.problems import Problem
from facts.containers import CONTAINER_FIELD, IMAGE_DIGEST_FIELD
from facts.files import BUNDLE_RUNS_DIR, CERTIFY_DIR, JOB_RECORD, RUN_RECORD, SWEEP_RECORD, payload_relpath


def _record(path: Path) -> dict:
    try:
        value = read_json(path)
    except JSONError:
        return {}  # absent or unreadable: the runs' and the records' checks name it
    return value if isinstance(value, dict) else {}


def pinned_digest(sweep: dict) -> str | None:
    """The digest ``sweep.json``'s cluster profile pins, or None (its jobs ran on the host)."""
    cluster = sweep.get("cluster") if isinstance(sweep.get("cluster"), dict) else {}
    container = cluster.get(CONTAINER_FIELD) if isinstance(cluster.get(CONTAINER_FIELD), dict) else None
    return str(container.get("digest")) if container and container.get("digest") else None


def check_images(data_dir: Path, sweep: dict) -> list[Problem]:
    """Every job copy's records name the pinned image (or none when none is pinned); each difference one problem."""
    pinned = pinned_digest(sweep)
    problems = []
    for folder in (BUNDLE_RUNS_DIR, CERTIFY_DIR):
        root = Path(data_dir) / folder
        for copy in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
            job = _record(copy / JOB_RECORD)
            container = job.get(CONTAINER_FIELD) if isinstance(job.get(CONTAINER_FIELD), dict) else {}
            said = {JOB_RECORD: container.get(IMAGE_DIGEST_FIELD)}
            if (copy / RUN_RECORD).is_file():
                said[RUN_RECORD] = _record(copy / RUN_RECORD).get(IMAGE_DIGEST_FIELD)
            for name, digest in said.items():
                if digest == pinned:
                    continue
                where = payload_relpath(folder, copy.name, name)
                if pinned is None:
                    problems.append(Problem(where, f"{copy.name} ran in image {digest}, but {SWEEP_RECORD} pins no "
                                                   "container image: its runs ran on the host"))
                else:
                    problems.append(Problem(where, f"{copy.name} ran in image {digest or 'none (on the host)'}, not "
                                                   f"the image {pinned} {SWEEP_RECORD} pins: the sweep's runs did not "
                                                   "all run one image"))
    return problems
