"""The leak scan over every file and file name in the bag: the sanitiser's own rule set (``evidence.seal.sanitize``)."""

from __future__ import annotations

from pathlib import Path

from evidence.audit.archive import MAX_MEMBER_BYTES
from evidence.problems import Problem
from evidence.report.png import document_text
from evidence.seal.sanitize import Sanitizer, payload_findings, payload_note


def scan_leaks(bag: Path, clean: Sanitizer | None = None, notes: list[str] | None = None) -> list[Problem]:
    """The leak scan over every file and file name in the bag (a PNG's text chunks, not its pixels); what only looks like a leak in a model's response or
    a dataset's text (``payload_findings``) goes to ``notes``, as the build said it when it sealed the file."""
    clean = clean or Sanitizer.from_environment()
    findings = []
    paths = sorted(bag.rglob("*"))
    rels = [path.relative_to(bag).as_posix() for path in paths]
    for path, rel, leaks in zip(paths, rels, clean.scan_names(rels)):
        if path.is_file() and not path.is_symlink() and path.stat().st_size > MAX_MEMBER_BYTES:
            findings.append(Problem(rel, f"above the {MAX_MEMBER_BYTES}-byte limit of a bundle file; not read"))
        elif path.is_file() and not path.is_symlink():
            found, noted = payload_findings(rel, clean.scan_document(rel, document_text(rel, path.read_bytes())))
            leaks += found
            if notes is not None:
                notes += [payload_note(note) for note in noted]
        findings += dict.fromkeys(leaks)
    return findings
