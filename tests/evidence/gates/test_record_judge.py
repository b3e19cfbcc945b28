"""The one judge of a job's records (evidence.gates.record_judge): the build's evaluate_job, the audit of an accepted
run and the audit of a rejected one run the same table of named gates, and each gate alone rejects the bad input it
states."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import write_job, write_json
from evidence.audit.rejections import check_rejections
from evidence.audit.runs import check_runs
from evidence.dataset import load_bundle_data
from evidence.gates import record_judge
from evidence.gates.index import evaluate_job
from evidence.gates.record_judge import (
    ACCEPTED,
    BUILD,
    EVERYWHERE,
    RECORD_GATES,
    REJECTED,
    RecordGate,
    gate_names,
)
from evidence.problems import Problem
from facts import checkpoint_name
from facts.metrics import IDENTICAL_GROUPS_KEY

N = 10  # the synthetic sweep's runs: 10 updates


def test_the_table_names_each_gate_once_and_states_its_rule():
    names = gate_names()
    assert len(set(names)) == len(names), names
    assert all(gate.rule and gate.where <= EVERYWHERE and gate.scope in ("job", "run") for gate in RECORD_GATES)
    assert all(set(gate.requires) <= set(names[:names.index(gate.name)]) for gate in RECORD_GATES)  # earlier gates
    # what each caller re-runs, as the table states it (the audit of an accepted run: job.json, the metrics log,
    # run.json, the ledger and the ranks; its evaluation is the evaluations check's)
    assert [g.name for g in RECORD_GATES if ACCEPTED in g.where] == ["job", "job-identity", "cleanup", "metrics", "run",
                                                                     "ledger", "ranks"]
    assert [g.name for g in RECORD_GATES if BUILD in g.where] == names
    assert [g.name for g in RECORD_GATES if REJECTED not in g.where] == [
        "links", "job-told", "rollout-diversity", "ranks", "changed-while-judged"]


@pytest.fixture
def marking_gate(monkeypatch):
    """A gate of this test's own, added to the table for the test's duration: every job's metrics log fails it."""
    def marked(records) -> list[Problem]:
        """Every job fails this test's gate."""
        return [Problem(f"{records.run_prefix}metrics.jsonl", "the test's own gate")]

    monkeypatch.setattr(record_judge, "RECORD_GATES", [*record_judge.RECORD_GATES, RecordGate("test-mark", marked)])
    return "the test's own gate"


def test_a_gate_added_to_the_table_is_run_by_the_build_and_both_audits(clean_build, bundle_copy, marking_gate):
    """One gate more in evidence.gates.record_judge.RECORD_GATES, and nothing else: the build's evaluate_job rejects
    with it, the audit's runs check finds it in every accepted run's copy, and its rejections check takes it as a
    failing gate the bundle shows (a rejected run failing it is no valid run left out)."""
    sweep, _ = clean_build
    evidence = evaluate_job(sweep / "jobs" / "grpo-42")
    assert [str(p) for p in evidence.failures] == [f"run/metrics.jsonl: {marking_gate}"]

    data_dir = bundle_copy / "data"
    data = load_bundle_data(data_dir)
    found = {str(p) for p in check_runs(data_dir, data)}
    assert {f"data/runs/{arm}-{seed}/metrics.jsonl: {marking_gate}" for arm, seed in data.accepted} <= found

    row = next(r for r in data.index if r["job"] == "grpo-42")
    row.update(accepted="no", reason="run/metrics.jsonl: rejected by the test")  # the build's verdict, as index.csv says
    assert check_rejections(data_dir, data) == []


def test_without_it_the_rejected_run_is_a_valid_run_left_out(bundle_copy):
    """The control of the test above: the same rejection, no gate failing, is cherry-picking."""
    data_dir = bundle_copy / "data"
    data = load_bundle_data(data_dir)
    row = next(r for r in data.index if r["job"] == "grpo-42")
    row.update(accepted="no", reason="run/metrics.jsonl: rejected by the test")
    (finding,) = check_rejections(data_dir, data)
    assert "a valid run left out" in finding.reason


# ---- each gate, alone -------------------------------------------------------------------------------------

def _edit_json(path: Path, edit) -> None:
    value = json.loads(path.read_text())
    edit(value)
    write_json(path, value)


def _job(**fields):
    return lambda job: _edit_json(job / "job.json", lambda r: r.update(fields))


def _run(edit):
    return lambda job: _edit_json(job / "run" / "run.json", edit)


def _lines(name: str, edit):
    def apply(job: Path) -> None:
        path = job / name
        path.write_text("".join(f"{line}\n" for line in edit(path.read_text().splitlines())))
    return apply


def _link(job: Path) -> None:
    os.symlink("job.json", job / "job-link.json")


def _identical_groups(job: Path) -> None:
    """Every rollout group of every step had its K = 4 responses identical (an engine that ignored the seeds)."""
    _lines("run/metrics.jsonl", lambda lines: [json.dumps({**json.loads(ln), IDENTICAL_GROUPS_KEY: 1.0}) for ln in lines])(job)
    _run(lambda r: r["config"]["workload"].update(n_samples_per_prompt=4))(job)


