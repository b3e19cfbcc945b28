"""Where the bundle is when the path given to the audit is not one: the bundle it is inside or belongs
to, the bundles it contains, or that none was found, as one line naming the path to audit instead.

A bundle is a bag directory (it holds a BagIt tag file) or a ``.tar.gz`` of one. Auditing anything else
(a sweep, an experiment, a job, a file inside a bag, the archive's ``.sha256``) would report every file
as a finding, quote binary content and name files relative to the wrong directory: the audit refuses it
with this line instead, before it reads any file.
"""

from __future__ import annotations

import os
import tarfile
import zlib
from pathlib import Path

from evidence.audit.archive import MAX_ARCHIVE_BYTES, MAX_MEMBERS, canonical_name, member_problem
from evidence.dataset import EXPERIMENT_FILE
from evidence.seal.bundle import TAG_FILES
from evidence.verdict.stages import CONFIRM_STAGE
from facts.files import (
    BUNDLE_ARCHIVE,
    BUNDLE_DIR,
    JOBS_DIR,
    SHA256_SIDECAR_SUFFIX,
    SWEEP_RECORD,
)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
# How far below the path the bundles are looked for: an experiment's stage bundles sit two levels
# down (<experiment>/<stage>/bundle.tar.gz), a directory of experiments three.
SEARCH_DEPTH = 3
# How many member headers of an archive found in a directory are read to tell a bundle: a bundle's tag
# files are its second and third.
FIRST_HEADERS = 8
NAMED_AT_MOST = 6  # bundles named in the line before the rest are counted
AUDIT = "python -m evidence audit"
BUILD = "python -m evidence build"


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False too where it cannot be looked at (a directory the user may not read)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def is_bag(path: Path) -> bool:
    """A bag directory: it holds at least one BagIt tag file (a bag missing some is still audited)."""
    return _is_dir(path) and any(_is_file(path / name) for name in TAG_FILES)


def is_archive(path: Path) -> bool:
    return _is_file(path) and path.name.endswith(ARCHIVE_SUFFIXES)


def is_sweep(path: Path) -> bool:
    """A sweep directory: its plan (``sweep.json``) or its ``jobs/``."""
    return _is_dir(path) and (_is_file(path / SWEEP_RECORD) or _is_dir(path / JOBS_DIR))


def holds_no_bag(archive: Path, headers: int = MAX_MEMBERS) -> bool:
    """A readable gzip tar archive, every member header of which the audit would extract, none of them a
    BagIt tag file of a top-level directory: a ``.tar.gz`` that is not a bundle. False at the first tag
    file (a bundle's come third) or unsafe header, past the audit's limits, or when it is not a readable
    gzip tar: the audit's archive check reports those as findings. With ``headers``, only that many are
    read (an archive with no tag file among them counts as no bundle)."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            count = total = 0
            while count < headers and (member := tar.next()) is not None:
                count, total = count + 1, total + member.size
                if member_problem(member) or count > MAX_MEMBERS or total > MAX_ARCHIVE_BYTES:
                    return False
                parts = canonical_name(member.name).split("/")
                if len(parts) == 2 and parts[1] in TAG_FILES and member.isfile():
                    return False
    except (tarfile.TarError, OSError, EOFError, zlib.error):
        return False
    return True


def sweep_bundle(sweep: Path) -> Path | None:
    """A sweep's sealed bundle: its archive (what a reviewer audits), else its bag directory."""
    for candidate in (sweep / BUNDLE_ARCHIVE, sweep / BUNDLE_DIR):
        if is_archive(candidate) or is_bag(candidate):
            return candidate
    return None


def contained_bundles(directory: Path, depth: int = SEARCH_DEPTH) -> list[Path]:
    """The bundles under ``directory`` (``depth`` levels at most); of a sealed sweep's bag and archive, the
    archive only. Jobs directories, hidden directories and bags are not searched inside."""
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        here = Path(root)
        sealed = sweep_bundle(here)
        found += [sealed] if sealed is not None else []
        found += [here / d for d in sorted(dirs) if is_bag(here / d) and not (sealed and d == BUNDLE_DIR)]
        found += [here / f for f in sorted(files) if f.endswith(ARCHIVE_SUFFIXES) and not (sealed and f == BUNDLE_ARCHIVE)
                  and not holds_no_bag(here / f, headers=FIRST_HEADERS)]
        deeper = len(here.relative_to(directory).parts) + 1 < depth
        dirs[:] = sorted(d for d in dirs if deeper and d != JOBS_DIR and not d.startswith(".") and not is_bag(here / d))
    return found


def _absolute(path: Path) -> Path:
    """``path`` made absolute with ``..`` taken out, links kept (as the user sees the tree)."""
    return Path(os.path.abspath(path))


