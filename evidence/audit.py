"""Audit a released bundle (a bag directory or its ``.tar.gz``) with no access to the sweep.

Checks, in order: archive members before anything is extracted, header by header (no ``..``,
absolute names, links, devices, sparse or oversized members, alias spellings such as
``./bundle/x`` or ``bundle//x`` that duplicate a member; one top-level directory); BagIt validity by
bagit-python's ``Bag.validate()`` plus proofgrid's rules (sha256 manifests only, nothing beside
the payload, a Source-Commit); every accepted run's metrics log passes the validator again and
matches ``steps.csv``/``eval.csv``; the shared initial evaluation (``data/initial_eval/<key12>/``) is
there once, with the SHA256 every run's eval.json records, and recomputes from its responses; every table CSV and every line of ``report.md`` recomputes; a
rejected job whose bundled evidence passes every gate is cherry-picking; ``bag-info.txt``,
``sweep.json``, ``index.csv`` and ``commands.txt`` agree; SVG figures hold no script or external
reference; the leak scan (the sanitiser's own rule set). Each problem is a ``Problem`` naming a
file (relative to the bag) and a reason.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import tarfile
import tempfile
import unicodedata
import zlib
from functools import partial
from pathlib import Path, PurePosixPath

import bagit

from evidence.artifacts import (
    check_cleanup,
    check_run_summary,
    check_shared_reference,
    checkpoint_name,
    shared_initial_dir,
)
from evidence.bundle import FIGURES_DRAWN_BY, TAG_FILES, figures_library_version, private_tool_dirs
from evidence.dataset import EVAL_COLUMNS, EVAL_ID_COLUMNS, load_bundle_data, read_csv
from evidence.fileio import JSONError, read_json, sha256_file
from evidence.incidents import history_incidents
from evidence.metrics_log import validate_metrics
from evidence.problems import Problem, UsageError, capped
from evidence.report import render_report
from evidence.sanitize import Sanitizer
from evidence.tables import compute_tables
from evidence.verdict.recompute import check_verdict
from facts import EVAL_RECORD, INITIAL_EVAL_DIR, sweep_jobs_dir

PAYLOAD = "data"
MANIFEST = "manifest-sha256.txt"
TAGMANIFEST = "tagmanifest-sha256.txt"


def audit(path: str | Path) -> list[Problem]:
    """Audit a bundle directory or a ``.tar.gz`` of one; an empty list means clean."""
    path = Path(path)
    if path.is_dir() and not (path / "bagit.txt").exists() and sweep_jobs_dir(path).is_dir():
        sealed = [p for p in (path / "bundle.tar.gz", path / "bundle") if p.exists()]
        fix = f"python -m evidence audit {sealed[0]}" if sealed else f"seal it first: python -m evidence build {path}"
        raise UsageError(f"{path} is a sweep directory, not a bundle; {fix}")
    if path.is_dir():
        return audit_bag(path)
    if path.is_file() and not _is_gzip(path) and tarfile.is_tarfile(path):
        raise UsageError(f"{path} is an uncompressed tar archive; the audit reads the bundle's .tar.gz "
                         f"(gzip {path}, then audit {path}.gz; or audit the extracted bundle directory)")
    if path.is_file() and (path.name.endswith((".tar.gz", ".tgz"))):
        return audit_archive(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    raise UsageError(f"{path}: not a bundle directory or .tar.gz archive")


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


# ---- archive ------------------------------------------------------------------------------------

# What no bundle holds: a bigger member, archive or member count is refused before extraction, so a
# decompression bomb is neither extracted nor read into memory.
MAX_MEMBER_BYTES = 256 * 2**20
MAX_ARCHIVE_BYTES = 2 * 2**30
MAX_MEMBERS = 100_000


def canonical_name(name: str) -> str:
    """The one spelling of a member name: ``/`` separators, no empty or ``.`` components, Unicode NFC.
    ``./bundle/x``, ``bundle//x``, ``bundle/./x`` and ``bundle/x/`` all have the canonical name ``bundle/x``."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    return unicodedata.normalize("NFC", "/".join(parts))


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
    if member.issparse():
        return "sparse member (no bundle holds one)"
    if member.size > MAX_MEMBER_BYTES:
        return f"member of {member.size} bytes, above the {MAX_MEMBER_BYTES}-byte limit of a bundle file"
    if name != canonical_name(name):
        return f"alias spelling of member {canonical_name(name)!r} (refused as a duplicate)"
    return None


