"""A run's data ledger (run/data_ledger.jsonl) is checked across its resumes: the run consumed exactly its planned rows,
in order, ran every step once, and its metrics log is the one its trainer recorded. The ledger here is written from the
formula the docs state (``benchmarks.synthetic_sweep.write_ledger``: a first process, then one resumed at step 2, as a stop-and-
resume leaves it); each forgery is one the peers' users met (verl#7401: a resume that ran nothing; verl#3457: data
order changed after a resume; NeMo-RL#2519: a changed dataset after a resume) or a copy. Each is judged by the build's
gate (``evaluate_job``) and, in a resealed bundle, by the audit. The real trainer's ledger across a real stop and
resume is tested through launch.py (tests/test_certify_launch.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import _digest, job_dir, make_sweep, write_json, write_ledger
from evidence import audit_bundle, build_bundle, evaluate_job
from tests.sweeps import reseal_bag

N_STEPS = 5
JOB = ("grpo", 1)


def _ledger(sweep: Path) -> Path:
    return job_dir(sweep, *JOB) / "run" / "data_ledger.jsonl"


def _lines(sweep: Path) -> list[dict]:
    return [json.loads(line) for line in _ledger(sweep).read_text().splitlines()]


def _write(sweep: Path, lines: list[dict]) -> None:
    _ledger(sweep).write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))


def _step(lines: list[dict], step: int) -> dict:
    """The last line of ``step`` (the one that stands for it after the resume)."""
    return [line for line in lines if line.get("step") == step][-1]


def _rechain(lines: list[dict], train_sha256: str = "7a" * 32) -> None:
    """What a careful forger does after editing rows: every chain value after the edit recomputed (but not the plan,
    which the process wrote from the split it loaded)."""
    previous, last = _digest(["proofgrid data ledger", train_sha256]), {}
    for line in lines:
        if "start" in line:
            previous = last.get(line["start"]["resumed_from"] - 1, _digest(["proofgrid data ledger", train_sha256]))
            continue
        line["chain"] = previous = _digest([previous, line["step"], line["rows"], line["rows_sha256"]])
        last[line["step"]] = previous


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> Path:
    """One run of 5 steps, stopped before step 2 and resumed by a second process."""
    sweep = make_sweep(tmp_path_factory.mktemp("ledger"), algos=("grpo",), seeds=(1,), n_steps=N_STEPS)
    write_ledger(job_dir(sweep, *JOB), nonce="ab" * 16, resumed_at=2)
    return sweep


def _failures(sweep: Path) -> list[str]:
    return [str(f) for f in evaluate_job(job_dir(sweep, *JOB)).failures]


def test_an_honest_stop_and_resume_is_accepted_and_its_bundle_audits_clean(resumed, tmp_path):
    sweep = Path(shutil.copytree(resumed, tmp_path / "sweep"))
    assert _failures(sweep) == []
    starts = [line["start"] for line in _lines(sweep) if "start" in line]
    assert [s["resumed_from"] for s in starts] == [0, 2] and starts[0]["process"] != starts[1]["process"]
    result = build_bundle(sweep, figures=False)
    assert result.accepted == 1 and (result.bundle_dir / "data" / "runs" / "grpo-1" / "data_ledger.jsonl").is_file()
    assert audit_bundle(result.archive) == []


def _skip_step(lines):  # verl#7401's class: a resume that runs past steps nobody ran
    start = next(i for i, line in enumerate(lines) if line.get("start", {}).get("resumed_from") == 2)
    lines[start]["start"]["resumed_from"] = 3
    lines.remove(_step(lines, 2))


def _reorder_rows(lines):  # verl#3457's class: the rows of a step after the resume in another order
    line = _step(lines, 3)
    line["rows"] = line["rows"][::-1]


def _reorder_rows_rechained(lines):
    _reorder_rows(lines)
    _rechain(lines)


def _changed_split(lines):  # NeMo-RL#2519's class: the resumed process loaded another split, and planned from it
    start = next(line for line in lines if line.get("start", {}).get("resumed_from") == 2)
    start["start"]["train_sha256"], start["start"]["plan_sha256"] = "5e" * 32, "6f" * 32
    for step in range(2, N_STEPS):
        line = _step(lines, step)
        line["rows"] = [r + 1 for r in line["rows"]]
        line["rows_sha256"] = _digest([[r, f"question {r}", str(r)] for r in line["rows"]])
    _rechain(lines)
    for step in range(2, N_STEPS):
        _step(lines, step)["plan"] = _step(lines, step)["chain"]  # its own plan: the other split's rows


def _ran_nothing(lines):  # a resume that exits 0 having run nothing: the steps after it are gone from the ledger
    del lines[next(i for i, line in enumerate(lines) if line.get("start", {}).get("resumed_from") == 2) + 1:]


def _another_job(lines):  # a ledger pieced together from two jobs': its processes carry two nonces
    next(line for line in lines if line.get("start", {}).get("resumed_from") == 2)["start"]["job_nonce"] = "cd" * 16


def _repeated_step(lines):
    lines.insert(lines.index(_step(lines, 3)) + 1, dict(_step(lines, 3)))


FORGERIES = {
    "a skipped step": (_skip_step, ["line 4: a process resumed at step 3, but step 2 never ran (no process recorded "
                                    "it): a skipped step",
                                    "records no rows consumed for step 2, which metrics.jsonl logs"]),
    "a reordered row": (_reorder_rows, ["line 6, step 3: its chain does not follow from the steps before it"]),
    "a reordered row, chain recomputed": (_reorder_rows_rechained, ["line 6, step 3: consumed rows [",
                                                                    "that are not the planned ones"]),
    "a changed split after the resume": (_changed_split, [
        "line 4: the process started at step 2 has plan_sha256 6f6f6f6f6f6f, run.json's is",
        "it planned other rows than the run (its training split, or their order, changed on resume)",
        "line 4: the process started at step 2 has train_sha256 5e5e5e5e5e5e"]),
    "a resume that ran nothing": (_ran_nothing, ["records no rows consumed for step 2, which metrics.jsonl logs",
                                                 "run.json says completed, but the ledger's processes ran 2 of its 5 "
                                                 "steps: steps 2..4 never ran"]),
    "processes of two jobs": (_another_job, ["its processes carry 2 job nonces: lines of another job's ledger"]),
    "a repeated step": (_repeated_step, ["line 7: step 3 where step 4 was next (a skipped, repeated or reordered "
                                         "step)"]),
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_ledger_rejects_the_run_naming_the_step(resumed, tmp_path, forgery):
    sweep = Path(shutil.copytree(resumed, tmp_path / "sweep"))
    edit, said = FORGERIES[forgery]
    lines = _lines(sweep)
    edit(lines)
    _write(sweep, lines)
    failures = _failures(sweep)
    for text in said:
        assert any(text in f for f in failures), (text, failures)
    assert all(f.startswith(("run/data_ledger.jsonl: ", "run/metrics.jsonl")) for f in failures), failures


def test_another_run_s_metrics_log_is_not_the_one_its_trainer_recorded(resumed, tmp_path):
    """The metrics log of another run (a copy) differs from the values the ledger's trainer recorded, step by step."""
    sweep = Path(shutil.copytree(resumed, tmp_path / "sweep"))
    log = job_dir(sweep, *JOB) / "run" / "metrics.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    records[1]["train/loss"] += 1e-9  # one value of one step
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert _failures(sweep) == ["run/data_ledger.jsonl: step 1: metrics.jsonl's line is not the values this run's "
                                "trainer logged at that step (the ledger's digest differs: another run's metrics log, "
                                "or an edited one)"]


