"""Every evaluation is re-derived from its rawest data: the audit and the build re-score every response against
the frozen subset the bundle carries (its SHA256 pinned by the summaries), recompute pass@k from the re-scored
rewards, and hold every stored summary to the statistics an evaluation can have.

Each forgery class is made as a thorough forger makes it (statistics, digests, eval.csv, tables and report restated,
the crate and bag resealed), then audited through ``python -m evidence audit``; the expected statistics come from a
float64 reference written here (pass@j as the share of j-subsets of a prompt's samples holding a correct one)."""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import N_PROMPTS, SUBSET_SHA, K, make_sweep, share_initial_eval
from evidence.seal.bundle import build_bundle
from tests.evidence_cli import evidence_in_process
from tests.sweeps import reseal_bag

JOBS = ("grpo-42", "rpp-42")


def reference_pass_at(rewards: list[float], k: int, j: int) -> float:
    """pass@j of responses in prompt order (k each): per prompt the share of its j-subsets of samples that hold a
    correct one, averaged over prompts, in float64 by enumeration."""
    prompts = [rewards[i:i + k] for i in range(0, len(rewards), k)]
    shares = []
    for samples in prompts:
        subsets = list(itertools.combinations(samples, j))
        shares.append(sum(any(r > 0 for r in subset) for subset in subsets) / len(subsets))
    return sum(shares) / len(shares)


def reference_statistics(records: list[dict], rewards: list[float]) -> dict:
    stats = {f"pass@{j}": reference_pass_at(rewards, K, j) for j in (1, 2, 4)}
    stats["mean_reward"] = sum(rewards) / len(rewards)
    return stats


@pytest.fixture(scope="module")
def shared_build(tmp_path_factory):
    """Two runs sharing one initial evaluation, built once (no figures): (sweep_dir, bundle_dir)."""
    sweep = make_sweep(tmp_path_factory.mktemp("rescore"), algos=("grpo", "rpp"), seeds=(42,), n_steps=3)
    share_initial_eval(sweep, JOBS)
    result = build_bundle(sweep, figures=False)
    assert result.accepted == 2, result.jobs
    return sweep, result.bundle_dir


@pytest.fixture
def bag(shared_build, tmp_path) -> Path:
    return Path(shutil.copytree(shared_build[1], tmp_path / "bundle"))


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _edit_json(path: Path, change) -> bytes:
    record = json.loads(path.read_text())
    change(record)
    text = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
    path.write_bytes(text)
    return text


def _edit_eval_csv(data: Path, job: str, kind: str, values: dict) -> None:
    path = data / "eval.csv"
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns, rows = reader.fieldnames, list(reader)
    for row in rows:
        if f"{row['arm']}-{row['seed']}" == job and row["kind"] == kind:
            row.update({name: repr(value) if isinstance(value, float) else str(value) for name, value in values.items()
                        if name in row})
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _restate_derived(data: Path) -> None:
    """What a thorough forger does after editing eval.csv: the tables and the report recomputed from it."""
    from evidence.computed import compute_tables
    from evidence.dataset import load_bundle_data
    from evidence.report.sections import render_report

    loaded = load_bundle_data(data)
    tables = compute_tables(loaded)
    for name, table in tables.items():
        (data / "tables" / f"{name}.csv").write_text(table.csv())
    (data / "report.md").write_text(render_report(loaded, tables))


def _forge_summary(bag: Path, job: str, kind: str, values: dict) -> None:
    """An eval.json entry's statistics replaced, eval.csv, tables and report restated to agree, resealed."""
    data = bag / "data"
    _edit_json(data / "runs" / job / "eval.json", lambda record: record[kind].update(values))
    _edit_eval_csv(data, job, kind, values)
    _restate_derived(data)
    reseal_bag(bag)


def _audit(bag: Path) -> tuple[int, str]:
    """``python -m evidence audit`` in this process (tests/evidence_cli.py; the builds below run as processes)."""
    done = evidence_in_process("audit", bag)
    return done.returncode, done.stdout + done.stderr


