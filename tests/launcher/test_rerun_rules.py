"""Re-running a sweep into the same directory: never over a job in flight or with other settings;
Slurm time strings; a checkpoint never resumes a run with other settings."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from facts.slurm_formats import time_to_minutes
from launcher.errors import PreflightError
from launcher.job_spec import JobSpec
from launcher.jobs import check_arms, check_plain_sweep, check_rerun
from tests.trainer_runs import train_in_process


def _spec(tmp_path, overrides=("algo=grpo", "seed=1")) -> JobSpec:
    return JobSpec(name="grpo-1", algo="grpo", seed=1, sweep_dir=str(tmp_path), trainer_overrides=tuple(overrides),
                   cpus=1, ray_cpus=0, n_updates=50, source_commit=None)


def _record(spec: JobSpec, **fields) -> None:
    spec.job_dir.mkdir(parents=True, exist_ok=True)
    (spec.job_dir / "spec.json").write_text(spec.to_json())
    (spec.job_dir / "job.json").write_text(json.dumps(fields))


def test_a_live_local_job_refuses_the_rerun(tmp_path):
    spec = _spec(tmp_path)
    _record(spec, state="RUNNING", scheduler="local", job_id="local-0", runtime_pid=os.getpid(),
            node=socket.gethostname())
    with pytest.raises(PreflightError, match="still RUNNING"):
        check_rerun(spec)


def test_a_local_job_whose_runtime_died_may_run_again(tmp_path):
    spec = _spec(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    _record(spec, state="RUNNING", scheduler="local", job_id="local-0", runtime_pid=dead.pid,
            node=socket.gethostname())
    check_rerun(spec)  # no error


def test_a_queued_slurm_job_refuses_the_rerun(tmp_path):
    spec = _spec(tmp_path)
    _record(spec, state="PENDING", scheduler="slurm", job_id="12_0")
    with pytest.raises(PreflightError, match="still PENDING"):
        check_rerun(spec)


def test_a_job_directory_made_with_other_settings_refuses_the_rerun(tmp_path):
    _record(_spec(tmp_path, ("algo=grpo", "seed=1", "workload.lr=0.001")), state="COMPLETED")
    with pytest.raises(PreflightError, match="other settings"):
        check_rerun(_spec(tmp_path))


def test_a_job_directory_of_another_arm_refuses_the_rerun(tmp_path):
    old = _spec(tmp_path)
    _record(JobSpec(**{**old.__dict__, "arm": "grpo-lr1e-4", "arm_overrides": {"algo": "grpo", "workload.lr": "1e-4"}}),
            state="COMPLETED")
    with pytest.raises(PreflightError, match="other settings"):
        check_rerun(old)  # same trainer overrides, but recorded as another arm


def test_an_older_job_directory_without_an_arm_is_the_same_job_as_its_algo_arm(tmp_path):
    spec = _spec(tmp_path)
    spec.job_dir.mkdir(parents=True)
    old = json.loads(spec.to_json())
    del old["arm"], old["arm_overrides"]
    (spec.job_dir / "spec.json").write_text(json.dumps(old))
    (spec.job_dir / "job.json").write_text(json.dumps({"state": "COMPLETED"}))
    check_rerun(JobSpec(**{**spec.__dict__, "arm": "grpo", "arm_overrides": {"algo": "grpo"}}))  # no error


def test_a_sweep_directory_whose_arm_had_other_settings_refuses_the_rerun(tmp_path):
    arms = {"rpp-lr3e-4": {"algo": "rpp", "workload.lr": "3e-4"}, "rpp-lr1e-4": {"algo": "rpp", "workload.lr": "1e-4"}}
    (tmp_path / "sweep.json").write_text(json.dumps({"arms": arms}))
    check_arms(tmp_path, arms)  # the same grid: fine
    check_arms(tmp_path, {"rpp-lr3e-4": arms["rpp-lr3e-4"], "grpo": {"algo": "grpo"}})  # a new arm: fine
    with pytest.raises(PreflightError, match=r"holds arm rpp-lr3e-4 run with other settings \(algo=rpp workload.lr=3e-4"):
        check_arms(tmp_path, {"rpp-lr3e-4": {"algo": "rpp", "workload.lr": "3e-4", "workload.eval.k": "2"}})


@pytest.mark.parametrize(("text", "minutes"), [
    ("30", 30), ("30:00", 30), ("30:01", 31), ("06:00:00", 360), ("1-12", 2160), ("1-12:30", 2190),
    ("1-0:0:1", 1441), (45, 45)])
def test_slurm_time_strings(text, minutes):
    assert time_to_minutes(text) == minutes


def test_a_checkpoint_never_resumes_a_run_with_other_settings(tmp_path):
    common = ("algo=rpp", "seed=2", "workload.n_updates=2", "workload.checkpoint_every=1", "workload.eval.n_prompts=2")
    train_in_process(tmp_path / "r", *common)
    proc = train_in_process(tmp_path / "r", *common, "workload.lr=0.002", check=False)
    assert proc.returncode == 2 and "other settings" in proc.stderr and "Traceback" not in proc.stderr
    train_in_process(tmp_path / "r", *common, "workload.lr=0.002", "resume=false")  # starting over is allowed


@pytest.mark.parametrize(("jobs", "needle"), [
    (["grpo-1"], "without grpo-2, rpp-1, rpp-2"),  # a subset
    (["grpo-1", "grpo-2", "rpp-1", "rpp-2", "grpo-3"], "with grpo-3"),  # a superset
    (["grpo-1", "grpo-3", "rpp-1", "rpp-2"], "without grpo-2; with grpo-3"),  # a changed grid
    (["rpp-1", "rpp-2", "grpo-1", "grpo-2"], "in another order"),
])
def test_a_plain_sweep_of_another_grid_than_the_recorded_one_is_refused(tmp_path, jobs, needle):
    recorded = ["grpo-1", "grpo-2", "rpp-1", "rpp-2"]
    (tmp_path / "sweep.json").write_text(json.dumps({"jobs": recorded}))
    check_plain_sweep(tmp_path, recorded)  # its own grid: fine
    check_plain_sweep(tmp_path / "new", jobs)  # a new directory: fine
    with pytest.raises(PreflightError, match=rf"holds a sweep of 4 job\(s\).*{needle}.*one frozen grid"):
        check_plain_sweep(tmp_path, jobs)


@pytest.mark.parametrize("mark", ["registration", "experiment_sha256", "experiment.yaml"])
def test_a_plain_sweep_in_an_experiment_stage_is_refused(tmp_path, mark):
    stage = tmp_path / "exp" / "probe"
    stage.mkdir(parents=True)
    (stage / "sweep.json").write_text(json.dumps({"jobs": ["grpo-1"], **(
        {"experiment_sha256": "0" * 64} if mark == "experiment_sha256" else {})}))
    if mark == "registration":
        (tmp_path / "exp" / "registration.json").write_text("{}")
    if mark == "experiment.yaml":
        (stage / "experiment.yaml").write_text("arms: {}\n")
    with pytest.raises(PreflightError, match="is a stage of the pre-registered experiment"):
        check_plain_sweep(stage, ["grpo-1"])
