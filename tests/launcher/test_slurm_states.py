"""Slurm's job-id and state notations, parsed without a cluster, and the one runner every Slurm
command goes through, on real commands (the cluster tests are in test_slurm.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from facts.repo import REPO_ROOT
from facts.states import VANISHED
from launcher.errors import PreflightError, SchedulerUnavailable
from launcher.slurm.commands import pipe_records, run_slurm
from launcher.slurm.slurm_profile import check_environment
from launcher.slurm.slurm_states import (
    SACCT_FORMAT,
    SQUEUE_FORMAT,
    base_state,
    combine_looks,
    expand_job_ids,
    parse_sacct,
    parse_squeue,
    recorded_exit_code,
    sacct_records,
    sacct_states,
    unsettled_tasks,
)

REPO = REPO_ROOT


@pytest.mark.parametrize(("field", "tasks"), [
    ("88_[1-3%4]", ["88_1", "88_2", "88_3"]),
    ("88_[1,3-5]", ["88_1", "88_3", "88_4", "88_5"]),
    ("88_[0-1,7%2]", ["88_0", "88_1", "88_7"]),
    ("88_[12]", ["88_12"]),
    ("88_7", ["88_7"]),
    ("88", ["88"]),
    ("", []),
])
def test_array_range_notation_expands_to_every_task(field, tasks):
    assert expand_job_ids(field) == tasks


def test_a_cancelled_arrays_aggregated_pending_line_reaches_every_pending_task():
    text = ("88_0|CANCELLED by 0|0:15|7|vm\n"
            "88_[1-3%4]|CANCELLED by 0|0:0|0|None assigned\n")
    states = parse_sacct(text)
    assert sorted(states) == ["88_0", "88_1", "88_2", "88_3"]
    assert {s["state"] for s in states.values()} == {"CANCELLED"}
    assert states["88_0"] == {"state": "CANCELLED", "exit_code": 0, "signal": 15, "elapsed_s": 7, "node": "vm"}
    assert states["88_2"]["node"] == "" and states["88_2"]["elapsed_s"] == 0


def test_squeue_lines_give_state_and_pending_reason_per_task():
    text = "90_[2-3]|PENDING|JobArrayTaskLimit\n90_1|RUNNING|None\n"
    states = parse_squeue(text)
    assert states == {"90_2": {"state": "PENDING", "reason": "JobArrayTaskLimit"},
                      "90_3": {"state": "PENDING", "reason": "JobArrayTaskLimit"},
                      "90_1": {"state": "RUNNING", "reason": "None"}}


@pytest.mark.parametrize(("field", "state"), [("CANCELLED by 1000", "CANCELLED"), ("NODE_FAIL", "NODE_FAIL"),
                                              ("", "UNKNOWN"), ("RUNNING+", "RUNNING")])
def test_state_field_reduces_to_the_state_word(field, state):
    assert base_state(field) == state


@pytest.mark.parametrize(("info", "code"), [
    ({"state": "CANCELLED", "exit_code": 0, "signal": 15, "elapsed_s": 7, "node": "vm"}, 143),
    ({"state": "CANCELLED", "exit_code": 0, "signal": 0, "elapsed_s": 0, "node": ""}, None),
    ({"state": "CANCELLED", "exit_code": 0, "signal": 0, "elapsed_s": 37, "node": "vm"}, None),
    ({"state": "TIMEOUT", "exit_code": 0, "signal": 0, "elapsed_s": 60, "node": "vm"}, None),
    ({"state": "FAILED", "exit_code": 1, "signal": 0, "elapsed_s": 3, "node": "vm"}, 1),
    ({"state": "COMPLETED", "exit_code": 0, "signal": 0, "elapsed_s": 3, "node": "vm"}, 0),
    ({"state": VANISHED, "exit_code": None, "signal": 0, "elapsed_s": 0, "node": ""}, None),
])
def test_recorded_exit_code_is_never_zero_for_a_task_that_did_not_complete(info, code):
    assert recorded_exit_code(info) == code


def test_sacct_and_squeue_are_asked_for_exactly_the_fields_their_parsers_read():
    assert SACCT_FORMAT == "--format=JobID,State,ExitCode,ElapsedRaw,NodeList"
    assert SQUEUE_FORMAT == "%i|%T|%r"


def test_pipe_records_name_each_field_pad_short_lines_and_skip_blank_ones():
    text = "a|b|c|extra\n\n  \nd|e\n"
    assert list(pipe_records(text, ("x", "y", "z"))) == [{"x": "a", "y": "b", "z": "c"}, {"x": "d", "y": "e", "z": ""}]


def test_every_run_of_a_requeued_task_is_one_record_in_order_and_the_last_is_its_state():
    # `sacct -D` after a node failure: the failed run, then the run that completed.
    text = "5|NODE_FAIL|0:0|12|nodefail1\n5|COMPLETED|0:0|30|nodefail1\n"
    assert sacct_records(text) == [
        ("5", {"state": "NODE_FAIL", "exit_code": 0, "signal": 0, "elapsed_s": 12, "node": "nodefail1"}),
        ("5", {"state": "COMPLETED", "exit_code": 0, "signal": 0, "elapsed_s": 30, "node": "nodefail1"})]
    assert parse_sacct(text) == {"5": {"state": "COMPLETED", "exit_code": 0, "signal": 0, "elapsed_s": 30,
                                       "node": "nodefail1"}}


@pytest.mark.parametrize("record", ["REQUEUED", "NODE_FAIL", "PREEMPTED"])
def test_the_record_a_requeue_follows_is_not_the_state_of_a_task_squeue_holds_again(record):
    # sacct's last record of a task for the moment after `scontrol requeue` (or a node failure, a
    # preemption), with squeue already holding it again: the queue wins. Out of the queue, sacct's
    # record stands (confirmed_states gives it its second look).
    accounted = parse_sacct(f"88_0|{record}|0:0|30|vm\n88_1|RUNNING|0:0|30|vm\n88_2|COMPLETED|0:0|31|vm\n")
    queued = parse_squeue("88_0|PENDING|BeginTime\n88_1|RUNNING|None\n")
    view = combine_looks(accounted, queued, ["88_0", "88_1", "88_2"])
    assert view["88_0"]["state"] == "PENDING" and view["88_0"]["reason"] == "BeginTime"
    assert view["88_1"]["state"] == "RUNNING" and view["88_2"]["state"] == "COMPLETED"
    assert combine_looks(accounted, {}, ["88_0"])["88_0"]["state"] == record


def test_a_task_in_flight_by_sacct_but_out_of_the_queue_gets_a_second_look():
    # The race CI met: sacct's line for a task of a fast array still read PENDING (the bare array line)
    # while squeue, asked a moment later, no longer held it: it had started and ended in between. A
    # state the two commands contradict is not settled by this look.
    accounted = parse_sacct("88|PENDING|0:0|0|None assigned\n88_1|RUNNING|0:0|3|vm\n88_2|COMPLETED|0:0|3|vm\n")
    queued = parse_squeue("88_3|PENDING|Priority\n")
    tasks = ["88_0", "88_1", "88_2", "88_3", "88_4"]
    view = combine_looks(accounted, queued, tasks)
    assert unsettled_tasks(view, set(queued), tasks) == ["88_0", "88_1", "88_4"]
    assert unsettled_tasks(view, set(tasks), tasks) == []  # held by the controller: its view stands


def test_a_short_sacct_line_reads_as_unknown_not_as_an_error():
    assert parse_sacct("88_4|\n") == {"88_4": {"state": "UNKNOWN", "exit_code": 0, "signal": 0, "elapsed_s": 0,
                                                "node": ""}}


@pytest.fixture
def no_slurm_on_path(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return {**os.environ, "PATH": str(empty)}


MISSING_SACCT = ("proofgrid needs Slurm's sacct on PATH, which is missing here; "
                 "run from a Slurm login node (or load its module)")


def test_a_slurm_command_missing_here_is_one_line_naming_it_and_the_fix(no_slurm_on_path):
    reply = run_slurm(["sacct", "-X", "-P", "-n", "-j", "1", SACCT_FORMAT])
    assert not reply.ok and reply.error == MISSING_SACCT and reply.answer() is None
    with pytest.raises(SchedulerUnavailable) as err:
        sacct_states(["1_0"])
    assert str(err.value) == MISSING_SACCT


def test_the_launch_refusal_for_missing_slurm_commands_keeps_its_words(no_slurm_on_path):
    with pytest.raises(PreflightError) as err:
        check_environment(OmegaConf.create({"kind": "slurm"}), dry_run=False)
    assert str(err.value) == ("cluster=slurm needs Slurm's sbatch, sacct, scancel on PATH, which are missing here; "
                              "run from a Slurm login node (or load its module), or use cluster=local")


def test_a_command_that_does_not_answer_in_time_is_one_line_and_is_not_waited_for():
    reply = run_slurm(["sleep", "30"], timeout_s=0.3)
    assert reply.error == "sleep did not answer within 0.3 s; is the Slurm controller up?"
    with pytest.raises(SchedulerUnavailable, match="did not answer"):
        reply.output()


@pytest.mark.parametrize(("argv", "error"), [
    (["sh", "-c", "echo out; echo 'first line' >&2; echo 'second line' >&2; exit 3"],
     "sh failed: first line; second line"),
    (["false"], "false failed: exit 1"),
])
def test_a_non_zero_exit_is_one_line_with_what_the_command_said(argv, error):
    reply = run_slurm(argv)
    assert reply.error == error and "\n" not in reply.error and reply.answer() is None
    assert reply.stdout == ("out\n" if argv[0] == "sh" else "")  # kept: sbatch's refusal is read from it


def test_a_command_that_answers_gives_its_output():
    reply = run_slurm(["printf", "88_1|RUNNING|None\n"])
    assert reply.ok and reply.output() == reply.answer() == "88_1|RUNNING|None\n"
    assert parse_squeue(reply.output()) == {"88_1": {"state": "RUNNING", "reason": "None"}}


def test_launcher_cancel_without_slurm_is_one_line_and_cancels_nothing(tmp_path, no_slurm_on_path):
    job_dir = tmp_path / "sweep" / "jobs" / "grpo-1"
    job_dir.mkdir(parents=True)
    record = '{"scheduler": "slurm", "job_id": "123_0", "state": "RUNNING"}'
    (job_dir / "job.json").write_text(record)
    proc = subprocess.run([sys.executable, "-m", "launcher", "cancel", str(tmp_path / "sweep")], cwd=REPO,
                          capture_output=True, text=True, env=no_slurm_on_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == (f"proofgrid: error: cannot ask Slurm which jobs are queued or running ({MISSING_SACCT}); "
                    "nothing was cancelled")
    assert (job_dir / "job.json").read_text() == record
