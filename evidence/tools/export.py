"""Tracking exports: a sweep's or a bundle's accepted runs as W&B offline runs or an MLflow file store.

``python -m evidence export --to wandb|mlflow PATH [--out DIR]`` writes, for every accepted run, its
seed, its arm's overrides, its resolved settings (run.json's ``config``) and every step's metrics as
logged, with the initial-checkpoint evaluation at step 0 and the final one at step ``n_updates`` on
the same ``eval/*`` keys (as the trainer's TensorBoard has them). Runs are grouped by arm: a W&B
``group`` per arm; in MLflow a parent run per arm with its seeds' runs nested under it.

Each step carries the time it was trained (``step_times``): the Unix time its metrics line was written, as
proofgrid's trainer records it in run.json (``step_ended_at``); for a run without that record (a trainer that is
not proofgrid's), the steps spread evenly over the job's resource samples (its runtime's first to last), and
the run says so (W&B config / MLflow tag ``step_times``: ``recorded`` or ``estimated``). The final evaluation
is at the job's last sample. W&B takes it as each step's ``_timestamp``, MLflow as each metric's timestamp and
the runs' start and end. MLflow runs carry the bundle's report (``report.md``) and each run's evaluated
responses (``responses/``) as artifacts, and are written into the store's default experiment (renamed to the
experiment's name), so ``mlflow.search_runs()`` finds them without naming one.

Nothing reaches the network and nothing is written outside the output directory: W&B runs in
offline mode with its directories, caches and settings under the output directory, git, code,
requirements, system metrics and error reports off; MLflow writes a file store there with its
telemetry off. ``wandb sync`` or an MLflow server takes the runs later (``ExportResult.take_later``).
The libraries are the optional ``export`` extra; without them the export is one line saying how to
install it.

Held to the audit first, as ``compare`` is: an input read from a bundle (an archive, a bundle directory, a
sweep's built ``bundle/``) whose audit has findings is refused in one line unless ``--force`` (then the
output says so). A project name or a metric key that the tool would refuse or turn into a path (``../x``)
is one line before anything is written, and whatever the library raises while writing is one line too.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import re
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from evidence.dataset import EVAL_FLOAT_COLUMNS, BundleData
from evidence.fileio import environment
from evidence.problems import ExportError
from evidence.statistics import descriptive
from evidence.tables import accepted_runs, flatten
from evidence.tables import arms as arm_order
from evidence.tools.load import ARCHIVE_SUFFIXES, read_evidence
from facts.extras import EXTRAS
from facts.files import (
    BUNDLE_DIR,
    EVAL_RESPONSES_DIR,
    EXPORTS_DIR,
    REPORT_FILE,
    SWEEP_RECORD,
    bundle_payload_dir,
    bundle_run_dir,
    run_dir_of_job,
    sweep_bundle_payload,
    sweep_job_dir,
)
from facts.metrics import STEP_TIMES_FIELD
from study.measure import EVAL_PREFIX

TOOLS = ("wandb", "mlflow")
# Module each tool needs, and the one command that installs both (the pinned `export` extra).
TOOL_MODULES = {"wandb": "wandb", "mlflow": "mlflow"}
INSTALL = EXTRAS["export"].install
DEFAULT_PROJECT = "proofgrid"
INITIAL, FINAL = "initial", "final"
# W&B records the host it runs on; an export runs elsewhere than the training did (and the bundle keeps
# no host name), so the runs name the exporter instead.
EXPORT_HOST = "proofgrid-export"
# MLflow metric keys take letters, digits and ``_ - . space : /`` only: ``eval/pass@1`` becomes ``eval/pass_at_1``.
MLFLOW_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-. :/")
MLFLOW_BATCH = 1000  # log_batch's limit on metrics per call
# A W&B project / MLflow experiment name: W&B refuses / \\ # ? % : and more than 128 characters; neither a path.
PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# A metric key: names separated by '/', each of letters, digits and _ - . @ (the trainer's and the evaluation's
# keys); never '.' or '..', which the tools' stores turn into paths.
METRIC_KEY_PART = re.compile(r"[A-Za-z0-9_@.-]+")
# Where a step's time comes from: run.json's step_ended_at, or spread over the job's resource samples.
RECORDED, ESTIMATED = "recorded", "estimated"
MLFLOW_DEFAULT_EXPERIMENT = "0"  # the file store's default experiment: what mlflow.search_runs() searches
RESPONSES_ARTIFACTS = "responses"


@dataclass
class RunExport:
    """One accepted run as a tracking tool takes it."""

    job: str
    arm: str
    algo: str
    seed: int
    config: dict
    steps: list[dict[str, float]]  # {"step": n, metric: value, ...}, oldest first
    times: dict[int, float] = field(default_factory=dict)  # step -> Unix time it was trained (``step_times``)
    time_source: str = ""  # RECORDED | ESTIMATED | "" (none known: the tools stamp the export's time)


@dataclass
class ExportResult:
    """What was written: the tool, the output directory, the runs (job names) and how to take them later."""

    tool: str
    out: Path
    runs: list[str] = field(default_factory=list)
    arms: list[str] = field(default_factory=list)
    take_later: str = ""
    audit_findings: list[str] = field(default_factory=list)  # exported with --force despite these


# ---- what is exported -------------------------------------------------------------------------------

def _eval_values(entry: dict | None) -> dict[str, float]:
    """An evaluation's numbers on the ``eval/*`` keys (pass@k, truncation, lengths, reward)."""
    return {EVAL_PREFIX + k: float(entry[k]) for k in EVAL_FLOAT_COLUMNS
            if entry is not None and isinstance(entry.get(k), (int, float))}


