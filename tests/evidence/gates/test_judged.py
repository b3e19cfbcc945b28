"""What was judged is what is sealed (issue 33 item 1): the build holds every copied job file to the digest it had
when its job was judged and refuses the seal when one changed after the decision; the bundle keeps those digests
(judged.csv) and the audit holds every run copy to them."""

from __future__ import annotations

import csv
import hashlib
import subprocess
import sys
import time
from pathlib import Path

import bagit
import pytest

from benchmarks.synthetic_sweep import make_sweep
from evidence import audit_bundle
from evidence.dataset import load_bundle_data
from evidence.gates.judged import JobFiles, changed_while_judged, job_file_digests, refuse_changed
from evidence.problems import SweepError
from evidence.seal.ro_crate import write_crate


def _rows(bag: Path) -> dict[str, dict]:
    with open(bag / "data" / "judged.csv", newline="") as handle:
        return {r["path"]: r for r in csv.DictReader(handle)}


def test_every_run_copy_has_its_decision_digest_and_a_verbatim_copy_is_the_judged_file(clean_build):
    sweep, result = clean_build
    rows = _rows(result.bundle_dir)
    copies = sorted(p.relative_to(result.bundle_dir / "data").as_posix()
                    for p in (result.bundle_dir / "data" / "runs").rglob("*") if p.is_file())
    assert sorted(rows) == copies
    responses = rows["runs/grpo-42/eval/final.jsonl"]
    judged = hashlib.sha256((sweep / "jobs" / "grpo-42" / "run" / "eval" / "final.jsonl").read_bytes()).hexdigest()
    assert responses == {"job": "grpo-42", "path": "runs/grpo-42/eval/final.jsonl", "judged_sha256": judged,
                         "verbatim": "yes"}
    assert rows["runs/grpo-42/job.json"]["verbatim"] == "no"  # rewritten path-free


def test_the_digests_leave_out_the_roots_the_checkpoints_and_the_trainers_own_output(tmp_path):
    job = tmp_path / "job"
    for rel in ("job.json", "run/metrics.jsonl", "roots/tmp/x", "run/checkpoints/step_1/w", "run/tensorboard/e",
                "run/trainer/log.jsonl", "ranks/rank1/trainer.log"):
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_text(rel)
    (job / "run" / "link").symlink_to(job / "job.json")
    assert sorted(job_file_digests(job)) == ["job.json", "ranks/rank1/trainer.log", "run/metrics.jsonl"]
    before = job_file_digests(job)
    (job / "run" / "metrics.jsonl").write_text("a late line\n")
    (job / "late.txt").write_text("x")
    problems = changed_while_judged(before, job_file_digests(job))
    assert [(p.file, p.kind) for p in problems] == [("late.txt", "judged"), ("run/metrics.jsonl", "judged")]


def test_a_copy_whose_bytes_are_not_the_judged_ones_is_named_and_refuses_the_seal(tmp_path):
    job = tmp_path / "grpo-1"
    (job / "run").mkdir(parents=True)
    (job / "run" / "metrics.jsonl").write_text("judged\n")
    changed: list[str] = []
    files = JobFiles(job, "grpo-1", job_file_digests(job), changed)
    assert files.read(job / "run" / "metrics.jsonl") == b"judged\n" and changed == []
    (job / "run" / "metrics.jsonl").write_text("judged\nlate\n")
    assert files.read(job / "run" / "metrics.jsonl") == b"judged\nlate\n"
    assert changed == ["grpo-1/run/metrics.jsonl"]
    with pytest.raises(SweepError, match=r"^jobs/grpo-1/run/metrics.jsonl changed after its job was judged: "):
        refuse_changed(changed)


def _restate_crate_and_manifests(bag: Path) -> None:
    """An edit whose crate and manifests agree, leaving judged.csv as the build wrote it."""
    write_crate(bag / "data", load_bundle_data(bag / "data"))
    bagit.Bag(str(bag)).save(manifests=True)


def test_the_audit_finds_a_run_copy_that_is_not_the_judged_file_or_has_no_digest(bundle_copy):
    responses = bundle_copy / "data" / "runs" / "rpp-42" / "eval" / "final.jsonl"
    responses.write_bytes(responses.read_bytes().replace(b"So he has", b"So he had", 1))
    extra = bundle_copy / "data" / "runs" / "rpp-42" / "logs" / "ray.log"
    extra.write_text("a log nobody judged\n")
    _restate_crate_and_manifests(bundle_copy)
    reasons = [str(p) for p in audit_bundle(bundle_copy) if p.kind == "judged"]
    assert reasons == [
        "data/runs/rpp-42/eval/final.jsonl: is not the file its job was judged on (judged.csv: "
        f"{_rows(bundle_copy)['runs/rpp-42/eval/final.jsonl']['judged_sha256'][:12]}…)",
        "data/runs/rpp-42/logs/ray.log: sealed without the digest it had when its job was judged (judged.csv)"]


@pytest.mark.slow
def test_a_job_file_written_after_the_decision_refuses_the_seal_through_the_cli(tmp_path):
    sweep = make_sweep(tmp_path)
    log = sweep / "jobs" / "grpo-42" / "trainer.log"
    # What outlives a job's end on a machine without the runtime's subreaper: it keeps writing into the job.
    writer = subprocess.Popen([sys.executable, "-c", f"import time\nwhile True:\n    open({str(log)!r}, 'a').write("
                                                     "'late\\n')\n    time.sleep(0.002)"])
    try:
        time.sleep(0.3)
        done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"],
                              capture_output=True, text=True, timeout=600)
    finally:
        writer.kill()
        writer.wait()
    assert done.returncode != 0
    assert "jobs/grpo-42/trainer.log changed after its job was judged: something of the job still writes into its " \
           "directory" in done.stderr, done.stderr[-2000:]
    assert not (sweep / "bundle").exists() and not (sweep / "bundle.tar.gz").exists()
