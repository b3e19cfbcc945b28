"""Live progress of a sweep: jobs queued / running / done / failed, and each running job's step."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table


def completed_steps(job_dir: Path) -> int:
    """Finished training steps: complete lines of the run's metrics.jsonl."""
    path = job_dir / "run" / "metrics.jsonl"
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def progress_table(title: str, states: dict[str, str], job_dirs: dict[str, Path], n_updates: dict[str, int]) -> Table:
    counts = {s: sum(1 for v in states.values() if v == s) for s in ("QUEUED", "RUNNING", "DONE")}
    # Every other state ended the job without success (FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...).
    counts["FAILED"] = len(states) - sum(counts.values())
    heading = (f"{title}: queued {counts['QUEUED']} | running {counts['RUNNING']} | "
               f"done {counts['DONE']} | failed {counts['FAILED']}")
    table = Table(title=heading, title_justify="left", min_width=len(heading))
    table.add_column("job")
    table.add_column("state")
    table.add_column("step", justify="right")
    for name, state in states.items():
        step = f"{completed_steps(job_dirs[name])}/{n_updates[name]}" if state != "QUEUED" else ""
        table.add_row(name, state, step)
    return table
