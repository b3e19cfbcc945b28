"""Figures: self-contained SVG drawings (no script, event handler, embedded document or external
reference), each with its PNG beside it (a well-formed PNG of pixels only, no text chunk), redrawn from the CSVs
and compared byte for byte when this machine's matplotlib drew them."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from evidence.audit.archive import MAX_MEMBER_BYTES
from evidence.dataset import BundleData
from evidence.fileio import sha256_file
from evidence.problems import Problem
from evidence.report.figures import FIGURE_FORMATS, render_figures
from evidence.report.png import SUFFIX as PNG_SUFFIX
from evidence.report.png import problem as png_problem
from evidence.seal.bundle import figures_library_version, private_tool_dirs
from facts.files import (
    BUNDLE_PAYLOAD,
    BUNDLE_RUNS_DIR,
    EVAL_TABLE,
    EVIDENCE_SETTINGS,
    FIGURES_DIR,
    FIGURES_DRAWN_BY,
    INCIDENTS_TABLE,
    INDEX_TABLE,
    JOB_RECORD,
    RESOURCE_SAMPLES,
    RUN_RECORD,
    STEPS_TABLE,
    SWEEP_RECORD,
    job_files_glob,
    payload_relpath,
)

# Active content or a reference out of the file: a figure must be a self-contained drawing.
_SVG_ACTIVE = re.compile(r"(?i)<\s*script|<\s*foreignObject|<!ENTITY|@import|<\s*(?:iframe|embed|object)\b"
                         r"|\son[a-z]+\s*=|javascript:")
_SVG_REFERENCE = re.compile(r"""(?i)\bhref\s*=\s*["']\s*([^"']*)["']|url\(\s*["']?\s*([^)"'\s]*)""")


def check_figures(data_dir: Path, data: BundleData | None = None, notes: list[str] | None = None) -> list[Problem]:
    """Every figure is an SVG with no script, event handler, embedded document or external reference
    (only ``#id`` references inside the file), with its PNG beside it (and every PNG with its SVG): a
    well-formed PNG (signature, chunks and their CRCs, IHDR first, IEND last) that carries no text chunk.
    When this machine's matplotlib is the one that drew them (evidence.json says which), the figures are
    also redrawn from the CSVs and compared byte for byte, both formats (their bytes depend on the matplotlib
    version, so another version cannot compare: a note says so). The folder is there exactly when evidence.json
    says figures were drawn (a bundle built without them, ``figures=false``, has none, and its report says so)."""
    findings = []
    figures = data_dir / FIGURES_DIR
    drawn_by = data.settings.get(FIGURES_DRAWN_BY) if data is not None else None
    if data is not None and drawn_by is None and figures.is_dir() and any(figures.iterdir()):
        findings.append(Problem(payload_relpath(FIGURES_DIR), f"figures in a bundle built without them ({EVIDENCE_SETTINGS} "
                                                              "names no matplotlib that drew them, and the report "
                                                              "says none was drawn)"))
    if not figures.is_dir():
        if drawn_by is not None:
            findings.append(Problem(payload_relpath(FIGURES_DIR), f"missing, while {EVIDENCE_SETTINGS} says matplotlib "
                                                                  f"{drawn_by} drew the figures the report links"))
        return findings
    held = {p.name for p in figures.iterdir() if p.is_file()}
    for path in sorted(figures.rglob("*")):
        rel = f"{BUNDLE_PAYLOAD}/{path.relative_to(data_dir).as_posix()}"
        if path.is_dir() or path.suffix.lstrip(".") not in FIGURE_FORMATS:
            continue  # not a figure: the layout check names it
        twins = [f"{path.stem}.{fmt}" for fmt in FIGURE_FORMATS if f"{path.stem}.{fmt}" not in held]
        if path.parent == figures and twins:
            findings.append(Problem(rel, f"has no {twins[0]} beside it (each figure is an SVG and a PNG)"))
        if path.stat().st_size > MAX_MEMBER_BYTES:
            continue  # reported by the leak scan, never read
        if path.suffix == PNG_SUFFIX:
            why = png_problem(path.read_bytes())
            if why is not None:
                findings.append(Problem(rel, f"not a figure's PNG: {why}"))
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        active = _SVG_ACTIVE.search(text)
        if active:
            findings.append(Problem(rel, f"active content in an SVG figure ({active.group(0).strip()!r})"))
        for match in _SVG_REFERENCE.finditer(text):
            target = match.group(1) if match.group(1) is not None else match.group(2)
            if not target.startswith("#"):
                findings.append(Problem(rel, f"external reference in an SVG figure ({target[:80]!r})"))
                break
    if drawn_by is not None and drawn_by == figures_library_version():
        findings += _compare_redrawn_figures(figures, data)
    elif drawn_by is not None and notes is not None:
        notes.append(f"figures: drawn by matplotlib {drawn_by}, not this machine's {figures_library_version()}: not "
                     "redrawn and compared (their bytes depend on the version)")
    return findings


# Redrawn figures by a digest of the files they are drawn from: auditing copies of one bundle
# (or an archive and its directory) redraws once.
_REDRAWN: dict[str, dict[str, bytes]] = {}


def _inputs_digest(data_dir: Path) -> str:
    """SHA256 over the files ``load_bundle_data`` reads (the figures' only input)."""
    names = [SWEEP_RECORD, EVIDENCE_SETTINGS, INDEX_TABLE, INCIDENTS_TABLE, STEPS_TABLE, EVAL_TABLE]
    names += sorted(p.relative_to(data_dir).as_posix() for name in (RUN_RECORD, RESOURCE_SAMPLES, JOB_RECORD)
                    for p in data_dir.glob(f"{BUNDLE_RUNS_DIR}/{job_files_glob(name)}"))
    lines = [f"{name} {sha256_file(data_dir / name) if (data_dir / name).is_file() else '-'}" for name in names]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _redrawn(data_dir: Path, data: BundleData) -> dict[str, bytes]:
    key = _inputs_digest(data_dir)
    if key not in _REDRAWN:
        with private_tool_dirs() as tools:
            out = tools / FIGURES_DIR
            _REDRAWN.clear()  # one bundle's figures at a time
            _REDRAWN[key] = {p.relative_to(out).as_posix(): p.read_bytes() for p in render_figures(data, out)}
    return _REDRAWN[key]


def _compare_redrawn_figures(figures: Path, data: BundleData) -> list[Problem]:
    findings = []
    redrawn = _redrawn(figures.parent, data)
    held = {p.name: p for fmt in FIGURE_FORMATS for p in figures.glob(f"*.{fmt}") if p.is_file()}  # else: layout
    for name in sorted(redrawn.keys() - held.keys()):
        findings.append(Problem(payload_relpath(FIGURES_DIR, name), "missing (the redrawing produces it)"))
    for name in sorted(held.keys() - redrawn.keys()):
        findings.append(Problem(payload_relpath(FIGURES_DIR, name), "not a figure of the redrawing"))
    for name in sorted(held.keys() & redrawn.keys()):
        if held[name].stat().st_size > MAX_MEMBER_BYTES or held[name].read_bytes() != redrawn[name]:
            findings.append(Problem(payload_relpath(FIGURES_DIR, name),
                                    "differs from the figure redrawn from steps.csv / eval.csv"))
    return findings
