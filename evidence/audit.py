"""Audit a released bundle (a bag directory or its ``.tar.gz``) with no access to the sweep.

Checks, in order: archive members before anything is extracted (no ``..``, absolute names,
links, devices; one top-level directory); BagIt validity (bagit.txt, sha256 manifests only,
every payload file listed, every digest right, nothing extra, Payload-Oxum); every accepted
run's metrics log passes the validator again and matches ``steps.csv``/``eval.csv``; every table
CSV and every line of ``report.md`` recomputes from ``steps.csv``/``eval.csv``; the leak scan.
Each problem is a ``Finding`` naming a file (relative to the bag) and a reason.
"""

from __future__ import annotations

import math
import re
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from evidence.bundle import TAG_FILES
from evidence.dataset import EVAL_COLUMNS, load_bundle_data, read_csv
from evidence.fileio import JSONError, read_json, sha256_file
from evidence.incidents import history_incidents
from evidence.metrics_log import validate_metrics
from evidence.report import render_report
from evidence.sanitize import Sanitizer
from evidence.tables import compute_tables

PAYLOAD = "data"
MANIFEST = "manifest-sha256.txt"
TAGMANIFEST = "tagmanifest-sha256.txt"
_HEX64 = re.compile(r"[0-9a-f]{64}")
# Reported per file before the rest are summarised, so one broken table does not bury the others.
MAX_PER_FILE = 20


@dataclass(frozen=True)
class Finding:
    """One audit problem: a file (relative to the bag, or the archive's name) and why."""

    file: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.reason}"


class UsageError(Exception):
    """The path given to the audit is neither a bag directory nor a .tar.gz archive."""


