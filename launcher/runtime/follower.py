"""Live tracking inside a job (``tracking.live``): a follower process beside the trainer that logs each step of
the job's ``run/metrics.jsonl`` to W&B, MLflow or TensorBoard as the line appears, and ends the tracker's run
with the job's status.

Why here, in the job runtime, and not in a trainer: every job's steps are on disk as they happen, in
``metrics.jsonl`` (proofgrid's trainer writes a line per step) or, for a trainer spec's command, in the log its
spec declares (a JSONL file or TensorBoard event files, which ``trainer.external`` converts into ``metrics.jsonl``
only once the trainer has exited: the follower reads the declared log itself, through the spec's map, so those
steps are live too). So one follower serves every trainer, with no tracker code in any of them; and the runtime
already knows what a tracker needs and a trainer does not: the job's identity, its isolation and how the job ended
(``RunEnd.state``). The follower is a process of its own
(``python -m launcher.runtime.follower <job_dir>``), so the tracker's library (W&B's service process, MLflow's
store) never runs in the runtime, and a tracker that fails (no network, a bad URI, a refused key) writes one line
to the job's ``runtime.log`` and stops following: the job never fails for it.

What reaches the tracker: the job's name, arm, algo and seed, its resolved settings (``run/run.json``'s
``config``, or the external trainer's) through the launcher's path-free sanitiser (``launcher.job_records``: machine
paths, user and host names and secrets become placeholders), each step's finite values on keys that are names
(``evidence.tools.export.metric_key_problem``; MLflow's spelling ``mlflow_key``) at the time the line was seen, and at
the end the final evaluation's ``eval/*`` values at ``n_updates``. Nothing else: W&B runs with its git, code,
system metrics, machine metadata and console capture off and its host set to the job's name, its local files
under the job's ``roots/cache/wandb``; MLflow's runs carry no user. W&B is online where the user has network and
credentials (``WANDB_API_KEY`` or ``wandb login``), and honours ``WANDB_MODE=offline`` from the environment.

The protocol with the runtime: it starts the follower after the trainer (rank 0 only) and, once the trainer is
gone, writes ``<job state>\\n`` to the follower's standard input; the follower logs what is left and ends the run
(COMPLETED: finished; REQUEUED: left to the next start of the job, which resumes the same run; anything else:
failed), then exits. A follower that has not exited ``FINISH_TIMEOUT_S`` later is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

from facts import TRAINER_OUTPUT_DIR, run_dir_of_job
from facts.files import EVAL_RECORD, JOB_SPEC, METRICS_LOG, RUN_RECORD
from facts.locks import try_lock
from facts.metrics import EVAL_TAG_KEYS, eval_tag
from facts.states import COMPLETED, FAILED, REQUEUED, RUN_COMPLETED, RUN_FAILED
from facts.trackers import FINISH_TIMEOUT_S, POLL_S
from launcher.directory_locks import INHERITED_FD_ENV
from launcher.isolation import JobRoots
from launcher.job_spec import JobSpec
from launcher.runtime.trainer_processes import die_with_parent

FOLLOWER_MODULE = "launcher.runtime.follower"
WANDB_CACHE = "wandb"  # <job>/roots/cache/wandb: W&B's local files for this job


class LiveTracking:
    """The runtime's handle on a job's follower process."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    @classmethod
    def start(cls, spec: JobSpec, roots: JobRoots, env: dict[str, str], log) -> LiveTracking | None:
        """The follower of ``spec``'s job (None when the job has no live tracking), in the job's environment."""
        if not spec.tracking:
            return None
        child_env = {k: v for k, v in env.items() if k != INHERITED_FD_ENV}
        child_env.update(tracker_environment(spec.tracking, roots))
        proc = subprocess.Popen([sys.executable, "-m", FOLLOWER_MODULE, str(spec.job_dir)], env=child_env,
                                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=die_with_parent(os.getpid()))
        return cls(proc)

    def finish(self, state: str) -> None:
        """Tell the follower how the job ended and wait for it to end the run (killed past the timeout)."""
        with contextlib.suppress(OSError, ValueError):  # it may have stopped on its own (a tracker failure)
            self.proc.stdin.write(state + "\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=FINISH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def tracker_environment(tracking: dict, roots: JobRoots) -> dict[str, str]:
    """What the tracker's library is given beside the job's isolated environment: its local files under the
    job's roots, no telemetry, no git or code capture."""
    from evidence.tools.export import mlflow_environment

    if tracking["live"] == "wandb":
        local = roots.cache / WANDB_CACHE
        return {"WANDB_DIR": str(local), "WANDB_CACHE_DIR": str(local / ".cache"), "WANDB_DATA_DIR": str(local / ".data"),
                "WANDB_ARTIFACT_DIR": str(local / ".artifacts"), "WANDB_SILENT": "true", "WANDB_QUIET": "true",
                "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true", "WANDB_CONSOLE": "off",
                "WANDB_ERROR_REPORTING": "false", "WANDB_PROGRAM": "proofgrid job"}
    if tracking["live"] == "mlflow":
        return mlflow_environment()
    return {}


# ---- the follower process ------------------------------------------------------------------------------


class Tracker:
    """One job's run in a tracker: ``begin`` (with the sanitised settings), ``log`` steps, ``end`` with a state."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec, self.settings = spec, spec.tracking
        self.name = spec.name
        self.tags = {"proofgrid.job": spec.name, "proofgrid.arm": spec.arm_label, "proofgrid.algo": spec.algo,
                     "proofgrid.seed": str(spec.seed), "proofgrid.sweep": Path(spec.sweep_dir).name}

    def begin(self, config: dict) -> None:
        raise NotImplementedError

    def log(self, step: int, values: dict[str, float], at: float) -> None:
        raise NotImplementedError

    def end(self, state: str, at: float) -> None:
        raise NotImplementedError


STORE_LOCK = ".proofgrid-experiments.lock"  # in a local MLflow store: held while an experiment is found or made
STORE_LOCK_WAIT_S = 60


@contextlib.contextmanager
def _store_lock(uri: str):
    """An exclusive lock on a local MLflow store (a ``file:`` URI or a path) while an experiment is looked up and
    made: MLflow's file store checks a name's uniqueness and then writes a new experiment, so two jobs starting
    together each made one named ``tracking.project`` and the second job's run was in neither's search. A server's
    store keeps names unique itself: no lock."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("", "file"):
        yield
        return
    store = Path(urllib.parse.unquote(parsed.path))
    store.mkdir(parents=True, exist_ok=True)
    path, deadline = store / STORE_LOCK, time.monotonic() + STORE_LOCK_WAIT_S
    while (fd := try_lock(path)) is None:  # facts.locks: never through a link; a file system without flock: unguarded
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path.name} in the MLflow store stayed locked for {STORE_LOCK_WAIT_S} s")
        time.sleep(0.05)
    try:
        yield
    finally:
        os.close(fd)


