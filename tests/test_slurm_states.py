"""Slurm's job-id and state notations, parsed without a cluster (the cluster tests are in test_slurm.py)."""

from __future__ import annotations

import pytest

from launcher.slurm_states import (
    VANISHED,
    base_state,
    expand_job_ids,
    parse_sacct,
    parse_squeue,
    recorded_exit_code,
)


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