def _members(tar: tarfile.TarFile, archive: Path, findings: list[Problem]) -> list[tarfile.TarInfo] | None:
    """Every member header, read one at a time; None (with a finding) past the count or size limits."""
    members, total = [], 0
    for member in tar:
        members.append(member)
        total += member.size
        if len(members) > MAX_MEMBERS or total > MAX_ARCHIVE_BYTES:
            findings.append(Problem(archive.name, f"more than {MAX_MEMBERS} members or {MAX_ARCHIVE_BYTES} bytes: "
                                                  "not a bundle; nothing extracted"))
            return None
    return members


def audit_archive(archive: Path) -> list[Problem]:
    """Check every member header first; extract (data filter) only when all are safe, then audit the bag."""
    findings: list[Problem] = []
    sidecar = archive.with_name(archive.name + ".sha256")
    if sidecar.is_file():
        recorded = sidecar.read_text(encoding="utf-8", errors="replace").split()
        if not recorded or recorded[0].lower() != sha256_file(archive):
            findings.append(Problem(archive.name, f"SHA256 differs from {sidecar.name}"))
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = _members(tar, archive, findings)
            if members is None:
                return findings
            seen: set[str] = set()
            for member in members:
                problem = member_problem(member)
                canonical = canonical_name(member.name)
                # Case-folded too: on a case-insensitive file system "Data/x" overwrites "data/x".
                if problem is None and canonical.casefold() in seen:
                    problem = "duplicate member"
                seen.add(canonical.casefold())
                if problem:
                    findings.append(Problem(f"{archive.name}:{member.name}", problem))
            roots = {canonical_name(m.name).split("/")[0] for m in members if canonical_name(m.name)}
            if len(roots) != 1:
                findings.append(Problem(archive.name, f"expected one top-level directory, found {len(roots)}"))
            if any(f.file != archive.name or "top-level" in f.reason for f in findings):
                return findings  # never extract an archive with an unsafe member
            with tempfile.TemporaryDirectory(prefix="evidence-audit-") as tmp:
                tar.extractall(tmp, members=members, filter="data")
                return findings + audit_bag(Path(tmp) / roots.pop())
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        return findings + [Problem(archive.name, f"not a readable gzip tar archive ({exc.__class__.__name__})")]


# ---- BagIt ----------------------------------------------------------------------------------------
# bagit-python's Bag.validate() is the bag check (structure, bagit.txt, manifests and tag manifests,
# completeness, every digest, Payload-Oxum); proofgrid adds only its own rules on top: sha256
# manifests only, nothing beside the payload but the tag files, no links or special files, every
# tag file in the tag manifest, a Source-Commit.

def _manifest_of(rel: str) -> str:
    return MANIFEST if rel.startswith(PAYLOAD + "/") else TAGMANIFEST


def _files(root: Path, findings: list[Problem], bag: Path) -> list[str]:
    """Regular files under ``root`` (bag-relative); links and special files become findings."""
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


def _read_tags(path: Path) -> dict[str, str]:
    tags = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if ":" in line and not line.startswith((" ", "\t")):
            key, value = line.split(":", 1)
            tags[key.strip()] = value.strip()
    return tags


