"""A job's history survives its successful re-run: earlier attempts and requeues are incidents."""

from __future__ import annotations

import csv
import json
import shutil

from benchmarks.synthetic_sweep import job_dir, set_job_fields, write_json
from evidence import audit_bundle, build_bundle

CANCELLED = {"algo": "rpp", "seed": 42, "scheduler": "slurm", "job_id": "88_3", "state": "CANCELLED",
             "exit_code": 143, "exit_signal": 15, "failure": "terminated by signal 15", "node": "cn-042.cluster.example"}
TIMED_OUT = {**CANCELLED, "job_id": "91_3", "state": "TIMEOUT", "exit_code": 0, "failure": None}
REQUEUE = {"event": "time-limit or preemption warning (USR2)", "job_id": "95_3", "restart_count": 0,
           "at_step": 4, "checkpointed": True, "action": "requeued", "node": "cn-042.cluster.example", "time": 1.5}


def _plant_history(sweep):
    run = job_dir(sweep, "rpp", 42)
    write_json(run / "attempts" / "0" / "job.json", CANCELLED)
    write_json(run / "attempts" / "1" / "job.json", TIMED_OUT)
    set_job_fields(sweep, "rpp", 42, job_id="95_3", history=[REQUEUE], failure=None)
    return run


def test_every_earlier_attempt_and_requeue_is_an_incident_and_stays_in_the_bundle(sweep):
    _plant_history(sweep)
    result = build_bundle(sweep, figures=False)
    assert result.accepted == 9, "history never rejects a job whose evidence is complete"
    rows = [(i.job, i.job_id, i.kind, i.title) for i in result.incidents]
    assert rows == [
        ("rpp-42", "88_3", "earlier-attempt", "Attempt 0 ended CANCELLED (exit 143): terminated by signal 15"),
        ("rpp-42", "91_3", "earlier-attempt", "Attempt 1 ended TIMEOUT (exit 0)"),
        ("rpp-42", "95_3", "requeue",
         "time-limit or preemption warning (USR2) at step 4, checkpointed: requeued"),
    ]
    assert all(i.resolution == "the job was accepted afterwards" for i in result.incidents)
    data = result.bundle_dir / "data"
    kept = json.loads((data / "runs" / "rpp-42" / "attempts" / "0" / "job.json").read_text())
    assert kept["state"] == "CANCELLED" and kept["node"] == "<HOST>"
    report = (data / "report.md").read_text()
    assert "No incidents." not in report and "Attempt 0 ended CANCELLED" in report
    assert audit_bundle(result.archive) == []


def test_the_audit_finds_an_attempt_missing_from_the_incidents(sweep, tmp_path):
    _plant_history(sweep)
    result = build_bundle(sweep, figures=False)
    bag = shutil.copytree(result.bundle_dir, tmp_path / "bag")
    path = bag / "data" / "incidents.csv"
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        kept = [r for r in reader if r["kind"] != "requeue"]
        columns = reader.fieldnames
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(kept)
    messages = [str(f) for f in audit_bundle(bag)]
    assert any("requeue incident" in m and "attempt history is missing" in m for m in messages), messages


def test_building_a_sweep_where_nothing_ran_is_refused_not_sealed_as_zero_accepted(sweep):
    import subprocess
    import sys

    shutil.rmtree(sweep / "jobs")
    proc = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep)], capture_output=True, text=True)
    assert proc.returncode == 2 and "nothing ran in" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not (sweep / "bundle").exists() and not (sweep / "bundle.tar.gz").exists()


def _set_resumed_from(run_dir, value) -> None:
    record = json.loads((run_dir / "run.json").read_text())
    write_json(run_dir / "run.json", {**record, "resumed_from": value})


def _actions(sweep, job: str) -> list[tuple[str, str]]:
    with open(sweep / "bundle" / "data" / "incidents.csv", newline="") as f:
        return [(r["title"].split(" ")[0], r["action"]) for r in csv.DictReader(f) if r["job"] == job]


def test_each_incident_says_how_the_job_went_on_from_its_records(sweep, capsys):
    """Through ``python -m evidence build``: the run.json each attempt left says where its last start began
    (a checkpoint, or step 0 with none); a stop followed by another stop in the same attempt says what its
    own event recorded; an older run.json without the record says that it does not say."""
    from evidence.__main__ import main

    rpp = _plant_history(sweep)  # attempts 0 and 1, then a requeue warned at step 4 in the current attempt
    write_json(rpp / "attempts" / "1" / "run" / "run.json", {"resumed_from": None})  # attempt 1 started from scratch
    _set_resumed_from(rpp / "run", {"checkpoint": "step_000004", "step": 4})  # after the requeue
    grpo = job_dir(sweep, "grpo", 42)  # failed at step 1 with no checkpoint; the re-run started from scratch
    write_json(grpo / "attempts" / "0" / "job.json", {**CANCELLED, "algo": "grpo", "state": "FAILED", "exit_code": 1,
                                                      "failure": "non-finite gradient norm (nan) at step 1"})
    _set_resumed_from(grpo / "run", None)
    twice = job_dir(sweep, "rppb", 42)  # two stops in one attempt: the first restart is the event's own record
    set_job_fields(sweep, "rppb", 42, history=[{**REQUEUE, "at_step": 0}, {**REQUEUE, "restart_count": 1, "at_step": 6}])
    _set_resumed_from(twice / "run", {"checkpoint": "step_000006", "step": 6})
    # rpp-1234: its run.json was written before runs recorded where they began
    set_job_fields(sweep, "rpp", 1234, history=[{**REQUEUE, "checkpointed": None, "at_step": None}])
    assert main(["build", str(sweep), "--no-figures"]) == 0
    capsys.readouterr()
    assert _actions(sweep, "rpp-42") == [
        ("Attempt", "re-run from scratch (step 0): there was no checkpoint to resume from"),  # attempt 1's start
        # the current attempt's run.json is of its start after the requeue, not of its first start
        ("Attempt", "re-run; its records do not say whether it resumed from a checkpoint"),
        ("time-limit", "re-run; resumed from its checkpoint step_000004 (continuing at step 4)"),
    ]
    assert _actions(sweep, "grpo-42") == [("Attempt", "re-run from scratch (step 0): there was no checkpoint to "
                                                      "resume from")]
    assert _actions(sweep, "rppb-42") == [
        ("time-limit", "re-run from scratch (step 0): no step was done, so there was no checkpoint"),
        ("time-limit", "re-run; resumed from its checkpoint step_000006 (continuing at step 6)"),
    ]
    assert _actions(sweep, "rpp-1234") == [("time-limit", "re-run; its records do not say whether it resumed from a "
                                                          "checkpoint")]
    report = (sweep / "bundle" / "data" / "report.md").read_text()
    assert "resumed from its last checkpoint" not in report and "there was no checkpoint to resume from" in report
    assert main(["audit", str(sweep / "bundle.tar.gz")]) == 0