def test_an_honest_bundle_carries_responses_and_subset_and_audits_clean(shared_build):
    _, bundle = shared_build
    data = bundle / "data"
    subset = data / "eval_subset" / f"{SUBSET_SHA[:12]}.json"
    assert hashlib.sha256(subset.read_bytes()).hexdigest() == SUBSET_SHA
    assert len(json.loads(subset.read_text())) == N_PROMPTS
    for job in JOBS:
        final = _read_jsonl(data / "runs" / job / "eval" / "final.jsonl")
        assert len(final) == N_PROMPTS * K
        summary = json.loads((data / "runs" / job / "eval.json").read_text())["final"]
        expected = reference_statistics(final, [r["reward"] for r in final])
        assert all(summary[name] == pytest.approx(value, abs=1e-12) for name, value in expected.items())
        assert not (data / "runs" / job / "eval" / "initial.jsonl").exists()  # its control is the shared one
    code, out = _audit(bundle)
    assert code == 0 and "clean" in out, out


def remark_shared_control_zero(bag: Path, jobs, remark=None) -> tuple[Path, list[dict], list[float]]:
    """The issue's forgery: every correct response of the shared control re-marked 0 (or as ``remark(records)``
    re-marks them), its statistics and SHA256 recomputed, every run's reference, eval.csv, tables and report
    restated, resealed. Returns the shared directory, its honest records and their rewards."""
    data = bag / "data"
    (shared,) = [p for p in (data / "initial_eval").iterdir() if p.is_dir()]
    records = _read_jsonl(shared / "responses.jsonl")
    honest = [r["reward"] for r in records]
    forged = (remark or (lambda rs: [{**r, "reward": 0.0} for r in rs]))(records)
    forged_rewards = [r["reward"] for r in forged]
    _write_jsonl(shared / "responses.jsonl", forged)
    k = max(r["sample"] for r in records) + 1
    stats = {f"pass@{j}": reference_pass_at(forged_rewards, k, j) for j in (1, 2, 4) if j <= k}
    stats.update(mean_reward=sum(forged_rewards) / len(forged_rewards), all_zero_reward=not any(forged_rewards))
    text = _edit_json(shared / "eval.json", lambda r: (r["initial"].update(stats), r.update(
        responses_sha256=hashlib.sha256((shared / "responses.jsonl").read_bytes()).hexdigest())))
    for job in jobs:
        _edit_json(data / "runs" / job / "eval.json", lambda r: (r["initial"].update(stats), r["initial"]["shared"].update(
            sha256=hashlib.sha256(text).hexdigest())))
        _edit_eval_csv(data, job, "initial", stats)
    _restate_derived(data)
    reseal_bag(bag)
    return shared, records, honest


def test_a_shared_initial_evaluation_whose_correct_responses_were_re_marked_zero_is_a_finding(bag):
    """The issue's repro: the gain reads larger, yet the control's responses re-score to the honest one."""
    shared, records, honest = remark_shared_control_zero(bag, JOBS)
    code, out = _audit(bag)
    assert code == 1
    first = next(i for i, r in enumerate(records) if r["reward"] > 0)
    assert (f"data/initial_eval/{shared.name}/responses.jsonl: line {first + 1}, row {records[first]['index']}, "
            f"sample {records[first]['sample']}: reward 0.0 re-scores to 1.0") in out
    honest_pass1 = reference_pass_at(honest, K, 1)
    assert (f"data/initial_eval/{shared.name}/eval.json: initial: pass@1 0.0 does not recompute from the re-scored "
            f"responses of data/initial_eval/{shared.name}/responses.jsonl ({honest_pass1!r})") in out


def test_a_final_evaluations_re_marked_reward_is_a_finding_with_the_recomputed_value(bag):
    data = bag / "data"
    path = data / "runs" / "grpo-42" / "eval" / "final.jsonl"
    records = _read_jsonl(path)
    honest = [r["reward"] for r in records]
    first = next(i for i, r in enumerate(records) if r["reward"] > 0)
    records[first]["reward"] = 0.0
    _write_jsonl(path, records)
    forged_rewards = [r["reward"] for r in records]
    _forge_summary(bag, "grpo-42", "final", reference_statistics(records, forged_rewards))
    code, out = _audit(bag)
    assert code == 1
    assert (f"data/runs/grpo-42/eval/final.jsonl: line {first + 1}, row {records[first]['index']}, sample "
            f"{records[first]['sample']}: reward 0.0 re-scores to 1.0") in out
    assert (f"pass@1 {reference_pass_at(forged_rewards, K, 1)!r} does not recompute from the re-scored responses of "
            f"data/runs/grpo-42/eval/final.jsonl ({reference_pass_at(honest, K, 1)!r})") in out


