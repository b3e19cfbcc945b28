"""Tracking exports: a sweep's or a bundle's accepted runs as W&B offline runs or an MLflow file store.

``python -m evidence export --to wandb|mlflow PATH [--out DIR]`` writes, for every accepted run, its
seed, its arm's overrides, its resolved settings (run.json's ``config``) and every step's metrics as
logged, with the initial-checkpoint evaluation at step 0 and the final one at step ``n_updates`` on
the same ``eval/*`` keys (as the trainer's TensorBoard has them). Runs are grouped by arm: a W&B
``group`` per arm; in MLflow a parent run per arm with its seeds' runs nested under it.

Nothing reaches the network and nothing is written outside the output directory: W&B runs in
offline mode with its directories, caches and settings under the output directory, git, code,
requirements, system metrics and error reports off; MLflow writes a file store there with its
telemetry off. ``wandb sync`` or an MLflow server takes the runs later (``ExportResult.take_later``).
The libraries are the optional ``export`` extra; without them the export is one line saying how to
install it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from evidence import stats
from evidence.dataset import EVAL_FLOAT_COLUMNS, BundleData
from evidence.fileio import environment
from evidence.measures import EVAL_PREFIX
from evidence.problems import ExportError
from evidence.results import read_evidence
from evidence.tables import accepted_runs, flatten
from evidence.tables import arms as arm_order
from facts.files import BUNDLE_DIR, EXPORTS_DIR, SWEEP_RECORD

TOOLS = ("wandb", "mlflow")
# Module each tool needs, and the one command that installs both (the pinned `export` extra).
TOOL_MODULES = {"wandb": "wandb", "mlflow": "mlflow"}
INSTALL = 'pip install -e ".[export]" (in a checkout: make export)'
DEFAULT_PROJECT = "proofgrid"
INITIAL, FINAL = "initial", "final"
# W&B records the host it runs on; an export runs elsewhere than the training did (and the bundle keeps
# no host name), so the runs name the exporter instead.
EXPORT_HOST = "proofgrid-export"
# MLflow metric keys take letters, digits and ``_ - . space : /`` only: ``eval/pass@1`` becomes ``eval/pass_at_1``.
MLFLOW_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-. :/")
MLFLOW_BATCH = 1000  # log_batch's limit on metrics per call


@dataclass
class RunExport:
    """One accepted run as a tracking tool takes it."""

    job: str
    arm: str
    algo: str
    seed: int
    config: dict
    steps: list[dict[str, float]]  # {"step": n, metric: value, ...}, oldest first


@dataclass
class ExportResult:
    """What was written: the tool, the output directory, the runs (job names) and how to take them later."""

    tool: str
    out: Path
    runs: list[str] = field(default_factory=list)
    arms: list[str] = field(default_factory=list)
    take_later: str = ""


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
            runs.append(RunExport(job=f"{arm}-{seed}", arm=arm, algo=algo, seed=seed, config=config,
                                  steps=run_steps(data, arm, seed)))
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
                    live.log({k: v for k, v in values.items() if k != "step"}, step=values["step"])
            finally:
                live.finish()
    return f"wandb sync {out / 'wandb'}/offline-run-*"


def write_mlflow(runs: list[RunExport], out: Path, experiment: str) -> str:
    """An MLflow file store at ``out``: one experiment, a parent run per arm, a nested run per seed."""
    with environment(mlflow_environment()):
        from mlflow.entities import Metric, Param, RunStatus, RunTag
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=out.as_uri())
        experiment_id = client.create_experiment(experiment)
        parents: dict[str, str] = {}
        now = int(time.time() * 1000)
        for run in runs:
            if run.arm not in parents:
                parent = client.create_run(experiment_id, run_name=run.arm, tags={
                    "proofgrid.arm": run.arm, "proofgrid.algo": run.algo})
                client.log_batch(parent.info.run_id, params=[
                    Param(k, v) for k, v in flatten({"arm": run.arm, "algo": run.algo,
                                                     "overrides": run.config["overrides"]}).items()])
                parents[run.arm] = parent.info.run_id
            child = client.create_run(experiment_id, run_name=run.job, tags={
                "mlflow.parentRunId": parents[run.arm], "proofgrid.arm": run.arm, "proofgrid.algo": run.algo,
                "proofgrid.seed": str(run.seed), "proofgrid.job": run.job})
            run_id = child.info.run_id
            client.log_batch(run_id, params=[Param(k, v) for k, v in flatten(run.config).items()],
                             tags=[RunTag("proofgrid.exported_by", EXPORT_HOST)])
            metrics = [Metric(mlflow_key(k), v, now, int(values["step"]))
                       for values in run.steps for k, v in values.items() if k != "step"]
            for start in range(0, len(metrics), MLFLOW_BATCH):
                client.log_batch(run_id, metrics=metrics[start:start + MLFLOW_BATCH])
            client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
        for run_id in parents.values():
            client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
    return (f"MLFLOW_ALLOW_FILE_STORE=true mlflow server --backend-store-uri {out.as_uri()} "
            f"(or move it into a database: mlflow migrate-filestore --source {out} --target sqlite:///mlflow.db)")


def export(path: str | Path, to: str, out: str | Path | None = None, project: str | None = None,
           last_k: int = stats.DEFAULT_LAST_K) -> ExportResult:
    """Export the accepted runs of a sweep directory, a bundle directory or a bundle archive to ``to``
    (``wandb`` or ``mlflow``) under ``out`` (default ``default_out``). ``project`` is the W&B project or
    the MLflow experiment (default ``proofgrid`` / the input's name). Raises ``ExportError`` or
    ``LoadError`` (one line) before anything is written."""
    if to not in TOOLS:
        raise ExportError(f"--to {to!r}: choose one of {', '.join(TOOLS)}")
    require(to)
    path = Path(path)
    name, data, _ = read_evidence(path, last_k)
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
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    if to == "wandb":
        take_later = write_wandb(runs, out, project or DEFAULT_PROJECT, sweep_digest(data))
    else:
        take_later = write_mlflow(runs, out, project or name.split("/")[0])  # a bundle: its sweep's name
    return ExportResult(tool=to, out=out, runs=[r.job for r in runs], arms=list(dict.fromkeys(r.arm for r in runs)),
                        take_later=take_later)
