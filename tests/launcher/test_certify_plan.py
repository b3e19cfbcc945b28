"""certify=true's plan, without Hydra: per arm a rerun of its first seed's job and a stop-and-resume of its last,
each a JobSpec of its own in <sweep>/certify/, the resume's command stopping at the step chosen from the seed; a grid
job's spec.json is as it was before certificates."""

from __future__ import annotations

import json

import pytest

from launcher.errors import PreflightError
from launcher.job_spec import JobSpec
from launcher.planning import plan_certificates


def _job(arm: str, seed: int, sweep: str = "/s", external=None) -> JobSpec:
    return JobSpec(name=f"{arm}-{seed}", algo="grpo", seed=seed, sweep_dir=sweep, trainer_overrides=("algo=grpo", f"seed={seed}"),
                   cpus=1, ray_cpus=0, n_updates=5, source_commit=None, arm=arm, arm_overrides={"algo": "grpo"},
                   external=external)


def test_each_arm_gets_a_rerun_of_its_first_seed_and_a_resume_of_its_last_in_their_own_directories():
    grid = [_job("grpo", 1), _job("grpo", 2), _job("grpo", 3), _job("rpp", 1)]
    planned = plan_certificates(grid, 5)
    assert [(s.name, s.certify) for s in planned] == [
        ("grpo-1.rerun", {"of": "grpo-1", "kind": "rerun"}),
        ("grpo-3.resume", {"of": "grpo-3", "kind": "resume", "stop_at_step": 4}),  # 1 + 3 mod 4
        ("rpp-1.rerun", {"of": "rpp-1", "kind": "rerun"}),
        ("rpp-1.resume", {"of": "rpp-1", "kind": "resume", "stop_at_step": 2}),  # one seed: the same job twice
    ]
    rerun, resume = planned[0], planned[1]
    assert str(rerun.job_dir) == "/s/certify/grpo-1.rerun" and str(grid[0].job_dir) == "/s/jobs/grpo-1"
    assert rerun.trainer_overrides == grid[0].trainer_overrides and rerun.share_initial_eval
    assert resume.planned_stop == 4 and rerun.planned_stop is None and grid[0].planned_stop is None
    assert resume.trainer_argv(resume.job_dir / "run")[-1] == "stop_at_step=4"
    assert not any("stop_at_step" in a for a in rerun.trainer_argv(rerun.job_dir / "run"))
    assert resume.identity()["certify"] == {"of": "grpo-3", "kind": "resume", "stop_at_step": 4}
    assert "certify" not in grid[0].identity()


def test_a_grid_job_s_spec_json_has_no_certify_field_and_a_certificate_job_s_round_trips():
    job = _job("grpo", 1)
    assert "certify" not in json.loads(job.to_json())
    assert JobSpec.from_json(job.to_json()) == job
    (copy, _) = plan_certificates([job], 3)
    assert JobSpec.from_json(copy.to_json()) == copy


def test_a_run_too_short_to_resume_or_another_trainer_is_refused_in_one_line():
    with pytest.raises(PreflightError, match=r"needs workload.n_updates >= 2 \(it is 1\)"):
        plan_certificates([_job("grpo", 1)], 1)
    trl = _job("grpo", 1, external={"spec": {"name": "trl"}, "argv": [], "config": {}})
    with pytest.raises(PreflightError, match="arm grpo runs trainer trl, which has no stop_at_step"):
        plan_certificates([trl], 3)


def test_the_trainer_refuses_a_stop_at_or_past_the_run_s_end_in_one_line():
    from trainer.run_config import RunConfigError, compose, validate

    validate(compose(["workload.n_updates=3", "stop_at_step=2"]))
    with pytest.raises(RunConfigError, match=r"stop_at_step=3 must be below workload.n_updates=3"):
        validate(compose(["workload.n_updates=3", "stop_at_step=3"]))


def test_every_recorded_job_directory_of_a_sweep_is_the_grid_s_then_its_certificate_jobs(tmp_path):
    from facts.files import recorded_job_dirs

    for rel in ("jobs/rpp-1", "jobs/grpo-1", "certify/grpo-1.rerun", "certify/grpo-1.resume", "jobs/unstarted"):
        (tmp_path / rel).mkdir(parents=True)
        if rel != "jobs/unstarted":
            (tmp_path / rel / "job.json").write_text("{}")
    assert [p.relative_to(tmp_path).as_posix() for p in recorded_job_dirs(tmp_path)] == [
        "jobs/grpo-1", "jobs/rpp-1", "certify/grpo-1.rerun", "certify/grpo-1.resume"]
    assert recorded_job_dirs(tmp_path / "nothing") == []
