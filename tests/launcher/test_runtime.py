"""The job runtime's own checks and the isolated environment, without a scheduler."""

from __future__ import annotations

import json
import shutil

import pytest

from launcher.errors import JobFailed
from launcher.isolation import JobRoots, env_diff, isolated_env
from launcher.job_spec import JobSpec
from launcher.runtime import run_job


def _spec(tmp_path, **changes) -> JobSpec:
    values = dict(name="grpo-1", algo="grpo", seed=1, sweep_dir=str(tmp_path), trainer_overrides=("algo=grpo", "seed=1"),
                  cpus=1, ray_cpus=0, n_updates=1, source_commit=None)
    return JobSpec(**{**values, **changes})


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="checks the no-GPU refusal")
def test_a_job_that_asked_for_a_gpu_model_it_did_not_get_fails_before_training(tmp_path):
    spec = _spec(tmp_path, gpu_model="A40")
    with pytest.raises(JobFailed, match="A40"):
        run_job(spec)
    record = json.loads((spec.job_dir / "job.json").read_text())
    assert record["state"] == "FAILED" and "A40" in record["failure"]
    assert not (spec.job_dir / "run" / "metrics.jsonl").exists()
    assert not JobRoots(spec.job_dir).ray_alias.exists()  # nothing left behind in /tmp


def test_isolated_env_points_every_cache_and_temp_root_into_the_job(tmp_path):
    roots = JobRoots(tmp_path / "jobs" / "rpp-7")
    base = {"HOME": "/somewhere", "RAY_ADDRESS": "10.0.0.1:6379", "HF_HOME": "/shared/hf", "PATH": "/bin"}
    env = isolated_env(roots, {"master_port": 30011, "sglang_server": 30009, "sglang_nccl": 30010}, base)
    for key in ("TMPDIR", "HF_HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TORCH_HOME"):
        assert env[key].startswith(str(roots.job_dir)), key
    assert env["PYTHONNOUSERSITE"] == "1" and env["RAY_AUTH_MODE"] == "disabled"
    assert "RAY_ADDRESS" not in env  # never attach to somebody else's Ray cluster
    assert env["MASTER_PORT"] == "30011" and env["PATH"] == "/bin"
    assert env["RAY_TMPDIR"] == str(roots.ray_alias) and len(str(roots.ray_alias)) < 40
    diff = env_diff(base, env)
    assert diff["RAY_ADDRESS"] is None and "PATH" not in diff and diff["HF_HOME"] == env["HF_HOME"]


def test_job_roots_record_is_relative_and_the_ray_alias_is_removed(tmp_path):
    roots = JobRoots(tmp_path / "jobs" / "rpp-7")
    roots.create()
    assert roots.ray_alias.resolve() == roots.ray.resolve()
    assert roots.as_record() == {"ray": "roots/ray", "cache": "roots/cache", "tmp": "roots/tmp", "output": "run"}
    roots.remove_alias()
    assert not roots.ray_alias.exists() and roots.ray.is_dir()


@pytest.mark.parametrize(("content", "status"), [
    ('{"status": "completed", "steps_completed": 2}', "completed"),
    ('{"status": "running", "steps_completed": 0}', "running"),
    ("[1, 2]", None),
    ('{"status": "compl', None),
    (None, None),
])
def test_the_status_a_trainer_left_in_run_json_decides_whether_its_exit_0_finished_the_run(tmp_path, content, status):
    """A trainer that exits 0 completed its job only when run.json says ``completed`` (a user's reward may call
    os._exit(0)); the launch test of that is tests/trainer/test_workloads.py."""
    from launcher.runtime.job import run_status

    if content is not None:
        (tmp_path / "run.json").write_text(content)
    assert run_status(tmp_path) == status