class MlflowTracker(Tracker):
    def begin(self, config: dict) -> None:
        from mlflow.entities import Param, RunStatus
        from mlflow.tracking import MlflowClient

        from evidence.tables import flatten

        self.client = MlflowClient(tracking_uri=self.settings["uri"])
        project = self.settings["project"]
        with _store_lock(self.settings["uri"]):  # the sweep's jobs start together: one experiment of that name
            experiment = self.client.get_experiment_by_name(project)
            if experiment is None:
                try:
                    experiment_id = self.client.create_experiment(project)
                except Exception:  # noqa: BLE001 - another sweep's job created it meanwhile (a tracking server)
                    experiment_id = self.client.get_experiment_by_name(project).experiment_id
            else:
                experiment_id = experiment.experiment_id
        # A requeued job's next start resumes its run: the one tagged with this job of this sweep.
        key = f"{self.spec.sweep_dir}::{self.spec.name}"
        self.run_key = _digest(key)
        found = self.client.search_runs([experiment_id], f"tags.`proofgrid.run_key` = '{self.run_key}'", max_results=1)
        if found:
            self.run_id = found[0].info.run_id
            self.client.update_run(self.run_id, status=RunStatus.to_string(RunStatus.RUNNING))
            return
        run = self.client.create_run(experiment_id, run_name=self.name, tags={**self.tags, "proofgrid.run_key": self.run_key})
        self.run_id = run.info.run_id
        self.client.log_batch(self.run_id, params=[Param(k, str(v)[:6000]) for k, v in flatten(config).items()])

    def log(self, step: int, values: dict[str, float], at: float) -> None:
        from mlflow.entities import Metric

        from evidence.tools.export import mlflow_key

        self.client.log_batch(self.run_id, metrics=[Metric(mlflow_key(k), v, int(at * 1000), step)
                                                    for k, v in values.items()])

    def end(self, state: str, at: float) -> None:
        from mlflow.entities import RunStatus

        if state != REQUEUED:
            status = RunStatus.FINISHED if state == COMPLETED else RunStatus.FAILED
            self.client.set_terminated(self.run_id, RunStatus.to_string(status), end_time=int(at * 1000))