def test_an_edited_pass_at_k_that_is_possible_is_caught_by_re_scoring(bag):
    """pass@1 moved by one correct response (on its lattice, below pass@2): only the responses contradict it."""
    final = json.loads((bag / "data" / "runs" / "rpp-42" / "eval.json").read_text())["final"]
    edited = round(final["pass@1"] + 1 / (N_PROMPTS * K), 12)
    assert edited <= final["pass@2"]
    _forge_summary(bag, "rpp-42", "final", {"pass@1": edited})
    code, out = _audit(bag)
    assert code == 1
    assert (f"data/runs/rpp-42/eval.json: final: pass@1 {edited!r} does not recompute from the re-scored responses "
            f"of data/runs/rpp-42/eval/final.jsonl ({final['pass@1']!r})") in out
    assert "cannot decrease" not in out and "whole multiple" not in out


@pytest.mark.parametrize(("values", "reason"), [
    ({"pass@1": 0.9, "pass@2": 0.708}, "pass@2 0.708 < pass@1 0.9: pass@j cannot decrease with j"),
    ({"pass@1": 0.4633}, "pass@1 0.4633 is not a whole multiple of 1/100 (1 / (n_prompts x C(k, 1)))"),
    ({"pass@2": 0.7801}, "pass@2 0.7801 is not a whole multiple of 1/150 (1 / (n_prompts x C(k, 2)))"),
    ({"truncation": 0.123}, "truncation 0.123 is not a whole multiple of 1/100 (1 / n_responses)"),
    ({"pass@1": 0.1, "pass@2": 0.3, "pass@4": 0.3}, "pass@2 0.3 > min(1, 2 x pass@1) = 0.2"),
    ({"n_responses": 99}, "n_responses 99 is not n_prompts 25 x k 4"),
], ids=["decreasing", "pass1-off-lattice", "pass2-off-lattice", "truncation-off-lattice", "union-bound", "counts"])
def test_impossible_statistics_are_findings_in_eval_json_and_eval_csv(bag, values, reason):
    _forge_summary(bag, "grpo-42", "final", values)
    code, out = _audit(bag)
    assert code == 1
    assert f"data/runs/grpo-42/eval.json: final: {reason}" in out
    assert f"data/eval.csv: grpo-42 final: {reason}" in out


def test_a_deleted_responses_file_is_a_finding(bag):
    (bag / "data" / "runs" / "rpp-42" / "eval" / "final.jsonl").unlink()
    reseal_bag(bag)
    code, out = _audit(bag)
    assert code == 1
    assert "data/runs/rpp-42/eval/final.jsonl: missing: the evaluation's responses" in out


def test_an_edited_evaluation_subset_is_a_sha256_finding(bag):
    path = bag / "data" / "eval_subset" / f"{SUBSET_SHA[:12]}.json"
    rows = json.loads(path.read_text())
    rows[0][2] = str(int(rows[0][2]) + 1)  # a label changed: the responses would re-score otherwise
    path.write_text(json.dumps(rows, separators=(",", ":")))
    reseal_bag(bag)
    code, out = _audit(bag)
    assert code == 1
    assert f"data/eval_subset/{SUBSET_SHA[:12]}.json: its SHA256 " in out
    assert f"is not the pinned subset_sha256 {SUBSET_SHA[:12]}" in out


def test_python_m_evidence_build_rejects_a_job_whose_responses_do_not_re_score(shared_build, tmp_path):
    """The build's gate re-scores too: a re-marked reward in the sweep, statistics restated, rejects that job,
    the reason naming the response file."""
    sweep = Path(shutil.copytree(shared_build[0], tmp_path / "sweep", ignore=shutil.ignore_patterns("bundle*")))
    run = sweep / "jobs" / "rpp-42" / "run"
    records = _read_jsonl(run / "eval" / "final.jsonl")
    first = next(i for i, r in enumerate(records) if r["reward"] > 0)
    records[first]["reward"] = 0.0
    _write_jsonl(run / "eval" / "final.jsonl", records)
    _edit_json(run / "eval.json", lambda r: r["final"].update(reference_statistics(records, [x["reward"] for x in records])))
    done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(sweep / "bundle" / "data" / "index.csv", newline="") as f:
        index = {row["job"]: row for row in csv.DictReader(f)}
    assert index["grpo-42"]["accepted"] == "yes"
    assert index["rpp-42"]["accepted"] == "no"
    assert "run/eval/final.jsonl" in index["rpp-42"]["reason"] and "re-scores to 1.0" in index["rpp-42"]["reason"]
    code, out = _audit(sweep / "bundle.tar.gz")
    assert code == 0, out


