"""Reading and forging a built bundle's tables in the statistics tests: a table's rows, one edited cell, and
a run's final pass@1 from the sweep's own files (the tests' expected values come from these, never from the
code under test)."""

from __future__ import annotations

import csv
import json
from pathlib import Path


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def edit_cell(path: Path, line: int, column: str, value) -> None:
    """Overwrite one CSV cell (line 2 is the first row), as a forger editing the table would."""
    with open(path, newline="") as f:
        table = list(csv.reader(f))
    table[line - 1][table[0].index(column)] = str(value)
    with open(path, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(table)


def final_pass1(sweep: Path, arm: str, seed: int) -> float:
    return json.loads((sweep / "jobs" / f"{arm}-{seed}" / "run" / "eval.json").read_text())["final"]["pass@1"]