def run_steps(data: BundleData, arm: str, seed: int) -> list[dict[str, float]]:
    """Every logged step's finite metrics, the initial evaluation merged into step 0 and the final one
    at step ``n_updates`` (after the last update), as the trainer's TensorBoard places them."""
    by_step: dict[int, dict[str, float]] = {}
    for record in data.steps.get((arm, seed), []):
        step = int(record["step"])
        by_step[step] = {k: float(v) for k, v in record.items() if k != "step" and v is not None}
    evals = data.evals.get((arm, seed), {})
    for kind, step in ((INITIAL, 0), (FINAL, data.n_updates)):
        values = _eval_values(evals.get(kind))
        if values:
            by_step.setdefault(step, {}).update(values)
    return [{"step": step, **values} for step, values in sorted(by_step.items())]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def step_times(data: BundleData, arm: str, seed: int) -> tuple[dict[int, float], str]:
    """``({step: Unix time}, source)`` of a run's steps 0..n_updates-1 and its final evaluation (``n_updates``):
    run.json's ``step_ended_at`` (RECORDED), else spread evenly over its job's resource samples (ESTIMATED), else
    nothing; the final evaluation at the job's last resource sample (or the last step's time)."""
    n = data.n_updates
    samples = [float(r["t"]) for r in data.resources.get((arm, seed), []) if isinstance(r, dict) and _number(r.get("t"))]
    recorded = (data.runs.get((arm, seed)) or {}).get(STEP_TIMES_FIELD)
    if isinstance(recorded, list) and len(recorded) >= n > 0 and all(_number(t) for t in recorded[:n]):
        times = {step: float(recorded[step]) for step in range(n)}
        times[n] = max([times[n - 1], *samples[-1:]])
        return times, RECORDED
    if len(samples) >= 2 and n > 0:
        first, last = samples[0], samples[-1]
        return {step: first + (last - first) * (step + 1) / (n + 1) for step in range(n + 1)}, ESTIMATED
    return {}, ""


def runs_of(data: BundleData) -> list[RunExport]:
    """The accepted runs in report order (arm, then seed), each with its config."""
    runs = []
    for arm in arm_order(data):
        algo, overrides = data.arms.get(arm, (data.arm_algo(arm), {}))
        for seed in accepted_runs(data, arm):
            record = data.runs.get((arm, seed), {})
            config = {"arm": arm, "algo": algo, "seed": seed, "overrides": dict(overrides),
                      "workload": data.sweep.get("workload"), "n_updates": data.n_updates,
                      "source_commit": data.sweep.get("source_commit"),
                      "settings": record.get("config", {}) if isinstance(record, dict) else {}}
            times, source = step_times(data, arm, seed)
            if source:
                config["step_times"] = source
            runs.append(RunExport(job=f"{arm}-{seed}", arm=arm, algo=algo, seed=seed, config=config,
                                  steps=run_steps(data, arm, seed), times=times, time_source=source))
    return runs


