"""The archive before anything is extracted: every member header checked, then extraction (data filter) when all are safe.

Refused, header by header: ``..`` or absolute names, links, devices, sparse or oversized members, names
too deep or too long, alias spellings such as ``./bundle/x`` or ``bundle//x`` that duplicate a member, a
member that case-folds onto another; and more than one top-level directory. A sidecar ``.sha256`` must match.
"""

from __future__ import annotations

import contextlib
import re
import tarfile
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from evidence.fileio import sha256_file
from evidence.problems import Problem

# What no bundle holds: a bigger member, archive or member count is refused before extraction, so a
# decompression bomb is neither extracted nor read into memory.
MAX_MEMBER_BYTES = 256 * 2**20
MAX_ARCHIVE_BYTES = 2 * 2**30
MAX_MEMBERS = 100_000
# How deep and how long a member's name may be: a build writes 8 levels (``bundle/data/stages/<stage>/runs/<job>/
# eval/<file>``) and names under 200 characters. A deeper or longer name is refused before extraction (an
# extraction, a bag walk or a file system would fail on it: a 2,500-level tree exhausts Python's recursion).
# The same limits hold for a bag directory's tree (``evidence.audit.bag.tree_problems``), its name counted.
MAX_MEMBER_DEPTH = 32
MAX_MEMBER_NAME = 1024
MAX_NAME_COMPONENT_BYTES = 255  # one file or directory name (UTF-8): what a file system holds


def canonical_name(name: str) -> str:
    """The one spelling of a member name: ``/`` separators, no empty or ``.`` components, Unicode NFC.
    ``./bundle/x``, ``bundle//x``, ``bundle/./x`` and ``bundle/x/`` all have the canonical name ``bundle/x``."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    return unicodedata.normalize("NFC", "/".join(parts))


def name_problem(name: str) -> str | None:
    """Why a member name (or a bag path, its top-level directory included) is too deep or too long, or None."""
    depth = len([p for p in name.replace("\\", "/").split("/") if p not in ("", ".")])
    if depth > MAX_MEMBER_DEPTH:
        return f"{depth} levels deep, above the {MAX_MEMBER_DEPTH}-level limit of a bundle"
    if len(name) > MAX_MEMBER_NAME:
        return f"name of {len(name)} characters, above the {MAX_MEMBER_NAME}-character limit of a bundle"
    longest = max((len(p.encode("utf-8", "surrogateescape")) for p in name.replace("\\", "/").split("/")), default=0)
    if longest > MAX_NAME_COMPONENT_BYTES:
        return f"name with a {longest}-byte component, above the {MAX_NAME_COMPONENT_BYTES}-byte limit of a file name"
    return None


def shown_name(name: str, keep: int = 120) -> str:
    """A name as a finding shows it: one past the limits cut to its first ``keep`` characters."""
    return name if len(name) <= keep else f"{name[:keep]}... ({len(name)} characters)"


def member_problem(member: tarfile.TarInfo) -> str | None:
    """Why an archive member must not be extracted, or None."""
    name = member.name
    too_big = name_problem(name)
    if too_big:
        return f"member {too_big}"
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "absolute member name"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "member name escapes the archive (..)"
    if member.issym() or member.islnk():
        return f"link member (to {member.linkname!r})"
    if member.ischr() or member.isblk() or member.isfifo():
        return "device or special-file member"
    if not (member.isfile() or member.isdir()):
        return "unsupported member type"
    if member.issparse():
        return "sparse member (no bundle holds one)"
    if member.size > MAX_MEMBER_BYTES:
        return f"member of {member.size} bytes, above the {MAX_MEMBER_BYTES}-byte limit of a bundle file"
    if name != canonical_name(name):
        return f"alias spelling of member {canonical_name(name)!r} (refused as a duplicate)"
    return None


def _members(tar: tarfile.TarFile, archive: Path) -> tuple[list[tarfile.TarInfo] | None, list[Problem]]:
    """Every member header, read one at a time; None (with a problem) past the count or size limits."""
    members, total = [], 0
    for member in tar:
        members.append(member)
        total += member.size
        if len(members) > MAX_MEMBERS or total > MAX_ARCHIVE_BYTES:
            return None, [Problem(archive.name, f"more than {MAX_MEMBERS} members or {MAX_ARCHIVE_BYTES} bytes: "
                                                "not a bundle; nothing extracted")]
    return members, []


def check_sidecar(archive: Path) -> list[Problem]:
    """The archive's SHA256 is the one its ``.sha256`` sidecar records, when there is one."""
    sidecar = archive.with_name(archive.name + ".sha256")
    if sidecar.is_file():
        recorded = sidecar.read_text(encoding="utf-8", errors="replace").split()
        if not recorded or recorded[0].lower() != sha256_file(archive):
            return [Problem(archive.name, f"SHA256 differs from {sidecar.name}")]
    return []


def check_members(tar: tarfile.TarFile, archive: Path) -> tuple[list[tarfile.TarInfo] | None, str, list[Problem]]:
    """Every member header and the one top-level directory: the members and that directory when all are
    safe to extract, else None (the problems say why)."""
    members, problems = _members(tar, archive)
    if members is None:
        return None, "", problems
    seen: set[str] = set()
    too_deep: set[tuple[str, ...]] = set()  # a chain of directories past the depth limit: one finding, not one each
    for member in members:
        problem = member_problem(member)
        canonical = canonical_name(member.name)
        branch = tuple(canonical.split("/")[:MAX_MEMBER_DEPTH + 1])
        if problem and len(branch) > MAX_MEMBER_DEPTH:
            if branch in too_deep:
                continue
            too_deep.add(branch)
        # Case-folded too: on a case-insensitive file system "Data/x" overwrites "data/x".
        if problem is None and canonical.casefold() in seen:
            problem = "duplicate member"
        seen.add(canonical.casefold())
        if problem:
            problems.append(Problem(f"{archive.name}:{shown_name(member.name)}", problem))
    roots = {canonical_name(m.name).split("/")[0] for m in members if canonical_name(m.name)}
    if len(roots) != 1:
        problems.append(Problem(archive.name, f"expected one top-level directory, found {len(roots)}"))
    if problems:
        return None, "", problems  # never extract an archive with an unsafe member
    return members, roots.pop(), problems


def checked_member_filter(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo:
    """tarfile's data filter for members ``check_members`` has passed: the same modes (no group or other write,
    owner read and write, execute bits only where the owner had one) and no owners, without its
    ``os.path.realpath`` of every member. That resolution guards against links; the checked members hold
    none (links, devices, ``..`` and absolute names are refused first) and the destination is a fresh empty
    directory, so it can find none, and it costs a ``stat`` per path component per member: quadratic in
    depth (a 900-directory tree took 13 s to extract)."""
    mode = None
    if member.isfile():
        mode = (member.mode & 0o755) | 0o600
        if not mode & 0o100:
            mode &= ~0o111
    return member.replace(mode=mode, uid=None, gid=None, uname=None, gname=None, deep=False)


@contextlib.contextmanager
def extracted(tar: tarfile.TarFile, members: list[tarfile.TarInfo], root: str) -> Iterator[Path]:
    """The checked members extracted (``checked_member_filter``) into a temporary directory: the bag's path."""
    with tempfile.TemporaryDirectory(prefix="evidence-audit-") as tmp:
        tar.extractall(tmp, members=members, filter=checked_member_filter)
        yield Path(tmp) / root
