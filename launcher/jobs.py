"""Job state and the rerun rules: which jobs of a planned sweep still need to run.

An accepted job is never re-run; a job still queued or running refuses the re-run; a job directory
made with other settings refuses it; a rejected job runs again after its records are kept under
``attempts/<n>/``. Scheduler states come through the back ends (``launcher.backend``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from evidence.gates.index import evaluate_job
from facts import INITIAL_EVAL_DIR, JOBS_DIR, run_dir_of_job
from facts.files import (
    ATTEMPTS_DIR,
    COMMAND_PUBLIC_RECORD,
    COMMAND_RECORD,
    EVAL_RECORD,
    EXPERIMENT_FILE,
    JOB_RECORD,
    JOB_SPEC,
    METRICS_LOG,
    RAY_START_LOG,
    RESOURCE_SAMPLES,
    RUN_RECORD,
    RUNTIME_LOG,
    SWEEP_RECORD,
    TRAINER_LOG,
)
from facts.states import IN_FLIGHT_STATES
from launcher.backend import BACKENDS, backend, refresh_job_records
from launcher.errors import PreflightError, SchedulerUnavailable
from launcher.job_records import read_job_record
from launcher.job_spec import JobSpec, Sweep
from launcher.liveness import mark_dead_local_jobs
from launcher.restart_point import RUN_STATE_DIRS, discard_checkpoint_past_bad_metrics

ATTEMPT_RUN_FILES = (METRICS_LOG, EVAL_RECORD, RUN_RECORD)
ATTEMPT_RECORDS = (JOB_RECORD, COMMAND_RECORD, COMMAND_PUBLIC_RECORD, TRAINER_LOG, RUNTIME_LOG, RAY_START_LOG,
                   RESOURCE_SAMPLES)


def is_accepted(job_dir: Path) -> bool:
    """The evidence's verdict on an existing job directory (the scheduler state is not enough)."""
    return bool(job_dir.is_dir() and evaluate_job(job_dir).accepted)


def in_flight(record: dict) -> bool:
    """Is the job of this record still queued or running somewhere? Its back end decides liveness."""
    if record.get("state") not in IN_FLIGHT_STATES:
        return False
    kind = record.get("scheduler")
    return backend(kind).in_flight(record) if kind in BACKENDS else False


def check_rerun(spec: JobSpec) -> None:
    """Refuse to re-run into a job directory made with other settings, or one still in flight."""
    previous = spec.job_dir / JOB_SPEC
    if previous.is_file():
        old = JobSpec.from_json(previous.read_text())
        if (old.trainer_overrides, old.n_updates, old.arm_label) != (spec.trainer_overrides, spec.n_updates,
                                                                     spec.arm_label):
            raise PreflightError(
                f"{spec.job_dir} holds job {spec.name} run with other settings "
                f"({' '.join(old.trainer_overrides)}); a sweep directory holds one frozen grid: "
                "use a new hydra.sweep.dir"
            )
    record = read_job_record(spec.job_dir)
    if in_flight(record):
        raise PreflightError(
            f"job {spec.name} is still {record.get('state')} (id {record.get('job_id')}); wait for it "
            f"(python -m launcher status {spec.sweep_dir}) or cancel it before re-running this sweep"
        )


def check_arms(sweep_dir: Path, arms: dict[str, dict[str, str]]) -> None:
    """Refuse to re-run a sweep directory whose recorded arm of the same label had other settings
    (an arm's label is stable only within one grid: its jobs would mix two experiments)."""
    path = sweep_dir / SWEEP_RECORD
    recorded = json.loads(path.read_text()).get("arms", {}) if path.is_file() else {}
    for label, overrides in arms.items():
        if label in recorded and recorded[label] != overrides:
            old = " ".join(f"{k}={v}" for k, v in sorted(recorded[label].items()))
            raise PreflightError(f"{sweep_dir} holds arm {label} run with other settings ({old}); a sweep "
                                 "directory holds one frozen grid: use a new hydra.sweep.dir")