def _no_command(job: Path) -> None:
    """No command.public.json, in a run of another trainer (whose evaluation's setting its job spec declares, not
    the command: the evaluation's eval-setting gate does not read the command then)."""
    _run(lambda r: r.update(trainer={"name": "labtrainer"}))(job)
    (job / "command.public.json").unlink()


def _still_written(monkeypatch):
    """Something of the job still writes into its directory while the gates read it (a gate of the test's own,
    before the last one, appends to its log)."""
    def writes(records) -> list[Problem]:
        """The job's log grows while it is judged."""
        with open(records.job_dir / "job.log", "a", encoding="utf-8") as handle:
            handle.write("a late line\n")
        return []

    gates = list(record_judge.RECORD_GATES)
    monkeypatch.setattr(record_judge, "RECORD_GATES", [*gates[:-1], RecordGate("test-writer", writes), gates[-1]])


# gate -> (what is done to a valid job directory, the first finding, its kind)
ALONE = {
    "links": (_link, "job-link.json: a symbolic link: ", "evidence-link"),
    "job-told": (_job(algo=None), "job.json: cannot tell algo, seed and n_updates of the job", "job"),
    "job": (lambda job: (job / "job.json").write_text("[]\n"), "job.json: not a JSON object", "job"),
    "job-identity": (_job(seed=9), "job.json: records grpo-9, not grpo-42", "job"),
    "cleanup": (_job(cleanup=["pid 4242"]), "job.json: 1 leftover(s) after the job: pid 4242", "cleanup"),
    "outputs": (_job(run_outputs_sha256={"run.json": "0" * 64}), "run/eval.json: appeared after the job ended",
                "outputs"),
    "metrics": (_lines("run/metrics.jsonl", lambda lines: lines[:-1]),
                "run/metrics.jsonl: key step: 9 of 10 steps present; missing step 9", "metrics"),
    "run": (_run(lambda r: r.update(status="failed")), "run/run.json: status is 'failed', not 'completed'", "run"),
    "checkpoint": (lambda job: (job / "run" / "checkpoints" / checkpoint_name(N) / "model.safetensors").write_bytes(b""),
                   f"run/checkpoints/{checkpoint_name(N)}/model.safetensors: empty file", "checkpoint"),
    "tensorboard": (lambda job: [p.write_bytes(b"") for p in (job / "run" / "tensorboard").iterdir()],
                    "run/tensorboard: event files are empty", "tensorboard"),
    "ledger": (_run(lambda r: r.update(data_ledger="x")), "run/run.json: data_ledger is not a ledger's declaration",
               "ledger"),
    "eval-json": (lambda job: (job / "run" / "eval.json").write_text("{"), "run/eval.json: ", "eval"),
    "eval": (lambda job: _edit_json(job / "run" / "eval.json", lambda r: r["final"].update(eval_seed=30)),
             "run/eval.json: initial and final differ in eval_seed", "eval"),
    "rollout-diversity": (_identical_groups, "run/metrics.jsonl: every rollout group of every step had 4 identical",
                          "identical-groups"),
    "ranks": (_job(ranks=[{"rank": 1, "node_index": 1, "state": "FAILED", "failure": "killed"}]),
              "job.json: rank 1 on node 1 ended FAILED: killed", "ranks"),
    "command": (_no_command, "command.public.json: missing", "command"),
    "changed-while-judged": (None, "job.log: changed while the job was judged", "judged"),
}


def test_every_gate_has_its_bad_input():
    assert sorted(ALONE) == sorted(gate_names())


@pytest.mark.parametrize("gate", list(ALONE))
def test_each_gate_alone_rejects_its_bad_input(tmp_path, monkeypatch, gate):
    """A valid job directory (written as the launcher and the trainer write it) passes every gate; one edit, and only
    the gate whose rule it breaks fails, naming the file, as the build's evaluate_job reports it."""
    job = write_job(tmp_path / "sweep", "grpo", 42, 0, N)
    told = (None, None, None) if gate == "job-told" else ("grpo", 42, N)  # as evaluate_job(job) tells them, or given
    assert record_judge.judge_records(_records(job)) == []
    edit, finding, kind = ALONE[gate]
    if edit is None:
        _still_written(monkeypatch)
    else:
        edit(job)
    found = record_judge.judge_records(_records(job, told))
    assert [failure.gate for failure in found] == [gate], found
    assert str(found[0].problems[0]).startswith(finding), found[0].problems
    assert {p.kind for p in found[0].problems} == {kind}
    evidence = evaluate_job(job, *told, digests=True)  # the build's call: the same problems, in order
    assert evidence.failures == list(found[0].problems) or gate == "changed-while-judged"
    assert not evidence.accepted


def _records(job: Path, told: tuple = ("grpo", 42, N)):
    """The job's records as the build gathers them (evaluate_job's own gathering), its algo, seed and run length
    ``told`` (None: it cannot tell them; evaluate_job reads job.json's, which the job-told edit takes away)."""
    from evidence.gates.index import _job_records
    from evidence.gates.judged import job_file_digests

    return _job_records(job, job / "run", *told, "grpo", None, None, job_file_digests(job))
