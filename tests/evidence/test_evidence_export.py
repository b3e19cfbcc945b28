"""``python -m evidence export --to wandb|mlflow``: real W&B offline runs and a real MLflow file store,
written with no network (in a network namespace of its own when the machine allows one) and read back
with the libraries' own readers: ``wandb leet inspect --json`` (W&B's reader of a .wandb transaction log)
and ``mlflow.tracking.MlflowClient``; compared with the job files read here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sweep_factory import make_sweep

from evidence import build_bundle

REPO = Path(__file__).resolve().parents[2]
N_STEPS = 6
pytestmark = pytest.mark.slow  # each export starts the tool's library (W&B's core process, MLflow): seconds


def no_network_prefix() -> list[str]:
    """``unshare -n`` (a network namespace with no interface up) where this machine allows it: the export
    then cannot reach any address, so passing proves it needs none."""
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        if shutil.which("unshare") and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    return []


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """Two arms x two seeds, grpo-2 rejected (a non-finite gradient norm), built: bundle and archive."""
    sweep = make_sweep(tmp_path_factory.mktemp("export"), algos=("grpo", "rpp"), seeds=(1, 2), n_steps=N_STEPS)
    log = sweep / "jobs" / "grpo-2" / "run" / "metrics.jsonl"
    log.write_text(log.read_text().replace('"train/grad_norm": ', '"train/grad_norm": Infinity, "z": ', 1))
    build_bundle(sweep, figures=False)
    return sweep


def run_export(tmp_path: Path, *args) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """The CLI with an empty HOME and TMPDIR of its own, so a write outside the output dir shows."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir(parents=True)
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_", "XDG_"))}
    env.update(HOME=str(home), TMPDIR=str(tmp))
    result = subprocess.run([*no_network_prefix(), sys.executable, "-m", "evidence", "export", *map(str, args)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return result, home, tmp


def logged(sweep: Path, job: str) -> list[dict]:
    return [json.loads(line) for line in (sweep / "jobs" / job / "run" / "metrics.jsonl").read_text().splitlines()]


def evaluation(sweep: Path, job: str, kind: str) -> dict:
    return json.loads((sweep / "jobs" / job / "run" / "eval.json").read_text())[kind]


def run_config(sweep: Path, job: str) -> dict:
    return json.loads((sweep / "jobs" / job / "run" / "run.json").read_text())["config"]


def wandb_records(run_file: Path) -> list[dict]:
    """Every record of a .wandb transaction log, read by W&B's own reader."""
    wandb = Path(sys.executable).with_name("wandb")
    out = subprocess.run([str(wandb), "leet", "inspect", "--json", str(run_file)], capture_output=True, text=True,
                         timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def test_wandb_export_writes_one_offline_run_per_accepted_run_grouped_by_arm_with_every_step(sweep, tmp_path):
    result, home, tmp = run_export(tmp_path, "--to", "wandb", sweep / "bundle.tar.gz")
    assert result.returncode == 0, result.stderr
    out = sweep / "exports" / "wandb"  # the default: beside the bundle, in its sweep directory
    assert result.stdout.splitlines() == [
        f"exported 3 W&B offline runs (2 arm(s): grpo, rpp) to {out}",
        f"take them later: wandb sync {out / 'wandb'}/offline-run-*"]
    assert result.stderr == ""
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []  # nothing outside the output dir
    run_files = sorted(out.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(run_files) == 3
    runs = {}
    for run_file in run_files:
        records = wandb_records(run_file)
        (run,) = [r["run"] for r in records if r["type"] == "run"]
        history = {r["history"]["step"].get("num", 0): r["history"]["item"] for r in records if r["type"] == "history"}
        runs[run["display_name"]] = (run, history)
    assert sorted(runs) == ["grpo-1", "rpp-1", "rpp-2"]  # the rejected grpo-2 is not exported
    for job, (run, history) in runs.items():
        arm, seed = job.rsplit("-", 1)
        assert run["run_group"] == arm and run["project"] == "proofgrid" and run["host"] == "proofgrid-export"
        config = run["config"]["update"]
        assert config["seed"] == int(seed) and config["arm"] == arm and config["overrides"] == {"algo": arm}
        assert config["settings"] == run_config(sweep, job) and config["workload"] == "toy"
        steps = logged(sweep, job)
        assert sorted(history) == [r["step"] for r in steps] + [N_STEPS]  # every step, then the final eval
        for record in steps:
            assert history[record["step"]]["train/loss"] == record["train/loss"]
            assert history[record["step"]]["rollout/raw_reward"] == record["rollout/raw_reward"]
        assert history[0]["eval/pass@1"] == evaluation(sweep, job, "initial")["pass@1"]
        assert history[N_STEPS]["eval/pass@1"] == evaluation(sweep, job, "final")["pass@1"]
        assert set(history[N_STEPS]) - {"_runtime", "_step", "_timestamp"} == {
            "eval/pass@1", "eval/pass@2", "eval/pass@4", "eval/truncation", "eval/mean_length", "eval/mean_reward"}

    again, _, _ = run_export(tmp_path / "again", "--to", "wandb", sweep / "bundle.tar.gz")
    assert again.returncode == 2 and again.stderr.count("\n") == 1
    assert f"{out} already holds something (an earlier export?): remove it or pass --out" in again.stderr


def test_mlflow_export_writes_a_file_store_with_a_parent_run_per_arm_and_every_step(sweep, tmp_path, monkeypatch):
    store = tmp_path / "store"
    result, home, tmp = run_export(tmp_path, "--to", "mlflow", sweep, "--out", store, "--project", "study")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"exported 3 runs in an MLflow file store (2 arm(s): grpo, rpp) to {store}"
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 opens a file store only when asked
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("study")
    runs = client.search_runs([experiment.experiment_id])
    by_name = {r.info.run_name: r for r in runs}
    assert sorted(by_name) == ["grpo", "grpo-1", "rpp", "rpp-1", "rpp-2"]
    for job in ("grpo-1", "rpp-1", "rpp-2"):
        arm, seed = job.rsplit("-", 1)
        run = by_name[job]
        assert run.data.tags["mlflow.parentRunId"] == by_name[arm].info.run_id
        assert run.info.status == "FINISHED"
        params = run.data.params
        assert params["seed"] == seed and params["arm"] == arm and params["overrides.algo"] == arm
        assert params["settings.lr"] == json.dumps(run_config(sweep, job)["lr"])
        losses = client.get_metric_history(run.info.run_id, "train/loss")
        assert [(m.step, m.value) for m in sorted(losses, key=lambda m: m.step)] == [
            (r["step"], r["train/loss"]) for r in logged(sweep, job)]
        passes = sorted(client.get_metric_history(run.info.run_id, "eval/pass_at_1"), key=lambda m: m.step)
        assert [(m.step, m.value) for m in passes] == [(0, evaluation(sweep, job, "initial")["pass@1"]),
                                                      (N_STEPS, evaluation(sweep, job, "final")["pass@1"])]
    assert by_name["rpp"].data.params["overrides.algo"] == "rpp"


def test_export_refuses_an_unknown_tool_in_one_line(sweep, tmp_path):
    result, _, _ = run_export(tmp_path, "--to", "tensorboard", sweep)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "argument --to: invalid choice: 'tensorboard'" in result.stderr


@pytest.mark.parametrize(("given", "out"), [("bundle", "bundle/exports"), ("sweep", "bundle/data/w"),
                                           ("bundle", "bundle/data/runs/x")])
def test_export_refuses_an_out_in_the_sealed_bundle_in_one_line_and_writes_nothing(sweep, tmp_path, given, out):
    before = sorted(p.relative_to(sweep) for p in (sweep / "bundle").rglob("*"))
    source = sweep / "bundle" if given == "bundle" else sweep
    result, _, _ = run_export(tmp_path, "--to", "wandb", source, "--out", sweep / out)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"lies in the sealed bundle {sweep / 'bundle'}; writing there breaks its seal" in result.stderr
    assert sorted(p.relative_to(sweep) for p in (sweep / "bundle").rglob("*")) == before
