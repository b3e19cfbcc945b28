"""An earlier attempt of a re-run job is a reader of the shared initial evaluation too: the launcher keeps what a
rejected attempt left (``jobs/<job>/attempts/<n>/run/eval.json``, launcher.jobs.prepare_job_dirs), so an attempt
that read other bytes than the shared file holds now (it was replaced between the attempts) accepts no job of that
evaluation, and the finding names the job and the attempt, as for a current reader. The bundle keeps each attempt's
eval.json (``runs/<job>/attempts/<n>/eval.json``) so the audit re-checks the same readers: an honest rejection
audits clean, and an index that accepts the jobs beside that attempt's record is a finding."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep, share_initial_eval, write_json
from evidence import audit_bundle, build_bundle
from facts.repo import REPO_ROOT
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
JOBS = ("grpo-42", "rpp-42")
ATTEMPT = {"algo": "rpp", "seed": 42, "scheduler": "slurm", "job_id": "88_3", "state": "TIMEOUT", "exit_code": 0,
           "failure": None, "node": "cn-042.cluster.example"}


def _keep_attempt(sweep: Path, job: str, number: int = 0) -> Path:
    """What prepare_job_dirs keeps of a rejected attempt before the re-run: its job record, and a copy of the run's
    metrics log, eval.json and run.json under attempts/<n>/run/."""
    job_dir = sweep / "jobs" / job
    attempt = job_dir / "attempts" / str(number)
    write_json(attempt / "job.json", ATTEMPT)
    (attempt / "run").mkdir(parents=True)
    for name in ("metrics.jsonl", "eval.json", "run.json"):
        shutil.copy2(job_dir / "run" / name, attempt / "run" / name)
    return attempt


@pytest.fixture(scope="module")
def replaced(tmp_path_factory) -> tuple[Path, str, str]:
    """rpp-42's attempt 0 read the shared evaluation; it was replaced (a lower control) before the re-run, which
    read the new file, as grpo-42 did: (sweep, the digest attempt 0 read, the file's digest now)."""
    sweep = make_sweep(tmp_path_factory.mktemp("attempts"), algos=("grpo", "rpp"), seeds=(42,), n_steps=3)
    shared = share_initial_eval(sweep, JOBS)
    first = hashlib.sha256((shared / "eval.json").read_bytes()).hexdigest()
    _keep_attempt(sweep, "rpp-42")
    share_initial_eval(sweep, JOBS, pass1=0.12)  # replaced in place; the current runs record the new bytes
    now = hashlib.sha256((shared / "eval.json").read_bytes()).hexdigest()
    assert first != now
    return sweep, first, now


def _index(sweep: Path) -> dict[str, dict]:
    with open(sweep / "bundle" / "data" / "index.csv", newline="") as f:
        return {row["job"]: row for row in csv.DictReader(f)}


def test_python_m_evidence_build_rejects_every_job_when_an_earlier_attempt_read_other_bytes(replaced, tmp_path):
    sweep = Path(shutil.copytree(replaced[0], tmp_path / "sweep"))
    done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    index = _index(sweep)
    assert {job: row["accepted"] for job, row in index.items()} == {"grpo-42": "no", "rpp-42": "no"}
    key12 = next((sweep / "initial_eval").iterdir()).name
    reason = f"replaced after a run read it: rpp-42 attempt 0 read {replaced[1][:12]}, the file is {replaced[2][:12]}"
    for job in JOBS:
        assert f"initial_eval/{key12}/eval.json: {reason}" in index[job]["reason"], index[job]["reason"]
    kept = json.loads((sweep / "bundle" / "data" / "runs" / "rpp-42" / "attempts" / "0" / "eval.json").read_text())
    assert kept["initial"]["shared"]["sha256"] == replaced[1]  # the bundle keeps what the attempt read
    # The rejection is honest: the audit re-checks the same readers (no cherry-picking finding), exit 0.
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(sweep / "bundle.tar.gz")], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert audited.returncode == 0, audited.stdout + audited.stderr


@pytest.fixture(scope="module")
def agreeing(replaced, tmp_path_factory) -> tuple[Path, Path]:
    """The same sweep where attempt 0 read the bytes the file holds now: (sweep, bundle dir), built once."""
    sweep = Path(shutil.copytree(replaced[0], tmp_path_factory.mktemp("agree") / "sweep"))
    path = sweep / "jobs" / "rpp-42" / "attempts" / "0" / "run" / "eval.json"
    record = json.loads(path.read_text())
    record["initial"] = json.loads((sweep / "jobs" / "rpp-42" / "run" / "eval.json").read_text())["initial"]
    write_json(path, record)
    result = build_bundle(sweep, figures=False)
    return sweep, result.bundle_dir


def test_an_attempt_that_read_the_same_bytes_accepts_the_jobs_and_audits_clean(agreeing):
    sweep, bundle = agreeing
    assert {job: row["accepted"] for job, row in _index(sweep).items()} == {"grpo-42": "yes", "rpp-42": "yes"}
    assert (bundle / "data" / "runs" / "rpp-42" / "attempts" / "0" / "eval.json").is_file()
    assert audit_bundle(bundle) == []


def test_an_index_accepting_the_jobs_beside_an_attempt_that_read_other_bytes_is_a_finding(replaced, agreeing,
                                                                                          tmp_path):
    """The rejection flipped: the index accepts both jobs while the bundle keeps the attempt's true record (the
    digest it read before the file was replaced), resealed: the audit names the shared file, the attempt and both
    digests."""
    bag = Path(shutil.copytree(agreeing[1], tmp_path / "bag"))
    path = bag / "data" / "runs" / "rpp-42" / "attempts" / "0" / "eval.json"
    record = json.loads(path.read_text())
    record["initial"]["shared"]["sha256"] = replaced[1]
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    reseal_bag(bag)
    key12 = next((bag / "data" / "initial_eval").iterdir()).name
    findings = [str(f) for f in audit_bundle(bag)]
    assert (f"data/initial_eval/{key12}/eval.json: replaced after a run read it: rpp-42 attempt 0 read "
            f"{replaced[1][:12]}, the file is {replaced[2][:12]}; no run is judged on other bytes than its readers "
            "read") in findings, findings