def sweep_digest(data: BundleData) -> str:
    """Eight hex digits naming the sweep (its plan as recorded): stable run ids across re-exports."""
    return hashlib.sha256(json.dumps(data.sweep, sort_keys=True, default=str).encode()).hexdigest()[:8]


def mlflow_key(key: str) -> str:
    """A metric key MLflow accepts: ``@`` spelled ``_at_`` (``eval/pass@1`` -> ``eval/pass_at_1``), any
    other character it refuses as ``_``."""
    key = key.replace("@", "_at_")
    return "".join(c if c in MLFLOW_KEY_CHARS else "_" for c in key)


# ---- where, and the environment the libraries run in ------------------------------------------------

def default_out(path: Path, tool: str) -> Path:
    """``<sweep>/exports/<tool>`` for a sweep directory; for a bundle directory or archive, the same
    beside it (``<dir holding the bundle>/exports/<tool>``): never inside the sealed bag."""
    base = path if path.is_dir() and (path / SWEEP_RECORD).is_file() else path.resolve().parent
    return base / EXPORTS_DIR / tool


def wandb_environment(out: Path) -> dict[str, str]:
    """Offline, silent, every directory W&B writes under ``out``, no git/code capture, no error reports."""
    return {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_QUIET": "true", "WANDB_DIR": str(out),
            "WANDB_CACHE_DIR": str(out / ".cache"), "WANDB_CONFIG_DIR": str(out / ".config"),
            "WANDB_DATA_DIR": str(out / ".data"), "WANDB_ARTIFACT_DIR": str(out / ".artifacts"),
            "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true", "WANDB_CONSOLE": "off",
            "WANDB_ERROR_REPORTING": "false", "WANDB_PROGRAM": "proofgrid export"}


def mlflow_environment() -> dict[str, str]:
    """MLflow's telemetry off; its file store allowed (MLflow 3 refuses one unless asked: a file store is
    the one format that needs no database and that `mlflow server` or `mlflow migrate-filestore` takes)."""
    return {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "MLFLOW_ALLOW_FILE_STORE": "true"}


def require(tool: str) -> None:
    """One line when the tool's library is not installed (before anything is read or written)."""
    try:
        importlib.import_module(TOOL_MODULES[tool])
    except ModuleNotFoundError:
        raise ExportError(f"export --to {tool} needs the {tool} library, which is not installed: {INSTALL}") from None


# ---- the writers -----------------------------------------------------------------------------------

def write_wandb(runs: list[RunExport], out: Path, project: str, digest: str) -> str:
    """One W&B offline run per accepted run under ``out/wandb/``; returns how to sync them."""
    with environment(wandb_environment(out)):
        import wandb

        settings = wandb.Settings(mode="offline", silent=True, console="off", disable_git=True, save_code=False,
                                  x_disable_stats=True, x_disable_meta=True, x_disable_machine_info=True,
                                  x_save_requirements=False, disable_job_creation=True, host=EXPORT_HOST)
        for run in runs:
            live = wandb.init(project=project, group=run.arm, name=run.job, id=f"{run.job}-{digest}",
                              job_type="train", tags=[run.algo], config=run.config, dir=str(out), settings=settings)
            try:
                for values in run.steps:
                    stamp = {"_timestamp": run.times[values["step"]]} if values["step"] in run.times else {}
                    live.log({**{k: v for k, v in values.items() if k != "step"}, **stamp}, step=values["step"])
            finally:
                live.finish()
    return f"wandb sync {out / 'wandb'}/offline-run-*"


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(round(seconds * 1000))