def _bagit_findings(loaded: bagit.Bag, error: bagit.BagError, bag: Path) -> list[Problem]:
    """bagit's validation error as findings: one per structured detail, else its message."""
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
    findings: list[Problem] = []
    for entry in sorted(bag.iterdir()):
        if entry.name == PAYLOAD and entry.is_dir() and not entry.is_symlink():
            continue
        if entry.name in TAG_FILES:
            continue
        if re.fullmatch(r"(tag)?manifest-\w+\.txt", entry.name):
            findings.append(Problem(entry.name, "only sha256 manifests are allowed"))
        else:
            findings.append(Problem(entry.name, "extra entry outside the payload"))
    if (bag / PAYLOAD).is_dir():
        _files(bag / PAYLOAD, findings, bag)
    logging.getLogger("bagit").setLevel(logging.CRITICAL)  # its findings come back as exceptions
    try:
        loaded = bagit.Bag(str(bag))
    except bagit.BagError as exc:
        message = str(exc).replace(str(bag) + os.sep, "").replace(str(bag), "<bag>")
        return findings + [Problem("bagit", f"not a loadable bag: {message}")]
    try:
        loaded.validate(processes=1)
    except bagit.BagError as exc:
        findings += _bagit_findings(loaded, exc, bag)
    except (OSError, ValueError) as exc:
        findings.append(Problem("bagit", f"validation failed ({exc.__class__.__name__}: {exc})"))

    tagged = {rel for rel in loaded.entries if "/" not in rel}
    for name in TAG_FILES:
        if name != TAGMANIFEST and (bag / name).is_file() and name not in tagged:
            findings.append(Problem(name, f"not listed in {TAGMANIFEST}"))
    if not loaded.info.get("Source-Commit"):
        findings.append(Problem("bag-info.txt", "no Source-Commit"))
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


def _compare_csv(rel: str, recorded_path: Path, expected_text: str) -> list[Problem]:
    import csv
    import io

    if not recorded_path.is_file():
        return [Problem(rel, "missing (the recomputation produces it)")]
    header, rows = read_csv(recorded_path)
    expected = list(csv.reader(io.StringIO(expected_text)))
    exp_header, exp_rows = expected[0], expected[1:]
    if header != exp_header:
        return [Problem(rel, "header differs from the recomputation")]
    if len(rows) != len(exp_rows):
        return [Problem(rel, f"{len(rows)} rows, the recomputation gives {len(exp_rows)}")]
    found = []
    for number, (row, exp) in enumerate(zip(rows, exp_rows), start=2):
        for column, want in zip(exp_header, exp):
            if not _same_cell(row.get(column, ""), want):
                found.append(Problem(rel, f"line {number}, column {column}: {row.get(column)!r} does not "
                                          f"recompute (recomputed {want!r})"))
    return capped(found)


def _compare_report(rel: str, recorded_path: Path, expected: str) -> list[Problem]:
    if not recorded_path.is_file():
        return [Problem(rel, "missing")]
    have = recorded_path.read_text(encoding="utf-8", errors="replace").split("\n")
    want = expected.split("\n")
    found = [Problem(rel, f"line {i}: does not recompute (recorded {a[:120]!r}, recomputed {b[:120]!r})")
             for i, (a, b) in enumerate(zip(have, want), start=1) if a != b]
    if len(have) != len(want):
        found.append(Problem(rel, f"{len(have)} lines, the recomputation gives {len(want)}"))
    return capped(found)


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    try:
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=0)
    except OverflowError:  # an integer no float holds: the metrics validator reports it
        return a == b