def audit(path: str | Path) -> list[Finding]:
    """Audit a bundle directory or a ``.tar.gz`` of one; an empty list means clean."""
    path = Path(path)
    if path.is_dir():
        return audit_bag(path)
    if path.is_file() and (path.name.endswith((".tar.gz", ".tgz"))):
        return audit_archive(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    raise UsageError(f"{path}: not a bundle directory or .tar.gz archive")


# ---- archive ------------------------------------------------------------------------------------

def member_problem(member: tarfile.TarInfo) -> str | None:
    """Why an archive member must not be extracted, or None."""
    name = member.name
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
    return None


def audit_archive(archive: Path) -> list[Finding]:
    """Check every member header first; extract (data filter) only when all are safe, then audit the bag."""
    findings: list[Finding] = []
    sidecar = archive.with_name(archive.name + ".sha256")
    if sidecar.is_file():
        recorded = sidecar.read_text(encoding="utf-8", errors="replace").split()
        if not recorded or recorded[0].lower() != sha256_file(archive):
            findings.append(Finding(archive.name, f"SHA256 differs from {sidecar.name}"))
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = tar.getmembers()
            seen: set[str] = set()
            for member in members:
                problem = member_problem(member)
                if problem is None and member.name.rstrip("/") in seen:
                    problem = "duplicate member"
                seen.add(member.name.rstrip("/"))
                if problem:
                    findings.append(Finding(f"{archive.name}:{member.name}", problem))
            roots = {PurePosixPath(m.name).parts[0] for m in members if PurePosixPath(m.name).parts}
            if len(roots) != 1:
                findings.append(Finding(archive.name, f"expected one top-level directory, found {len(roots)}"))
            if any(f.file != archive.name or "top-level" in f.reason for f in findings):
                return findings  # never extract an archive with an unsafe member
            with tempfile.TemporaryDirectory(prefix="evidence-audit-") as tmp:
                tar.extractall(tmp, members=members, filter="data")
                return findings + audit_bag(Path(tmp) / roots.pop())
    except (tarfile.TarError, OSError, EOFError) as exc:
        return findings + [Finding(archive.name, f"not a readable gzip tar archive ({exc.__class__.__name__})")]


# ---- BagIt ----------------------------------------------------------------------------------------

def _parse_manifest(bag: Path, name: str, findings: list[Finding]) -> dict[str, str]:
    """``{relative path: digest}`` of a manifest; unsafe or malformed lines become findings."""
    entries: dict[str, str] = {}
    try:
        text = (bag / name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        findings.append(Finding(name, "missing or unreadable"))
        return entries
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split(None, 1)
        if len(parts) != 2 or not _HEX64.fullmatch(parts[0].lower()):
            findings.append(Finding(name, f"line {number}: not '<sha256>  <path>'"))
            continue
        digest = parts[0].lower()
        rel = parts[1].strip().lstrip("*").replace("%0D", "\r").replace("%0A", "\n")
        pure = PurePosixPath(rel)
        if pure.is_absolute() or rel.startswith("\\") or re.match(r"^[A-Za-z]:", rel):
            findings.append(Finding(name, f"line {number}: absolute path {rel!r}"))
        elif ".." in pure.parts or "\\" in rel:
            findings.append(Finding(name, f"line {number}: path {rel!r} escapes the bag"))
        elif rel in entries:
            findings.append(Finding(name, f"line {number}: {rel} listed twice"))
        else:
            entries[rel] = digest
    return entries


def _files(root: Path, findings: list[Finding], bag: Path) -> list[str]:
    """Regular files under ``root`` (bag-relative); links and special files become findings."""
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(bag).as_posix()
        if path.is_symlink():
            findings.append(Finding(rel, "symbolic link inside the bag"))
        elif path.is_file():
            files.append(rel)
        elif not path.is_dir():
            findings.append(Finding(rel, "not a regular file"))
    return files


def _check_digests(bag: Path, entries: dict[str, str], manifest: str, findings: list[Finding]) -> None:
    for rel, digest in sorted(entries.items()):
        path = bag / rel
        if path.is_symlink() or not path.is_file():
            findings.append(Finding(rel, f"listed in {manifest} but missing"))
        elif sha256_file(path) != digest:
            findings.append(Finding(rel, f"SHA256 differs from {manifest}"))


def _read_tags(path: Path) -> dict[str, str]:
    tags = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if ":" in line and not line.startswith((" ", "\t")):
            key, value = line.split(":", 1)
            tags[key.strip()] = value.strip()
    return tags


def check_bag(bag: Path) -> list[Finding]:
    """BagIt validity to RFC 8493 with sha256 manifests only: listed, digested, nothing extra."""
    findings: list[Finding] = []
    for entry in sorted(bag.iterdir()):
        if entry.name == PAYLOAD and entry.is_dir() and not entry.is_symlink():
            continue
        if entry.name in TAG_FILES:
            continue
        if re.fullmatch(r"(tag)?manifest-\w+\.txt", entry.name):
            findings.append(Finding(entry.name, "only sha256 manifests are allowed"))
        else:
            findings.append(Finding(entry.name, "extra entry outside the payload"))
    try:
        raw = (bag / "bagit.txt").read_bytes()
        tags = _read_tags(bag / "bagit.txt")
        if raw.startswith(b"\xef\xbb\xbf"):
            findings.append(Finding("bagit.txt", "starts with a byte-order mark"))
        if tags.get("BagIt-Version") not in ("0.97", "1.0") or tags.get("Tag-File-Character-Encoding") != "UTF-8":
            findings.append(Finding("bagit.txt", "BagIt-Version / Tag-File-Character-Encoding missing or wrong"))
    except (OSError, UnicodeDecodeError):
        findings.append(Finding("bagit.txt", "missing or unreadable"))
    if not (bag / PAYLOAD).is_dir():
        findings.append(Finding(PAYLOAD, "payload directory missing"))
        return findings

    payload = _files(bag / PAYLOAD, findings, bag)
    manifest = _parse_manifest(bag, MANIFEST, findings)
    for rel in manifest:
        if not rel.startswith(PAYLOAD + "/"):
            findings.append(Finding(MANIFEST, f"{rel}: payload entry outside data/"))
    safe = {rel: d for rel, d in manifest.items() if rel.startswith(PAYLOAD + "/")}
    _check_digests(bag, safe, MANIFEST, findings)
    for rel in payload:
        if rel not in manifest:
            findings.append(Finding(rel, f"not listed in {MANIFEST} (extra file)"))

    tagmanifest = _parse_manifest(bag, TAGMANIFEST, findings)
    for rel in list(tagmanifest):
        if "/" in rel or rel == TAGMANIFEST:
            findings.append(Finding(TAGMANIFEST, f"{rel}: not a tag file"))
            del tagmanifest[rel]
    _check_digests(bag, tagmanifest, TAGMANIFEST, findings)
    for name in TAG_FILES:
        if name != TAGMANIFEST and (bag / name).is_file() and name not in tagmanifest:
            findings.append(Finding(name, f"not listed in {TAGMANIFEST}"))

    try:
        info = _read_tags(bag / "bag-info.txt")
    except (OSError, UnicodeDecodeError):
        findings.append(Finding("bag-info.txt", "missing or unreadable"))
        return findings
    oxum = f"{sum((bag / rel).stat().st_size for rel in payload)}.{len(payload)}"
    if info.get("Payload-Oxum") != oxum:
        findings.append(Finding("bag-info.txt", f"Payload-Oxum {info.get('Payload-Oxum')} != payload {oxum}"))
    if not info.get("Source-Commit"):
        findings.append(Finding("bag-info.txt", "no Source-Commit"))
    return findings


# ---- content ----------------------------------------------------------------------------------------

def _same_cell(recorded: str, recomputed: str) -> bool:
    if recorded == recomputed:
        return True
    try:
        a, b = float(recorded), float(recomputed)
    except ValueError:
        return False
    # scipy's t quantile may differ in the last bits between versions; a real edit is far larger.
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _capped(findings: list[Finding]) -> list[Finding]:
    if len(findings) <= MAX_PER_FILE:
        return findings
    rest = len(findings) - MAX_PER_FILE
    return findings[:MAX_PER_FILE] + [Finding(findings[0].file, f"(+{rest} more differences)")]


def _compare_csv(rel: str, recorded_path: Path, expected_text: str) -> list[Finding]:
    import csv
    import io

    if not recorded_path.is_file():
        return [Finding(rel, "missing (the recomputation produces it)")]
    header, rows = read_csv(recorded_path)
    expected = list(csv.reader(io.StringIO(expected_text)))
    exp_header, exp_rows = expected[0], expected[1:]
    if header != exp_header:
        return [Finding(rel, "header differs from the recomputation")]
    if len(rows) != len(exp_rows):
        return [Finding(rel, f"{len(rows)} rows, the recomputation gives {len(exp_rows)}")]
    found = []
    for number, (row, exp) in enumerate(zip(rows, exp_rows), start=2):
        for column, want in zip(exp_header, exp):
            if not _same_cell(row.get(column, ""), want):
                found.append(Finding(rel, f"line {number}, column {column}: {row.get(column)!r} does not "
                                          f"recompute (recomputed {want!r})"))
    return _capped(found)


def _compare_report(rel: str, recorded_path: Path, expected: str) -> list[Finding]:
    if not recorded_path.is_file():
        return [Finding(rel, "missing")]
    have = recorded_path.read_text(encoding="utf-8", errors="replace").split("\n")
    want = expected.split("\n")
    found = [Finding(rel, f"line {i}: does not recompute (recorded {a[:120]!r}, recomputed {b[:120]!r})")
             for i, (a, b) in enumerate(zip(have, want), start=1) if a != b]
    if len(have) != len(want):
        found.append(Finding(rel, f"{len(have)} lines, the recomputation gives {len(want)}"))
    return _capped(found)


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=0, abs_tol=0)


def check_runs(data_dir: Path, data) -> list[Finding]:
    """Every accepted run re-validates, and steps.csv / eval.csv carry exactly its records."""
    findings: list[Finding] = []
    n_updates = data.n_updates
    accepted = set(data.accepted)
    for name in ("steps.csv", "eval.csv"):
        _, rows = read_csv(data_dir / name)
        strays = sorted({f"{r['algo']}-{r['seed']}" for r in rows if (r["algo"], int(r["seed"])) not in accepted})
        for job in strays:
            findings.append(Finding(f"data/{name}", f"rows of {job}, which the index does not accept"))
    for algo, seed in data.accepted:
        job = f"{algo}-{seed}"
        rel = f"data/runs/{job}/metrics.jsonl"
        log = validate_metrics(data_dir / "runs" / job / "metrics.jsonl", algo, n_updates, name=rel)
        findings += _capped([Finding(rel, v.detail()) for v in log.violations])
        csv_records = {r["step"]: r for r in data.steps.get((algo, seed), [])}
        mismatches = []
        if len(csv_records) != len(log.records):
            mismatches.append(Finding("data/steps.csv", f"{len(csv_records)} rows of {job}, its metrics log has {len(log.records)}"))
        for record in log.records:
            row = csv_records.get(record["step"])
            keys = set(record) | {k for k, v in (row or {}).items() if v is not None}
            if row is None or any(not _close(record.get(k), row.get(k)) for k in keys - {"step"}):
                mismatches.append(Finding("data/steps.csv", f"{job} step {record['step']} differs from {rel}"))
        findings += _capped(mismatches)
        try:
            summary = read_json(data_dir / "runs" / job / "eval.json")
            for kind in ("initial", "final"):
                row = data.evals.get((algo, seed), {}).get(kind)
                entry = summary.get(kind) if isinstance(summary, dict) else None
                if row is None or not isinstance(entry, dict):
                    findings.append(Finding("data/eval.csv", f"{job} {kind}: missing row or eval.json entry"))
                    continue
                for column in EVAL_COLUMNS[3:]:
                    if str(entry.get(column)).lower() != str(row.get(column)).lower() and not (
                            isinstance(entry.get(column), (int, float)) and _close(entry.get(column), row.get(column))):
                        findings.append(Finding("data/eval.csv", f"{job} {kind} {column} differs from data/runs/{job}/eval.json"))
        except JSONError as exc:
            findings.append(Finding(f"data/runs/{job}/eval.json", str(exc)))
    recorded = {(r["job"], r["kind"], r["title"]) for r in data.incidents}
    for row in data.index:
        for kind, _, title, _ in history_incidents(data_dir / "runs" / row["job"]):
            if (row["job"], kind, title) not in recorded:
                findings.append(Finding("data/incidents.csv", f"{row['job']}: {kind} incident {title!r} of its "
                                        "attempt history is missing"))
    rejected = [r["job"] for r in data.index if r["accepted"] != "yes"]
    with_incident = {r["job"] for r in data.incidents}
    for job in rejected:
        if job not in with_incident:
            findings.append(Finding("data/incidents.csv", f"rejected job {job} has no incident record"))
    return findings


def check_recomputation(data_dir: Path, data) -> list[Finding]:
    """Every table CSV and every line of report.md equals what steps.csv / eval.csv give."""
    findings: list[Finding] = []
    tables = compute_tables(data)
    for name, table in tables.items():
        findings += _compare_csv(f"data/tables/{name}.csv", data_dir / "tables" / f"{name}.csv", table.csv())
    if (data_dir / "tables").is_dir():
        for extra in sorted((data_dir / "tables").glob("*.csv")):
            if extra.stem not in tables:
                findings.append(Finding(f"data/tables/{extra.name}", "not a table of the recomputation"))
    findings += _compare_report("data/report.md", data_dir / "report.md", render_report(data, tables))
    return findings


def scan_leaks(bag: Path, clean: Sanitizer | None = None) -> list[Finding]:
    """The leak scan over every file and file name in the bag."""
    clean = clean or Sanitizer.from_environment()
    findings = []
    for path in sorted(bag.rglob("*")):
        rel = path.relative_to(bag).as_posix()
        leaks = clean.scan(rel)
        if path.is_file() and not path.is_symlink():
            leaks += clean.scan(path.read_bytes().decode("utf-8", errors="replace"))
        findings += [Finding(rel, f"leak: {leak}") for leak in dict.fromkeys(leaks)]
    return findings


def audit_bag(bag: Path) -> list[Finding]:
    """Audit an unpacked bag directory."""
    findings = check_bag(bag)
    data_dir = bag / PAYLOAD
    if data_dir.is_dir():
        try:
            data = load_bundle_data(data_dir)
        except (JSONError, OSError, KeyError, ValueError, TypeError) as exc:
            findings.append(Finding(PAYLOAD, f"cannot load the bundle's data ({exc.__class__.__name__}: {exc})"))
        else:
            for check in (check_runs, check_recomputation):
                try:
                    findings += check(data_dir, data)
                except (KeyError, ValueError, TypeError, ZeroDivisionError, StopIteration) as exc:
                    findings.append(Finding(PAYLOAD, f"cannot recompute ({exc.__class__.__name__}: {exc})"))
    findings += scan_leaks(bag)
    return findings
