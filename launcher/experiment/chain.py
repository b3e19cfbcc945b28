"""An experiment with no waiting launcher: ``launch.py experiment=<name> cluster=slurm wait=false``.

The launcher pre-registers the spec and the plan of every stage, submits the probe's array and a decision job
after it (``--dependency=afterany``), and returns. Each decision job (``python -m launcher experiment-step <dir>
<k>``, one CPU, proofgrid's own code from the checkout) seals the stage that has just run, makes the decision
between stages (``stages.decide``: the probe's checks and the budget, the selection from the tuning bundle, the
grid extension at an edge, a sized design's second look) and submits the next stage's array with the next
decision job after it; the last one seals the confirm stage, whose bundle holds the verdict. The chain is built
stage by stage by its own jobs, because a stage's plan depends on the previous stage's result.

``<dir>/chain.json`` records each stage's arrays and the decision job after them, and how each decision ended
(the confirm bundle carries it as ``data/chain.json``); ``<dir>/chain/`` holds the command the decision jobs
compose the experiment from again (``command.json``), each decision job's log and, after ``launcher cancel``,
the mark that stops a decision job from submitting anything more. A decision job re-checks the registration
(the spec's SHA256 and the overrides) before it decides, so a spec edited between stages stops the chain.

One writer at a time holds ``<dir>``'s lock: the launcher while it submits, a decision job while it decides,
``launcher cancel`` once it has cancelled the decision jobs. A rerun of the same command resumes: while any job
of the chain is queued or running it submits nothing; otherwise it submits what is missing (a stage whose jobs
were all accepted is not submitted again: a decision job without dependency seals it and goes on).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from facts import atomic_write_json
from facts.backends import SLURM
from facts.files import (
    CHAIN_CANCELLED,
    CHAIN_COMMAND,
    CHAIN_DIR,
    CHAIN_RECORD,
    STAGES,
    SWEEP_RECORD,
    recorded_job_dirs,
    sweep_jobs_dir,
)
from facts.states import TERMINAL_STATES
from launcher.backend import backend, refresh_job_records
from launcher.directory_locks import sweep_lock
from launcher.errors import LauncherError, LockHeld, PreflightError, SchedulerUnavailable
from launcher.experiment.experiment_errors import ExperimentError, ExperimentFailed
from launcher.experiment.runner import Runner, runner_for, stage_header
from launcher.experiment.stage_runner import AFTER_PROBE, BEGIN, Next, decide, spec_beside, stage_evidence
from launcher.interrupts import HANDLED, signals_interrupt
from launcher.job_records import read_job_record
from launcher.overrides import one_line
from launcher.planning import extra_config_dirs
from launcher.slurm import cancel_sweep
from launcher.slurm.commands import run_slurm
from launcher.slurm.script import job_name
from launcher.slurm.slurm_backend import HELPER_RESOURCES, job_resources, submit_helper_job
from launcher.slurm.slurm_states import confirmed_states, squeue_states
from launcher.sweep_runner import seal, submit_sweep

STEP_COMMAND = "experiment-step"  # python -m launcher experiment-step <dir> <k>: decision k of the chain
# How each decision ended, as the decision job records it in chain.json (none yet: queued, running, or killed).
DECIDED, DONE, FAILED_DECISION, CANCELLED_DECISION = "decided", "done", "failed", "cancelled"
LOCK_WAIT_S = 60  # launcher cancel waits this long for a cancelled decision job to let go of the directory


def read_chain(exp_dir: Path) -> dict:
    """``<dir>/chain.json``, or an empty chain."""
    path = exp_dir / CHAIN_RECORD
    return json.loads(path.read_text()) if path.is_file() else {"steps": []}


def is_chain(exp_dir: Path) -> bool:
    return (exp_dir / CHAIN_RECORD).is_file()


def _chain_ids(chain: dict) -> list[str]:
    """Every Slurm job id of the chain: each stage's arrays and the decision job after them."""
    return [job for step in chain["steps"] for job in (*step["arrays"], step["decision"]["job_id"])]


