"""One run of one job inside its allocation (a local process or one Slurm array task), in the order
it happens: begin, start, watch, stop, record.

``start`` creates the job's roots, takes its run lock, claims a port block, starts a job-scoped Ray
when the workload uses one, writes the exact command and starts the trainer in the isolated
environment; ``watch`` waits for it; ``stop`` tears everything down whatever happened (the trainer's
group, Ray, the Ray socket alias, the ports) and lists what the job left behind; ``record`` writes
the terminal ``job.json``. What the scheduler adds at each phase is the back end's ``JobHooks``.

A job of several tasks runs one of these per task (``JobHooks.placement``): rank 0 keeps the job's
records in the job directory as a job of one task does; rank r > 0 keeps its own in
``<job>/ranks/rank<r>/`` (``facts.ranks.rank_record_dir``: its record, trainer log and roots) and
writes into the job's ``run/`` only its step records.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from facts import run_dir_of_job
from facts.certify import PLANNED_RESTART_FIELD
from facts.files import RESOURCE_SAMPLING_FIELD, TRAINER_LOG
from facts.processes import runtime_identity
from facts.ranks import rank_record_dir
from facts.repo import REPO_ROOT, SOURCE_COMMIT_ENV
from facts.states import COMPLETED, FAILED, REQUEUED, RUNNING, TERMINATED
from launcher.errors import JobFailed, PreflightError
from launcher.isolation import JobRoots, env_diff, isolated_env
from launcher.liveness import death_cause
from launcher.locks import INHERITED_FD_ENV, lock_job_run_dir, record_holder
from launcher.ports import PortBlock, claim_port_block
from launcher.ray_runtime import JobRay
from launcher.records import update_job_record, write_command_records
from launcher.runtime.hooks import JobHooks, Reaction, RunEnd
from launcher.runtime.process import die_with_parent, leftovers, wait_for_group_exit
from launcher.runtime.resources import ResourceSampler
from launcher.spec import JobSpec
from trainer.preemption import CHECKPOINT_SIGNALS, EXIT_CHECKPOINTED, EXIT_STOPPED_UNSAVED

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)
TRAINER_STOP_GRACE_S = 20  # a trainer told to stop (SIGTERM to its group) is killed after this


def run_job(spec: JobSpec, hooks: JobHooks | None = None) -> dict:
    """Run one job to completion inside its allocation; returns its ``job.json`` record.

    Whatever happens (trainer failure, Ray start failure, no port block, SIGTERM from scancel or a
    requeue, Slurm's time-limit warning), the job ends with a terminal record, its Ray runtime
    stopped, its alias removed and its cleanup list written. ``hooks``: what the job's scheduler
    adds (default: none, a local job). Exits with 128 + the signal when a stop signal ended it;
    raises ``JobFailed`` when it did not complete.
    """
    run = JobRun(spec, hooks or JobHooks())
    run.begin()
    with run.stop_signals_handled():
        try:
            run.start()
            run.watch()
        except KeyboardInterrupt:  # a stop signal (see on_stop_signal), or Ctrl-C
            run.failure = f"terminated by signal {run.signals[0]}" if run.signals else "interrupted"
        except (RuntimeError, OSError) as exc:  # a refusal (PreflightError, PortLockError), Ray, the disk
            run.failure = str(exc)
        finally:
            run.stop()
    return run.record()


def check_visible_gpu(model: str | None) -> None:
    """Inside the allocation: the GPU the profile asked for is the one we got."""
    if not model:
        return
    try:
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        raise PreflightError(f"the job asked for a {model} GPU but nvidia-smi sees no GPU") from None
    if not any(model.lower() in n.lower() for n in names):
        raise PreflightError(f"the job asked for a {model} GPU but the visible devices are: {', '.join(names)}")


class JobRun:
    """The state of one run as its phases fill it in; ``run_job`` calls them in order."""

    def __init__(self, spec: JobSpec, hooks: JobHooks) -> None:
        self.spec, self.hooks = spec, hooks
        self.placement = hooks.placement()
        # Where this runtime keeps its record, trainer log and roots: the job directory for rank 0.
        self.record_dir = rank_record_dir(spec.job_dir, self.placement.rank)
        self.roots = JobRoots(self.record_dir, run_dir_of_job(spec.job_dir))
        self.base_env = dict(os.environ)
        self.started_at = time.time()
        self.identity = hooks.identity()
        self.signals: list[int] = []  # stop signals received, in order
        self.killed_by_scheduler = False
        self.proc: subprocess.Popen | None = None  # bound before a stop signal can be handled: it reads it
        self.argv: list[str] = []  # the trainer's command and environment, as start made them
        self.env: dict[str, str] = {}
        self.run_lock: int | None = None
        self.block: PortBlock | None = None
        self.ray: JobRay | None = None
        self.exit_code: int | None = None
        self.failure: str | None = None
        self.cleanup: list[dict] = []
        self.sampler: ResourceSampler | None = None
        self.sampling: dict | None = None  # what the sampler recorded, for job.json

    def begin(self) -> None:
        """The RUNNING record: which job, where, started when, by which runtime process."""
        update_job_record(self.record_dir, {
            **self.spec.identity(), **self.identity, "node": socket.gethostname(), "state": RUNNING,
            "exit_code": None, "source_commit": self.spec.source_commit, "roots": self.roots.as_record(),
            "started_at": self.started_at, **runtime_identity(os.getpid()),
        })
        self.hooks.begin(self.record_dir)

    @contextlib.contextmanager
    def stop_signals_handled(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self._on_stop_signal) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_stop_signal(self, signum, _frame) -> None:
        first = not self.signals
        self.signals.append(signum)
        if not first:  # later signals during teardown must not interrupt the cleanup
            return
        if self.proc is not None and self.proc.poll() is None:
            reaction = self.hooks.on_stop_signal(signum)
            if reaction is Reaction.CHECKPOINT:  # the trainer exits EXIT_CHECKPOINTED; watch() goes on
                self.proc.send_signal(signal.SIGUSR2)
                return
            if reaction is Reaction.KILL:
                self.killed_by_scheduler = True
                self.proc.kill()
        raise KeyboardInterrupt

    def start(self) -> None:
        """Roots, run lock, ports, Ray (and the other ranks) and the command records, then the trainer."""
        check_visible_gpu(self.spec.gpu_model)  # the profile asked for a GPU model: is it the one we got?
        self.roots.create()
        # This runtime's process tree, from before Ray and the trainer start until they are gone.
        self.sampler = ResourceSampler(self.record_dir, self.spec.resource_sample_s).start()
        if self.placement.leads:  # no second trainer in this run directory, ever (rank 0's holds it)
            self.run_lock = lock_job_run_dir(self.spec.job_dir)
        self.block = claim_port_block()
        env = isolated_env(self.roots, self.block.ports, self.base_env)
        env.update(self.spec.trainer_env(self.roots))
        env[SOURCE_COMMIT_ENV] = self.spec.source_commit or ""
        services, self.ray = self.hooks.start_services(self.roots, self.block, env, self.spec.ray_cpus)
        env.update(services)
        argv = self.spec.trainer_argv(self.roots.output)
        if self.placement.leads:  # the other ranks run the same command; their env:// values are their records'
            write_command_records(self.spec, argv, env_diff(self.base_env, env), REPO_ROOT,
                                  sbatch=self.hooks.submission_script())
        if self.run_lock is not None:
            env[INHERITED_FD_ENV] = str(self.run_lock)  # the trainer holds the lock it inherits (not a record)
        self.argv, self.env = argv, env
        self.start_trainer()

    def start_trainer(self) -> None:
        """The trainer in the isolated environment ``start`` made (again, for a certificate's planned resume)."""
        argv, env = self.argv, self.env
        with open(self.record_dir / TRAINER_LOG, "ab") as log:
            # Own process group (torn down as one); the run lock is inherited, so it stays held
            # while the trainer lives even if this runtime is killed. Started with the stop signals
            # blocked (the mask survives exec): one arriving while the trainer imports torch is held
            # until its handler is set, never fatal. ``self.proc`` is bound before the mask is
            # restored, so a signal held meanwhile finds the trainer it must reach.
            held = signal.pthread_sigmask(signal.SIG_BLOCK, CHECKPOINT_SIGNALS)
            try:
                self.proc = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True,
                                             pass_fds=() if self.run_lock is None else (self.run_lock,),
                                             preexec_fn=die_with_parent(os.getpid()))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        if self.run_lock is not None:
            record_holder(self.run_lock, self.proc.pid)

    def watch(self) -> None:
        """Wait for the trainer; a non-zero exit is a failure with the cause its logs end with. A certificate's
        resume job (``JobSpec.planned_stop``) whose trainer stopped there with its checkpoint (exit 75, no
        signal) starts a new trainer process once, which resumes from that checkpoint."""
        self.exit_code = self.proc.wait()
        if self.exit_code == EXIT_CHECKPOINTED and not self.signals and self.spec.planned_stop is not None:
            update_job_record(self.record_dir, {PLANNED_RESTART_FIELD: {"exit_code": self.exit_code,
                                                                        "stopped_before_step": self.spec.planned_stop}})
            wait_for_group_exit(self.proc.pid)  # nothing of the first trainer is left when the second starts
            self.start_trainer()
            self.exit_code = self.proc.wait()
        if self.exit_code != 0:
            self.failure = death_cause(self.record_dir, f"the trainer exited with {self.exit_code}")

    def stop(self) -> None:
        """Nothing of the job outlives it: the trainer's group, Ray, the alias, the ports, the lock."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                self.exit_code = proc.wait(timeout=TRAINER_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                self.exit_code = proc.wait()
        if proc is not None:
            wait_for_group_exit(proc.pid)
        if self.ray is not None:
            self.ray.stop()
        self.roots.remove_alias()
        if self.block is not None:
            self.cleanup = leftovers(self.roots, self.block)
            self.block.release()
        if proc is not None:  # recorded above; now make sure nothing of the trainer outlives the job
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self.run_lock is not None:
            os.close(self.run_lock)
        if self.sampler is not None:
            self.sampling = self.sampler.stop()

    def end(self) -> RunEnd:
        """How the run ended. A stop signal with the trainer stopped at a checkpoint (or not started
        yet, or stopped with nothing to resume from: its rerun starts over) is a requeue when the
        scheduler runs the job again; warned during its final evaluation, the trainer finishes its
        run, which is a completed job."""
        stop_signal = self.signals[0] if self.signals else None
        at_checkpoint = stop_signal is not None and (self.exit_code in (EXIT_CHECKPOINTED, EXIT_STOPPED_UNSAVED)
                                                     or self.proc is None)
        refusal = self.hooks.requeue_refusal() if at_checkpoint else None
        requeue = at_checkpoint and refusal is None
        finished_anyway = stop_signal is not None and self.exit_code == 0 and self.failure is None
        failure = self.failure
        if requeue:
            failure = None
        elif stop_signal is not None and failure is None and not finished_anyway:
            failure = f"terminated by signal {stop_signal}"
        if requeue:
            state = REQUEUED
        elif stop_signal is not None and not finished_anyway:
            state = TERMINATED
        elif failure is None and self.exit_code == 0:
            state = COMPLETED
        else:
            state = FAILED
        return RunEnd(state, self.exit_code, failure, stop_signal, self.killed_by_scheduler, finished_anyway, refusal)

    def record(self) -> dict:
        """The terminal ``job.json`` (and the scheduler's part); then the exit the run calls for."""
        end = self.end()
        record = update_job_record(self.record_dir, {
            "state": end.state, "runtime_state": end.state, "exit_code": end.exit_code,
            "elapsed_s": round(time.time() - self.started_at, 3),
            "ports": self.block.as_record() if self.block is not None else None, "cleanup": self.cleanup,
            "failure": end.failure,  # None on success: never a stale failure of an earlier attempt
            RESOURCE_SAMPLING_FIELD: self.sampling,
        })
        record = self.hooks.ended(self.record_dir, end, record)
        if end.stop_signal is not None and not end.finished_anyway:
            sys.exit(128 + end.stop_signal)
        if end.state != COMPLETED:
            raise JobFailed(f"job {self.spec.name}: {end.failure or f'trainer exited with {end.exit_code}; see trainer.log'}")
        return record
