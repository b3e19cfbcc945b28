"""Structured validation of metrics.jsonl: every rule, and the "Nancy" case that a regex got wrong."""

from __future__ import annotations

import json

import pytest

from benchmarks.synthetic_sweep import job_dir, metric_records, write_metrics
from evidence.gates.index import evaluate_job
from evidence.gates.metrics_log import validate_metrics


def write_lines(tmp_path, lines: list[str], newline_at_end: bool = True):
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines) + ("\n" if newline_at_end else ""), encoding="utf-8")
    return path


def good_lines(algo: str = "grpo", n: int = 5) -> list[str]:
    return [json.dumps(r) for r in metric_records(algo, 42, n)]


@pytest.mark.parametrize("algo", ["grpo", "rpp", "rppb"])
def test_clean_log_passes(tmp_path, algo):
    log = validate_metrics(write_lines(tmp_path, good_lines(algo)), algo, 5)
    assert log.ok, [str(v) for v in log.violations]
    assert log.valid_steps == 5
    assert [r["step"] for r in log.records] == [0, 1, 2, 3, 4]


def test_nancy_text_in_responses_and_logs_does_not_fail_a_good_job(sweep):
    # The factory's eval responses and runtime log say "Nancy", "nan", "NaN", "inf", "Infinity".
    job = job_dir(sweep, "rpp", 1234)
    texts = (job / "run" / "eval" / "final.jsonl").read_text() + (job / "runtime.log").read_text()
    for word in ("Nancy", "nan", "NaN", "inf", "Infinity"):
        assert word in texts
    evidence = evaluate_job(job, "rpp", 1234, 10)
    assert evidence.accepted, evidence.reason()


def test_bare_nan_names_file_line_step_and_key(tmp_path):
    lines = good_lines()
    lines[3] = lines[3].replace('"train/loss": ', '"train/loss": NaN, "x": ', 1)
    log = validate_metrics(write_lines(tmp_path, lines), "grpo", 5, name="run/metrics.jsonl")
    assert not log.ok
    (violation,) = [v for v in log.violations if v.key == "train/loss"]
    assert (violation.file, violation.line, violation.step) == ("run/metrics.jsonl", 4, 3)
    assert "NaN" in violation.reason
    assert str(violation).startswith("run/metrics.jsonl: line 4, step 3, key train/loss:")
    assert log.valid_steps == 3


def test_nan_as_a_string_is_a_violation(tmp_path):
    lines = good_lines()
    record = json.loads(lines[2])
    record["train/grad_norm"] = "nan"
    lines[2] = json.dumps(record)
    log = validate_metrics(write_lines(tmp_path, lines), "grpo", 5)
    (violation,) = log.violations
    assert (violation.line, violation.step, violation.key) == (3, 2, "train/grad_norm")
    assert "string" in violation.reason


@pytest.mark.parametrize("spelling", ["Infinity", "-Infinity", "1e999"])
def test_infinity_in_any_spelling_is_a_violation(tmp_path, spelling):
    lines = good_lines()
    record = json.loads(lines[1])
    lines[1] = json.dumps(record).replace(f'"perf/step_s": {record["perf/step_s"]}', f'"perf/step_s": {spelling}')
    log = validate_metrics(write_lines(tmp_path, lines), "grpo", 5)
    (violation,) = log.violations
    assert (violation.line, violation.step, violation.key) == (2, 1, "perf/step_s")
    assert "non-finite" in violation.reason


@pytest.mark.parametrize("value,word", [(None, "null"), (True, "boolean"), ([1.0], "list")])
def test_null_bool_and_containers_are_not_numbers(tmp_path, value, word):
    lines = good_lines()
    record = json.loads(lines[0])
    record["rollout/raw_reward"] = value
    lines[0] = json.dumps(record)
    (violation,) = validate_metrics(write_lines(tmp_path, lines), "grpo", 5).violations
    assert violation.key == "rollout/raw_reward" and word in violation.reason


def test_missing_step(tmp_path):
    lines = good_lines()
    del lines[2]
    log = validate_metrics(write_lines(tmp_path, lines), "grpo", 5)
    gap = [v for v in log.violations if v.line == 3]
    assert gap and gap[0].step == 3 and gap[0].key == "step" and "missing step 2" in gap[0].reason
    assert any(v.line is None and "4 of 5 steps" in v.reason for v in log.violations)
    assert log.valid_steps == 2


def test_repeated_step(tmp_path):
    lines = good_lines()
    lines.insert(3, lines[2])
    log = validate_metrics(write_lines(tmp_path, lines), "grpo", 5)
    (violation,) = log.violations
    assert (violation.line, violation.step, violation.key) == (4, 2, "step")
    assert "repeated" in violation.reason


