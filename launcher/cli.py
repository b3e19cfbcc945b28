"""Entry points: the Hydra sweep (``launch.py``) and ``python -m launcher status <sweep_dir>``."""

from __future__ import annotations

import sys
from pathlib import Path

from launcher.preflight import PreflightError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("algo", "workload", "cluster")


def check_group_choices(argv: list[str]) -> str | None:
    """A one-line error for an unknown config-group option (``algo=bogus``), else ``None``.

    Hydra validates the whole grid before any launcher runs and reports a bad option over a dozen
    lines; checking plain (comma-separated) group overrides first keeps the message to one line.
    """
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key.lstrip("+~") not in GROUPS or "(" in value:
            continue
        group = key.lstrip("+~")
        known = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        unknown = [v for v in value.split(",") if v and v not in known]
        if unknown:
            return (f"bad grid: unknown {group} {', '.join(repr(u) for u in unknown)}; "
                    f"choose from {', '.join(known)} (conf/{group}/)")
    return None


def _one_line(exc: BaseException) -> str:
    """Hydra's composition errors span several lines; keep the problem and the available options."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines)


def launch_grid(root_cfg, config_loader, job_overrides: list[list[str]], sweep_dir: str) -> int:
    """Compose every grid cell, check them all, then run (or dry-run) the sweep. Returns an exit code."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from launcher.sweep import plan_sweep, run_sweep

    try:
        job_cfgs = [config_loader.load_sweep_config(root_cfg, overrides) for overrides in job_overrides]
        sweep = plan_sweep(root_cfg, job_cfgs, job_overrides, Path(sweep_dir))
    except (HydraException, OmegaConfBaseException) as exc:
        print(f"proofgrid: error: bad grid: {_one_line(exc)}", file=sys.stderr)
        return 2
    except PreflightError as exc:
        print(f"proofgrid: error: {exc}", file=sys.stderr)
        return 2
    return run_sweep(sweep)


def status(sweep_dir: Path) -> int:
    from rich.console import Console
    from rich.table import Table

    from launcher.progress import completed_steps
    from launcher.records import read_job_record
    from launcher.slurm import refresh_job_records

    jobs_root = sweep_dir / "jobs"
    if not jobs_root.is_dir():
        print(f"proofgrid: error: {sweep_dir} has no jobs/ directory; is it a sweep directory?", file=sys.stderr)
        return 2
    job_dirs = sorted(p for p in jobs_root.iterdir() if p.is_dir())
    try:
        refresh_job_records(job_dirs)
    except (OSError, ValueError) as exc:  # no sacct here: show what the records say
        print(f"note: scheduler not reachable ({exc}); showing recorded states", file=sys.stderr)
    table = Table(title=str(sweep_dir.name))
    for col in ("job", "scheduler id", "state", "step", "exit", "elapsed s"):
        table.add_column(col)
    for d in job_dirs:
        r = read_job_record(d)
        spec_updates = r.get("n_updates", "")
        table.add_row(d.name, str(r.get("job_id", "")), str(r.get("state", "")),
                      f"{completed_steps(d)}{'/' + str(spec_updates) if spec_updates else ''}",
                      str(r.get("exit_code", "")), str(r.get("elapsed_s", "")))
    Console().print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "status":
        return status(Path(args[1]))
    print("usage: python -m launcher status <sweep_dir>", file=sys.stderr)
    return 2
