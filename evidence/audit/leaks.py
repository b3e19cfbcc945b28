"""The leak scan over every file and file name in the bag: the sanitiser's own rule set (``evidence.sanitize``)."""

from __future__ import annotations

from pathlib import Path

from evidence.audit.archive import MAX_MEMBER_BYTES
from evidence.problems import Problem
from evidence.sanitize import Sanitizer


def scan_leaks(bag: Path, clean: Sanitizer | None = None) -> list[Problem]:
    """The leak scan over every file and file name in the bag."""
    clean = clean or Sanitizer.from_environment()
    findings = []
    paths = sorted(bag.rglob("*"))
    rels = [path.relative_to(bag).as_posix() for path in paths]
    for path, rel, leaks in zip(paths, rels, clean.scan_names(rels)):
        if path.is_file() and not path.is_symlink() and path.stat().st_size > MAX_MEMBER_BYTES:
            findings.append(Problem(rel, f"above the {MAX_MEMBER_BYTES}-byte limit of a bundle file; not read"))
        elif path.is_file() and not path.is_symlink():
            leaks += clean.scan_document(rel, path.read_bytes().decode("utf-8", errors="replace"))
        findings += dict.fromkeys(leaks)
    return findings
