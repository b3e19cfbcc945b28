"""Entry points: the Hydra sweep (``launch.py``, after ``launcher.overrides`` checked its command
line), ``python -m launcher status|cancel|seal <sweep_dir>``, ``status|cancel <experiment_dir>`` and an
experiment's decision job (``experiment-step <experiment_dir> <k>``, ``wait=false``)."""

from __future__ import annotations

import csv
import errno
import json
import re
import signal
import sys
from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console
from rich.table import Table

from evidence import IncidentsFileError, LeakError, SweepError
from facts import JOBS_DIR, sweep_jobs_dir
from facts.failures import failure_cause
from facts.files import (
    CERTIFICATES_FILE,
    CERTIFY_DIR,
    INDEX_TABLE,
    JOB_RECORD,
    JOB_SPEC,
    SWEEP_RECORD,
    recorded_job_dirs,
    sweep_bundle_payload,
)
from facts.states import COMPLETED, FAILED, IN_FLIGHT_STATES, PENDING, VIEW_QUEUED
from launcher.backend import refresh_job_records
from launcher.directory_locks import sweep_lock
from launcher.errors import LockHeld, PreflightError, SchedulerUnavailable
from launcher.interrupts import signals_interrupt, signum_of
from launcher.job_records import read_job_record
from launcher.jobs import check_plain_sweep
from launcher.liveness import mark_dead_local_jobs
from launcher.overrides import one_line
from launcher.planning import plan_sweep
from launcher.preflight import check_launch_environment
from launcher.progress import completed_steps, natural_key
from launcher.resume import record_resume_command, resume_advice
from launcher.sweep_runner import run_sweep, seal


def launch_grid(root_cfg, cells: list[list[str]], sweep_dir: str, compose) -> int:
    """Compose each distinct grid cell once, check them all, then run (or dry-run) the sweep.
    ``compose`` turns one cell's overrides into its config. Returns an exit code; every failure is
    one line on stderr (``one_line_errors``)."""
    def body() -> int:
        try:
            sweep = plan_sweep(root_cfg, cells, Path(sweep_dir), compose)
            check_launch_environment(sweep.sweep_dir, sweep.cluster, sweep.dry_run)
        except (HydraException, OmegaConfBaseException) as exc:
            return _error(f"bad grid: {one_line(exc)}")
        check_plain_sweep(sweep.sweep_dir, [s.name for s in sweep.specs])  # before anything is written
        with sweep_lock(sweep.sweep_dir):  # one launcher per sweep directory, refused at once
            return run_sweep(sweep)

    return one_line_errors(sweep_dir, body)


def one_line_errors(sweep_dir: str | Path, body) -> int:
    """Run ``body`` (a sweep, or an experiment's stages) and turn every failure into one line on
    stderr and an exit code: a bad setting, an unusable sweep directory, a launcher already running
    in it, a missing scheduler, a full disk, evidence that cannot be sealed, or a signal (Ctrl-C,
    SIGTERM, SIGHUP: exit status 128 + the signal, and how to resume)."""
    dry_run = any(DRY_RUN_OVERRIDE.fullmatch(a) for a in sys.argv[1:])
    ran = False  # jobs may have run: record how to resume (a refused command, exit 2, records nothing)
    try:
        with signals_interrupt():
            code = body()
        ran = code in (0, 1)
        # A sweep's jobs ran and some were rejected (or the audit found something); an experiment says
        # itself why it stopped.
        if code == 1 and not dry_run and (Path(sweep_dir) / SWEEP_RECORD).is_file():
            print(f"to run the jobs that were not accepted again (each from its last checkpoint, where its trainer saved "
                  f"one): "
                  f"{resume_advice(sweep_dir)}", file=sys.stderr)
        return code
    except (PreflightError, LockHeld) as exc:  # nothing submitted
        return _error(str(exc))
    except KeyboardInterrupt as exc:
        ran, signum = True, signum_of(exc)
        _error(f"stopped by {signal.Signals(signum).name}; to resume (accepted jobs are kept, the others restart "
               f"from their last checkpoint, where their trainer saved one): {resume_advice(sweep_dir)}; python -m launcher status "
               f"{Path(sweep_dir).resolve()} shows each job")  # absolute, as the resume command is
        return 128 + signum
    except OSError as exc:
        return _error(_os_error_line(exc, Path(sweep_dir)), code=1)
    except (SweepError, IncidentsFileError, LeakError) as exc:  # sealing the evidence: jobs are kept
        ran = True
        return _error(f"the jobs ran but the evidence was not sealed: {one_line(exc)}; fix that, then "
                      f"python -m evidence build {sweep_dir}", code=1)
    except Exception as exc:
        if type(exc).__module__.split(".")[0] != "submitit":
            raise
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        return _error(f"Slurm refused the submission ({first}); check the cluster profile (cluster.*) and that "
                      "this machine can reach the Slurm controller (sinfo)", code=1)
    finally:
        if ran and not dry_run:  # a dry run writes nothing a real run (or status) reads
            record_resume_command(sweep_dir)


