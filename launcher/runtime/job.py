"""The job runtime: what runs inside one allocation (a local process or one Slurm array task).

It creates the job's roots, claims a port block, starts a job-scoped Ray when the workload uses
one, runs the exact trainer command in the isolated environment, stops Ray, looks for anything the
job left behind (processes, ports, the Ray socket alias) and writes ``job.json``. The same
function runs locally (``python -m launcher.runtime <job_dir>``) and under submitit on Slurm.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from facts.processes import runtime_identity
from launcher.isolation import JobRoots, env_diff, isolated_env
from launcher.liveness import death_cause
from launcher.locks import INHERITED_FD_ENV, lock_job_run_dir, record_holder
from launcher.ports import BLOCK_SIZE, PortBlock, claim_port_block, listening_ports
from launcher.preflight import PreflightError, check_visible_gpu
from launcher.progress import completed_steps
from launcher.ray_runtime import JobRay, leftover_processes
from launcher.records import update_job_record, write_command_records
from launcher.slurm_requeue import (
    append_history,
    keep_scheduler_output,
    record_scheduler_requeues,
    requeue,
    requeue_refusal,
    signal_event,
    slurm_job_state,
)
from launcher.spec import JobSpec
from trainer.inputs import REPO_ROOT
from trainer.preemption import CHECKPOINT_SIGNALS, EXIT_CHECKPOINTED

SPEC_FILE = "spec.json"


class JobFailed(RuntimeError):
    """The trainer exited non-zero (the job record says how far it got)."""


# Characters a Hydra override value may hold unquoted (a comma would make a sweep, a quote or a
# non-ASCII character fails to parse).
_HYDRA_PLAIN = re.compile(r"[A-Za-z0-9_/.\-+@%]*")


def hydra_value(text: str) -> str:
    """``text`` as a Hydra override value that parses back to exactly ``text``: as is when plain,
    else single-quoted, with quotes (and the backslashes before a quote or the end) escaped."""
    if _HYDRA_PLAIN.fullmatch(text):
        return text
    body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
    return f"'{body}'"


def trainer_argv(spec: JobSpec, roots: JobRoots) -> list[str]:
    shared = [f"sweep_dir={hydra_value(spec.sweep_dir)}"] if spec.share_initial_eval else []
    return [sys.executable, "-m", "trainer", *spec.trainer_overrides, f"output_dir={hydra_value(str(roots.output))}",
            *shared]


def scheduler_identity() -> dict:
    """Scheduler job id and array index as seen from inside the allocation."""
    env = os.environ
    if "SLURM_JOB_ID" in env:
        array_job, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
        return {
            "scheduler": "slurm",
            "job_id": f"{array_job}_{task}" if array_job and task else env["SLURM_JOB_ID"],
            "array_index": int(task) if task else None,
            "restart_count": int(env.get("SLURM_RESTART_COUNT", "0")),
        }
    return {"scheduler": "local", "job_id": env.get("PROOFGRID_LOCAL_JOB_ID", f"local-{os.getpid()}"),
            "array_index": int(env["PROOFGRID_ARRAY_INDEX"]) if "PROOFGRID_ARRAY_INDEX" in env else None,
            "restart_count": 0}


PR_SET_PDEATHSIG = 1  # linux/prctl.h
GROUP_EXIT_GRACE_S = 15.0  # helpers of a finished trainer (torch's resource tracker) still exiting


def _die_with_parent(parent: int):
    """``preexec_fn`` of the trainer: the kernel SIGKILLs it when the runtime dies, even by SIGKILL
    (torch's spawned ranks in turn get SIGINT from their parent's death), so no trainer outlives
    its runtime. Checks the parent afterwards: it may have died before the prctl."""
    def tie() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return tie


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


def wait_for_group_exit(pgid: int, grace_s: float = GROUP_EXIT_GRACE_S) -> None:
    """Give what the trainer started (its ranks, torch's multiprocessing resource tracker) time to
    finish exiting: a helper still on its way out is not a leftover."""
    deadline = time.monotonic() + grace_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)


def leftovers(roots: JobRoots, block: PortBlock) -> list[dict]:
    """Everything the job left behind; must be empty, and a non-empty list is an incident."""
    found = leftover_processes(roots.job_dir)
    # Only listeners count: a port of the block that someone still *serves* on after the job.
    found += [{"kind": "port", "port": p} for p in listening_ports(range(block.start, block.start + BLOCK_SIZE))]
    if roots.ray_alias.is_symlink() or roots.ray_alias.exists():
        found.append({"kind": "directory", "path": "<RAY_ALIAS>"})
    return found


def run_job(spec: JobSpec) -> dict:
    """Run one job to completion inside its allocation; returns its ``job.json`` record.

    Whatever happens (trainer failure, Ray start failure, no port block, SIGTERM from scancel or a
    requeue, submitit's timeout signal), the job ends with a terminal record, its Ray runtime
    stopped, its alias removed and its cleanup list written.
    """
    started = time.time()
    roots = JobRoots(spec.job_dir)
    base_env = dict(os.environ)
    update_job_record(roots.job_dir, {
        **spec.identity(), **scheduler_identity(), "node": socket.gethostname(),
        "state": "RUNNING", "exit_code": None, "source_commit": spec.source_commit, "roots": roots.as_record(),
        "started_at": started, **runtime_identity(os.getpid()),
    })
    terminated: list[int] = []
    ended_by_slurm: list[int] = []

    identity = scheduler_identity()
    if identity["scheduler"] == "slurm":  # Slurm requeued an earlier run (node failure, preemption)?
        record_scheduler_requeues(roots.job_dir, identity["job_id"], identity["restart_count"])
    proc: subprocess.Popen | None = None  # bound before the handler can run: it reads it

    def on_signal(signum, _frame):
        first = not terminated
        terminated.append(signum)
        if first and identity["scheduler"] == "slurm" and proc is not None and proc.poll() is None:
            if signum == signal.SIGTERM and slurm_job_state(identity["job_id"]) != "RUNNING":
                # scancel, a hard time limit: Slurm kills the task within KillWait, so there is
                # time for the cleanup only, not for a checkpoint (sacct tells how it ended).
                ended_by_slurm.append(signum)
                proc.kill()
                raise KeyboardInterrupt
            # Slurm's warning (time limit, preemption, scancel --signal): the trainer checkpoints at
            # its current step and exits EXIT_CHECKPOINTED; proc.wait() below simply continues.
            proc.send_signal(signal.SIGUSR2)
            return
        if first:  # later signals during teardown must not interrupt the cleanup
            raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGUSR2)}
    exit_code: int | None = None
    failure: str | None = None
    block: PortBlock | None = None
    ray: JobRay | None = None
    cleanup: list[dict] = []
    run_lock: int | None = None
    try:
        check_visible_gpu(spec.gpu_model)  # the profile asked for a GPU model: is it the one we got?
        roots.create()
        run_lock = lock_job_run_dir(roots.job_dir)  # no second trainer in this run directory, ever
        block = claim_port_block()
        env = isolated_env(roots, block.ports, base_env)
        env["PROOFGRID_SOURCE_COMMIT"] = spec.source_commit or ""
        if spec.ray_cpus > 0:
            ray = JobRay(roots, block, spec.ray_cpus, env)
            env["RAY_ADDRESS"] = ray.start()
        argv = trainer_argv(spec, roots)
        write_command_records(spec, argv, env_diff(base_env, env), REPO_ROOT)
        env[INHERITED_FD_ENV] = str(run_lock)  # the trainer holds the lock it inherits (not a record)
        with open(roots.job_dir / "trainer.log", "ab") as log:
            # Own process group (torn down as one); the run lock is inherited, so it stays held
            # while the trainer lives even if this runtime is killed. Started with Slurm's warning
            # signals blocked (the mask survives exec): one arriving while the trainer imports torch
            # is held until its handler is set, never fatal.
            held = signal.pthread_sigmask(signal.SIG_BLOCK, CHECKPOINT_SIGNALS)
            try:
                proc = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=(run_lock,),
                                        preexec_fn=_die_with_parent(os.getpid()))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            record_holder(run_lock, proc.pid)
            exit_code = proc.wait()
        if exit_code != 0:
            failure = death_cause(roots.job_dir, f"the trainer exited with {exit_code}")
    except KeyboardInterrupt:
        failure = f"terminated by signal {terminated[0]}" if terminated else "interrupted"
    except (PreflightError, RuntimeError, OSError) as exc:
        failure = str(exc)
    finally:
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                exit_code = proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                exit_code = proc.wait()
        if proc is not None:
            wait_for_group_exit(proc.pid)
        if ray is not None:
            ray.stop()
        roots.remove_alias()
        if block is not None:
            cleanup = leftovers(roots, block)
            block.release()
        if proc is not None:  # recorded above; now make sure nothing of the trainer outlives the job
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        if run_lock is not None:
            os.close(run_lock)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # Slurm warned the task (time limit, preemption, scancel --signal): requeue it when the trainer
    # stopped at a checkpoint (or had not started yet) and Slurm is not cancelling the task.
    stopped_for_requeue = bool(terminated) and identity["scheduler"] == "slurm" and \
        (exit_code == EXIT_CHECKPOINTED or proc is None)
    requeue_refused = requeue_refusal(identity["job_id"], identity["restart_count"]) if stopped_for_requeue else None
    will_requeue = stopped_for_requeue and requeue_refused is None
    # Warned during the final evaluation, the trainer finishes its run: that is a completed job.
    finished_anyway = bool(terminated) and exit_code == 0 and failure is None
    if will_requeue:
        failure = None
    elif terminated and failure is None and not finished_anyway:
        failure = f"terminated by signal {terminated[0]}"
    if will_requeue:
        state = "REQUEUED"
    elif terminated and not finished_anyway:
        state = "TERMINATED"
    elif failure is None and exit_code == 0:
        state = "COMPLETED"
    else:
        state = "FAILED"
    record = update_job_record(roots.job_dir, {
        "state": state, "runtime_state": state, "exit_code": exit_code, "elapsed_s": round(time.time() - started, 3),
        "ports": block.as_record() if block is not None else None, "cleanup": cleanup,
        "failure": failure,  # None on success: never a stale failure of an earlier attempt
    })
    if terminated and identity["scheduler"] == "slurm" and not ended_by_slurm:  # a warning, not a cancel
        event = {"event": signal_event(terminated[0]), "job_id": identity["job_id"],
                 "restart_count": identity["restart_count"], "node": socket.gethostname(),
                 "at_step": completed_steps(roots.job_dir),
                 "checkpointed": exit_code == EXIT_CHECKPOINTED,
                 "action": "requeued" if will_requeue else "finished its run before stopping" if finished_anyway
                 else (requeue_refused or "stopped")}
        if will_requeue and (refused := requeue(identity["job_id"])):
            event["action"] = f"requeue refused by Slurm: {refused}"
            update_job_record(roots.job_dir, {"state": "TERMINATED", "runtime_state": "TERMINATED",
                                              "failure": f"stopped by signal {terminated[0]}; {event['action']}"})
        record = append_history(roots.job_dir, event)
    if identity["scheduler"] == "slurm":
        keep_scheduler_output(roots.job_dir, identity["job_id"], identity["restart_count"])
    if terminated and not finished_anyway:
        sys.exit(128 + terminated[0])
    if state != "COMPLETED":
        raise JobFailed(f"job {spec.name}: {failure or f'trainer exited with {exit_code}; see trainer.log'}")
    return record


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m launcher.runtime <job_dir>", file=sys.stderr)
        return 2
    spec = JobSpec.from_json((Path(args[0]) / SPEC_FILE).read_text())
    try:
        run_job(spec)
    except JobFailed as exc:
        print(f"proofgrid job: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