def live_jobs(exp_dir: Path) -> list[str]:
    """The chain's jobs the controller still holds (queued or running), as ``<id> (<state>)``; raises
    ``SchedulerUnavailable`` when Slurm cannot be asked."""
    ids = _chain_ids(read_chain(exp_dir))
    if not ids:
        return []
    queued = squeue_states(ids)
    return sorted(f"{task} ({info['state']})" for task, info in queued.items())


@contextlib.contextmanager
def experiment_lock(exp_dir: Path) -> Iterator[None]:
    """Hold ``exp_dir`` as its one writer (the waiting launcher for its whole run, the launcher submitting its chain),
    refused at once while a chain of this experiment still has jobs queued or running (a decision job, itself one of
    them, holds the directory's lock alone)."""
    with sweep_lock(exp_dir):
        if is_chain(exp_dir) and (live := _live_or_unknown(exp_dir)):
            raise ExperimentError(f"{exp_dir.name}'s chain of Slurm jobs is still running ({', '.join(live[:3])}); "
                                  f"follow it with python -m launcher status {exp_dir}, or cancel it with python -m "
                                  f"launcher cancel {exp_dir}, before running it again")
        yield


def _live_or_unknown(exp_dir: Path) -> list[str]:
    try:
        return live_jobs(exp_dir)
    except SchedulerUnavailable as exc:  # whether the chain still runs is unknown: submit nothing rather than guess
        raise ExperimentError(f"cannot ask Slurm whether {exp_dir.name}'s chain of jobs is still running ({exc}); "
                              "nothing was submitted") from None


def check_chain(cluster: DictConfig) -> None:
    """What a chain cannot honour, refused in one line before anything is written: another back end than Slurm,
    a seal job of its own (each stage's decision job seals it), and config directories beyond ``conf/`` (a
    decision job composes the experiment from ``conf/`` alone)."""
    if str(cluster.kind) != SLURM:
        backend(str(cluster.kind)).check_profile(cluster, dry_run=False, wait=False)  # its own refusal of wait=false
    if cluster.get("seal_job"):
        raise ExperimentError("cluster.seal_job=true: an experiment's chain seals each stage in the decision job "
                              "after it; drop cluster.seal_job")
    if dirs := extra_config_dirs(DictConfig({})):
        raise ExperimentError(f"wait=false composes the experiment again in each decision job from conf/ alone, and "
                              f"this command composes from {', '.join(dirs)} too; run it waiting (wait=true), or "
                              f"copy those configs into conf/")


def submit_chain(runner: Runner, recorded: list[str], overrides: list[str], name: str, cluster: DictConfig) -> int:
    """``wait=false``: register, submit the probe (or, resuming, the first stage with anything to run, or a decision
    job to seal what has run) with a decision job after it, and return. Submits nothing while the chain runs."""
    check_chain(cluster)
    exp_dir = runner.exp_dir
    if is_chain(exp_dir) and (live := _live_or_unknown(exp_dir)):
        print(f"{exp_dir.name}'s chain of Slurm jobs is still running ({', '.join(live[:3])}"
              f"{f', +{len(live) - 3} more' if len(live) > 3 else ''}); nothing submitted. Follow it with "
              f"`python -m launcher status {exp_dir}`; cancel it with `python -m launcher cancel {exp_dir}`")
        return 0
    with experiment_lock(exp_dir):
        (exp_dir / CHAIN_DIR).mkdir(parents=True, exist_ok=True)
        atomic_write_json(exp_dir / CHAIN_DIR / CHAIN_COMMAND, {"experiment": name, "overrides": list(overrides),
                                                              "cwd": os.getcwd()})
        (exp_dir / CHAIN_DIR / CHAIN_CANCELLED).unlink(missing_ok=True)  # a rerun resumes a cancelled chain
        if not is_chain(exp_dir):
            atomic_write_json(exp_dir / CHAIN_RECORD, {"experiment": name, "steps": []})
        advance(runner, BEGIN, 0, recorded, inline=False)
    print(f"follow it with `python -m launcher status {exp_dir}`; cancel it with `python -m launcher cancel "
          f"{exp_dir}`; no launcher needs to stay")
    return 0