def check_runs(data_dir: Path, data, shared_checks: dict | None = None) -> list[Problem]:
    """Every accepted run re-validates, and steps.csv / eval.csv carry exactly its records.
    ``shared_checks``: the audit's cache, so each shared initial evaluation is read once."""
    findings: list[Problem] = []
    n_updates = data.n_updates
    accepted = set(data.accepted)
    shared_checks = {} if shared_checks is None else shared_checks
    shared_reported: set[Problem] = set()  # and each of its problems reported once
    referenced: set[str] = set()
    for name in ("steps.csv", "eval.csv"):
        _, rows = read_csv(data_dir / name)
        strays = sorted({f"{r.get('arm') or r['algo']}-{r['seed']}" for r in rows
                         if (r.get("arm") or r["algo"], int(r["seed"])) not in accepted})
        for job in strays:
            findings.append(Problem(f"data/{name}", f"rows of {job}, which the index does not accept"))
    for arm, seed in data.accepted:
        job = f"{arm}-{seed}"
        rel = f"data/runs/{job}/metrics.jsonl"
        log = validate_metrics(data_dir / "runs" / job / "metrics.jsonl", data.arm_algo(arm), n_updates, name=rel)
        findings += capped([v.problem() for v in log.violations])
        csv_records = {r["step"]: r for r in data.steps.get((arm, seed), [])}
        mismatches = []
        if len(csv_records) != len(log.records):
            mismatches.append(Problem("data/steps.csv", f"{len(csv_records)} rows of {job}, its metrics log has {len(log.records)}"))
        for record in log.records:
            row = csv_records.get(record["step"])
            keys = set(record) | {k for k, v in (row or {}).items() if v is not None}
            if row is None or any(not _close(record.get(k), row.get(k)) for k in keys - {"step"}):
                mismatches.append(Problem("data/steps.csv", f"{job} step {record['step']} differs from {rel}"))
        findings += capped(mismatches)
        try:
            summary = read_json(data_dir / "runs" / job / "eval.json")
            for kind in ("initial", "final"):
                row = data.evals.get((arm, seed), {}).get(kind)
                entry = summary.get(kind) if isinstance(summary, dict) else None
                if row is None or not isinstance(entry, dict):
                    findings.append(Problem("data/eval.csv", f"{job} {kind}: missing row or eval.json entry"))
                    continue
                shared = shared_initial_dir(entry)
                if kind == "initial" and shared is not None:
                    referenced.add(shared)
                    findings += _check_shared_reference(data_dir, job, entry, shared_checks, shared_reported)
                if (row.get("initial_eval") or None) != shared:
                    findings.append(Problem("data/eval.csv", f"{job} {kind} initial_eval differs from data/runs/{job}/eval.json"))
                for column in EVAL_COLUMNS[len(EVAL_ID_COLUMNS):]:
                    if column == "initial_eval":
                        continue
                    if str(entry.get(column)).lower() != str(row.get(column)).lower() and not (
                            isinstance(entry.get(column), (int, float)) and _close(entry.get(column), row.get(column))):
                        findings.append(Problem("data/eval.csv", f"{job} {kind} {column} differs from data/runs/{job}/eval.json"))
        except JSONError as exc:
            findings.append(Problem(f"data/runs/{job}/eval.json", str(exc)))
    # A rejected run's evidence is bundled too, and its eval.json may be the only reference (a sweep
    # whose every run was rejected); only a directory no bundled run names is a stray.
    for eval_record in sorted((data_dir / "runs").glob(f"*/{EVAL_RECORD}")):
        try:
            entry = read_json(eval_record)
        except JSONError:
            continue  # an accepted run's unreadable eval.json is reported above; a rejected one's is its reason
        if isinstance(entry, dict) and (shared := shared_initial_dir(entry.get("initial"))) is not None:
            referenced.add(shared)
    for stray in sorted(p for p in (data_dir / INITIAL_EVAL_DIR).glob("*") if p.is_dir()):
        if f"{INITIAL_EVAL_DIR}/{stray.name}" not in referenced:
            findings.append(Problem(f"data/{INITIAL_EVAL_DIR}/{stray.name}", "no bundled run references this initial evaluation"))
    recorded = {(r["job"], r["kind"], r["title"]) for r in data.incidents}
    for row in data.index:
        for kind, _, title, _ in history_incidents(data_dir / "runs" / row["job"]):
            if (row["job"], kind, title) not in recorded:
                findings.append(Problem("data/incidents.csv", f"{row['job']}: {kind} incident {title!r} of its "
                                        "attempt history is missing"))
    rejected = [r["job"] for r in data.index if r["accepted"] != "yes"]
    with_incident = {r["job"] for r in data.incidents}
    for job in rejected:
        if job not in with_incident:
            findings.append(Problem("data/incidents.csv", f"rejected job {job} has no incident record"))
    return findings


