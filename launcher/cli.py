"""Entry points: the Hydra sweep (``launch.py``) and ``python -m launcher status <sweep_dir>``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from facts import JOBS_DIR, sweep_jobs_dir
from launcher.preflight import PreflightError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("algo", "workload", "cluster", "experiment")


def check_overrides(argv: list[str], compose=None) -> str | None:
    """A one-line error for a bad command-line override, else ``None``.

    Hydra validates the whole grid before any launcher runs and reports a bad group option or an
    unknown key over a dozen lines; these checks run first and keep the message to one line:
    unknown config-group options (``algo=bogus``) and unknown settings (``workload.lrr=3``).
    ``compose`` composes the group choices (default: ``trainer.config.compose``, outside a Hydra app).
    """
    import difflib

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    args = [a for a in argv if not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException as exc:
        return f"cannot parse the overrides: {_one_line(exc)}"
    for o in parsed:
        if o.key_or_group in ("hydra.sweep.dir", "hydra.run.dir") and not o.is_sweep_override():
            # Hydra creates this directory before any launcher runs: check it first.
            value = str(o.value())
            if "${" not in value:
                from launcher.preflight import check_sweep_dir

                try:
                    check_sweep_dir(Path(value).absolute(), o.key_or_group)
                except PreflightError as exc:
                    return str(exc)
    choices = []
    for o in parsed:
        group = o.key_or_group.lstrip("+~")
        if group not in GROUPS or o.is_delete():
            continue
        known = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        values = [str(v) for v in o.sweep_iterator()] if o.is_sweep_override() else [str(o.value())]
        unknown = [v for v in values if v not in known]
        if unknown:
            return (f"bad grid: unknown {group} {', '.join(repr(u) for u in unknown)}; "
                    f"choose from {', '.join(known)} (conf/{group}/)")
        choices.append(f"{group}={values[0]}")
    if compose is None:
        from trainer.config import compose

    cfg = compose(choices)
    missing = object()
    for o in parsed:
        key = o.key_or_group
        if key.split(".")[0] in GROUPS and "." not in key or key.startswith("hydra") or o.is_add() or o.is_force_add():
            continue
        if OmegaConf.select(cfg, key, default=missing) is missing:
            parts, node, i = key.split("."), cfg, 0
            while i < len(parts) - 1 and OmegaConf.is_dict(node) and parts[i] in node:
                node, i = node[parts[i]], i + 1  # down to the first unknown part: worklaod in worklaod.lr
            near = difflib.get_close_matches(parts[i], list(node.keys()) if OmegaConf.is_dict(node) else [], n=1)
            hint = f"did you mean {'.'.join([*parts[:i], near[0], *parts[i + 1:]])}? " if near else ""
            return f"unknown setting {key!r}; {hint}(+{key}=... adds a new key)"
    return None


def _one_line(exc: BaseException) -> str:
    """Hydra's composition errors span several lines; keep the problem and the available options."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines)


