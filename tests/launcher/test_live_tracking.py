"""Live tracking (``tracking.live``) through ``launch.py``: tiny local sweeps whose job runtimes' followers log each
step to MLflow (a local file store), W&B (offline mode: no network here) and TensorBoard while the jobs run, read
back with each tool's own reader and compared with the job's files read here; a tracker that fails is one line in
the job's runtime.log and the job is accepted all the same. Then ``python -m evidence export`` of the MLflow sweep:
the exported steps carry the times the trainer recorded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from facts.metrics import eval_tag
from tests.no_network import wandb_records
from tests.sweeps import REPO, launch

pytestmark = pytest.mark.slow

N_UPDATES = 2
TINY = (f"workload.n_updates={N_UPDATES}", "workload.checkpoint_every=2", "workload.eval.n_prompts=4", "workload.eval.k=2")


def launched(sweep_dir: Path, *args: str, env: dict | None = None) -> Path:
    proc = launch(sweep_dir, *TINY, *args, env={"OMP_NUM_THREADS": "1", **(env or {})})  # a later n_updates wins
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sweep_dir


@pytest.fixture(scope="module")
def mlflow_sweep(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("live-mlflow")
    store = root / "mlruns"
    return launched(root / "sweep", "algo=grpo,rpp", "seed=5", "tracking.live=mlflow", f"tracking.uri={store}",
                    "tracking.project=live"), store


def steps_of(job: Path) -> list[dict]:
    return [json.loads(line) for line in (job / "run" / "metrics.jsonl").read_text().splitlines()]


def final_eval(job: Path) -> dict:
    return json.loads((job / "run" / "eval.json").read_text())["final"]


def machine_strings(sweep: Path) -> list[str]:
    return [str(sweep), str(REPO), os.path.expanduser("~") + "/", str(Path(os.environ.get("TMPDIR", "/tmp")))]


def test_mlflow_gets_every_step_while_the_job_runs_with_the_job_s_status_and_no_machine_path(mlflow_sweep, monkeypatch):
    sweep, store = mlflow_sweep
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("live")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["grpo-5", "rpp-5"]
    for job, run in runs.items():
        job_dir = sweep / "jobs" / job
        record = json.loads((job_dir / "job.json").read_text())
        spec = json.loads((job_dir / "spec.json").read_text())
        assert spec["tracking"] == {"live": "mlflow", "uri": store.resolve().as_uri(), "project": "live"}
        assert run.info.status == "FINISHED" and record["state"] == "COMPLETED"
        assert run.data.tags["proofgrid.arm"] == job.split("-")[0] and run.data.tags["proofgrid.seed"] == "5"
        steps = steps_of(job_dir)
        losses = sorted(client.get_metric_history(run.info.run_id, "train/loss"), key=lambda m: m.step)
        assert [(m.step, m.value) for m in losses] == [(r["step"], r["train/loss"]) for r in steps]
        # Logged while the job ran: each step's time lies in the job's run, in step order.
        started, ended = record["started_at"] * 1000, (record["started_at"] + record["elapsed_s"]) * 1000
        stamps = [m.timestamp for m in losses]
        assert stamps == sorted(stamps) and started <= stamps[0] and stamps[-1] <= ended
        (final,) = client.get_metric_history(run.info.run_id, "eval/pass_at_1")
        assert (final.step, final.value) == (N_UPDATES, final_eval(job_dir)["pass@1"])
        params = run.data.params
        assert params["seed"] == "5" and params["settings.workload.n_updates"] == str(N_UPDATES)
        texts = [*params.values(), *run.data.tags.values()]
        for machine in machine_strings(sweep):
            assert not any(machine in text for text in texts), machine
        log = (job_dir / "runtime.log").read_text()
        assert f"tracking.live=mlflow: logged {N_UPDATES} steps, run ended COMPLETED" in log


def test_the_export_of_a_real_sweep_stamps_each_step_with_the_time_the_trainer_recorded(mlflow_sweep, tmp_path,
                                                                                         monkeypatch):
    import subprocess
    import sys

    sweep, _ = mlflow_sweep
    out = tmp_path / "export"
    done = subprocess.run([sys.executable, "-m", "evidence", "export", "--to", "mlflow", str(sweep), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    import mlflow

    mlflow.set_tracking_uri(out.as_uri())
    runs = {r.info.run_name: r for r in mlflow.search_runs(output_format="list")}
    client = mlflow.MlflowClient(tracking_uri=out.as_uri())
    for job in ("grpo-5", "rpp-5"):
        recorded = json.loads((sweep / "jobs" / job / "run" / "run.json").read_text())["step_ended_at"]
        record = json.loads((sweep / "jobs" / job / "job.json").read_text())
        assert len(recorded) == N_UPDATES and recorded == sorted(recorded)
        assert record["started_at"] < recorded[0] and recorded[-1] < record["started_at"] + record["elapsed_s"]
        run = runs[job]
        assert run.data.tags["proofgrid.step_times"] == "recorded"
        losses = sorted(client.get_metric_history(run.info.run_id, "train/loss"), key=lambda m: m.step)
        assert [m.timestamp for m in losses] == [round(t * 1000) for t in recorded]


def test_wandb_offline_gets_every_step_of_the_job(tmp_path):
    sweep = launched(tmp_path / "sweep", "algo=grpo", "seed=5", "tracking.live=wandb", "tracking.project=live",
                     env={"WANDB_MODE": "offline"})
    job = sweep / "jobs" / "grpo-5"
    (run_file,) = (job / "roots" / "cache" / "wandb").glob("wandb/offline-run-*/run-*.wandb")
    records = wandb_records(run_file)
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["display_name"] == "grpo-5" and run["run_group"] == "grpo" and run["project"] == "live"
    assert run["host"] == "grpo-5"  # the job's name, never the machine's
    history = {r["history"]["step"].get("num", 0): r["history"]["item"] for r in records if r["type"] == "history"}
    steps = steps_of(job)
    assert sorted(history) == [r["step"] for r in steps] + [N_UPDATES]
    for r in steps:
        assert history[r["step"]]["train/loss"] == r["train/loss"]
    assert history[N_UPDATES]["eval/pass@1"] == final_eval(job)["pass@1"]
    text = json.dumps(records)
    for machine in machine_strings(sweep):
        assert machine not in text, machine


def test_tensorboard_gets_every_step_and_the_hparams_session_ends_with_the_job_s_status(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, metadata

    board = tmp_path / "board"
    sweep = launched(tmp_path / "sweep", "algo=grpo", "seed=5", "tracking.live=tensorboard", f"tracking.uri={board}")
    job = sweep / "jobs" / "grpo-5"
    accumulator = EventAccumulator(str(board / "grpo-5"), size_guidance={"scalars": 0})
    accumulator.Reload()
    assert [(e.step, e.value) for e in accumulator.Scalars("train/loss")] == pytest.approx(
        [(r["step"], r["train/loss"]) for r in steps_of(job)], rel=1e-6)  # float32 as TensorBoard stores it
    assert accumulator.Scalars(eval_tag("pass@1"))[-1].step == N_UPDATES
    content = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    assert api_pb2.Status.Name(end.status) == "STATUS_SUCCESS"
    assert start.hparams["proofgrid.job"].string_value == "grpo-5"


def test_a_tracker_that_fails_is_one_line_in_runtime_log_and_the_job_is_accepted(tmp_path):
    sweep = launched(tmp_path / "sweep", "algo=grpo", "seed=5", "tracking.live=mlflow", "tracking.uri=nosuchscheme://x")
    job = sweep / "jobs" / "grpo-5"
    assert json.loads((job / "job.json").read_text())["state"] == "COMPLETED"
    lines = [line for line in (job / "runtime.log").read_text().splitlines() if "tracking.live=mlflow" in line]
    assert len(lines) == 1 and "the tracker failed (" in lines[0] and "the job goes on without it" in lines[0]
    assert (sweep / "bundle.tar.gz").is_file()
    import csv

    with open(sweep / "bundle" / "data" / "index.csv", newline="") as f:
        (row,) = csv.DictReader(f)
    assert row["job"] == "grpo-5" and row["accepted"] == "yes"


def test_an_external_trainer_s_own_log_is_followed_while_it_runs(tmp_path):
    """trainer=command (examples/trainers/reinforce.py, a JSONL log): the steps reach TensorBoard from the script's
    own log as it writes it, before trainer.external converts that log into metrics.jsonl at the script's exit."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = tmp_path / "board"
    sweep = launched(tmp_path / "sweep", "trainer=command", "algo=grpo", "seed=5", "workload.n_updates=4",
                     "tracking.live=tensorboard", f"tracking.uri={board}")
    job = sweep / "jobs" / "reinforce-command-5"  # the arm's label: the spec's declared algorithm and the trainer
    accumulator = EventAccumulator(str(board / job.name), size_guidance={"scalars": 0})
    accumulator.Reload()
    losses = accumulator.Scalars("train/loss")
    assert [(e.step, e.value) for e in losses] == pytest.approx(
        [(r["step"], r["train/loss"]) for r in steps_of(job)], rel=1e-6)
    converted_at = (job / "run" / "metrics.jsonl").stat().st_mtime
    assert losses[0].wall_time < converted_at  # seen while the script ran, not from the conversion