def _check_shared_reference(data_dir: Path, job: str, entry: dict, checked: dict, reported: set) -> list[Problem]:
    """A run's shared initial control by ``check_shared_reference``, as findings: the shared
    evaluation's own problems once per bundle (``reported``), the run's under its eval.json."""
    try:
        run_summary = read_json(data_dir / "runs" / job / "run.json")
    except JSONError:
        run_summary = None  # check_runs and the rejection checks report an unreadable run.json
    found = check_shared_reference(data_dir, entry, run_summary, checked)
    findings = [Problem(f"{PAYLOAD}/{found.shared_file}", problem) for problem in found.of_shared]
    findings = [f for f in findings if f not in reported]
    reported.update(findings)
    return findings + [Problem(f"{PAYLOAD}/runs/{job}/eval.json", problem) for problem in found.of_run]


def _still_rejected(data_dir: Path, data, row: dict, majority: tuple | None, artifacts: set[tuple[str, str]],
                    shared_checks: dict) -> list[str]:
    """The gates that still reject ``row``'s job on the evidence the bundle carries (the bundled
    metrics log, run.json, eval.json and the shared initial evaluation it references, job.json,
    command.public.json, and artifacts.csv's listing)."""
    job, algo, seed, n = row["job"], row["algo"], int(row["seed"]), data.n_updates
    run = data_dir / "runs" / job
    log = validate_metrics(run / "metrics.jsonl", algo, n)
    failures = ["metrics"] if log.violations or log.valid_steps != n else []
    run_summary, run_failures = check_run_summary(run, algo, seed, n)
    failures += ["run"] if run_failures else []
    try:
        record, summary, command = (read_json(run / name) for name in ("job.json", "eval.json", "command.public.json"))
    except JSONError:
        return failures + ["unreadable record"]
    if not isinstance(record, dict) or check_cleanup(record) or (record.get("algo"), record.get("seed")) != (algo, seed):
        failures.append("job")
    if not isinstance(command, dict) or not isinstance(command.get("argv"), list):
        failures.append("command")
    entries = [summary.get(kind) if isinstance(summary, dict) else None for kind in ("initial", "final")]
    if not all(isinstance(e, dict) for e in entries) or entries[1].get("checkpoint") != checkpoint_name(n):
        failures.append("eval")
    elif majority is not None and _identity(entries[1]) != majority:
        failures.append("eval-subset")
    if isinstance(entries[0], dict) and "shared" in entries[0]:
        found = check_shared_reference(data_dir, entries[0], run_summary, shared_checks)
        if found.of_shared or found.of_run:
            failures.append("eval-shared")
    if (job, f"run/checkpoints/{checkpoint_name(n)}/model.safetensors") not in artifacts:
        failures.append("checkpoint")
    if not any(j == job and p.startswith("run/tensorboard/events.out.tfevents.") for j, p in artifacts):
        failures.append("tensorboard")
    return failures


def _identity(entry: dict) -> tuple:
    return tuple(entry.get(k) for k in ("subset_sha256", "eval_seed", "n_prompts", "k"))


