"""The records tell one story: ``bag-info.txt``, ``sweep.json``, ``index.csv`` and ``commands.txt`` name the
same grid, the same accepted count and the same commit."""

from __future__ import annotations

import re
from pathlib import Path

from evidence.audit.bag import read_tags
from evidence.dataset import BundleData
from evidence.problems import Problem
from facts.certify import CERTIFY_FIELD
from facts.files import BUNDLE_PAYLOAD, COMMANDS_FILE, INDEX_TABLE, payload_relpath


def _grid_jobs(sweep: dict) -> set[str]:
    """Job names of the sweep's grid: ``<arm>-<seed>`` (the arm is the algo when only the algo varies)."""
    arms = sweep.get("arms") or sweep.get("algos") or []
    return {f"{arm}-{seed}" for arm in arms for seed in sweep.get("seeds") or []}


def check_records(bag: Path, data: BundleData) -> list[Problem]:
    """bag-info.txt, sweep.json, index.csv and commands.txt tell one story: the same grid, the same
    accepted count, the same commit."""
    findings: list[Problem] = []
    sweep, index = data.sweep, data.index
    grid = _grid_jobs(sweep)
    in_grid = {r["job"] for r in index if "not in the sweep grid" not in r["reason"]}
    for job in sorted(grid - in_grid):
        findings.append(Problem(payload_relpath(INDEX_TABLE), f"no row for {job} of the sweep.json grid"))
    for job in sorted(in_grid - grid):
        findings.append(Problem(payload_relpath(INDEX_TABLE), f"{job} is not in the sweep.json grid and not marked as a stray"))
    try:
        info = read_tags(bag / "bag-info.txt")
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
    certify = (sweep.get(CERTIFY_FIELD) or {}).get("jobs") or {}  # certify=true: the certificate jobs' commands too
    findings += _check_commands(bag / BUNDLE_PAYLOAD / COMMANDS_FILE, grid | set(certify))
    return findings


def _check_commands(path: Path, grid: set[str]) -> list[Problem]:
    """commands.txt has one line per job of ``grid`` (``[i] <job>: ...``, or ``... algo=A seed=S ...``): the
    sweep.json grid's, and its certificate jobs' (certify=true)."""
    if not path.is_file():
        return [Problem(payload_relpath(COMMANDS_FILE), "missing")]
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
    findings = [Problem(payload_relpath(COMMANDS_FILE), f"{job}: not a job of the sweep.json grid") for job in named if job not in grid]
    findings += [Problem(payload_relpath(COMMANDS_FILE), f"no command for {job}") for job in sorted(grid - set(named))]
    if len(named) != len(set(named)):
        findings.append(Problem(payload_relpath(COMMANDS_FILE), "a job's command is listed twice"))
    return findings