DRY_RUN_OVERRIDE = re.compile(r"\+{0,2}dry_run=(true|True|1|yes)")


def _error(message: str, code: int = 2) -> int:
    print(f"proofgrid: error: {message}", file=sys.stderr)
    return code


def _os_error_line(exc: OSError, sweep_dir: Path) -> str:
    """An operating-system failure in one line: what failed, on which file, and the fix."""
    where = f" at {exc.filename}" if exc.filename else f" under {sweep_dir}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full ({exc.strerror}){where}: free space (or quota) there, then re-run the same command"
    return f"{exc.strerror or exc}{where}; fix the path or its permissions, then re-run the same command"


def status(sweep_dir: Path) -> int:
    """``python -m launcher status``: each job's scheduler state, step, exit code and failure cause."""
    jobs_root = sweep_jobs_dir(sweep_dir)
    if not jobs_root.is_dir() and (stages := _experiment(sweep_dir)) is not None:
        return experiment_status(sweep_dir, stages)
    if not jobs_root.is_dir():
        print(f"proofgrid: error: {sweep_dir} has no {JOBS_DIR}/ directory; is it a sweep directory?", file=sys.stderr)
        return 2
    job_dirs = sorted(p for p in jobs_root.iterdir() if p.is_dir())
    certify_root = sweep_dir / CERTIFY_DIR  # certify=true: the certificate jobs, after the grid's
    job_dirs += sorted(p for p in certify_root.iterdir() if p.is_dir()) if certify_root.is_dir() else []
    try:
        refresh_job_records(job_dirs, {d: read_job_record(d) for d in job_dirs})
    except (OSError, SchedulerUnavailable) as exc:  # no sacct here: show what the records say
        print(f"note: scheduler not reachable ({exc}); showing recorded states", file=sys.stderr)
    for name, cause in mark_dead_local_jobs(job_dirs).items():
        print(f"job {name} FAILED: {cause}", file=sys.stderr)
    rows = []
    for d in job_dirs:
        r = read_job_record(d)
        spec = json.loads((d / JOB_SPEC).read_text()) if (d / JOB_SPEC).is_file() else {}
        arm = r.get("arm") or spec.get("arm") or r.get("algo") or spec.get("algo", "")
        rows.append((arm, d, r, spec.get("n_updates", "")))
    rows.sort(key=lambda row: (row[1].parent.name == CERTIFY_DIR, natural_key(row[0]), natural_key(row[1].name)))
    decisions = _sealed_decisions(sweep_dir, {d: r for _, d, r, _ in rows})
    decisions.update(_sealed_certificates(sweep_dir))
    table = Table(title=str(sweep_dir.name))
    for col in ("arm", "job", "scheduler id", "state", "step", "exit", "elapsed s", "decision"):
        table.add_column(col)
    previous = None
    for arm, d, r, n_updates in rows:
        state = _shown(r.get("state"), VIEW_QUEUED)
        if state == PENDING and r.get("scheduler_reason"):  # why Slurm has not started it yet
            state += f" ({r['scheduler_reason']})"
        table.add_row(arm if arm != previous else "", d.name, _shown(r.get("job_id"), "not submitted"), state,
                      f"{completed_steps(d)}{'/' + str(n_updates) if n_updates else ''}",
                      _shown(r.get("exit_code")), _shown(r.get("elapsed_s")),
                      DECISIONS.get(decisions.get(d.name, {}).get("accepted"), "not sealed"))
        previous = arm
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    for _, d, r, _ in rows:  # the cause under the table: a table column would wrap it out of reading
        if cause := failure_cause(r, d.name):
            console.print(f"job {d.name} {r.get('state', FAILED)}: {cause}", soft_wrap=True, highlight=False)
        elif decisions.get(d.name, {}).get("accepted") == "no":  # it ran, and the evidence rejected it
            console.print(f"job {d.name} rejected: {decisions[d.name].get('reason', '')}", soft_wrap=True,
                          highlight=False)
    if any(r.get("state") not in (COMPLETED, *IN_FLIGHT_STATES) for _, _, r, _ in rows):
        console.print(f"to resume (accepted jobs are kept, the others restart from their last checkpoint): "
                      f"{resume_advice(sweep_dir)}", soft_wrap=True, highlight=False)
    return 0


def _experiment(exp_dir: Path) -> list[Path] | None:
    """An experiment's directory (its chain of Slurm jobs recorded, or a stage with jobs): its stages with jobs."""
    from launcher.experiment.chain import is_chain, stage_dirs  # noqa: PLC0415 (composition's imports: an experiment only)

    stages = stage_dirs(exp_dir)
    return stages if stages or is_chain(exp_dir) else None