def write_mlflow(runs: list[RunExport], out: Path, experiment: str, files: ExportFiles) -> str:
    """An MLflow file store at ``out``: its default experiment, named ``experiment``, with a parent run per arm
    and a nested run per seed; each step at its time, the report and the responses as artifacts."""
    with environment(mlflow_environment()):
        from mlflow.entities import Metric, Param, RunStatus, RunTag
        from mlflow.tracking import MlflowClient

        out.rmdir()  # empty (export checked): MLflow's file store makes its default experiment in a new directory
        client = MlflowClient(tracking_uri=out.as_uri())
        experiment_id = MLFLOW_DEFAULT_EXPERIMENT  # created with the store; mlflow.search_runs() searches it
        client.rename_experiment(experiment_id, experiment)
        now = time.time()
        spans: dict[str, list[float]] = {}  # arm -> its runs' first and last times
        for run in runs:
            if run.times:
                spans.setdefault(run.arm, []).extend([min(run.times.values()), max(run.times.values())])
        parents: dict[str, str] = {}
        for run in runs:
            if run.arm not in parents:
                parent = client.create_run(experiment_id, run_name=run.arm, start_time=_ms(min(spans.get(run.arm, [now]))),
                                           tags={"proofgrid.arm": run.arm, "proofgrid.algo": run.algo})
                client.log_batch(parent.info.run_id, params=[
                    Param(k, v) for k, v in flatten({"arm": run.arm, "algo": run.algo,
                                                     "overrides": run.config["overrides"]}).items()])
                if files.report is not None:
                    client.log_artifact(parent.info.run_id, str(files.report))
                parents[run.arm] = parent.info.run_id
            start = min(run.times.values()) if run.times else now
            child = client.create_run(experiment_id, run_name=run.job, start_time=_ms(start), tags={
                "mlflow.parentRunId": parents[run.arm], "proofgrid.arm": run.arm, "proofgrid.algo": run.algo,
                "proofgrid.seed": str(run.seed), "proofgrid.job": run.job})
            run_id = child.info.run_id
            client.log_batch(run_id, params=[Param(k, v) for k, v in flatten(run.config).items()],
                             tags=[RunTag("proofgrid.exported_by", EXPORT_HOST),
                                   RunTag("proofgrid.step_times", run.time_source or "export time")])
            metrics = [Metric(mlflow_key(k), v, _ms(run.times.get(int(values["step"]), now)), int(values["step"]))
                       for values in run.steps for k, v in values.items() if k != "step"]
            for first in range(0, len(metrics), MLFLOW_BATCH):
                client.log_batch(run_id, metrics=metrics[first:first + MLFLOW_BATCH])
            if files.report is not None:
                client.log_artifact(run_id, str(files.report))
            for response_file in files.responses.get(run.job, []):
                client.log_artifact(run_id, str(response_file), RESPONSES_ARTIFACTS)
            end = max(run.times.values()) if run.times else now
            client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED), end_time=_ms(end))
        for arm, run_id in parents.items():
            client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED), end_time=_ms(max(spans.get(arm, [now]))))
    return (f"MLFLOW_ALLOW_FILE_STORE=true mlflow server --backend-store-uri {out.as_uri()} "
            f"(or move it into a database: mlflow migrate-filestore --source {out} --target sqlite:///mlflow.db)")


@dataclass
class ExportFiles:
    """What an MLflow run carries as artifacts: the bundle's report (None for a sweep without a built bundle)
    and each run's evaluated responses (``eval/*.jsonl``), by job."""

    report: Path | None = None
    responses: dict[str, list[Path]] = field(default_factory=dict)


@contextlib.contextmanager
def export_files(path: Path, jobs: list[str]) -> Iterator[ExportFiles]:
    """The report and responses of the input (a sweep directory, a bundle directory or archive), while open:
    an archive's are extracted (its members checked, as the audit does) into a temporary directory."""
    if path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES):
        from evidence.audit.archive import check_members, extracted

        with tarfile.open(path, mode="r:gz") as tar:
            members, root, _ = check_members(tar, path)
            if members is None:  # read_evidence refused it already; nothing to carry
                yield ExportFiles()
                return
            with extracted(tar, members, root) as bag:
                yield _payload_files(bundle_payload_dir(bag), jobs)
        return
    if path.is_dir() and (path / SWEEP_RECORD).is_file() and not sweep_bundle_payload(path).is_dir():
        yield ExportFiles(responses={job: sorted((run_dir_of_job(sweep_job_dir(path, job)) / EVAL_RESPONSES_DIR)
                                                 .glob("*.jsonl")) for job in jobs})
        return
    payload = sweep_bundle_payload(path) if (path / SWEEP_RECORD).is_file() else bundle_payload_dir(path)
    yield _payload_files(payload, jobs)