def launch_grid(root_cfg, cells: list[list[str]], sweep_dir: str, compose) -> int:
    """Compose each distinct grid cell once, check them all, then run (or dry-run) the sweep.
    ``compose`` turns one cell's overrides into its config. Returns an exit code; every failure is
    one line on stderr (``one_line_errors``)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from launcher.locks import sweep_lock
    from launcher.plan import plan_sweep
    from launcher.preflight import check_launch_environment
    from launcher.sweep import run_sweep

    def body() -> int:
        try:
            sweep = plan_sweep(root_cfg, cells, Path(sweep_dir), compose)
            check_launch_environment(sweep.sweep_dir, sweep.cluster, sweep.dry_run)
        except (HydraException, OmegaConfBaseException) as exc:
            return _error(f"bad grid: {_one_line(exc)}")
        with sweep_lock(sweep.sweep_dir):  # one launcher per sweep directory, refused at once
            return run_sweep(sweep)

    return one_line_errors(sweep_dir, body)


def one_line_errors(sweep_dir: str | Path, body) -> int:
    """Run ``body`` (a sweep, or an experiment's stages) and turn every failure into one line on
    stderr and an exit code: a bad setting, an unusable sweep directory, a launcher already running
    in it, a missing scheduler, a full disk, evidence that cannot be sealed, or a signal (Ctrl-C,
    SIGTERM, SIGHUP: exit status 128 + the signal, and how to resume)."""
    from evidence.problems import IncidentsFileError, LeakError, SweepError
    from launcher.interrupts import signals_interrupt, signum_of
    from launcher.locks import LockHeld

    try:
        with signals_interrupt():
            return body()
    except (PreflightError, LockHeld) as exc:  # nothing submitted
        return _error(str(exc))
    except KeyboardInterrupt as exc:
        import signal

        signum = signum_of(exc)
        _error(f"stopped by {signal.Signals(signum).name}; re-run the same command to resume (accepted jobs are "
               f"kept, the others restart from their last checkpoint; python -m launcher status {sweep_dir} "
               "shows each job)")
        return 128 + signum
    except OSError as exc:
        return _error(_os_error_line(exc, Path(sweep_dir)), code=1)
    except (SweepError, IncidentsFileError, LeakError) as exc:  # sealing the evidence: jobs are kept
        return _error(f"the jobs ran but the evidence was not sealed: {_one_line(exc)}; fix that, then "
                      f"python -m evidence build {sweep_dir}", code=1)
    except Exception as exc:
        if type(exc).__module__.split(".")[0] != "submitit":
            raise
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        return _error(f"Slurm refused the submission ({first}); check the cluster profile (cluster.*) and that "
                      "this machine can reach the Slurm controller (sinfo)", code=1)


def _error(message: str, code: int = 2) -> int:
    print(f"proofgrid: error: {message}", file=sys.stderr)
    return code


def _os_error_line(exc: OSError, sweep_dir: Path) -> str:
    """An operating-system failure in one line: what failed, on which file, and the fix."""
    import errno

    where = f" at {exc.filename}" if exc.filename else f" under {sweep_dir}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full ({exc.strerror}){where}: free space (or quota) there, then re-run the same command"
    return f"{exc.strerror or exc}{where}; fix the path or its permissions, then re-run the same command"


def status(sweep_dir: Path) -> int:
    from rich.console import Console
    from rich.table import Table

    from facts.failures import failure_cause
    from launcher.backend import SchedulerUnavailable, refresh_job_records
    from launcher.liveness import mark_dead_local_jobs
    from launcher.progress import completed_steps, natural_key
    from launcher.records import read_job_record

    jobs_root = sweep_jobs_dir(sweep_dir)
    if not jobs_root.is_dir():
        print(f"proofgrid: error: {sweep_dir} has no {JOBS_DIR}/ directory; is it a sweep directory?", file=sys.stderr)
        return 2
    job_dirs = sorted(p for p in jobs_root.iterdir() if p.is_dir())
    try:
        refresh_job_records(job_dirs, {d: read_job_record(d) for d in job_dirs})
    except (OSError, SchedulerUnavailable) as exc:  # no sacct here: show what the records say
        print(f"note: scheduler not reachable ({exc}); showing recorded states", file=sys.stderr)
    for name, cause in mark_dead_local_jobs(job_dirs).items():
        print(f"job {name} FAILED: {cause}", file=sys.stderr)
    rows = []
    for d in job_dirs:
        r = read_job_record(d)
        spec = json.loads((d / "spec.json").read_text()) if (d / "spec.json").is_file() else {}
        arm = r.get("arm") or spec.get("arm") or r.get("algo") or spec.get("algo", "")
        rows.append((arm, d, r, spec.get("n_updates", "")))
    rows.sort(key=lambda row: (natural_key(row[0]), natural_key(row[1].name)))
    table = Table(title=str(sweep_dir.name))
    for col in ("arm", "job", "scheduler id", "state", "step", "exit", "elapsed s"):
        table.add_column(col)
    previous = None
    for arm, d, r, n_updates in rows:
        state = _shown(r.get("state"), "QUEUED")
        if state == "PENDING" and r.get("scheduler_reason"):  # why Slurm has not started it yet
            state += f" ({r['scheduler_reason']})"
        table.add_row(arm if arm != previous else "", d.name, _shown(r.get("job_id"), "not submitted"), state,
                      f"{completed_steps(d)}{'/' + str(n_updates) if n_updates else ''}",
                      _shown(r.get("exit_code")), _shown(r.get("elapsed_s")))
        previous = arm
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    for _, d, r, _ in rows:  # the cause under the table: a table column would wrap it out of reading
        if cause := failure_cause(r, d.name):
            console.print(f"job {d.name} {r.get('state', 'FAILED')}: {cause}", soft_wrap=True, highlight=False)
    return 0


def _shown(value, missing: str = "—") -> str:
    """A record's field for a table cell: a value not recorded (yet) is ``missing``, never ``None``."""
    return missing if value is None or value == "" else str(value)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "status":
        return status(Path(args[1]))
    if len(args) == 2 and args[0] == "cancel":
        from launcher.slurm import cancel_sweep

        if not sweep_jobs_dir(args[1]).is_dir():
            print(f"proofgrid: error: {args[1]} has no {JOBS_DIR}/ directory; is it a sweep directory?", file=sys.stderr)
            return 2
        return cancel_sweep(Path(args[1]))
    if len(args) == 2 and args[0] == "seal":  # what the wait=false seal job runs once the array has ended
        from launcher.slurm import SchedulerUnavailable, refresh_job_records
        from launcher.sweep import seal

        job_dirs = sorted(p for p in sweep_jobs_dir(args[1]).glob("*") if (p / "job.json").is_file())
        try:
            refresh_job_records(job_dirs)
        except (OSError, SchedulerUnavailable) as exc:
            print(f"note: scheduler not reachable ({exc}); sealing the recorded states", file=sys.stderr)
        return seal(Path(args[1]))
    print("usage: python -m launcher status|cancel|seal <sweep_dir>", file=sys.stderr)
    return 2