def experiment_status(exp_dir: Path, stages: list[Path]) -> int:
    """``python -m launcher status <experiment dir>``: its chain of Slurm jobs (``wait=false``: each stage's arrays
    and the decision job after them, and why a decision stopped it), then each stage's jobs."""
    from launcher.experiment.chain import chain_status, is_chain  # noqa: PLC0415

    notes = chain_status(exp_dir) if is_chain(exp_dir) else []
    for stage in stages:
        status(stage)
    for note in notes:
        Console(width=None if sys.stdout.isatty() else 200).print(note, soft_wrap=True, highlight=False)
    return 0


DECISIONS = {"yes": "accepted", "no": "rejected", "reproduced": "certificate: reproduced",
             "not reproduced": "certificate: NOT reproduced"}  # the index's accepted column; a certificate's outcome


def cancel_experiment(exp_dir: Path, stages: list[Path]) -> int:
    """``python -m launcher cancel <experiment dir>``: its chain (``wait=false``) with every decision job, or, run by a
    waiting launcher, each stage's queued and running jobs."""
    from launcher.experiment.chain import cancel_chain, is_chain  # noqa: PLC0415
    from launcher.slurm import cancel_sweep  # noqa: PLC0415

    return cancel_chain(exp_dir) if is_chain(exp_dir) else max(cancel_sweep(stage) for stage in stages)


def _sealed_decisions(sweep_dir: Path, records: dict[Path, dict]) -> dict[str, dict]:
    """Each job's row of the sealed evidence index (accept/reject and why), for the jobs the seal saw as
    they are now: a job that is in flight, or whose record changed after the seal (a re-run), is not
    sealed yet (an earlier seal's decision would be stale)."""
    index = sweep_bundle_payload(sweep_dir) / INDEX_TABLE
    if not index.is_file():
        return {}
    sealed_at = index.stat().st_mtime
    current = {d.name for d, record in records.items() if record.get("state") not in IN_FLIGHT_STATES
               and (d / JOB_RECORD).is_file() and (d / JOB_RECORD).stat().st_mtime <= sealed_at}
    with open(index, newline="") as f:
        return {row["job"]: row for row in csv.DictReader(f) if row["job"] in current}


def _sealed_certificates(sweep_dir: Path) -> dict[str, dict]:
    """certify=true: each certificate job's outcome in the sealed ``certificates.json``, as a decision row."""
    path = sweep_bundle_payload(sweep_dir) / CERTIFICATES_FILE
    if not path.is_file():
        return {}
    return {c["certificate_job"]: {"accepted": "reproduced" if c["reproduced"] else "not reproduced"}
            for c in json.loads(path.read_text())["certificates"]}


def _shown(value, missing: str = "—") -> str:
    """A record's field for a table cell: a value not recorded (yet) is ``missing``, never ``None``."""
    return missing if value is None or value == "" else str(value)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "status":
        return status(Path(args[1]))
    if len(args) == 2 and args[0] == "cancel":
        # The Slurm back end for `cancel` alone: only Slurm's jobs outlive the launcher that made them.
        from launcher.slurm import cancel_sweep

        if not sweep_jobs_dir(args[1]).is_dir() and (stages := _experiment(Path(args[1]))) is not None:
            return cancel_experiment(Path(args[1]), stages)
        if not sweep_jobs_dir(args[1]).is_dir():
            print(f"proofgrid: error: {args[1]} has no {JOBS_DIR}/ directory; is it a sweep directory?", file=sys.stderr)
            return 2
        return cancel_sweep(Path(args[1]))
    if len(args) == 2 and args[0] == "seal":  # what the wait=false seal job runs once the array has ended
        job_dirs = recorded_job_dirs(args[1])  # the grid's and its certificate jobs (certify=true)
        try:
            refresh_job_records(job_dirs, {d: read_job_record(d) for d in job_dirs})
        except (OSError, SchedulerUnavailable) as exc:
            print(f"note: scheduler not reachable ({exc}); sealing the recorded states", file=sys.stderr)
        try:
            return seal(Path(args[1]))
        except LockHeld as exc:  # another writer of the sweep's evidence: nothing sealed
            return _error(str(exc), code=1)
        except (SweepError, IncidentsFileError, LeakError) as exc:
            return _error(f"the evidence was not sealed: {one_line(exc)}; fix that, then python -m evidence build "
                          f"{args[1]}", code=1)
    if len(args) == 3:  # an experiment's decision job (wait=false)
        from launcher.experiment.chain import STEP_COMMAND, run_decision  # noqa: PLC0415

        if args[0] == STEP_COMMAND and args[2].isdigit():
            return run_decision(Path(args[1]), int(args[2]))
    print("usage: python -m launcher status|cancel|seal <sweep_dir>, or status|cancel <experiment_dir>", file=sys.stderr)
    return 2