def check_rejections(data_dir: Path, data, shared_checks: dict | None = None) -> list[Problem]:
    """A job the index rejects (other than by incidents.yaml) whose bundled evidence passes every gate
    the bundle can re-check was left out of the comparison although valid: cherry-picking.
    ``shared_checks``: the audit's cache, so each shared initial evaluation is read once."""
    findings: list[Problem] = []
    _, artifact_rows = read_csv(data_dir / "artifacts.csv")
    artifacts = {(r["job"], r["path"]) for r in artifact_rows if r.get("bytes", "0") not in ("", "0")}
    identities = [_identity(data.evals[run]["final"]) for run in data.accepted if "final" in data.evals.get(run, {})]
    majority = max(set(identities), key=identities.count) if identities else None
    shared_checks = {} if shared_checks is None else shared_checks
    for row in data.index:
        excluded = row["reason"].startswith("excluded by incidents.yaml")
        if row["accepted"] == "yes" or excluded or not (data_dir / "runs" / row["job"]).is_dir():
            continue
        if not _still_rejected(data_dir, data, row, majority, artifacts, shared_checks):
            findings.append(Problem("data/index.csv", f"{row['job']} is rejected ({row['reason'][:80]}) but its "
                                                      "bundled evidence passes every gate: a valid run left out"))
    return findings


def _grid_jobs(sweep: dict) -> set[str]:
    """Job names of the sweep's grid: ``<arm>-<seed>`` (the arm is the algo when only the algo varies)."""
    arms = sweep.get("arms") or sweep.get("algos") or []
    return {f"{arm}-{seed}" for arm in arms for seed in sweep.get("seeds") or []}


def check_records(bag: Path, data) -> list[Problem]:
    """bag-info.txt, sweep.json, index.csv and commands.txt tell one story: the same grid, the same
    accepted count, the same commit."""
    findings: list[Problem] = []
    sweep, index = data.sweep, data.index
    grid = _grid_jobs(sweep)
    in_grid = {r["job"] for r in index if "not in the sweep grid" not in r["reason"]}
    for job in sorted(grid - in_grid):
        findings.append(Problem("data/index.csv", f"no row for {job} of the sweep.json grid"))
    for job in sorted(in_grid - grid):
        findings.append(Problem("data/index.csv", f"{job} is not in the sweep.json grid and not marked as a stray"))
    try:
        info = _read_tags(bag / "bag-info.txt")
    except (OSError, UnicodeDecodeError):
        info = {}
    accepted = sum(r["accepted"] == "yes" for r in index)
    if info.get("Proofgrid-Jobs-Accepted") != f"{accepted}/{len(index)}":
        findings.append(Problem("bag-info.txt", f"Proofgrid-Jobs-Accepted {info.get('Proofgrid-Jobs-Accepted')} != "
                                                f"index.csv's {accepted}/{len(index)}"))
    if sweep.get("source_commit") and info.get("Source-Commit") != sweep.get("source_commit"):
        findings.append(Problem("bag-info.txt", "Source-Commit differs from sweep.json's source_commit"))
    shape = (f"{len(sweep.get('algos') or [])} algorithms x {len(sweep.get('seeds') or [])} seeds, "
             f"{data.n_updates} updates")
    if not str(info.get("External-Description", "")).endswith(shape):
        findings.append(Problem("bag-info.txt", f"External-Description does not end with sweep.json's {shape!r}"))
    findings += _check_commands(bag / PAYLOAD / "commands.txt", grid)
    return findings


def _check_commands(path: Path, grid: set[str]) -> list[Problem]:
    """commands.txt has one line per grid job (``[i] <job>: ...``, or ``... algo=A seed=S ...``)."""
    if not path.is_file():
        return [Problem("data/commands.txt", "missing")]
    lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()
             if ln.strip() and not ln.startswith("#")]
    named = []
    for line in lines:
        match = re.match(r"\[\d+\] (\S+):", line)
        if match:
            named.append(match.group(1))
        else:
            tokens = dict(t.split("=", 1) for t in line.split() if "=" in t)
            named.append(f"{tokens.get('algo')}-{tokens.get('seed')}")
    findings = [Problem("data/commands.txt", f"{job}: not a job of the sweep.json grid") for job in named if job not in grid]
    findings += [Problem("data/commands.txt", f"no command for {job}") for job in sorted(grid - set(named))]
    if len(named) != len(set(named)):
        findings.append(Problem("data/commands.txt", "a job's command is listed twice"))
    return findings