def test_truncated_last_line(tmp_path):
    lines = good_lines()
    lines[-1] = lines[-1][: len(lines[-1]) // 2]
    log = validate_metrics(write_lines(tmp_path, lines, newline_at_end=False), "grpo", 5)
    assert any(v.line == 5 and "truncated last line" in v.reason for v in log.violations)
    assert log.valid_steps == 4


def test_garbage_line_in_the_middle_is_not_called_truncated(tmp_path):
    lines = good_lines()
    lines[1] = lines[1][:20]
    log = validate_metrics(write_lines(tmp_path, lines), "grpo", 5)
    violation = log.violations[0]
    assert violation.line == 2 and "not valid JSON" in violation.reason
    assert not any("truncated" in v.reason for v in log.violations)
    # The lost record is also a missing step 1.
    assert any(v.line is None and "missing step 1" in v.reason for v in log.violations)


def test_kl_loss_required_for_grpo_and_rppb_absent_for_rpp(tmp_path):
    rpp = [json.loads(x) for x in good_lines("rpp")]
    rpp[0]["train/kl_loss"] = 0.01
    log = validate_metrics(write_lines(tmp_path, [json.dumps(r) for r in rpp]), "rpp", 5)
    (violation,) = log.violations
    assert violation.key == "train/kl_loss" and "absent" in violation.reason
    rppb = [json.loads(x) for x in good_lines("rppb")]
    del rppb[4]["train/kl_loss"]
    log = validate_metrics(write_lines(tmp_path, [json.dumps(r) for r in rppb]), "rppb", 5)
    (violation,) = log.violations
    assert (violation.step, violation.key, violation.reason) == (4, "train/kl_loss", "missing")


def test_step_count_must_equal_n_updates(tmp_path):
    log = validate_metrics(write_lines(tmp_path, good_lines()), "grpo", 6)
    assert [v.reason for v in log.violations] == ["5 of 6 steps present; missing step 5"]
    log = validate_metrics(write_lines(tmp_path, good_lines()), "grpo", 4)
    assert [(v.step, v.key) for v in log.violations] == [(4, "step")]


def test_duplicate_key_and_non_object_lines(tmp_path):
    lines = good_lines()
    lines[0] = lines[0][:-1] + ', "train/loss": 1.0}'
    lines[1] = "[1, 2]"
    log = validate_metrics(write_lines(tmp_path, lines), "grpo", 5)
    reasons = {(v.line, v.key): v.reason for v in log.violations}
    assert "more than once" in reasons[(1, "train/loss")]
    assert "not a JSON object" in reasons[(2, None)]


def test_missing_file_is_a_violation(tmp_path):
    log = validate_metrics(tmp_path / "metrics.jsonl", "grpo", 5)
    assert not log.ok and "unreadable" in log.violations[0].reason


def test_rejected_job_reports_the_violation_in_its_reason(sweep):
    run_dir = job_dir(sweep, "grpo", 42) / "run"
    records = metric_records("grpo", 42, 10)
    write_metrics(run_dir, records)
    text = (run_dir / "metrics.jsonl").read_text().replace('"train/pg_loss": ', '"train/pg_loss": NaN, "y": ', 1)
    (run_dir / "metrics.jsonl").write_text(text)
    evidence = evaluate_job(job_dir(sweep, "grpo", 42), "grpo", 42, 10)
    assert not evidence.accepted
    assert "run/metrics.jsonl: line 1, step 0, key train/pg_loss: non-finite number NaN" in evidence.reason()


def test_the_keys_a_run_declares_in_its_run_json_are_the_keys_each_step_must_carry(tmp_path):
    # A new algorithm needs no evidence edit: the run states its keys (trainer.metrics_writer.metric_keys).
    records = metric_records("rpp", 42, 3)
    declared = sorted([*records[0].keys() - {"step"}, "train/staleness"])
    (tmp_path / "run.json").write_text(json.dumps({"metric_keys": declared}))
    path = write_lines(tmp_path, [json.dumps({**r, "train/staleness": 1.0}) for r in records])
    assert validate_metrics(path, "newalgo", 3).ok
    # A declared key that a step lacks is a violation naming the key ...
    path = write_lines(tmp_path, [json.dumps(r) for r in records])
    log = validate_metrics(path, "newalgo", 3)
    assert {(v.step, v.key, v.reason) for v in log.violations} == {(s, "train/staleness", "missing") for s in range(3)}
    # ... and an undeclared KL loss is refused, whatever the algorithm's name.
    path = write_lines(tmp_path, [json.dumps({**r, "train/staleness": 1.0, "train/kl_loss": 0.1}) for r in records])
    assert {v.key for v in validate_metrics(path, "grpo", 3).violations} == {"train/kl_loss"}


def test_a_run_json_without_declared_keys_falls_back_to_the_fixed_table(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"algo": "rppb"}))
    records = [{k: v for k, v in r.items() if k != "train/kl_loss"} for r in metric_records("rppb", 42, 2)]
    log = validate_metrics(write_lines(tmp_path, [json.dumps(r) for r in records]), "rppb", 2)
    assert {v.key for v in log.violations} == {"train/kl_loss"}
