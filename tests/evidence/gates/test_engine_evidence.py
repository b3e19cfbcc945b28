"""The evidence's side of the rollout engines (issue 37), on run files written here: a run whose engine is not torch
must log the mismatch keys whether it declares them or not; identical rollout groups above the bound are an incident
naming the cause, and with K > 1 a run whose every group is identical is rejected; the certificate says which
tolerance it used for which engines."""

from __future__ import annotations

import json

import pytest

from evidence.gates.certificate_jobs import tolerance
from evidence.gates.index import rollout_diversity
from evidence.gates.metrics_log import validate_metrics
from facts import REQUIRED_KEYS
from facts.engines import IDENTICAL_GROUPS_BOUND
from facts.metrics import IDENTICAL_GROUPS_KEY, MISMATCH_KEYS

DECLARED = sorted([*REQUIRED_KEYS, "train/kl_loss", IDENTICAL_GROUPS_KEY])


def _run(tmp_path, engine: str, keys: list[str], declared: list[str] = DECLARED, steps: int = 3):
    run = tmp_path / engine
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"metric_keys": declared, "config": {"workload": {"engine": engine}}}))
    lines = [json.dumps({"step": s, **{k: 0.5 for k in keys}}) for s in range(steps)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run / "metrics.jsonl"


def test_a_vllm_run_without_the_mismatch_keys_is_refused_though_it_does_not_declare_them(tmp_path):
    log = validate_metrics(_run(tmp_path, "vllm", DECLARED), "grpo", 3)
    missing = {v.key for v in log.violations}
    assert missing == set(MISMATCH_KEYS) and all("missing" in v.reason for v in log.violations)
    (tmp_path / "logged").mkdir()
    assert not validate_metrics(_run(tmp_path / "logged", "vllm", [*DECLARED, *MISMATCH_KEYS]), "grpo", 3).violations


def test_a_torch_run_or_another_trainer_s_run_needs_no_mismatch_keys(tmp_path):
    assert not validate_metrics(_run(tmp_path, "torch", DECLARED), "grpo", 3).violations
    (tmp_path / "trl").mkdir()
    log = _run(tmp_path / "trl", "vllm", DECLARED)
    record = json.loads((log.parent / "run.json").read_text())
    (log.parent / "run.json").write_text(json.dumps({**record, "trainer": {"name": "trl"}}))
    assert not validate_metrics(log, "grpo", 3).violations


def _summary(k: int = 8, engine: str = "vllm") -> dict:
    return {"config": {"workload": {"engine": engine, "n_samples_per_prompt": k, "sampling": {"temperature": 1.0}}}}


def test_identical_groups_above_the_bound_are_an_incident_naming_the_steps_the_engine_and_the_cause():
    records = [{"step": s, IDENTICAL_GROUPS_KEY: v} for s, v in enumerate([0.0, 0.75, IDENTICAL_GROUPS_BOUND, 1.0])]
    failures, anomalies = rollout_diversity(records, _summary())
    assert failures == [] and len(anomalies) == 1
    reason = anomalies[0].reason
    assert anomalies[0].kind == "identical-groups"
    assert reason.startswith("2 of 4 steps had more than 50% of their rollout groups identical (first: step 1, 75%)")
    assert "engine vllm at temperature 1.0" in reason and "seed handling" in reason
    assert rollout_diversity([{"step": 0, IDENTICAL_GROUPS_KEY: IDENTICAL_GROUPS_BOUND}], _summary()) == ([], [])


@pytest.mark.parametrize(("k", "rejected"), [(8, True), (1, False)])
def test_a_run_whose_every_group_was_identical_is_rejected_when_it_had_more_than_one_sample(k, rejected):
    records = [{"step": s, IDENTICAL_GROUPS_KEY: 1.0} for s in range(3)]
    failures, anomalies = rollout_diversity(records, _summary(k))
    if rejected:
        assert len(failures) == 1 and not anomalies and failures[0].kind == "identical-groups"
        assert "every rollout group of every step had 8 identical responses" in failures[0].reason
    else:  # a group of one is never counted identical by the trainer; a run that says otherwise is flagged only
        assert not failures and len(anomalies) == 1


def test_a_run_that_does_not_log_identical_groups_is_not_judged_on_them():
    assert rollout_diversity([{"step": 0, "train/loss": 1.0}], _summary()) == ([], [])


def test_the_certificate_s_tolerance_names_the_engines_and_why():
    rule = tolerance({"cpu"}, {"vllm", "torch"})
    assert rule["engines"] == ["torch", "vllm"] and rule["exact"] and rule["metrics_rel_tol"] == 0.0
    assert "vLLM engine" in rule["why"] and "own seed" in rule["why"]
    assert tolerance({"cpu"})["engines"] == ["torch"] and "vLLM" not in tolerance({"cpu"})["why"]
