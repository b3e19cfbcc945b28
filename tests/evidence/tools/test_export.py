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

from benchmarks.synthetic_sweep import make_sweep
from evidence import build_bundle
from facts.repo import REPO_ROOT
from tests.no_network import no_network_prefix, wandb_records

REPO = REPO_ROOT
N_STEPS = 6
pytestmark = pytest.mark.slow  # each export starts the tool's library (W&B's core process, MLflow): seconds


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """Two arms x two seeds, grpo-2 rejected (a non-finite gradient norm), built: bundle and archive."""
    sweep = make_sweep(tmp_path_factory.mktemp("export"), algos=("grpo", "rpp"), seeds=(1, 2), n_steps=N_STEPS)
    log = sweep / "jobs" / "grpo-2" / "run" / "metrics.jsonl"
    log.write_text(log.read_text().replace('"train/grad_norm": ', '"train/grad_norm": Infinity, "z": ', 1))
    record = sweep / "jobs" / "rpp-1" / "run" / "run.json"  # as proofgrid's trainer records its steps' times
    record.write_text(json.dumps({**json.loads(record.read_text()), "step_ended_at": RECORDED_TIMES}))
    build_bundle(sweep, figures=False)
    return sweep


RECORDED_TIMES = [1768471200.25 + 10 * step for step in range(N_STEPS)]


def expected_times(sweep: Path, job: str) -> dict[int, float]:
    """Each step's time and the final evaluation's (at N_STEPS), from the job's own records read here: run.json's
    step_ended_at, else the steps spread evenly over its resource samples; the final one at the last sample."""
    samples = [json.loads(line)["t"] for line in (sweep / "jobs" / job / "resources.jsonl").read_text().splitlines()]
    recorded = json.loads((sweep / "jobs" / job / "run" / "run.json").read_text()).get("step_ended_at")
    if recorded:
        return {**dict(enumerate(recorded)), N_STEPS: max(recorded[-1], samples[-1])}
    return {k: samples[0] + (samples[-1] - samples[0]) * (k + 1) / (N_STEPS + 1) for k in range(N_STEPS + 1)}


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
        times = expected_times(sweep, job)  # the training's times, not the export's
        assert {step: item["_timestamp"] for step, item in history.items()} == pytest.approx(times, abs=1e-6)
        assert config["step_times"] == ("recorded" if job == "rpp-1" else "estimated")
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
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(store.as_uri())
    runs = mlflow.search_runs(output_format="list")  # no experiment named: the store's default one
    by_name = {r.info.run_name: r for r in runs}
    assert sorted(by_name) == ["grpo", "grpo-1", "rpp", "rpp-1", "rpp-2"]
    client = MlflowClient(tracking_uri=store.as_uri())
    assert {r.info.experiment_id for r in runs} == {client.get_experiment_by_name("study").experiment_id}
    report = (sweep / "bundle" / "data" / "report.md").read_bytes()
    for arm in ("grpo", "rpp"):  # the report, as sealed, on each arm's run
        assert Path(mlflow.artifacts.download_artifacts(run_id=by_name[arm].info.run_id, artifact_path="report.md",
                                                        dst_path=str(tmp_path / "dl" / arm))).read_bytes() == report
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
        times = expected_times(sweep, job)  # each metric at its step's training time, in ms
        assert {m.step: m.timestamp for m in losses} == {k: round(times[k] * 1000) for k in range(N_STEPS)}
        assert (run.info.start_time, run.info.end_time) == (round(min(times.values()) * 1000),
                                                            round(max(times.values()) * 1000))
        assert run.data.tags["proofgrid.step_times"] == ("recorded" if job == "rpp-1" else "estimated")
        artifacts = {f.path for f in client.list_artifacts(run.info.run_id, "responses")}
        assert artifacts == {f"responses/{p.name}" for p in (sweep / "bundle" / "data" / "runs" / job / "eval").glob("*.jsonl")}
        final = Path(client.download_artifacts(run.info.run_id, "responses/final.jsonl", str(tmp_path / "dl" / job)))
        assert final.read_bytes() == (sweep / "bundle" / "data" / "runs" / job / "eval" / "final.jsonl").read_bytes()
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


@pytest.mark.parametrize("project", ["../x", "a/b", "x:y", "#1", "", "p" * 129])
@pytest.mark.parametrize("tool", ["wandb", "mlflow"])
def test_a_project_name_the_tools_would_refuse_or_make_a_path_is_one_line_and_nothing_is_written(sweep, tmp_path,
                                                                                                  project, tool):
    out = tmp_path / "out"
    result, _, _ = run_export(tmp_path, "--to", tool, sweep / "bundle.tar.gz", "--out", out, "--project", project)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"--project {project!r}: a project (W&B) or experiment (MLflow) name is 1-128 letters" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


@pytest.mark.parametrize("key", ["../..", "train/../../x", "./loss", "a//b", "/abs", "loss\\n"])
def test_a_sweep_whose_metric_key_is_no_name_is_one_line_naming_run_and_key_and_nothing_is_written(tmp_path, key):
    sweep = make_sweep(tmp_path / "s", algos=("grpo",), seeds=(1,), n_steps=N_STEPS)
    log = sweep / "jobs" / "grpo-1" / "run" / "metrics.jsonl"
    log.write_text("".join(line[:-1] + f", {json.dumps(key)}: 0.5}}\n" for line in log.read_text().splitlines()))
    out = tmp_path / "out"
    result, _, _ = run_export(tmp_path, "--to", "mlflow", sweep, "--out", out)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"run grpo-1 logs the metric key {key!r}, which cannot be exported" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def test_a_bundle_whose_audit_has_findings_is_refused_as_compare_refuses_it_and_forced_it_says_so(sweep, tmp_path):
    tampered = tmp_path / "tampered" / "bundle"
    shutil.copytree(sweep / "bundle", tampered)
    steps = tampered / "data" / "steps.csv"
    steps.write_text(steps.read_text().replace("0.", "0.9", 1))
    out = tmp_path / "out"
    refused, _, _ = run_export(tmp_path / "a", "--to", "mlflow", tampered, "--out", out)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"{tampered}: {tampered} fails its audit (" in refused.stderr
    assert refused.stderr.rstrip().endswith("(--force exports it anyway)") and not out.exists()
    forced, _, _ = run_export(tmp_path / "b", "--to", "mlflow", tampered, "--out", out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.splitlines()[-1].startswith("exported with --force although its audit has ")
    clean, _, _ = run_export(tmp_path / "c", "--to", "mlflow", sweep / "bundle", "--out", tmp_path / "clean")
    assert clean.returncode == 0 and "--force" not in clean.stdout, clean.stderr
