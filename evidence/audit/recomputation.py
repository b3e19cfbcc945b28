"""Recomputation: every table CSV and every line of ``report.md`` equal what ``steps.csv`` / ``eval.csv`` give."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from evidence.computed import compute_tables
from evidence.dataset import BundleData
from evidence.fileio import read_csv
from evidence.problems import Problem, capped
from evidence.report.sections import render_report
from facts.files import TABLES_DIR, payload_relpath


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


def check_recomputation(data_dir: Path, data: BundleData) -> list[Problem]:
    """Every table CSV and every line of report.md equals what steps.csv / eval.csv give."""
    findings: list[Problem] = []
    tables = compute_tables(data)
    for name, table in tables.items():
        findings += _compare_csv(payload_relpath(TABLES_DIR, f"{name}.csv"), data_dir / TABLES_DIR / f"{name}.csv", table.csv())
    if (data_dir / TABLES_DIR).is_dir():
        for extra in sorted((data_dir / TABLES_DIR).glob("*.csv")):
            if extra.stem not in tables:
                findings.append(Problem(payload_relpath(TABLES_DIR, extra.name), "not a table of the recomputation"))
    findings += _compare_report("data/report.md", data_dir / "report.md", render_report(data, tables))
    return findings