def check_recomputation(data_dir: Path, data) -> list[Problem]:
    """Every table CSV and every line of report.md equals what steps.csv / eval.csv give."""
    findings: list[Problem] = []
    tables = compute_tables(data)
    for name, table in tables.items():
        findings += _compare_csv(f"data/tables/{name}.csv", data_dir / "tables" / f"{name}.csv", table.csv())
    if (data_dir / "tables").is_dir():
        for extra in sorted((data_dir / "tables").glob("*.csv")):
            if extra.stem not in tables:
                findings.append(Problem(f"data/tables/{extra.name}", "not a table of the recomputation"))
    findings += _compare_report("data/report.md", data_dir / "report.md", render_report(data, tables))
    return findings


def _check_verdict(data_dir: Path, data) -> list[Problem]:
    """An experiment's verdict.json recomputes from the CSVs and data/experiment.yaml (evidence.verdict),
    and each earlier stage carried under data/stages/<name>/ passes the run and recomputation checks."""
    findings = check_verdict(data_dir, data)
    for name, stage in data.stages.items():
        inside = f"{PAYLOAD}/stages/{name}/"
        for check in (check_runs, check_recomputation):
            findings += [Problem(f.file.replace(f"{PAYLOAD}/", inside, 1), f.reason.replace(f"{PAYLOAD}/", inside))
                         for f in check(data_dir / "stages" / name, stage)]
    return findings


# Active content or a reference out of the file: a figure must be a self-contained drawing.
_SVG_ACTIVE = re.compile(r"(?i)<\s*script|<\s*foreignObject|<!ENTITY|@import|<\s*(?:iframe|embed|object)\b"
                         r"|\son[a-z]+\s*=|javascript:")
_SVG_REFERENCE = re.compile(r"""(?i)\bhref\s*=\s*["']\s*([^"']*)["']|url\(\s*["']?\s*([^)"'\s]*)""")


def check_figures(data_dir: Path, data=None) -> list[Problem]:
    """Every figure is an SVG with no script, event handler, embedded document or external reference
    (only ``#id`` references inside the file). When this machine's matplotlib is the one that drew
    them (evidence.json says which), the figures are also redrawn from the CSVs and compared byte for
    byte (SVG bytes depend on the matplotlib version, so another version cannot compare)."""
    findings = []
    figures = data_dir / "figures"
    if not figures.is_dir():
        return findings
    for path in sorted(figures.rglob("*")):
        rel = f"{PAYLOAD}/{path.relative_to(data_dir).as_posix()}"
        if path.is_dir():
            continue
        if path.suffix != ".svg":
            findings.append(Problem(rel, "not an SVG figure"))
            continue
        if path.stat().st_size > MAX_MEMBER_BYTES:
            continue  # reported by the leak scan, never read
        text = path.read_bytes().decode("utf-8", errors="replace")
        active = _SVG_ACTIVE.search(text)
        if active:
            findings.append(Problem(rel, f"active content in an SVG figure ({active.group(0).strip()!r})"))
        for match in _SVG_REFERENCE.finditer(text):
            target = match.group(1) if match.group(1) is not None else match.group(2)
            if not target.startswith("#"):
                findings.append(Problem(rel, f"external reference in an SVG figure ({target[:80]!r})"))
                break
    if data is not None and data.settings.get(FIGURES_DRAWN_BY) == figures_library_version():
        findings += _compare_redrawn_figures(figures, data)
    return findings


# Redrawn figures by a digest of the files they are drawn from: auditing copies of one bundle
# (or an archive and its directory) redraws once.
_REDRAWN: dict[str, dict[str, bytes]] = {}