@pytest.mark.parametrize("n_prompts", [1, 3, 7])
def test_every_honest_count_vector_passes_the_statistics_rules(n_prompts):
    """No false finding: every way n prompts x 4 samples can be answered (all count vectors) gives statistics
    (the float64 reference, summed in the trainer's order) that break no rule."""
    from facts.evaluation import impossible_statistics

    for counts in itertools.combinations_with_replacement(range(K + 1), n_prompts):
        rewards = [float(j < c) for c in counts for j in range(K)]
        summary = {"n_prompts": n_prompts, "k": K, "n_responses": n_prompts * K, "truncation": 0.0,
                   "mean_length": 80.0, "mean_reward": sum(rewards) / len(rewards),
                   **{f"pass@{j}": reference_pass_at(rewards, K, j) for j in (1, 2, 4)}}
        assert impossible_statistics(summary) == [], counts


@pytest.mark.slow  # a real 2-job sweep through launch.py: trains, evaluates, seals and audits (~2 min)
def test_a_real_sweeps_bundle_carries_responses_and_subset_and_a_re_marked_control_is_flagged(tmp_path):
    from tests.sweeps import launch

    sweep = tmp_path / "sweep"
    result = launch(sweep, "algo=grpo", "seed=1,2", "workload.n_updates=2", "workload.checkpoint_every=2")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "audit: clean" in result.stdout
    data = sweep / "bundle" / "data"
    jobs = sorted(p.name for p in (data / "runs").iterdir())
    for job in jobs:
        evaluation = json.loads((data / "runs" / job / "eval.json").read_text())
        final, digest = evaluation["final"], evaluation["final"]["subset_sha256"]
        subset = data / "eval_subset" / f"{digest[:12]}.json"
        assert hashlib.sha256(subset.read_bytes()).hexdigest() == digest
        assert (data / "runs" / job / "eval" / "final.jsonl").read_bytes() == \
            (sweep / "jobs" / job / "run" / "eval" / "final.jsonl").read_bytes()
        records = _read_jsonl(data / "runs" / job / "eval" / "final.jsonl")
        assert len(records) == final["n_prompts"] * final["k"] == final["n_responses"]
        rewards = [r["reward"] for r in records]
        assert final["pass@1"] == pytest.approx(reference_pass_at(rewards, final["k"], 1), abs=1e-12)
    code, out = _audit(sweep / "bundle.tar.gz")
    assert code == 0, out
    forged = Path(shutil.copytree(sweep / "bundle", tmp_path / "forged"))
    # The first response's reward flipped (a correct one re-marked 0, or a wrong one marked 1 when the toy
    # initial checkpoint answers nothing right), everything derived from it restated.
    shared, records, _ = remark_shared_control_zero(
        forged, jobs, lambda rs: [{**rs[0], "reward": 1.0 - rs[0]["reward"]}, *rs[1:]])
    code, out = _audit(forged)
    assert code == 1
    assert (f"data/initial_eval/{shared.name}/responses.jsonl: line 1, row {records[0]['index']}, sample "
            f"{records[0]['sample']}: reward {1.0 - records[0]['reward']!r} re-scores to {records[0]['reward']!r}") in out


# Re-scoring counts samples, not records (adv B10): each evaluated row holds its samples 0..k-1 once each.
def _copy_first_correct(records: list[dict]) -> list[dict]:
    """The reviewer's forgery: every record of a row replaced by a copy of the row's first correct one (its sample
    id kept), so each row keeps k records and pass@k reads as if every sample were correct."""
    rows: dict[int, list[dict]] = {}
    for record in records:
        rows.setdefault(record["index"], []).append(record)
    out = []
    for samples in rows.values():
        correct = [r for r in samples if r["reward"] > 0]
        out += [dict(correct[0]) for _ in samples] if correct else samples
    return out


