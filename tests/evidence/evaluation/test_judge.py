"""The one judge of an evaluation (evidence.evaluation.judge): the build's eval gate and the audit run the same
table of named gates, and each gate alone rejects the bad input it states."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import N_PROMPTS, TEST_SPLIT, TEST_SPLIT_SHA256, write_eval, write_json
from evidence import audit_bundle, build_bundle
from evidence.audit.evaluations import check_evaluations
from evidence.audit.rejections import check_rejections
from evidence.dataset import load_bundle_data
from evidence.evaluation import judge
from evidence.evaluation.judge import GATES, Gate, gate_names, judge_evaluation
from evidence.gates.artifacts import check_eval, job_evaluation
from evidence.problems import Problem
from facts import checkpoint_name

FINAL = checkpoint_name(10)  # the synthetic sweep's runs: 10 updates


def test_the_table_names_each_gate_once_and_states_its_rule():
    names = gate_names()
    assert names == [gate.name for gate in judge.GATES] and len(set(names)) == len(names)
    assert all(gate.rule and gate.scope in ("record", "entry", "evaluation") for gate in GATES), names
    assert all(set(gate.requires) <= set(names[:names.index(gate.name)]) for gate in GATES)  # only earlier gates


@pytest.fixture
def marking_gate(monkeypatch):
    """A gate of this test's own, added to the table for the test's duration: it fails every evaluation."""
    def marked(ev) -> list[Problem]:
        """Every evaluation fails this test's gate."""
        return [Problem(ev.record_file, "the test's own gate")]

    monkeypatch.setattr(judge, "GATES", [*judge.GATES, Gate("eval-test-mark", marked, "evaluation")])
    return "the test's own gate"


def test_a_gate_added_to_the_table_is_run_by_the_build_and_the_audit(clean_build, bundle_copy, marking_gate):
    """One gate more in evidence.evaluation.judge.GATES, and nothing else: the build's eval gate rejects with it,
    the audit's evaluations check finds it in every accepted run's copy, and its rejections check takes it as a
    failing gate the bundle shows (a rejected run failing it is no valid run left out)."""
    sweep, _ = clean_build
    _, failures = check_eval(sweep / "jobs" / "grpo-42" / "run", FINAL, sweep_dir=sweep)
    assert f"run/eval.json: {marking_gate}" in [str(p) for p in failures]

    data_dir = bundle_copy / "data"
    data = load_bundle_data(data_dir)
    found = {str(p) for p in check_evaluations(data_dir, data)}
    assert {f"data/runs/{arm}-{seed}/eval.json: {marking_gate}" for arm, seed in data.accepted} <= found

    row = next(r for r in data.index if r["job"] == "grpo-42")
    row.update(accepted="no", reason="run/eval.json: rejected by the test")  # the build's verdict, as index.csv says
    assert check_rejections(data_dir, data) == []


def test_without_it_the_rejected_run_is_a_valid_run_left_out(bundle_copy):
    """The control of the test above: the same rejection, no gate failing, is cherry-picking."""
    data_dir = bundle_copy / "data"
    data = load_bundle_data(data_dir)
    row = next(r for r in data.index if r["job"] == "grpo-42")
    row.update(accepted="no", reason="run/eval.json: rejected by the test")
    (finding,) = check_rejections(data_dir, data)
    assert "a valid run left out" in finding.reason


def test_a_run_rejected_by_a_gate_the_audit_once_lacked_is_no_valid_run_left_out(sweep):
    """A final evaluation whose reward is all zero: the build rejects the run (eval-all-zero), and the audit's
    rejections check, which runs the same table on the bundle's copy, confirms the rejection (its own short list
    of gates lacked this one: it called the run a valid one left out, an audit finding on an honest bundle)."""
    write_eval(sweep / "jobs" / "grpo-42" / "run", FINAL, 0.0)
    bag = build_bundle(sweep, figures=False).bundle_dir
    index = {row.split(",")[0]: row for row in (bag / "data" / "index.csv").read_text().splitlines()}
    assert ",no," in index["grpo-42"] and "all-zero eval reward on the final checkpoint" in index["grpo-42"]
    notes = []
    assert not [f for f in audit_bundle(bag, notes=notes) if "a valid run left out" in f.reason]
    assert not [n for n in notes if n.startswith("rejection: grpo-42")], notes  # shown by the bundle: confirmed


# ---- each gate, alone -------------------------------------------------------------------------------------

def _edit_json(path: Path, edit) -> None:
    value = json.loads(path.read_text())
    edit(value)
    write_json(path, value)


def _entry(kind: str, **fields):
    return lambda run: _edit_json(run / "eval.json", lambda r: r[kind].update(fields))