def _inputs_digest(data_dir: Path) -> str:
    """SHA256 over the files ``load_bundle_data`` reads (the figures' only input)."""
    names = ["sweep.json", "evidence.json", "index.csv", "incidents.csv", "steps.csv", "eval.csv"]
    names += sorted(p.relative_to(data_dir).as_posix() for p in data_dir.glob("runs/*/run.json"))
    lines = [f"{name} {sha256_file(data_dir / name) if (data_dir / name).is_file() else '-'}" for name in names]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _redrawn(data_dir: Path, data) -> dict[str, bytes]:
    from evidence.figures import render_figures

    key = _inputs_digest(data_dir)
    if key not in _REDRAWN:
        with private_tool_dirs() as tools:
            out = tools / "figures"
            _REDRAWN.clear()  # one bundle's figures at a time
            _REDRAWN[key] = {p.relative_to(out).as_posix(): p.read_bytes() for p in render_figures(data, out)}
    return _REDRAWN[key]


def _compare_redrawn_figures(figures: Path, data) -> list[Problem]:
    findings = []
    redrawn = _redrawn(figures.parent, data)
    held = {p.relative_to(figures).as_posix(): p for p in figures.rglob("*") if p.is_file()}
    for name in sorted(redrawn.keys() - held.keys()):
        findings.append(Problem(f"{PAYLOAD}/figures/{name}", "missing (the redrawing produces it)"))
    for name in sorted(held.keys() - redrawn.keys()):
        findings.append(Problem(f"{PAYLOAD}/figures/{name}", "not a figure of the redrawing"))
    for name in sorted(held.keys() & redrawn.keys()):
        if held[name].stat().st_size > MAX_MEMBER_BYTES or held[name].read_bytes() != redrawn[name]:
            findings.append(Problem(f"{PAYLOAD}/figures/{name}",
                                    "differs from the figure redrawn from steps.csv / eval.csv"))
    return findings


def scan_leaks(bag: Path, clean: Sanitizer | None = None) -> list[Problem]:
    """The leak scan over every file and file name in the bag."""
    clean = clean or Sanitizer.from_environment()
    findings = []
    for path in sorted(bag.rglob("*")):
        rel = path.relative_to(bag).as_posix()
        leaks = clean.scan(rel, rel)
        if path.is_file() and not path.is_symlink() and path.stat().st_size > MAX_MEMBER_BYTES:
            findings.append(Problem(rel, f"above the {MAX_MEMBER_BYTES}-byte limit of a bundle file; not read"))
        elif path.is_file() and not path.is_symlink():
            leaks += clean.scan_document(rel, path.read_bytes().decode("utf-8", errors="replace"))
        findings += dict.fromkeys(leaks)
    return findings


def audit_bag(bag: Path) -> list[Problem]:
    """Audit an unpacked bag directory."""
    findings = check_bag(bag)
    data_dir = bag / PAYLOAD
    if data_dir.is_dir():
        try:
            data = load_bundle_data(data_dir)
        except (JSONError, OSError, KeyError, ValueError, TypeError, OverflowError) as exc:
            findings.append(Problem(PAYLOAD, f"cannot load the bundle's data ({exc.__class__.__name__}: {exc})"))
            data = None
        if data is not None:
            shared_checks: dict = {}  # each shared initial evaluation, read and validated once per audit
            for check in (partial(check_runs, shared_checks=shared_checks), check_recomputation,
                          partial(check_rejections, shared_checks=shared_checks), _check_verdict):
                try:
                    findings += check(data_dir, data)
                except (KeyError, ValueError, TypeError, ZeroDivisionError, StopIteration, OverflowError) as exc:
                    findings.append(Problem(PAYLOAD, f"cannot recompute ({exc.__class__.__name__}: {exc})"))
            try:
                findings += check_records(bag, data)
            except (KeyError, ValueError, TypeError, OverflowError) as exc:
                findings.append(Problem(PAYLOAD, f"cannot cross-check the records ({exc.__class__.__name__}: {exc})"))
        try:
            findings += check_figures(data_dir, data)
        except (KeyError, ValueError, TypeError, ZeroDivisionError, StopIteration, OverflowError) as exc:
            findings.append(Problem(f"{PAYLOAD}/figures", f"cannot redraw ({exc.__class__.__name__}: {exc})"))
    findings += scan_leaks(bag)
    return findings