def _drop_last_sample(records: list[dict]) -> list[dict]:
    """Row 1's sample 3 removed."""
    return [r for r in records if (r["index"], r["sample"]) != (1, K - 1)]


def _renumber_out_of_range(records: list[dict]) -> list[dict]:
    """Row 2's sample 3 renumbered k."""
    return [{**r, "sample": K} if (r["index"], r["sample"]) == (2, K - 1) else r for r in records]


def _extra_record(records: list[dict]) -> list[dict]:
    """Row 0 given a fifth record: a copy of its sample 0, appended after the row."""
    return records[:K] + [dict(records[0])] + records[K:]


def _first_correct_line(records: list[dict]) -> tuple[int, int, int]:
    """(line of the first copy that repeats a sample, its row, its sample) in ``_copy_first_correct``'s output."""
    forged = _copy_first_correct(records)
    seen = set()
    for line, r in enumerate(forged, start=1):
        if (r["index"], r["sample"]) in seen:
            return line, r["index"], r["sample"]
        seen.add((r["index"], r["sample"]))
    raise AssertionError("no repeated sample")


# name -> (forgery, the finding it must raise about the responses file: (line or None, row, sample, reason start))
MISPLACED = {
    "duplicated": (_copy_first_correct, None),
    "missing": (_drop_last_sample, (None, 1, K - 1, "missing: no record of this (row, sample)")),
    "out-of-range": (_renumber_out_of_range, (2 * K + K, 2, K, f"sample {K} is not one of the row's samples 0..3")),
    "k-plus-one": (_extra_record, (K + 1, 0, 0, "a second record of this (row, sample), first on line 1")),
}


def _expected(name: str, honest: list[dict]) -> tuple[int | None, int, int, str]:
    if name == "duplicated":
        line, row, sample = _first_correct_line(honest)
        return line, row, sample, "a second record of this (row, sample)"
    return MISPLACED[name][1]


def _finding(file: str, expected) -> str:
    line, row, sample, reason = expected
    return f"{file}: {f'line {line}, ' if line is not None else ''}row {row}, sample {sample}: {reason}"


def _names(findings: list[str], file: str, expected) -> bool:
    """Some finding of ``findings`` is the expected one (it may go on: a repeat names the first record's line)."""
    return any(f.startswith(_finding(file, expected)) for f in findings)


def _restated(records: list[dict]) -> dict:
    """The summary statistics a forger restates from the forged records (the evaluation's own estimator, k kept)."""
    from facts.evaluation import recompute_eval

    stats = recompute_eval(records, K)
    return {name: stats[name] for name in ("pass@1", "pass@2", "pass@4", "mean_reward", "mean_length", "truncation")}


@pytest.mark.parametrize("name", sorted(MISPLACED))
def test_a_final_evaluations_misplaced_sample_is_an_audit_finding_naming_row_and_sample(bag, name):
    from evidence import audit_bundle

    path = bag / "data" / "runs" / "grpo-42" / "eval" / "final.jsonl"
    honest = _read_jsonl(path)
    forged = MISPLACED[name][0](honest)
    _write_jsonl(path, forged)
    _forge_summary(bag, "grpo-42", "final", _restated(forged))
    findings = [str(p) for p in audit_bundle(bag)]
    assert _names(findings, "data/runs/grpo-42/eval/final.jsonl", _expected(name, honest)), findings


@pytest.mark.parametrize("name", sorted(MISPLACED))
def test_the_build_gate_rejects_a_misplaced_sample_naming_row_and_sample(shared_build, tmp_path, name):
    from evidence.gates.index import evaluate_job

    sweep = Path(shutil.copytree(shared_build[0], tmp_path / "sweep", ignore=shutil.ignore_patterns("bundle*")))
    run = sweep / "jobs" / "rpp-42" / "run"
    honest = _read_jsonl(run / "eval" / "final.jsonl")
    forged = MISPLACED[name][0](honest)
    _write_jsonl(run / "eval" / "final.jsonl", forged)
    _edit_json(run / "eval.json", lambda r: r["final"].update(_restated(forged)))
    evidence = evaluate_job(sweep / "jobs" / "rpp-42")
    assert not evidence.accepted
    failures = [str(p) for p in evidence.failures]
    assert _names(failures, "run/eval/final.jsonl", _expected(name, honest)), failures


