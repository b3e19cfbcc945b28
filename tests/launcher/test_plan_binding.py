"""The plan bound before any job starts (facts.sweep_plan), without Hydra: sweep.json's plan lists every job (grid, then
certificate jobs), its SHA256 (written out here from its definition) goes into every job's spec and identity, each job
draws a nonce of its own once and keeps it across later plans, a plan that grows keeps the earlier one's digest, and
nothing of it reaches the dry run's commands (the goldens stay as they were)."""

from __future__ import annotations

import hashlib
import json

from omegaconf import OmegaConf

from launcher.job_spec import JobSpec, Sweep
from launcher.planning import expanded_commands, plan_certificates, write_plan


def _job(arm: str, seed: int, sweep: str) -> JobSpec:
    return JobSpec(name=f"{arm}-{seed}", algo="grpo", seed=seed, sweep_dir=sweep,
                   trainer_overrides=("algo=grpo", f"seed={seed}"), cpus=1, ray_cpus=0, n_updates=3,
                   source_commit=None, arm=arm, arm_overrides={"algo": "grpo"})


def _sweep(tmp_path, seeds=(1, 2), certify=False) -> Sweep:
    specs = [_job("grpo", s, str(tmp_path)) for s in seeds]
    return Sweep(tmp_path, OmegaConf.create({"kind": "local"}), specs, dry_run=False, wait=True, formal=False,
                 source_commit=None, n_updates=3, eval_responses=8, workload="toy",
                 certify=plan_certificates(specs, 3) if certify else [])


def _digest(plan: dict) -> str:
    return hashlib.sha256(json.dumps(plan, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def test_the_plan_lists_every_job_and_every_spec_carries_its_digest_and_a_nonce_of_its_own(tmp_path):
    sweep = _sweep(tmp_path, certify=True)
    plan = sweep.plan()
    assert plan == {"jobs": [{"job": "grpo-1", "arm": "grpo", "seed": 1}, {"job": "grpo-2", "arm": "grpo", "seed": 2},
                             {"job": "grpo-1.rerun", "arm": "grpo", "seed": 1,
                              "certify": {"of": "grpo-1", "kind": "rerun"}},
                             {"job": "grpo-2.resume", "arm": "grpo", "seed": 2,
                              "certify": {"of": "grpo-2", "kind": "resume", "stop_at_step": 1}}],
                    "n_updates": 3, "workload": "toy"}
    digest = sweep.bind_plan({"grpo-2": "ab" * 16})
    assert digest == _digest(plan) == sweep.record()["plan_sha256"] and sweep.record()["plan"] == plan
    nonces = [s.job_nonce for s in sweep.all_specs]
    assert nonces[1] == "ab" * 16 and len(set(nonces)) == 4 and all(len(n) == 32 for n in nonces)
    for spec in sweep.all_specs:
        assert spec.plan_sha256 == digest
        assert spec.identity()["plan_sha256"] == digest and spec.identity()["job_nonce"] == spec.job_nonce
        assert spec.run_env() == {"PROOFGRID_JOB_NONCE": spec.job_nonce, "PROOFGRID_PLAN_SHA256": digest}
        assert JobSpec.from_json(spec.to_json()) == spec
    assert not any(n in line for n in nonces for line in expanded_commands(sweep))  # never in a dry run's command
    assert "plan_sha256" not in json.loads(_job("grpo", 1, "/s").to_json())  # unbound: spec.json as it was


def test_a_job_keeps_its_nonce_and_a_plan_that_grows_keeps_the_earlier_plan_s_digest(tmp_path):
    first = _sweep(tmp_path, seeds=(1, 2))
    write_plan(first)
    for spec in first.specs:  # the launcher writes each job's spec.json before it runs
        spec.job_dir.mkdir(parents=True)
        (spec.job_dir / "spec.json").write_text(spec.to_json())
    record = json.loads((tmp_path / "sweep.json").read_text())
    assert record["plan_sha256"] == _digest(record["plan"]) and "earlier_plans" not in record
    second = _sweep(tmp_path, seeds=(1, 2, 3, 4))  # a sized design's second look: the same directory, more seeds
    write_plan(second)
    grown = json.loads((tmp_path / "sweep.json").read_text())
    assert grown["earlier_plans"] == [{"plan_sha256": record["plan_sha256"], "jobs": ["grpo-1", "grpo-2"]}]
    assert [s.job_nonce for s in second.specs[:2]] == [s.job_nonce for s in first.specs]
    assert second.specs[2].job_nonce not in {s.job_nonce for s in first.specs}
    write_plan(second)  # the same plan again (a resumed launch): nothing more to keep
    assert json.loads((tmp_path / "sweep.json").read_text())["earlier_plans"] == grown["earlier_plans"]