def advance(runner: Runner, step: str, code: int, recorded: list[str], inline: bool) -> int:
    """From ``step`` on: decide, and submit the next stage with a decision job after it (0), or return the verdict's
    exit code. A stage with nothing left to run (every job accepted) is sealed here and the next step decided
    (``inline``: a decision job), or left to a decision job submitted at once (the launcher)."""
    while not isinstance(nxt := decide(runner, step, code, recorded), int):
        if nxt.header is not None:
            stage_header(nxt.stage, nxt.header)
        with sweep_lock(nxt.sweep.sweep_dir):
            spec_beside(runner, nxt.sweep)
            with _uninterrupted():  # a cancel's signal waits until what is submitted is recorded
                _refuse_if_cancelled(runner.exp_dir)
                before = _submissions(nxt.sweep.sweep_dir)
                todo = submit_sweep(nxt.sweep)
                if todo or not inline:
                    arrays = [s["array_job_id"] for s in _submissions(nxt.sweep.sweep_dir)[len(before):]]
                    _submit_decision(runner, nxt, arrays, len(todo))
                    return 0
            with stage_evidence(nxt.sweep.sweep_dir):
                code = seal(nxt.sweep.sweep_dir, nxt.sweep.user_rewards)
        step = nxt.after
    return nxt


def _submissions(sweep_dir: Path) -> list[dict]:
    path = sweep_dir / SWEEP_RECORD
    return json.loads(path.read_text()).get("submissions", []) if path.is_file() else []