def contained_sweeps(directory: Path, depth: int = SEARCH_DEPTH) -> list[Path]:
    """The sweep directories under ``directory`` (``depth`` levels at most; not searched inside)."""
    found: list[Path] = []
    for root, dirs, _ in os.walk(directory):
        here = Path(root)
        deeper = len(here.relative_to(directory).parts) + 1 < depth
        found += [here / d for d in sorted(dirs) if is_sweep(here / d)]
        dirs[:] = sorted(d for d in dirs if deeper and not d.startswith(".") and not is_sweep(here / d))
    return found


def _enclosing(path: Path, test) -> Path | None:
    for parent in (path, *path.parents):
        if test(parent):
            return parent
    return None


def _audit_that(bundle: Path) -> str:
    return f"audit that: {AUDIT} {bundle}"


def _several(bundles: list[Path], experiment_bundle: Path | None) -> str:
    named = ", ".join(str(b) for b in bundles[:NAMED_AT_MOST])
    more = f" and {len(bundles) - NAMED_AT_MOST} more" if len(bundles) > NAMED_AT_MOST else ""
    first = experiment_bundle or bundles[0]
    whose = " (the experiment's is its confirm stage's)" if experiment_bundle is not None else ""
    return f"it contains the bundles {named}{more}: audit one of them{whose}, e.g. {AUDIT} {first}"


def not_a_bundle(path: Path) -> str | None:
    """None when ``path`` is a bundle to audit (a bag directory or a ``.tar.gz``); else the one line
    saying what it is and which bundle to audit instead (or that none was found)."""
    if is_bag(path):
        return None
    if is_archive(path):
        if holds_no_bag(path):
            return (f"{path} is a gzip tar archive but not a bundle: no directory at its top holds a BagIt tag file "
                    f"({TAG_FILES[0]}); audit a sweep's {BUNDLE_ARCHIVE} or its {BUNDLE_DIR}/ directory")
        return None
    if not path.exists():
        return f"{path}: no such file or directory"
    if path.is_file() and path.name.endswith(SHA256_SIDECAR_SUFFIX):
        archive = path.with_name(path.name[: -len(SHA256_SIDECAR_SUFFIX)])
        if is_archive(archive):
            return f"{path} is the SHA256 sidecar of {archive}, not a bundle; {_audit_that(archive)} (it checks the sidecar)"
    bag = _enclosing(_absolute(path).parent, is_bag)
    if bag is not None:
        bag = _shown(bag, path)
        return f"{path} is not a bundle: it is inside the bundle {bag}; {_audit_that(bag)}"
    sweep = _enclosing(_absolute(path), is_sweep)
    if sweep is not None:
        sweep = _shown(sweep, path)
        sealed = sweep_bundle(sweep)
        what = "is a sweep directory" if _absolute(sweep) == _absolute(path) else f"belongs to the sweep {sweep}"
        if sealed is None:
            return (f"{path} is not a bundle: it {what}, which is not sealed yet; seal it first: {BUILD} {sweep}, "
                    f"then {AUDIT} {sweep / BUNDLE_ARCHIVE}")
        return f"{path} is not a bundle: it {what}, whose bundle is {sealed}; {_audit_that(sealed)}"
    if path.is_dir():
        bundles = contained_bundles(path)
        if len(bundles) == 1:
            return f"{path} is not a bundle: it contains the bundle {bundles[0]}; {_audit_that(bundles[0])}"
        if bundles:
            confirm = sweep_bundle(path / CONFIRM_STAGE) if (path / EXPERIMENT_FILE).is_file() else None
            return f"{path} is not a bundle: {_several(bundles, confirm)}"
        sweeps = contained_sweeps(path)
        if sweeps:
            named = ", ".join(str(p) for p in sweeps[:NAMED_AT_MOST])
            return (f"{path} is not a bundle and holds none: it contains the sweep(s) {named}, none sealed yet; "
                    f"seal one first: {BUILD} {sweeps[0]}, then {AUDIT} {sweeps[0] / BUNDLE_ARCHIVE}")
        return (f"{path} is not a bundle (a bag directory or its .tar.gz) and holds none within {SEARCH_DEPTH} "
                f"levels; seal a sweep with {BUILD} <sweep dir>, then audit its {BUNDLE_ARCHIVE}")
    return (f"{path} is not a bundle (a bag directory or its .tar.gz), and no bundle or sweep contains it; "
            f"audit a sweep's {BUNDLE_ARCHIVE} or its {BUNDLE_DIR}/ directory")


def _shown(found: Path, given: Path) -> Path:
    """``found`` (a parent of ``given``) spelled as ``given`` is: absolute, or relative to the current directory."""
    return found if given.is_absolute() else Path(os.path.relpath(found))