def test_a_declared_ledger_that_is_missing_or_torn_rejects_the_run(resumed, tmp_path):
    sweep = Path(shutil.copytree(resumed, tmp_path / "sweep"))
    text = _ledger(sweep).read_text()
    _ledger(sweep).write_text(text + '{"step": 5, "rows": [1, 2')  # a torn last line after the run completed
    assert "run/data_ledger.jsonl: line 8: not valid JSON" in _failures(sweep)
    _ledger(sweep).unlink()
    assert _failures(sweep) == ["run/data_ledger.jsonl: missing or unreadable, but run.json declares the run's data "
                                "ledger (data_ledger)"]
    run = job_dir(sweep, *JOB) / "run" / "run.json"
    write_json(run, {k: v for k, v in json.loads(run.read_text()).items() if k != "data_ledger"})
    assert _failures(sweep) == []  # a run that declares no ledger (another trainer's, an older one) has none


def test_the_audit_names_a_ledger_edited_in_a_resealed_bundle(resumed, tmp_path):
    sweep = Path(shutil.copytree(resumed, tmp_path / "sweep"))
    result = build_bundle(sweep, figures=False)
    bag = Path(shutil.copytree(result.bundle_dir, tmp_path / "bag"))
    path = bag / "data" / "runs" / "grpo-1" / "data_ledger.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    _reorder_rows_rechained(lines)
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    reseal_bag(bag)
    found = [str(p) for p in audit_bundle(bag)]
    assert any(f.startswith("data/runs/grpo-1/data_ledger.jsonl: line 6, step 3: consumed rows [") for f in found), found


def test_the_chain_is_the_documented_formula():
    """facts.ledger_format against the formula written out here: SHA256 of canonical JSON, genesis bound to the split."""
    from facts.ledger_format import chain, genesis, planned_chain, rows_digest

    start = hashlib.sha256(b'["proofgrid data ledger","' + b"7a" * 32 + b'"]').hexdigest()
    assert genesis("7a" * 32) == start
    rows = rows_digest([(3, "q", "7")])
    assert rows == hashlib.sha256(b'[[3,"q","7"]]').hexdigest()
    first = hashlib.sha256(f'["{start}",0,[3],"{rows}"]'.encode()).hexdigest()
    assert chain(start, 0, [3], rows) == first == planned_chain("7a" * 32, [([3], rows)])[-1]


def test_a_run_rejected_on_its_ledger_is_a_rejection_the_bundle_shows(resumed, tmp_path):
    """The build rejects the run on its ledger, and the audit confirms the rejection from the ledger the bundle carries
    (not a valid run left out); without the bundled ledger it is a note, as any rejection resting on a missing file."""
    sweep = Path(shutil.copytree(resumed, tmp_path / "sweep"))
    lines = _lines(sweep)
    _reorder_rows(lines)
    _write(sweep, lines)
    result = build_bundle(sweep, figures=False)
    assert result.accepted == 0 and "data_ledger.jsonl: line 6, step 3" in result.jobs[0]["reason"]
    notes: list[str] = []
    assert audit_bundle(result.archive, notes=notes) == [] and notes == []
    bag = Path(shutil.copytree(result.bundle_dir, tmp_path / "bag"))
    (bag / "data" / "runs" / "grpo-1" / "data_ledger.jsonl").unlink()
    reseal_bag(bag)
    notes = []
    assert audit_bundle(bag, notes=notes) == [] and any("grpo-1" in n and "not re-derived" in n for n in notes), notes