def _copy_first_correct_in_sweep(sweep: Path) -> tuple[str, list[dict]]:
    """The reviewer's forgery on the sweep's shared initial evaluation, restated as the trainer would have written
    it (summary, responses SHA256, every run's reference): its directory name and its honest records."""
    (shared,) = [p for p in (sweep / "initial_eval").iterdir() if p.is_dir()]
    honest = _read_jsonl(shared / "responses.jsonl")
    forged = _copy_first_correct(honest)
    _write_jsonl(shared / "responses.jsonl", forged)
    stats = _restated(forged)
    text = _edit_json(shared / "eval.json", lambda r: (r["initial"].update(stats), r.update(
        responses_sha256=hashlib.sha256((shared / "responses.jsonl").read_bytes()).hexdigest())))
    for job in JOBS:
        _edit_json(sweep / "jobs" / job / "run" / "eval.json", lambda r: (r["initial"].update(stats),
                   r["initial"]["shared"].update(sha256=hashlib.sha256(text).hexdigest())))
    return shared.name, honest


def test_a_shared_initial_evaluations_copied_samples_reject_every_run_and_are_an_audit_finding(shared_build, bag,
                                                                                               tmp_path):
    """The shared control's responses go through the same check: in the build's gate (its own line under the
    shared eval.json, each (row, sample) under its responses) and in the audit of a resealed bundle."""
    from evidence import audit_bundle
    from evidence.gates.index import evaluate_job

    sweep = Path(shutil.copytree(shared_build[0], tmp_path / "sweep", ignore=shutil.ignore_patterns("bundle*")))
    key12, honest = _copy_first_correct_in_sweep(sweep)
    line, row, sample = _first_correct_line(honest)
    responses = f"initial_eval/{key12}/responses.jsonl"
    for job in JOBS:
        failures = [str(p) for p in evaluate_job(sweep / "jobs" / job).failures]
        assert _names(failures, responses, (line, row, sample, "a second record of this (row, sample)")), failures
        assert any(f.startswith(f"initial_eval/{key12}/eval.json: responses.jsonl: row ") for f in failures), failures
    shared, _, _ = remark_shared_control_zero(bag, JOBS, remark=_copy_first_correct)
    findings = [str(p) for p in audit_bundle(bag)]
    assert _names(findings, f"data/initial_eval/{shared.name}/responses.jsonl",
                  (line, row, sample, "a second record of this (row, sample)")), findings


def test_python_m_evidence_build_and_audit_count_samples_not_records(shared_build, bag, tmp_path):
    """The reviewer's B10 through the entry points: the build rejects the run whose rows repeat their correct
    sample (statistics restated), and the audit of a bundle so forged and resealed exits 1 naming row and sample."""
    sweep = Path(shutil.copytree(shared_build[0], tmp_path / "sweep", ignore=shutil.ignore_patterns("bundle*")))
    run = sweep / "jobs" / "rpp-42" / "run"
    honest = _read_jsonl(run / "eval" / "final.jsonl")
    forged = _copy_first_correct(honest)
    _write_jsonl(run / "eval" / "final.jsonl", forged)
    _edit_json(run / "eval.json", lambda r: r["final"].update(_restated(forged)))
    done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(sweep / "bundle" / "data" / "index.csv", newline="") as f:
        index = {row["job"]: row for row in csv.DictReader(f)}
    line, row, sample = _first_correct_line(honest)
    assert index["rpp-42"]["accepted"] == "no"
    assert index["rpp-42"]["reason"].startswith(f"run/eval/final.jsonl: line {line}, row {row}, sample {sample}: "
                                                "a second record of this (row, sample)"), index["rpp-42"]["reason"]

    path = bag / "data" / "runs" / "rpp-42" / "eval" / "final.jsonl"
    _write_jsonl(path, _copy_first_correct(_read_jsonl(path)))
    _forge_summary(bag, "rpp-42", "final", _restated(_read_jsonl(path)))
    code, out = _audit(bag)
    assert code == 1
    assert _finding("data/runs/rpp-42/eval/final.jsonl", (line, row, sample, "a second record of this (row, sample)")) \
        in out, out