def _user_reward_and(edit):
    """``edit`` on a run whose reward is a user's function the reviewer did not pass (its responses are then not
    re-scored: the statistics are judged as stored)."""
    def apply(run: Path) -> dict:
        edit(run)
        return {"task": {"reward": {"name": "labmod:score", "source_sha256": "0" * 64}}}
    return apply


def _declared(run_record: dict, argv) -> callable:
    def apply(run: Path) -> dict:
        write_json(run.parent / "command.public.json", {"argv": argv})
        return run_record
    return apply


def _pinned_split(trainer: dict | None = None) -> dict:
    record = {"config": {"workload": {"test_path": TEST_SPLIT, "eval": {"n_prompts": N_PROMPTS}}},
              "inputs": {TEST_SPLIT: TEST_SPLIT_SHA256}}
    return {**record, "trainer": trainer} if trainer is not None else record


def _relabel(run: Path) -> dict:
    """A label of the subset edited and every digest rewritten around it (another trainer's run: its declared
    setting is in its job spec)."""
    rows = json.loads((run / "eval" / "subset.json").read_text())
    rows[3][2] += "0"
    data = json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode()
    (run / "eval" / "subset.json").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    _edit_json(run / "eval.json", lambda r: [r[k].update(subset_sha256=digest) for k in ("initial", "final")])
    return _pinned_split({"name": "labtrainer"})


def _reward_edited(run: Path) -> None:
    lines = (run / "eval" / "final.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["reward"] = 1.0 - record["reward"]
    (run / "eval" / "final.jsonl").write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")


# gate -> (what is done to a valid run's evaluation: returns run.json's record or None, the finding's start)
ALONE = {
    "eval-record": (lambda run: (run / "eval.json").write_text("[]\n"), "run/eval.json: not a JSON object"),
    "eval-entries": (lambda run: _edit_json(run / "eval.json", lambda r: r.pop("initial")),
                     "run/eval.json: no 'initial' checkpoint entry"),
    "eval-fields": (_entry("final", all_zero_reward="no"), "run/eval.json: final.all_zero_reward is not a boolean"),
    "eval-shared": (_entry("initial", shared={"path": "elsewhere"}),
                    "run/eval.json: initial.shared needs path, key and sha256"),
    "eval-responses": (None, "run/eval.json: initial.n_responses 100, expected 99"),  # the plan said 99
    "eval-statistics": (_user_reward_and(lambda run: _edit_json(run / "eval.json", lambda r: r["final"].update(
        {"pass@1": r["final"]["pass@1"] + 0.001}))), "run/eval.json: final: pass@1 "),
    "eval-checkpoint": (_entry("final", checkpoint=checkpoint_name(9)),
                        f"run/eval.json: final.checkpoint is {checkpoint_name(9)!r}, expected {FINAL!r}"),
    "eval-all-zero": (_entry("final", all_zero_reward=True), "run/eval.json: all-zero eval reward on the final"),
    "eval-control": (_entry("initial", eval_seed=30), "run/eval.json: initial and final differ in eval_seed"),
    "eval-subset-pinned": (lambda run: (run / "eval" / "subset.json").write_text("[]"),
                           "run/eval/subset.json: its SHA256 "),
    "eval-setting": (_declared(_pinned_split(), ["python", "-m", "labtrainer"]),
                     "run/run.json: run.json is proofgrid's trainer's"),
    "eval-subset-derived": (_relabel, "run/eval/subset.json: row 3: label "),
    "eval-rescored": (_reward_edited, "run/eval/final.jsonl: line 1, row 0, sample 0: reward "),
}


def test_every_gate_has_its_bad_input():
    assert sorted(ALONE) == sorted(gate_names())


@pytest.mark.parametrize("gate", list(ALONE))
def test_each_gate_alone_rejects_its_bad_input(tmp_path, gate):
    """A valid run's evaluation (written as the trainer writes it) passes every gate; one edit, and only the gate
    whose rule it breaks fails, naming the file."""
    run = tmp_path / "sweep" / "jobs" / "grpo-1" / "run"
    write_eval(run, FINAL, 0.5)
    assert judge_evaluation(job_evaluation(run, FINAL, sweep_dir=tmp_path / "sweep")) == []
    edit, finding = ALONE[gate]
    run_record = edit(run) if edit is not None else None
    expected = 99 if gate == "eval-responses" else None
    found = judge_evaluation(job_evaluation(run, FINAL, expected, tmp_path / "sweep", run_summary=run_record))
    assert [failure.gate for failure in found] == [gate] * len(found) and found, found
    assert str(found[0].problems[0]).startswith(finding), found[0].problems
    assert all(p.kind == ("all-zero-eval-reward" if gate == "eval-all-zero" else "eval") for p in found[0].problems)
