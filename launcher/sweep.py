"""Running a planned sweep: the dry run, or the jobs that still need to run on the chosen back end,
then the sealed evidence bundle and the summary printed at the end."""

from __future__ import annotations

import sys
from pathlib import Path

from launcher.backend import backend
from launcher.jobs import prepare_job_dirs
from launcher.plan import COMMANDS_FILE, Sweep, expanded_commands, write_plan


def run_sweep(sweep: Sweep) -> int:
    """Dry-run or run the sweep; returns the process exit code."""
    write_plan(sweep)
    if sweep.dry_run:
        print("\n".join(expanded_commands(sweep)))
        print(f"dry run: {len(sweep.specs)} job(s) checked, nothing submitted; commands in "
              f"{sweep.sweep_dir / COMMANDS_FILE}")
        return 0
    todo = prepare_job_dirs(sweep)
    skipped = len(sweep.specs) - len(todo)
    if skipped:
        print(f"{skipped} job(s) already accepted in {sweep.sweep_dir}; not re-submitted")
    finished = backend(sweep.cluster.kind).submit(sweep, todo)
    if not finished:
        return 0  # wait=false: `python -m evidence build` (or `launcher status`) seals it later
    return seal(sweep.sweep_dir)


def seal(sweep_dir: Path) -> int:
    """Build, seal and audit the evidence bundle; 0 when every job was accepted and the audit is clean."""
    from evidence import audit, build_bundle

    result = build_bundle(sweep_dir)
    print_eval_summary(result.bundle_dir / "data" / "tables" / "eval_aggregate.csv", result.jobs)
    print(result.summary())
    findings = audit(result.archive)
    for finding in findings:
        print(f"audit: {finding}", file=sys.stderr)
    print(f"audit: {'clean' if not findings else f'{len(findings)} finding(s)'}")
    return 0 if not findings and result.accepted == len(result.jobs) else 1


def _arm(row: dict) -> str:
    """A row's arm; rows of evidence older than arms name only the algo, which is then the arm."""
    return row.get("arm") or row["algo"]


def print_eval_summary(aggregate_csv: Path, jobs: list[dict]) -> None:
    """Per arm: final pass@1 against the initial-checkpoint control, and accepted jobs."""
    import csv

    from rich.console import Console
    from rich.table import Table

    if not aggregate_csv.is_file():
        return
    with open(aggregate_csv, newline="") as f:
        rows = {(_arm(r), r["checkpoint"]): r for r in csv.DictReader(f)}
    table = Table(title="final eval pass@1 (mean ± SD over seeds) vs the initial checkpoint", title_justify="left")
    for col in ("arm", "final", "initial control", "gain", "accepted"):
        table.add_column(col)

    def cell(row):
        if row is None or not row.get("pass@1_mean"):
            return "n/a"
        sd = f" ± {float(row['pass@1_sd']):.3f}" if row.get("pass@1_sd") else " (n<2)"
        return f"{float(row['pass@1_mean']):.3f}{sd}"

    for arm in dict.fromkeys(a for a, _ in rows):
        final = rows.get((arm, "final")) or {}
        name = final.get("algorithm", arm) if arm == final.get("algo") else arm  # GRPO, or rpp-lr3e-4
        accepted = sum(1 for j in jobs if _arm(j) == arm and j["accepted"] == "yes")
        total = sum(1 for j in jobs if _arm(j) == arm)
        table.add_row(name, cell(rows.get((arm, "final"))), cell(rows.get((arm, "initial"))),
                      cell(rows.get((arm, "gain"))), f"{accepted}/{total}")
    Console().print(table)