class WandbTracker(Tracker):
    def begin(self, config: dict) -> None:
        import wandb

        settings = wandb.Settings(silent=True, console="off", disable_git=True, save_code=False, x_disable_stats=True,
                                  x_disable_meta=True, x_disable_machine_info=True, x_save_requirements=False,
                                  disable_job_creation=True, host=self.name)
        self.run = wandb.init(project=self.settings["project"], group=self.spec.arm_label, name=self.name,
                              id=f"{self.name}-{_digest(self.spec.sweep_dir)[:8]}", resume="allow", job_type="train",
                              tags=[self.spec.algo], config={**config, **self.tags}, settings=settings,
                              dir=os.environ.get("WANDB_DIR"))

    def log(self, step: int, values: dict[str, float], at: float) -> None:
        self.run.log({**values, "_timestamp": at}, step=step)

    def end(self, state: str, at: float) -> None:
        if state == REQUEUED:
            self.run.mark_preempting()
        self.run.finish(exit_code=0 if state in (COMPLETED, REQUEUED) else 1)


class TensorboardTracker(Tracker):
    """Event files of the job's own under ``<uri>/<job>/``, with its settings as the HParams session."""

    def begin(self, config: dict) -> None:
        from torch.utils.tensorboard import SummaryWriter

        from trainer.metrics_writer import hparam_values, write_hparams_session

        self.directory = Path(self.settings["uri"]) / self.name
        self.directory.mkdir(parents=True, exist_ok=True)
        if not any(self.directory.iterdir()):  # a requeued job's next start goes on in the same session
            write_hparams_session(self.directory, hparam_values({**config, **self.tags}))
        self.writer = SummaryWriter(log_dir=str(self.directory))

    def log(self, step: int, values: dict[str, float], at: float) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step, walltime=at)
        self.writer.flush()

    def end(self, state: str, at: float) -> None:
        from trainer.metrics_writer import write_session_end

        self.writer.close()
        if state != REQUEUED:
            write_session_end(self.directory, RUN_COMPLETED if state == COMPLETED else RUN_FAILED)


TRACKERS = {"mlflow": MlflowTracker, "wandb": WandbTracker, "tensorboard": TensorboardTracker}


def _digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]


class MetricsFollower:
    """The complete lines of a growing JSONL file (``metrics.jsonl``), each once, in order (a torn last line waits);
    ``new_steps``: those of steps after the last one seen."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.seen = path, 0, -1

    def new_records(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.offset:  # rewritten from the start (a resume's truncation)
                    self.offset = 0
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        records = []
        for line in complete.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records

    def new_steps(self) -> list[tuple[int, dict[str, float]]]:
        steps = []
        for record in self.new_records():
            step = record.get("step")
            if isinstance(step, int) and not isinstance(step, bool) and step > self.seen:
                self.seen = step
                steps.append((step, loggable(record)))
        return steps


class TrainerLogFollower:
    """An external trainer's own metrics log as it grows (its spec's ``metrics``: a JSONL file or TensorBoard event
    files under ``run/trainer/``), each step's mapped values on proofgrid's keys: ``trainer.external`` converts
    that log into ``metrics.jsonl`` only when the trainer has exited, so this is what is live."""

    def __init__(self, metrics: dict, trainer_out: Path) -> None:
        self.format, self.path = metrics["format"], trainer_out / metrics["path"]
        self.offset_step, self.step_key = int(metrics.get("step_offset") or 0), metrics.get("step_key")
        self.map = dict(metrics["map"])  # ours -> theirs
        self.theirs = {theirs: ours for ours, theirs in self.map.items()}
        self.lines = MetricsFollower(self.path) if self.format == "jsonl" else None
        self.events = None
        self.seen = -1

    def new_steps(self) -> list[tuple[int, dict[str, float]]]:
        if self.lines is not None:
            records = self.lines.new_records()
            steps = [(record.get(self.step_key), {ours: record.get(theirs) for ours, theirs in self.map.items()})
                     for record in records]
        else:
            if self.events is None:
                from evidence.gates.tensorboard_log import ScalarTail

                self.events = ScalarTail(self.path)
            by_step: dict[int, dict[str, float]] = {}
            for tag, point in self.events.new_points():
                if tag in self.theirs:
                    by_step.setdefault(point.step, {})[self.theirs[tag]] = point.value
            steps = sorted(by_step.items())
        found = []
        for step, values in steps:
            if isinstance(step, int) and not isinstance(step, bool):
                self.seen = max(self.seen, step + self.offset_step)
                found.append((step + self.offset_step, loggable(values)))
        return found


def loggable(record: dict) -> dict[str, float]:
    """A line's values a tracker takes: finite numbers on keys that are names (never paths)."""
    from evidence.tools.export import metric_key_problem

    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
            and abs(v) != float("inf") and metric_key_problem(k) is None}


