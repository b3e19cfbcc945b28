"""One run of one job inside its allocation (a local process or one Slurm array task), in the order
it happens: begin, start, watch, stop, record.

``start`` creates the job's roots, takes its run lock, claims a port block, starts a job-scoped Ray
when the workload uses one, writes the exact command and starts the trainer in the isolated
environment; ``watch`` waits for it; ``stop`` tears everything down whatever happened (the trainer's
group, Ray, the Ray socket alias, the ports) and lists what the job left behind; ``record`` writes
the terminal ``job.json``. What the scheduler adds at each phase is the back end's ``JobHooks``.

A job of several tasks runs one of these per task (``JobHooks.placement``): rank 0 keeps the job's
records in the job directory as a job of one task does; rank r > 0 keeps its own in
``<job>/ranks/rank<r>/`` (``facts.data_parallel_ranks.rank_record_dir``: its record, trainer log and roots) and
writes into the job's ``run/`` only its step records.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from facts import RUN_RECORD, atomic_write_json, run_dir_of_job
from facts.certify import PLANNED_RESTART_FIELD
from facts.containers import CONTAINER_FIELD, CONTAINER_PREFLIGHT, CONTAINER_RUNTIME_STARTED, IMAGE_DIGEST_ENV
from facts.data_parallel_ranks import rank_record_dir
from facts.files import (
    INITIAL_EVAL_DIR,
    JOB_GUARD_FIELD,
    MACHINE_NAMES,
    RESOURCE_SAMPLING_FIELD,
    RUN_OUTPUTS_FIELD,
    RUNTIME_LOG,
    TRAINER_LOG,
    run_output_digests,
)
from facts.machine import machine_names
from facts.processes import marked_processes, runtime_identity
from facts.repo import REPO_ROOT, SOURCE_COMMIT_ENV
from facts.states import COMPLETED, FAILED, REQUEUED, RUN_COMPLETED, RUNNING, TERMINATED
from launcher.container import INHERITED_LOCK_FD, Contained, check_container_here, container_record
from launcher.directory_locks import INHERITED_FD_ENV, lock_job_run_dir, record_holder
from launcher.errors import JobFailed, PreflightError
from launcher.isolation import JobRoots, env_diff, isolated_env
from launcher.job_records import read_job_record, update_job_record, write_command_records
from launcher.job_spec import JobSpec
from launcher.liveness import death_cause
from launcher.ports import BLOCK_SIZE, DEFAULT_MAX_BLOCKS, PortBlock, claim_port_block, port_base
from launcher.ray_runtime import JobRay
from launcher.runtime.confine import WriteGuard
from launcher.runtime.follower import LiveTracking
from launcher.runtime.resource_sampler import ResourceSampler
from launcher.runtime.runtime_hooks import JobHooks, Reaction, RunEnd
from launcher.runtime.trainer_processes import (
    GROUP_EXIT_GRACE_S,
    JobProcesses,
    die_with_parent,
    leftovers,
    wait_for_group_exit,
)
from trainer.preemption import CHECKPOINT_SIGNALS, EXIT_CHECKPOINTED, EXIT_STOPPED_UNSAVED

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)
TRAINER_STOP_GRACE_S = 20  # a trainer told to stop (SIGTERM to its group) is killed after this
REAP_EVERY_S = 5.0  # how often a runtime waiting for its trainer reaps the orphans it adopted


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


SHM_DIR = Path("/dev/shm")
SHM_LEFT_FIELD = "dev_shm_left"  # job.json: files that appeared in /dev/shm during the job and stayed




def shm_files() -> set[str]:
    """The regular files in ``/dev/shm`` (shared memory a job may create: it persists after the job)."""
    found = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(SHM_DIR):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    found.add(entry.name)
    return found


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


def run_status(run_dir: Path) -> str | None:
    """The status the trainer left in the run's ``run.json`` (None without a readable one): a trainer that exits 0
    finished its run only when it is ``completed`` (a user's code may call ``sys.exit(0)`` anywhere)."""
    try:
        record = json.loads((Path(run_dir) / RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record.get("status") if isinstance(record, dict) else None


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
        self.processes: JobProcesses | None = None  # the job's processes, found by descent (a subreaper)
        self.guard: WriteGuard | None = None  # where the trainer may write (Landlock)
        self.live: LiveTracking | None = None  # tracking.live: the follower logging the job's metrics
        self.image_digest: str | None = None  # the container image's, checked before the job starts
        self.ending: dict | None = None  # how ending the job's processes went, when it took more than one round
        self.shm_before: set[str] | None = None  # the files in /dev/shm when the trainer started
        self.shm_left: list[str] = []  # ...and those there after the job that were not then
        self.outputs: dict[str, str] = {}  # the run's records' digests once nothing of the job runs

    def begin(self) -> None:
        """The RUNNING record: which job, where, started when, by which runtime process."""
        update_job_record(self.record_dir, {
            **self.spec.identity(), **self.identity, "node": socket.gethostname(), "state": RUNNING,
            "exit_code": None, "source_commit": self.spec.source_commit, "roots": self.roots.as_record(),
            "started_at": self.started_at, **runtime_identity(os.getpid()),
        })
        # The user and host names a build elsewhere would not know, for its sanitiser (never bundled).
        atomic_write_json(self.record_dir / MACHINE_NAMES, machine_names(self.base_env))
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
        if self.spec.container is not None:  # the image is the pinned one, and its runtime is here
            self.image_digest = check_container_here(self.spec.container)
        check_visible_gpu(self.spec.gpu_model)  # the profile asked for a GPU model: is it the one we got?
        self.roots.create()
        self.processes = JobProcesses()  # from here every process the job starts stays below this runtime
        # This runtime's process tree, from before Ray and the trainer start until they are gone.
        self.sampler = ResourceSampler(self.record_dir, self.spec.resource_sample_s).start()
        if self.placement.leads:  # no second trainer in this run directory, ever (rank 0's holds it)
            self.run_lock = lock_job_run_dir(self.spec.job_dir)
        self.block = claim_port_block()
        ports, ports_are = self.guarded_ports()
        self.guard = WriteGuard(self.writable_roots(), ports, self.spec.job_ports, ports_are=ports_are)
        guard = {"processes": self.processes.mechanism, **self.guard.record(self.spec.job_dir)}
        if self.spec.container is not None:
            update_job_record(self.record_dir, {CONTAINER_FIELD: container_record(self.spec.container)})
            guard["writes"] = f"{self.spec.container['runtime']} container: {guard['writes']} (applied inside the image)"
        update_job_record(self.record_dir, {JOB_GUARD_FIELD: guard})
        env = isolated_env(self.roots, self.block.ports, self.base_env)
        env.update(self.spec.trainer_env(self.roots))
        env.update(self.spec.run_env())  # its nonce and plan digest, which its trainer records (facts.sweep_plan)
        env[SOURCE_COMMIT_ENV] = self.spec.source_commit or ""
        if self.image_digest is not None:
            env[IMAGE_DIGEST_ENV] = self.image_digest  # the trainer records the image it ran in
        contain = self.contained(env)
        services, self.ray = self.hooks.start_services(
            self.roots, self.block, env, self.spec.ray_cpus, confine=None if contain else self.guard.restrict,
            contain=contain and (lambda argv: contain.wrap(argv, preflight=False)))
        env.update(services)
        argv = self.spec.trainer_argv(self.roots.output)
        if self.spec.container is not None:  # inside the image, after its preflight (launcher.runtime.inside)
            argv = self.contained(env).wrap(argv, preflight=True, lock=self.run_lock is not None)
        if self.placement.leads:  # the other ranks run the same command; their env:// values are their records'
            write_command_records(self.spec, argv, env_diff(self.base_env, env), REPO_ROOT,
                                  sbatch=self.hooks.submission_script())
        if self.run_lock is not None:  # the trainer holds the lock it inherits (not a record); in an image, as fd 3
            env[INHERITED_FD_ENV] = str(INHERITED_LOCK_FD if self.contain_started else self.run_lock)
        self.argv, self.env = argv, env
        self.shm_before = shm_files()
        self.start_trainer()
        if self.placement.leads:
            with open(self.record_dir / RUNTIME_LOG, "ab") as log:
                self.live = LiveTracking.start(self.spec, self.roots, env, log)

    @property
    def contain_started(self) -> bool:
        """The job's commands start a container runtime (Apptainer, Podman), which mounts: Landlock applies inside."""
        return self.spec.container is not None and self.spec.container["runtime"] in CONTAINER_RUNTIME_STARTED

    def contained(self, env: dict[str, str]) -> Contained | None:
        """The job's commands in its image when they start a container runtime (its variables passed in by name)."""
        if not self.contain_started:
            return None
        names = sorted(k for k, v in env_diff(self.base_env, env).items() if v is not None)
        alias = self.roots.ray_alias if self.spec.ray_cpus else None
        return Contained.of(self.spec, self.record_dir, names, alias)

    def guarded_ports(self) -> tuple[range, str]:
        """The TCP ports the guard leaves the job beside the ephemeral range, and what they are: its own port block;
        for a job of several tasks, every block of proofgrid's port range (each task's runtime claims its own block
        on its node, and the ranks meet at rank 0's)."""
        if self.placement.tasks > 1:
            base = port_base()
            return range(base, base + DEFAULT_MAX_BLOCKS * BLOCK_SIZE), "proofgrid's port blocks (the ranks' own)"
        return range(self.block.start, self.block.start + BLOCK_SIZE), "the job's port block"

    def writable_roots(self) -> list[Path]:
        """Where the trainer may write: the job directory (its run, roots and records; a rank's too) and, when
        the job shares the sweep's initial evaluation, the sweep's ``initial_eval/`` (made here: a rule needs it)."""
        roots = [Path(self.spec.job_dir)]
        if self.spec.share_initial_eval:
            shared = Path(self.spec.sweep_dir) / INITIAL_EVAL_DIR
            shared.mkdir(parents=True, exist_ok=True)
            roots.append(shared)
        return roots

    def own_children(self) -> set[int]:
        """The runtime's children a ``Popen`` waits for (never reaped as adopted orphans)."""
        procs = (self.proc, self.ray.proc if self.ray is not None else None,
                 self.live.proc if self.live is not None else None)  # the tracking follower: finished in stop()
        return {p.pid for p in procs if p is not None}

    def wait_trainer(self) -> int:
        """The trainer's exit code, reaping meanwhile the orphans the runtime adopts."""
        while True:
            try:
                return self.proc.wait(timeout=REAP_EVERY_S)
            except subprocess.TimeoutExpired:
                self.processes.reap(self.own_children())

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
            fds = () if self.run_lock is None else (self.run_lock, INHERITED_LOCK_FD) if self.contain_started \
                else (self.run_lock,)
            try:
                self.proc = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=fds,
                                             preexec_fn=self.confined_child())
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        if self.run_lock is not None:
            record_holder(self.run_lock, self.proc.pid)

    def confined_child(self):
        """The trainer's ``preexec_fn``: tied to the runtime's life, then held to the job's directories."""
        tie, guard = die_with_parent(os.getpid()), self.guard
        lock = self.run_lock if self.contain_started else None

        def confine() -> None:
            tie()
            if lock is not None:  # the runtime passes fd 3 on into the image (podman --preserve-fds=1)
                os.dup2(lock, INHERITED_LOCK_FD)
            if guard is not None and not self.contain_started:  # a container runtime mounts: Landlock applies inside
                guard.restrict()
        return confine

    def watch(self) -> None:
        """Wait for the trainer; a non-zero exit is a failure with the cause its logs end with. A certificate's
        resume job (``JobSpec.planned_stop``) whose trainer stopped there with its checkpoint (exit 75, no
        signal) starts a new trainer process once, which resumes from that checkpoint."""
        self.exit_code = self.wait_trainer()
        if self.exit_code == EXIT_CHECKPOINTED and not self.signals and self.spec.planned_stop is not None:
            update_job_record(self.record_dir, {PLANNED_RESTART_FIELD: {"exit_code": self.exit_code,
                                                                        "stopped_before_step": self.spec.planned_stop}})
            wait_for_group_exit(self.proc.pid)  # nothing of the first trainer is left when the second starts
            self.start_trainer()
            self.exit_code = self.wait_trainer()
        if self.exit_code != 0:
            self.failure = death_cause(self.record_dir, f"the trainer exited with {self.exit_code}")
        elif self.placement.rank == 0 and (status := run_status(run_dir_of_job(self.spec.job_dir))) != RUN_COMPLETED:
            self.failure = death_cause(self.record_dir, f"the trainer exited with 0 but its {RUN_RECORD} status is "
                                                        f"{status!r}, not {RUN_COMPLETED!r}: it ended before its run did")

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
        ended = time.monotonic()  # one grace for the trainer's group and what it started outside it (settle below)
        if proc is not None:
            wait_for_group_exit(proc.pid)
        if self.live is not None:  # the trainer is gone: the tracker's run ends with the job's state
            self.live.finish(self.end().state)
        if self.ray is not None:
            self.ray.stop()
        self.roots.remove_alias()
        if self.block is not None:
            if self.processes is not None:  # within the group's grace: a job's end stays under Slurm's KillWait
                self.processes.settle(self.own_children(), max(0.0, GROUP_EXIT_GRACE_S - (time.monotonic() - ended)))
            self.cleanup = leftovers(self.roots, self.block, self.processes)
            self.block.release()
        if proc is not None:  # recorded above; now make sure nothing of the trainer outlives the job
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self.processes is not None:  # nor anything it started, wherever it went: none writes after the end
            self.end_processes()
        if self.placement.leads:
            self.outputs = run_output_digests(run_dir_of_job(self.spec.job_dir))
        if self.shm_before is not None:  # a note, not a leftover: a file there may be another job's of the node
            self.shm_left = sorted(shm_files() - self.shm_before)
        if self.guard is not None:
            self.guard.close()
        if self.run_lock is not None:
            os.close(self.run_lock)
        if self.sampler is not None:
            self.sampling = self.sampler.stop()

    def container_findings(self) -> dict:
        """What the preflight inside the image recorded (``launcher.runtime.inside``), into ``job.json``'s container
        record, and the write guard it applied there; its failure is the job's."""
        path = self.record_dir / CONTAINER_PREFLIGHT
        if self.spec.container is None or not path.is_file():
            return {}
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        if found.get("failure"):  # the trainer never started: this is why the job failed
            self.failure = f"container preflight: {found['failure']}"
        record = read_job_record(self.record_dir)
        guard = {**(record.get(JOB_GUARD_FIELD) or {}),
                 "writes": f"{self.spec.container['runtime']} container: {found.pop('writes', '?')}"}
        return {CONTAINER_FIELD: {**container_record(self.spec.container, self.image_digest), "preflight": found},
                JOB_GUARD_FIELD: guard}
    def end_processes(self) -> None:
        """End the job's tree however it forks, and the marked processes outside it (started through a daemon with
        the job's environment). Each one still alive is a leftover: one the snapshot above missed (a process that
        forks and exits in a loop) joins ``cleanup``; an end that took more than one round is recorded (``ending``)."""
        ending = self.processes.end(self.own_children())
        listed = {item.get("pid") for item in self.cleanup}
        self.cleanup += [{"kind": "process", **item, "found": "while ending the job"} for item in ending["ended"]
                         if item["pid"] not in listed]
        for item in marked_processes(self.roots.job_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(item["pid"], signal.SIGKILL)
            if item["pid"] not in listed:
                self.cleanup.append({**item, "found": "while ending the job"})
        if ending["rounds"] > 1 or not ending["quiet"]:
            self.ending = {k: ending[k] for k in ("rounds", "reaped", "quiet")}

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
        findings = self.container_findings()  # before end(): a failed preflight is the job's failure
        end = self.end()
        record = update_job_record(self.record_dir, {
            "state": end.state, "runtime_state": end.state, "exit_code": end.exit_code,
            "elapsed_s": round(time.time() - self.started_at, 3),
            "ports": self.block.as_record() if self.block is not None else None, "cleanup": self.cleanup,
            "failure": end.failure,  # None on success: never a stale failure of an earlier attempt
            RESOURCE_SAMPLING_FIELD: self.sampling, **({"ending": self.ending} if self.ending else {}),
            **({SHM_LEFT_FIELD: self.shm_left} if self.shm_left else {}),
            **({RUN_OUTPUTS_FIELD: self.outputs} if self.outputs else {}),
            **findings,
        })
        record = self.hooks.ended(self.record_dir, end, record)
        if end.stop_signal is not None and not end.finished_anyway:
            sys.exit(128 + end.stop_signal)
        if end.state != COMPLETED:
            raise JobFailed(f"job {self.spec.name}: {end.failure or f'trainer exited with {end.exit_code}; see trainer.log'}")
        return record
