"""The payload's files against the bundle's layout (``facts.bundle_layout``): every file under a payload
directory that the build never writes there. The build refuses to seal one; the audit names each."""

from __future__ import annotations

import os
from pathlib import Path

from evidence.certificates import certified_jobs
from evidence.dataset import BundleData
from facts.bundle_layout import payload_member
from facts.files import STAGES_DIR

NOT_WRITTEN = "not a file the build writes (the bundle's layout, facts/bundle_layout.py, has no such member)"
EMPTY_DIR = "an empty directory: the build creates a directory only for the files it writes there"


def payload_files(data_dir: Path, empty_dirs: list[str] | None = None) -> list[str]:
    """Every regular file under ``data_dir``, ``/``-separated and relative to it, in sorted order; links are
    not followed (the bag check reports them) and a tree of any depth is walked without recursion. With
    ``empty_dirs``, every directory holding nothing is appended to it."""
    found, pending = [], [""]
    while pending:
        rel_dir = pending.pop()
        try:
            entries = list(os.scandir(data_dir / rel_dir if rel_dir else data_dir))
        except OSError:
            continue
        if not entries and rel_dir and empty_dirs is not None:
            empty_dirs.append(rel_dir)
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_symlink():
                continue
            if entry.is_dir():
                pending.append(rel)
            elif entry.is_file():
                found.append(rel)
    return sorted(found)


def _index_jobs(data: BundleData | None) -> dict[str | None, set[str]] | None:
    """The jobs of the payload's index and of each earlier stage's (by stage; None: the payload's own)."""
    if data is None:
        return None
    jobs = {None: {row.get("job") for row in data.index}}
    jobs.update({name: {row.get("job") for row in stage.index} for name, stage in data.stages.items()})
    return jobs


def unexpected_files(data_dir: Path, data: BundleData | None = None) -> list[tuple[str, str]]:
    """(path relative to ``data_dir``, why) of every file the build never writes there: outside the layout,
    or the copy of a job the index (``data``'s, when loaded) does not list; and of every empty directory
    (a name the build never creates: a claim in a directory's name, a stage no plain sweep has)."""
    jobs = _index_jobs(data)
    certified = _certificate_jobs(data)
    found, empty = [], []
    for rel in payload_files(data_dir, empty):
        member = payload_member(rel)
        if member is None:
            found.append((rel, NOT_WRITTEN))
            continue
        if jobs is not None and member.get("job") is not None:
            stage = member.get("stage")
            listed = jobs.get(stage)
            if listed is not None and member["job"] not in listed:
                where = f"{STAGES_DIR}/{stage}/" if stage else ""
                found.append((rel, f"the copy of job {member['job']!r}, which {where}index.csv does not list"))
        if certified is not None and member.get("certjob") is not None:
            listed = certified.get(member.get("stage"))
            if listed is not None and member["certjob"] not in listed:
                where = f"{STAGES_DIR}/{member['stage']}/" if member.get("stage") else ""
                found.append((rel, f"the copy of certificate job {member['certjob']!r}, which {where}sweep.json's "
                                   "certify does not list"))
    return found + [(f"{rel}/", EMPTY_DIR) for rel in sorted(empty)]


def _certificate_jobs(data: BundleData | None) -> dict[str | None, set[str]] | None:
    """The certificate jobs sweep.json names, of the payload and of each earlier stage (by stage)."""
    if data is None:
        return None
    jobs = {None: set(certified_jobs(data.sweep))}
    jobs.update({name: set(certified_jobs(stage.sweep)) for name, stage in data.stages.items()})
    return jobs
