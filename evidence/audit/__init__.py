"""Audit a released bundle (a bag directory or its ``.tar.gz``) with no access to the sweep.

``audit_bundle(path)`` is a short chain of named checks, in order, each returning ``Problem`` records (a file
relative to the bag, or the archive's name, and a reason):

    archive         member headers before anything is extracted; the sidecar's SHA256
    signature       the archive's signature, verified with the reviewer's public key (``audit_bundle(path, public_key)``)
    crate           ``ro-crate-metadata.json`` names the bag's files with their digests and every accepted run
    bag             bagit-python's ``Bag.validate()`` plus proofgrid's rules
    layout          every payload file is one the build writes (``facts.bundle_layout``), of a job the index lists;
                    no empty directory
    runs            every accepted run re-validates and matches ``steps.csv``/``eval.csv``; the shared
                    initial evaluations (``data/initial_eval/<key12>/``) are the ones the runs reference
    evaluations     every accepted run's evaluation judged by the build's gates (``evidence.evaluation.judge``): its
                    responses re-scored against the frozen subset (its pinned SHA256), its statistics recomputed
                    from them, its shared initial control sound; no stored summary reports impossible statistics
    subsets         each frozen subset cut again from its runs' pinned test split, where the reviewer has it
    resources       every accepted run's resource samples are there, well formed, their times increasing
    judged          every run file's copy has the digest its job's file had when the job was judged, and a
                    verbatim copy is that file (``judged.csv``; ``evidence.gates.judged``)
    recomputation   every table CSV and every line of ``report.md`` (the resource peaks among them)
    plan            every job the sweep's plan lists has its copy, each copy carries its plan's digest
    images          every job copy ran the container image sweep.json pins (job.json's and run.json's digest)
    certificates    certify=true: ``certificates.json`` recomputed from the certificate jobs' copies and the runs
                    they repeat (each difference named by record and value); each failure has its incident
    rejections      a rejected job whose bundled evidence passes every gate (cherry-picking)
    experiment      an experiment's ``verdict.json`` and its earlier stages; every job its spec plans is there
    records         ``bag-info.txt``, ``sweep.json``, ``index.csv`` and ``commands.txt`` agree
    figures         SVG figures hold no script or external reference, and redraw the same
    leaks           the leak scan (the sanitiser's own rule set)

A check that meets data no build writes reports it as a problem, never a crash.
"""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Callable
from functools import partial
from pathlib import Path

from evidence.audit.archive import check_members, check_sidecar, extracted
from evidence.audit.bag import check_bag, tree_problems
from evidence.audit.certificates import check_certificates
from evidence.audit.crate import check_crate
from evidence.audit.evaluations import check_evaluations
from evidence.audit.experiment import check_experiment
from evidence.audit.figure_files import check_figures
from evidence.audit.images import check_images
from evidence.audit.leaks import scan_leaks
from evidence.audit.locate import not_a_bundle
from evidence.audit.plan import check_plan
from evidence.audit.recomputation import check_recomputation
from evidence.audit.records import check_records
from evidence.audit.rejections import check_rejections
from evidence.audit.resources import check_resources
from evidence.audit.runs import check_runs
from evidence.audit.signature import check_signature, check_signed_bag
from evidence.audit.subsets import check_subsets
from evidence.audit.unexpected_files import check_layout
from evidence.dataset import SETTINGS_FILE, BundleData, load_bundle_data
from evidence.fileio import JSONError
from evidence.gates.judged import check_judged
from evidence.problems import Problem, SigningError, UsageError
from facts.files import BUNDLE_DIR, BUNDLE_PAYLOAD, bundle_payload_dir, signature_path, sweep_bundle_payload

# What a check of the content may raise on data no build writes: reported as a problem of the payload.
RECOMPUTE_ERRORS = (KeyError, ValueError, TypeError, ZeroDivisionError, StopIteration, OverflowError)
RECORDS_ERRORS = (KeyError, ValueError, TypeError, OverflowError)
LOAD_ERRORS = (JSONError, OSError, KeyError, ValueError, TypeError, OverflowError)


def audit_bundle(path: str | Path, public_key: str | Path | None = None, notes: list[str] | None = None) -> list[Problem]:
    """Audit a bundle directory or a ``.tar.gz`` of one; an empty list means clean. Any other path is
    refused (``UsageError``) with one line naming the bundle it is inside, belongs to or contains. With
    ``public_key`` (a key file) the archive's signature must verify with it (``SigningError`` for a key
    file that is not a public key, before anything is read). ``notes``: where what the audit could not check
    (and says so, as no finding) is appended."""
    path = Path(path)
    key = None if public_key is None else _load_public_key(public_key)
    if path.is_file() and not _is_gzip(path) and tarfile.is_tarfile(path):
        raise UsageError(f"{path} is an uncompressed tar archive; the audit reads the bundle's .tar.gz "
                         f"(gzip {path}, then audit {path}.gz; or audit the extracted bundle directory)")
    refused = not_a_bundle(path)
    if refused is not None:
        raise UsageError(refused)
    if key is not None and path.is_dir():
        raise SigningError(f"{path}: a signature covers the bundle's .tar.gz, not its directory; audit the archive "
                           "with --public-key")
    return audit_bag(path, notes) if path.is_dir() else audit_archive(path, key, notes)


