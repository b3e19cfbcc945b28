"""BagIt validity: bagit-python's ``Bag.validate()``, then only proofgrid's own rules on top.

bagit checks the structure, bagit.txt, manifests and tag manifests, completeness, every digest and
the Payload-Oxum; proofgrid adds: sha256 manifests only, nothing beside the payload but the tag files,
no links or special files, every tag file in the tag manifest, a Source-Commit.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import bagit

from evidence.audit.archive import name_problem, shown_name
from evidence.fileio import sha256_file
from evidence.problems import Problem
from evidence.seal.bundle import TAG_FILES
from facts.files import BUNDLE_PAYLOAD

MANIFEST = "manifest-sha256.txt"
TAGMANIFEST = "tagmanifest-sha256.txt"


def _manifest_of(rel: str) -> str:
    return MANIFEST if rel.startswith(BUNDLE_PAYLOAD + "/") else TAGMANIFEST


def tree_problems(bag: Path) -> list[Problem]:
    """The first path of the bag's tree deeper or longer than a bundle's (``evidence.audit.archive``'s
    limits, the bag's own name counted as an archive's top-level directory), as one problem; [] when none.
    The walk is iterative and goes no deeper than the limit: the recursive walks of the later checks (and
    bagit's) are only run on a tree that passed, so a 2,500-level tree is a finding, never a crash."""
    stack = [(bag, bag.name)]
    while stack:
        directory, name = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            return [Problem(name.split("/", 1)[-1], f"cannot be listed ({exc.__class__.__name__}); nothing else checked")]
        for entry in entries:
            child = f"{name}/{entry.name}"
            problem = name_problem(child)
            if problem:
                return [Problem(shown_name(child.split("/", 1)[1]), f"path {problem}: no build writes it; nothing else checked")]
            if entry.is_dir(follow_symlinks=False):
                stack.append((Path(entry.path), child))
    return []


def _files(root: Path, findings: list[Problem], bag: Path) -> list[str]:
    """Regular files under ``root`` (bag-relative); links and special files become problems."""
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(bag).as_posix()
        if path.is_symlink():
            findings.append(Problem(rel, "symbolic link inside the bag"))
        elif path.is_file():
            files.append(rel)
        elif not path.is_dir():
            findings.append(Problem(rel, "not a regular file"))
    return files


def read_tags(path: Path) -> dict[str, str]:
    tags = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if ":" in line and not line.startswith((" ", "\t")):
            key, value = line.split(":", 1)
            tags[key.strip()] = value.strip()
    return tags


def _bagit_problems(loaded: bagit.Bag, error: bagit.BagError, bag: Path) -> list[Problem]:
    """bagit's validation error as problems: one per structured detail, else its message."""
    findings = []
    for detail in getattr(error, "details", None) or []:
        rel = str(detail.path).replace(os.sep, "/")
        if isinstance(detail, bagit.ChecksumMismatch):
            findings.append(Problem(rel, f"SHA256 differs from {_manifest_of(rel)}"))
        elif isinstance(detail, bagit.FileMissing):
            findings.append(Problem(rel, f"listed in {_manifest_of(rel)} but missing"))
        elif isinstance(detail, bagit.UnexpectedFile):
            findings.append(Problem(rel, f"not listed in {MANIFEST} (extra file)"))
        else:
            findings.append(Problem(rel, str(detail)))
    if findings:
        return findings
    message = str(getattr(error, "message", error)).replace(str(bag) + os.sep, "").replace(str(bag), "<bag>")
    if "Payload-Oxum" in message:
        # bagit stops at the Payload-Oxum: still name the files that differ, from its own manifest entries.
        findings.append(Problem("bag-info.txt", message))
        only_in_manifest, only_on_fs = loaded.compare_manifests_with_fs()
        findings += [Problem(rel, f"listed in {MANIFEST} but missing") for rel in sorted(only_in_manifest)]
        findings += [Problem(rel, f"not listed in {MANIFEST} (extra file)") for rel in sorted(only_on_fs)]
        for rel, digests in sorted(loaded.entries.items()):
            path = bag / rel
            if "sha256" in digests and path.is_file() and not path.is_symlink() \
                    and sha256_file(path) != digests["sha256"].lower():
                findings.append(Problem(rel, f"SHA256 differs from {_manifest_of(rel)}"))
        return findings
    return [Problem("bagit", message)]


def check_bag(bag: Path) -> list[Problem]:
    """BagIt validity by bagit-python's ``Bag.validate()``, plus proofgrid's rules on top."""
    findings = tree_problems(bag)
    if findings:
        return findings
    for entry in sorted(bag.iterdir()):
        if entry.name == BUNDLE_PAYLOAD and entry.is_dir() and not entry.is_symlink():
            continue
        if entry.name in TAG_FILES:
            continue
        if re.fullmatch(r"(tag)?manifest-\w+\.txt", entry.name):
            findings.append(Problem(entry.name, "only sha256 manifests are allowed"))
        else:
            findings.append(Problem(entry.name, "extra entry outside the payload"))
    if (bag / BUNDLE_PAYLOAD).is_dir():
        _files(bag / BUNDLE_PAYLOAD, findings, bag)
    logging.getLogger("bagit").setLevel(logging.CRITICAL)  # its findings come back as exceptions
    try:
        loaded = bagit.Bag(str(bag))
    except bagit.BagError as exc:
        message = str(exc).replace(str(bag) + os.sep, "").replace(str(bag), "<bag>")
        return findings + [Problem("bagit", f"not a loadable bag: {message}")]
    try:
        loaded.validate(processes=1)
    except bagit.BagError as exc:
        findings += _bagit_problems(loaded, exc, bag)
    except (OSError, ValueError) as exc:
        findings.append(Problem("bagit", f"validation failed ({exc.__class__.__name__}: {exc})"))

    tagged = {rel for rel in loaded.entries if "/" not in rel}
    for name in TAG_FILES:
        if name != TAGMANIFEST and (bag / name).is_file() and name not in tagged:
            findings.append(Problem(name, f"not listed in {TAGMANIFEST}"))
    if not loaded.info.get("Source-Commit"):
        findings.append(Problem("bag-info.txt", "no Source-Commit"))
    return findings