def check_planned_by_this_launcher(sweep: Sweep) -> None:
    """Refuse a sweep whose directory holds a shared initial evaluation or job directories this launcher did not
    plan: ``initial_eval/`` or ``jobs/`` with no ``sweep.json`` (placed there before the sweep was planned), or
    ``initial_eval/`` before any job of the plan was prepared (its jobs would reuse an evaluation no job of this
    sweep computed, as if this sweep had computed it)."""
    planted = [name for name in (INITIAL_EVAL_DIR, JOBS_DIR) if os.path.lexists(sweep.sweep_dir / name)]
    if planted and not (sweep.sweep_dir / SWEEP_RECORD).is_file():
        raise PreflightError(f"{sweep.sweep_dir} holds {' and '.join(f'{n}/' for n in planted)} but no "
                             f"{SWEEP_RECORD}: this launcher did not plan them; use a new hydra.sweep.dir")
    if os.path.lexists(sweep.sweep_dir / INITIAL_EVAL_DIR) and not any(
            (s.job_dir / JOB_SPEC).is_file() for s in sweep.specs):
        raise PreflightError(f"{sweep.sweep_dir} holds {INITIAL_EVAL_DIR}/ before any job of this sweep ran: no job "
                             "of it computed that evaluation; use a new hydra.sweep.dir")


def check_plain_sweep(sweep_dir: Path, jobs: list[str]) -> None:
    """Refuse, before anything is written, a plain sweep into a directory that holds another grid (a subset,
    a superset or a changed one: re-sealing would rewrite the plan of record and replace its sealed bundle),
    or into a stage of a pre-registered experiment (only the experiment's own command runs its stages)."""
    from launcher.experiment.registration import REGISTRATION  # noqa: PLC0415 (the experiment package imports this one)

    path = sweep_dir / SWEEP_RECORD
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    if (sweep_dir.parent / REGISTRATION).is_file() or (sweep_dir / EXPERIMENT_FILE).is_file() \
            or recorded.get("experiment_sha256"):
        raise PreflightError(f"{sweep_dir} is a stage of the pre-registered experiment in {sweep_dir.parent}: a plain "
                             "sweep would rewrite its plan and reseal its bundle; re-run the experiment's own command "
                             f"(launch.py experiment=... hydra.run.dir={sweep_dir.parent}) or use a new hydra.sweep.dir")
    old = recorded.get("jobs")
    if old is not None and list(old) != list(jobs):
        missing, extra = [j for j in old if j not in jobs], [j for j in jobs if j not in old]
        diff = "; ".join(part for part in (f"without {', '.join(missing)}" if missing else "",
                                           f"with {', '.join(extra)}" if extra else "") if part) or "in another order"
        raise PreflightError(f"{sweep_dir} holds a sweep of {len(old)} job(s) ({', '.join(old)}); this grid is another "
                             f"one ({diff}); a sweep directory holds one frozen grid: re-run its own grid or use a new "
                             "hydra.sweep.dir")


def prepare_job_dirs(sweep: Sweep) -> list[JobSpec]:
    """Jobs that still need to run. An accepted job is never re-run; a job still queued or running
    refuses the re-run; a rejected one runs again (resuming from its checkpoint) after its records
    and its run's evidence files are copied to ``attempts/<n>/``: nothing is lost."""
    existing = [s.job_dir for s in sweep.all_specs if (s.job_dir / JOB_RECORD).is_file()]
    if existing:
        with contextlib.suppress(OSError, SchedulerUnavailable):  # no scheduler here: records decide
            refresh_job_records(existing, {d: read_job_record(d) for d in existing})
        mark_dead_local_jobs(existing)
    for spec in sweep.all_specs:
        check_rerun(spec)
    todo = []
    for spec in sweep.all_specs:
        job_dir = spec.job_dir
        if (job_dir / JOB_RECORD).is_file():
            if is_accepted(job_dir):
                continue
            attempts = job_dir / ATTEMPTS_DIR
            attempt = attempts / str(len(list(attempts.iterdir())) if attempts.is_dir() else 0)
            run_dir_of_job(attempt).mkdir(parents=True)
            for name in ATTEMPT_RECORDS:
                if (job_dir / name).exists():
                    shutil.move(str(job_dir / name), str(attempt / name))
            for name in ATTEMPT_RUN_FILES:  # the resumed run rewrites these: keep the rejected ones
                if (run_dir_of_job(job_dir) / name).exists():
                    shutil.copy2(run_dir_of_job(job_dir) / name, run_dir_of_job(attempt) / name)
            if spec.certify is not None:  # a certificate proves a run from its start: never from a checkpoint
                for name in RUN_STATE_DIRS:
                    if (run_dir_of_job(job_dir) / name).exists():
                        shutil.move(str(run_dir_of_job(job_dir) / name), str(run_dir_of_job(attempt) / name))
            elif note := discard_checkpoint_past_bad_metrics(job_dir, spec.algo, spec.n_updates, attempt):
                print(f"job {spec.name}: {note}")
        job_dir.mkdir(parents=True, exist_ok=True)
        (job_dir / JOB_SPEC).write_text(spec.to_json() + "\n")
        todo.append(spec)
    return todo