def _payload_files(payload: Path, jobs: list[str]) -> ExportFiles:
    report = payload / REPORT_FILE
    return ExportFiles(report=report if report.is_file() else None,
                       responses={job: sorted((bundle_run_dir(payload, job) / EVAL_RESPONSES_DIR).glob("*.jsonl"))
                                  for job in jobs})


def metric_key_problem(key: str) -> str | None:
    """Why a metric key cannot be exported (it is no name, or a path), else None."""
    parts = key.split("/")
    if all(METRIC_KEY_PART.fullmatch(p) and p not in (".", "..") for p in parts):
        return None
    return ("a metric key is names of letters, digits, '_', '-', '.' or '@' separated by '/' ('.' and '..' are "
            "no names)")


def check_runs(runs: list[RunExport]) -> None:
    """Every metric key of every run exportable (``metric_key_problem``), else one line naming the first."""
    for run in runs:
        for values in run.steps:
            for key in values:
                problem = metric_key_problem(key) if key != "step" else None
                if problem:
                    shown = key if len(key) <= 60 else key[:57] + "..."
                    raise ExportError(f"run {run.job} logs the metric key {shown!r}, which cannot be exported: "
                                      f"{problem}; nothing was written")


def export(path: str | Path, to: str, out: str | Path | None = None, project: str | None = None,
           last_k: int = descriptive.DEFAULT_LAST_K, force: bool = False) -> ExportResult:
    """Export the accepted runs of a sweep directory, a bundle directory or a bundle archive to ``to``
    (``wandb`` or ``mlflow``) under ``out`` (default ``default_out``). ``project`` is the W&B project or
    the MLflow experiment (default ``proofgrid`` / the input's name). An input whose bundle's audit has
    findings is refused unless ``force`` (``ExportResult.audit_findings`` then holds them). Raises
    ``ExportError`` or ``LoadError`` (one line) before anything is written, and ``ExportError`` (one line)
    for whatever the library refuses while writing."""
    if to not in TOOLS:
        raise ExportError(f"--to {to!r}: choose one of {', '.join(TOOLS)}")
    if project is not None and not PROJECT_NAME.fullmatch(project):
        raise ExportError(f"--project {project!r}: a project (W&B) or experiment (MLflow) name is 1-128 letters, "
                          "digits, '_', '-' or '.', starting with a letter or digit")
    require(to)
    path = Path(path)
    name, data, _ = read_evidence(path, last_k)
    from evidence.audit import audit_input, refused_input

    bundle, findings = audit_input(path)
    if findings and not force:
        raise ExportError(refused_input(str(path), bundle, findings) + " (--force exports it anyway)")
    out = Path(out) if out is not None else default_out(path, to)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} already holds something (an earlier export?): remove it or pass --out")
    resolved, source = out.resolve(), path.resolve()
    sealed = [source] if source.is_dir() and not (source / SWEEP_RECORD).is_file() else [source / BUNDLE_DIR]
    for bag in sealed:  # a bundle's bag: anything written in it breaks its seal
        if resolved == bag or bag in resolved.parents:
            raise ExportError(f"--out {out}: lies in the sealed bundle {bag}; writing there breaks its seal: "
                              "choose a directory outside it")
    runs = runs_of(data)
    if not runs:
        raise ExportError(f"{name}: no accepted run to export")
    check_runs(runs)
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    try:
        if to == "wandb":
            take_later = write_wandb(runs, out, project or DEFAULT_PROJECT, sweep_digest(data))
        else:
            with export_files(path, [r.job for r in runs]) as files:  # a bundle: its sweep's name
                take_later = write_mlflow(runs, out, project or name.split("/")[0], files)
    except Exception as exc:  # noqa: BLE001 - the library's refusal is one line, never its traceback
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ExportError(f"{to} refused the export ({type(exc).__name__}{': ' + first if first else ''}); what "
                          f"it wrote is in {out}: remove it before exporting again") from None
    return ExportResult(tool=to, out=out, runs=[r.job for r in runs], arms=list(dict.fromkeys(r.arm for r in runs)),
                        take_later=take_later, audit_findings=[str(f) for f in findings])
