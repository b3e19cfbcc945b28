"""A job's history survives its successful re-run: earlier attempts and requeues are incidents."""

from __future__ import annotations

import csv
import json
import shutil

from sweep_factory import job_dir, set_job_fields, write_json

from evidence import audit, build_bundle

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
    assert audit(result.archive) == []


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
    messages = [str(f) for f in audit(bag)]
    assert any("requeue incident" in m and "attempt history is missing" in m for m in messages), messages


def test_building_a_sweep_where_nothing_ran_is_refused_not_sealed_as_zero_accepted(sweep):
    import subprocess
    import sys

    shutil.rmtree(sweep / "jobs")
    proc = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep)], capture_output=True, text=True)
    assert proc.returncode == 2 and "nothing ran in" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not (sweep / "bundle").exists() and not (sweep / "bundle.tar.gz").exists()