def bundle_of_input(path: str | Path) -> Path | None:
    """The bundle an input of ``compare`` or ``export`` is read from (an archive, a bundle directory, a sweep's
    built ``bundle/``), or None for a sweep evaluated in memory (its runs pass the build's gates there)."""
    path = Path(path)
    if path.is_file():
        return path
    if (bundle_payload_dir(path) / SETTINGS_FILE).is_file():
        return path
    if (sweep_bundle_payload(path) / SETTINGS_FILE).is_file():
        return path / BUNDLE_DIR
    return None


def audit_input(path: str | Path) -> tuple[Path | None, list]:
    """``(bundle, findings)`` of an input as ``compare`` and ``export`` hold it to the audit before using it:
    its bundle (``bundle_of_input``; None: nothing to audit) and the audit's findings (a bundle the audit
    refuses to read is one finding, its line)."""
    bundle = bundle_of_input(path)
    if bundle is None:
        return None, []
    try:
        return bundle, audit_bundle(bundle)
    except (UsageError, SigningError) as exc:
        return bundle, [str(exc)]


def refused_input(label: str, bundle: Path, findings: list) -> str:
    """The one line naming an input whose audit has findings: how many, the first two, the audit to run."""
    first = "; ".join(str(p) for p in findings[:2])
    return (f"{label}: {bundle} fails its audit ({len(findings)} finding(s), first: {first}): "
            f"run python -m evidence audit {bundle}")


def _load_public_key(path: str | Path):
    from evidence.seal.signing import load_public_key  # the signing library: only when a key is given

    return load_public_key(path)


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def audit_archive(archive: Path, key=None, notes: list[str] | None = None) -> list[Problem]:
    """Check the sidecar and the signature (verified with ``key`` when given), then every member header;
    extract (data filter) only when all are safe, then audit the bag and that its manifests are the signed ones."""
    signature_problems, signed = check_signature(archive, key)
    problems = check_sidecar(archive) + signature_problems
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members, root, refused = check_members(tar, archive)
            if members is None:
                return problems + refused
            with extracted(tar, members, root) as bag:
                if signed is not None:
                    problems += check_signed_bag(bag, signed, signature_path(archive).name)
                return problems + audit_bag(bag, notes)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        return problems + [Problem(archive.name, f"not a readable gzip tar archive ({exc.__class__.__name__})")]


def _guarded(check: Callable[[], list[Problem]], file: str, what: str, errors=RECOMPUTE_ERRORS) -> list[Problem]:
    """The check's problems; an error it raises on malformed data becomes one problem of ``file``."""
    try:
        return check()
    except errors as exc:
        return [Problem(file, f"{what} ({exc.__class__.__name__}: {exc})")]


def _load(data_dir: Path) -> tuple[BundleData | None, list[Problem]]:
    try:
        return load_bundle_data(data_dir), []
    except LOAD_ERRORS as exc:
        return None, [Problem(BUNDLE_PAYLOAD, f"cannot load the bundle's data ({exc.__class__.__name__}: {exc})")]


def check_content(bag: Path, data: BundleData, notes: list[str] | None = None) -> list[Problem]:
    """What the payload's files say, checked against each other: runs, resource samples, recomputation,
    rejections, the experiment, then the records (each shared initial evaluation read once for all of them)."""
    data_dir, shared_checks = bag / BUNDLE_PAYLOAD, {}
    checks = (partial(check_runs, data_dir, data),
              partial(check_evaluations, data_dir, data, notes, shared_checks=shared_checks),
              partial(check_subsets, data_dir, data, notes),
              partial(check_resources, data_dir, data),
              partial(check_judged, data_dir),
              partial(check_recomputation, data_dir, data),
              partial(check_plan, data_dir, data),
              partial(check_images, data_dir, data.sweep),
              partial(check_certificates, data_dir, data),
              partial(check_rejections, data_dir, data, shared_checks=shared_checks, notes=notes),
              partial(check_experiment, data_dir, data),
              partial(check_crate, data_dir, data))
    problems = [p for check in checks for p in _guarded(check, BUNDLE_PAYLOAD, "cannot recompute")]
    return problems + _guarded(partial(check_records, bag, data), BUNDLE_PAYLOAD, "cannot cross-check the records",
                               RECORDS_ERRORS)


def audit_bag(bag: Path, notes: list[str] | None = None) -> list[Problem]:
    """Audit an unpacked bag directory: the bag, its layout, its content, its figures, then the leak scan."""
    problems = tree_problems(bag)
    if problems:
        return problems  # a tree no build writes (too deep, or too long a name): the other checks walk it
    problems = check_bag(bag)
    data_dir = bag / BUNDLE_PAYLOAD
    if data_dir.is_dir():
        data, unloadable = _load(data_dir)
        problems += check_layout(bag, data)
        problems += unloadable if data is None else check_content(bag, data, notes)
        problems += _guarded(partial(check_figures, data_dir, data, notes), f"{BUNDLE_PAYLOAD}/figures", "cannot redraw")
    return problems + scan_leaks(bag, notes=notes)


__all__ = ["UsageError", "audit_archive", "audit_bag", "audit_bundle"]