def _submit_decision(runner: Runner, nxt: Next, arrays: list[str], tasks: int) -> None:
    """The decision job after ``arrays`` (at once with none), recorded in ``chain.json`` as step k; when it cannot be
    submitted, the arrays are cancelled again (nobody would follow them) and the refusal is one line."""
    exp_dir, chain = runner.exp_dir, read_chain(runner.exp_dir)
    k = len(chain["steps"])
    log = f"{CHAIN_DIR}/{k}-{nxt.after}.log"
    ran = f"the {nxt.stage} stage's array(s) {', '.join(arrays)} were cancelled again" if arrays else "nothing ran"
    # the probe's decision runs the spec's gradient check (both arms' gradients on a batch): a job's resources
    computes = nxt.after == AFTER_PROBE and runner.study.probe.get("gradient_check")
    try:
        job = submit_helper_job(nxt.sweep.cluster, job_name(exp_dir, f"decide-{nxt.after}"), "the decision job",
                                ["-u", "-m", "launcher", STEP_COMMAND, str(exp_dir), str(k)], exp_dir / log, arrays, ran,
                                "fix that, then run the same command again",
                                job_resources(nxt.sweep.cluster) if computes else HELPER_RESOURCES)
    except PreflightError:
        if arrays:
            run_slurm(["scancel", *arrays])
        raise
    chain["steps"].append({"stage": nxt.stage, "arrays": arrays, "tasks": tasks, "user_rewards": list(nxt.sweep.user_rewards),
                           "decision": {"job_id": job, "after": nxt.after, "log": log},
                           "submitted": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    atomic_write_json(exp_dir / CHAIN_RECORD, chain)
    what = f"array job(s) {', '.join(arrays)} ({tasks} task(s))" if arrays else "nothing left to run"
    print(f"{nxt.stage}: {what}; decision job {job} after it seals the {nxt.stage} stage and decides what runs next "
          f"(log: {exp_dir / log})")


@contextlib.contextmanager
def _uninterrupted() -> Iterator[None]:
    """Hold off the signals that stop the process (``launcher cancel``'s scancel) while a submission and its record
    are made: a signal arriving meanwhile is delivered when they are done, so nothing submitted goes unrecorded."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _refuse_if_cancelled(exp_dir: Path) -> None:
    if (exp_dir / CHAIN_DIR / CHAIN_CANCELLED).is_file():
        raise ExperimentFailed(f"the chain was cancelled (python -m launcher cancel {exp_dir}); nothing more is "
                               "submitted: run the same command again to resume")


def _outside_this_job() -> None:
    """A decision job submits Slurm jobs from inside its own: the variables Slurm set for it (its job id, CPUs,
    memory) would otherwise be read by the jobs it submits as requests of theirs. ``SLURM_CONF`` stays."""
    for key in [k for k in os.environ if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        del os.environ[key]


def run_decision(exp_dir: Path, k: int) -> int:
    """``python -m launcher experiment-step <dir> <k>``: decision k of the chain. Seal the stage that has just run,
    decide and submit what runs next (or seal the verdict); a failure stops the chain, in one line in this job's
    log and in ``chain.json``. An exit code."""
    _outside_this_job()
    exp_dir = exp_dir.resolve()
    outcome, code = FAILED_DECISION, 1
    try:
        with signals_interrupt(), sweep_lock(exp_dir):  # its own job is live: no experiment_lock
            step = read_chain(exp_dir)["steps"][k]
            print(f"decision {k} of {exp_dir.name}: sealing the {step['stage']} stage, then deciding what runs next",
                  flush=True)
            _refuse_if_cancelled(exp_dir)
            runner, recorded = _compose_again(exp_dir)
            stage_dir = runner.stage_dir(step["stage"])
            job_dirs = recorded_job_dirs(stage_dir)
            with contextlib.suppress(OSError, SchedulerUnavailable):  # no answer: seal the recorded states
                refresh_job_records(job_dirs, {d: read_job_record(d) for d in job_dirs})
            with sweep_lock(stage_dir), stage_evidence(stage_dir):
                sealed = seal(stage_dir, tuple(step.get("user_rewards") or ()))
            code = advance(runner, step["decision"]["after"], sealed, recorded, inline=True)
            outcome = DONE if len(read_chain(exp_dir)["steps"]) == k + 1 else DECIDED
    except KeyboardInterrupt as exc:
        outcome = CANCELLED_DECISION
        print(f"proofgrid: experiment stopped: decision {k} was stopped ({exc.__class__.__name__}); nothing more "
              f"is submitted", file=sys.stderr)
    except ExperimentFailed as exc:
        cancelled = (exp_dir / CHAIN_DIR / CHAIN_CANCELLED).is_file()
        outcome = CANCELLED_DECISION if cancelled else FAILED_DECISION
        print(f"proofgrid: experiment stopped: {exc}", file=sys.stderr)
    except (LauncherError, LockHeld, OSError) as exc:
        print(f"proofgrid: experiment stopped: {one_line(exc)}", file=sys.stderr)
    except Exception as exc:  # a bug or a composition the conf/ of now refuses: the traceback, then its one line
        traceback.print_exc()
        print(f"proofgrid: experiment stopped: decision {k} failed: {exc.__class__.__name__}: {one_line(exc)}",
              file=sys.stderr)
    _record_outcome(exp_dir, k, outcome, code if outcome in (DONE, DECIDED) else 1)
    return code if outcome in (DONE, DECIDED) else 1


def _compose_again(exp_dir: Path) -> tuple[Runner, list[str]]:
    """The experiment composed again from the command that submitted the chain, in its working directory, checked
    against the registration (a spec edited since stops the chain here)."""
    from launcher.experiment.study import compose  # noqa: PLC0415 (Hydra's compose, only in a decision job)

    command = json.loads((exp_dir / CHAIN_DIR / CHAIN_COMMAND).read_text())
    with contextlib.suppress(OSError):
        os.chdir(command["cwd"])  # relative paths in the overrides mean what they meant to the launcher
    cfg = compose(command["overrides"])
    return runner_for(cfg, command["overrides"], exp_dir, command["experiment"], check_arms=False)


def _record_outcome(exp_dir: Path, k: int, outcome: str, code: int) -> None:
    """How decision k ended, in ``chain.json`` (the decision job's last write; best effort when it cannot)."""
    with contextlib.suppress(OSError, ValueError, IndexError, KeyError):
        chain = read_chain(exp_dir)
        chain["steps"][k]["decision"].update({"outcome": outcome, "exit_code": code,
                                              "ended": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        atomic_write_json(exp_dir / CHAIN_RECORD, chain)


def decision_reason(exp_dir: Path, log: str) -> str | None:
    """The line a decision job's log ends on when it stopped the experiment (``proofgrid: experiment stopped: ...``)."""
    path = exp_dir / log
    lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
    return next((ln.split(": ", 1)[1] for ln in reversed(lines) if ln.startswith("proofgrid: ")), None)


def chain_status(exp_dir: Path) -> list[str]:
    """``launcher status <dir>``'s chain: a table of each stage's arrays and the decision job after them, and why a
    decision stopped the chain (the line its log ends on); returns the lines to print under it."""
    chain = read_chain(exp_dir)
    ids = [s["decision"]["job_id"] for s in chain["steps"]]
    notes = []
    try:
        states = {i: info["state"] for i, info in confirmed_states(ids).items()}
    except SchedulerUnavailable as exc:
        states, notes = {}, [f"note: scheduler not reachable ({exc}); showing recorded outcomes"]
    table = Table(title=f"{exp_dir.name}: chain of Slurm jobs (wait=false)")
    for col in ("step", "stage", "array(s)", "tasks", "decision job", "state", "decided"):
        table.add_column(col)
    for k, s in enumerate(chain["steps"]):
        d = s["decision"]
        table.add_row(str(k), s["stage"], ", ".join(s["arrays"]) or "—", str(s["tasks"]), f"{d['job_id']} (after "
                      f"{d['after']})", states.get(d["job_id"], "—"), d.get("outcome", "not yet"))
        if d.get("outcome") in (FAILED_DECISION, CANCELLED_DECISION) or (
                d.get("outcome") is None and states.get(d["job_id"]) in TERMINAL_STATES):
            why = decision_reason(exp_dir, d["log"]) or f"it ended {states.get(d['job_id'], 'without a record')}"
            notes.append(f"decision job {d['job_id']} (after {d['after']}) stopped the chain: {why}; log: "
                         f"{exp_dir / d['log']}")
    if (exp_dir / CHAIN_DIR / CHAIN_CANCELLED).is_file():
        notes.append("the chain was cancelled (python -m launcher cancel); run the same command again to resume")
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return notes


def stage_dirs(exp_dir: Path) -> list[Path]:
    """The experiment's stages that have jobs, in order."""
    return [exp_dir / stage for stage in STAGES if sweep_jobs_dir(exp_dir / stage).is_dir()]


def cancel_chain(exp_dir: Path) -> int:
    """``launcher cancel <dir>``: mark the chain cancelled (no decision job submits anything after), cancel its
    decision jobs, then, holding the directory once they have let go of it, every stage's queued or running jobs."""
    exp_dir = exp_dir.resolve()
    (exp_dir / CHAIN_DIR).mkdir(parents=True, exist_ok=True)
    (exp_dir / CHAIN_DIR / CHAIN_CANCELLED).write_text(datetime.now(timezone.utc).isoformat(timespec="seconds") + "\n")
    try:
        live = [task.split()[0] for task in live_jobs(exp_dir)]
    except SchedulerUnavailable as exc:
        print(f"proofgrid: error: cannot ask Slurm which jobs of the chain are queued or running ({exc}); nothing was "
              "cancelled (no decision job submits anything more)", file=sys.stderr)
        return 1
    decisions = {s["decision"]["job_id"] for s in read_chain(exp_dir)["steps"]}
    if killed := [i for i in live if i in decisions]:
        run_slurm(["scancel", *killed])
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            with sweep_lock(exp_dir):
                codes = [cancel_sweep(stage) for stage in stage_dirs(exp_dir)]
                rest = [task.split()[0] for task in live_jobs(exp_dir)]
                if rest:  # a decision job submitted before it saw the mark: its jobs too
                    run_slurm(["scancel", *{t.split("_")[0] for t in rest}])
            break
        except LockHeld:
            if time.monotonic() > deadline:
                print(f"proofgrid: error: a decision job still holds {exp_dir} after {LOCK_WAIT_S} s; the chain is "
                      f"marked cancelled: run python -m launcher cancel {exp_dir} again", file=sys.stderr)
                return 1
            time.sleep(1)
    print(f"cancelled {exp_dir.name}'s chain: decision job(s) {', '.join(killed) or 'none queued'}; every stage's "
          f"queued and running jobs above. Run the same command again to resume")
    return max(codes, default=0)


__all__ = ["STEP_COMMAND", "cancel_chain", "chain_status", "check_chain", "experiment_lock", "is_chain", "run_decision",
           "stage_dirs", "submit_chain"]