def sanitised(spec: JobSpec, data: dict) -> dict:
    """``data`` as the tracker may see it: the launcher's path-free sanitiser over every key and string."""
    from facts.repo import REPO_ROOT
    from launcher.job_records import path_free_sanitizer, public_copy

    return public_copy(data, path_free_sanitizer(spec, REPO_ROOT))


def job_config(spec: JobSpec, run_dir: Path) -> dict:
    """What the tracker is told about the job: its identity and resolved settings."""
    config = (spec.external or {}).get("config")
    if config is None:
        try:
            config = json.loads((run_dir / RUN_RECORD).read_text(encoding="utf-8")).get("config")
        except (OSError, ValueError, AttributeError):
            config = None
    identity = {"job": spec.name, "arm": spec.arm_label, "algo": spec.algo, "seed": spec.seed,
                "arm_overrides": dict(spec.arm_overrides), "n_updates": spec.n_updates}
    return {**identity, "settings": config if isinstance(config, dict) else {}}


def final_evaluation(run_dir: Path) -> dict[str, float]:
    """The final checkpoint's evaluation (``eval.json``) on the trainer's TensorBoard tags (``eval/pass@1``, ...)."""
    try:
        final = json.loads((run_dir / EVAL_RECORD).read_text(encoding="utf-8")).get("final") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {eval_tag(k): float(final[k]) for k in EVAL_TAG_KEYS
            if isinstance(final.get(k), (int, float)) and not isinstance(final.get(k), bool)}


def ended_state(timeout: float) -> str | None:
    """The job's state once the runtime has written it to our standard input (None: not yet)."""
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    if not ready:
        return None
    return sys.stdin.readline().strip() or FAILED  # closed without a word: the runtime is gone


def follow(job_dir: Path) -> int:
    spec = JobSpec.from_json((job_dir / JOB_SPEC).read_text(encoding="utf-8"))
    run_dir = run_dir_of_job(job_dir)
    tracker = TRACKERS[spec.tracking["live"]](spec)
    own_log = (spec.external or {}).get("spec", {}).get("metrics")
    follower = TrainerLogFollower(own_log, run_dir / TRAINER_OUTPUT_DIR) if own_log else MetricsFollower(run_dir / METRICS_LOG)
    where = f"tracking.live={spec.tracking['live']}"
    try:
        state = None
        while state is None and not (run_dir / RUN_RECORD).is_file():  # the settings are known once it is written
            state = ended_state(POLL_S)
        tracker.tags = sanitised(spec, tracker.tags)
        tracker.begin(sanitised(spec, job_config(spec, run_dir)))
        while True:
            for step, values in follower.new_steps():
                if values:
                    tracker.log(step, values, time.time())
            if state is not None:
                break
            state = ended_state(POLL_S)
        if state == COMPLETED and (final := final_evaluation(run_dir)):
            tracker.log(spec.n_updates, final, time.time())
        tracker.end(state, time.time())
    except Exception as exc:  # noqa: BLE001 - a tracker's failure is one line in runtime.log, never the job's
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        print(f"proofgrid job: {where}: the tracker failed ({type(exc).__name__}{': ' + first if first else ''}); "
              "the job goes on without it", flush=True)
        return 1
    print(f"proofgrid job: {where}: logged {follower.seen + 1} steps, run ended {state}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {FOLLOWER_MODULE} <job_dir>", file=sys.stderr)
        return 2
    return follow(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
