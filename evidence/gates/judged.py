"""What was judged is what is sealed: a job's files as they were when its acceptance was decided.

``evaluate_job`` (with ``digests``, the build's) takes the SHA256 of every file of the job directory that the
bundle may copy (``job_file_digests``: all but the isolation roots, an external trainer's own output, the
checkpoints and the TensorBoard files, whose digests ``artifacts.csv`` keeps) before its gates read them and
again after; a file that changed meanwhile rejects the job. The build then copies each job file through
``JobFiles.read``, which compares the bytes it copies with that decision digest: a file that changed after the
decision (a process of the job still writing: the late line of issue 33) refuses the seal, naming it. The bundle
keeps the decision digests in ``judged.csv`` (``JUDGED_COLUMNS``): per copied file, its job, its path in the
bundle, the digest of the job's file at the decision, and whether the copy is that file byte for byte
(``verbatim``: the responses, a log the sanitiser left as it was). The audit holds every copy of a run to a row
and every verbatim copy to its digest (``check_judged``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from evidence.fileio import read_csv, sha256_file
from evidence.problems import Problem, SweepError
from facts.files import (
    BUNDLE_RUNS_DIR,
    CHECKPOINTS_DIR,
    JOBS_DIR,
    JUDGED_TABLE,
    NOT_EVIDENCE_DIRS,
    TENSORBOARD_DIR,
    linked_part,
    payload_relpath,
)

JUDGED_COLUMNS = ("job", "path", "judged_sha256", "verbatim")
JUDGED_KIND = "judged"
# Not copied into a bundle and hashed elsewhere (artifacts.csv), or gigabytes: never part of the decision digests.
_NOT_DIGESTED = (CHECKPOINTS_DIR, TENSORBOARD_DIR)


def job_file_digests(job_dir: Path) -> dict[str, str]:
    """``{path relative to the job directory: SHA256}`` of every regular file the bundle may copy from it, walked
    without following a link and without entering ``NOT_EVIDENCE_DIRS``, checkpoints or TensorBoard files."""
    found, todo = {}, [Path(job_dir)]
    while todo:
        directory = todo.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in _NOT_DIGESTED and not any(
                        name == entry.name and parent in (None, directory.name) for parent, name in NOT_EVIDENCE_DIRS):
                    todo.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                path = Path(entry.path)
                try:
                    found[path.relative_to(job_dir).as_posix()] = sha256_file(path)
                except OSError:
                    continue
    return found


def changed_while_judged(before: dict[str, str], after: dict[str, str]) -> list[Problem]:
    """A file of the job that appeared, changed or went while its gates read it: each a failed gate."""
    return [Problem(rel, "changed while the job was judged (something still writes into the job directory); build "
                         "again once nothing of the job runs", kind=JUDGED_KIND)
            for rel in sorted(set(before) | set(after)) if before.get(rel) != after.get(rel)]


@dataclass
class JobFiles:
    """A job directory the bundle copies from (``root``), with its decision digests (``judged``: None for a job
    that is not judged file by file, a certificate job), and what the copies found and wrote (shared lists)."""

    root: Path
    job: str = ""
    judged: dict[str, str] | None = None
    changed: list[str] = field(default_factory=list)  # <job>/<path>: differs from its decision digest
    rows: list[dict] = field(default_factory=list)  # judged.csv's rows
    out: Path | None = None  # where the job's copy is written (runs/<job>/ of the staged payload)

    def read(self, path: Path) -> bytes | None:
        """The file's bytes, never through a link inside ``root`` (None then, or when it is no regular file); a
        judged job's file whose bytes are not the ones judged is noted in ``changed``."""
        rel = path.relative_to(self.root).as_posix()
        if linked_part(self.root, rel, ()) is not None or not path.is_file():
            return None
        data = path.read_bytes()
        if self.judged is not None and self.judged.get(rel) != hashlib.sha256(data).hexdigest():
            self.changed.append(f"{self.job}/{rel}")
        return data

    def copied(self, path: Path, data: bytes, dst: Path, written: bytes) -> None:
        """Record a judged job's copy: ``path`` (its bytes ``data``) sealed as ``dst`` (``written``)."""
        if self.judged is None or self.out is None:
            return
        rel = dst.relative_to(self.out).as_posix()
        self.rows.append({"job": self.job, "path": f"{BUNDLE_RUNS_DIR}/{self.job}/{rel}",
                          "judged_sha256": self.judged.get(path.relative_to(self.root).as_posix(), ""),
                          "verbatim": "yes" if written == data else "no"})


def refuse_changed(changed: list[str]) -> None:
    """The seal refused when a copied file is not the one judged (``SweepError``, one line naming it)."""
    if changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise SweepError(f"{JOBS_DIR}/{changed[0]}{more} changed after its job was judged: something of the job still "
                         "writes into its directory (see its job.json cleanup list); nothing sealed: build again once "
                         "nothing of the job runs")


def check_judged(data_dir: Path) -> list[Problem]:
    """Every copy of an accepted or rejected run (``runs/<job>/...``) has its decision digest in ``judged.csv``, and
    each verbatim one is byte for byte the file that was judged. A bundle without ``judged.csv`` predates it."""
    table = data_dir / JUDGED_TABLE
    if not table.is_file():
        return []
    columns, rows = read_csv(table)
    if tuple(columns) != JUDGED_COLUMNS:
        return [Problem(payload_relpath(JUDGED_TABLE), f"columns {', '.join(columns)}, not {', '.join(JUDGED_COLUMNS)}")]
    problems, listed = [], set()
    for row in rows:
        listed.add(row["path"])
        copy = data_dir / row["path"]
        if row["verbatim"] == "yes" and copy.is_file() and sha256_file(copy) != row["judged_sha256"]:
            problems.append(Problem(payload_relpath(row["path"]), "is not the file its job was judged on "
                                    f"(judged.csv: {row['judged_sha256'][:12]}…)", kind=JUDGED_KIND))
    runs = data_dir / BUNDLE_RUNS_DIR
    copies = sorted(p.relative_to(data_dir).as_posix() for p in runs.rglob("*") if p.is_file()) if runs.is_dir() else []
    problems += [Problem(payload_relpath(rel), "sealed without the digest it had when its job was judged (judged.csv)",
                         kind=JUDGED_KIND) for rel in copies if rel not in listed]
    return problems
