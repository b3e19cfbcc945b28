"""A job's evidence is read the one way (``facts.files.unfollowed_paths``, the rule a shared initial evaluation is
read by): a link anywhere in it (to a file outside the sweep, to one inside it, a linked directory, a dangling one,
the job directory itself) or a file that is not a regular one is never followed. The job is rejected with an
``evidence-link`` incident naming the file, the bundle carries none of those bytes, and the audit of the sealed
bundle is clean (the build never seals what its own audit rejects). The job's isolation roots (Ray's sockets and
``session_latest`` link live there) are not evidence and reject nothing."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import job_dir, make_sweep
from evidence import audit_bundle
from evidence.gates.index import evaluate_job
from evidence.seal.bundle import build_bundle
from facts.repo import REPO_ROOT

REPO = REPO_ROOT


def _link_outside(sweep: Path, outside: Path) -> None:
    """grpo-1's runtime.log is a link to a log outside the sweep (the reviewer's B7)."""
    outside.write_text("a runtime log kept elsewhere\n")
    log = job_dir(sweep, "grpo", 1) / "runtime.log"
    log.unlink(missing_ok=True)  # the synthetic job's own runtime.log, replaced by the link
    log.symlink_to(outside)


def _link_inside(sweep: Path, outside: Path) -> None:
    """grpo-2's final responses are a link to another job's, inside the sweep."""
    final = job_dir(sweep, "grpo", 2) / "run" / "eval" / "final.jsonl"
    final.unlink()
    final.symlink_to(job_dir(sweep, "rppb", 3) / "run" / "eval" / "final.jsonl")


def _link_directory(sweep: Path, outside: Path) -> None:
    """grpo-3's run/eval is a link to a copy of it elsewhere: every file in it is read through the link."""
    run = job_dir(sweep, "grpo", 3) / "run"
    shutil.move(run / "eval", outside)
    (run / "eval").symlink_to(outside, target_is_directory=True)


def _link_dangling(sweep: Path, outside: Path) -> None:
    """rpp-1's logs/stdout.log is a link to nothing."""
    log = job_dir(sweep, "rpp", 1) / "logs" / "stdout.log"
    log.parent.mkdir(exist_ok=True)
    log.unlink(missing_ok=True)
    log.symlink_to(outside / "gone.log")


def _link_metrics(sweep: Path, outside: Path) -> None:
    """rpp-2's metrics log is a link to a copy outside the sweep."""
    metrics = job_dir(sweep, "rpp", 2) / "run" / "metrics.jsonl"
    shutil.move(metrics, outside)
    metrics.symlink_to(outside)


def _link_job_directory(sweep: Path, outside: Path) -> None:
    """rpp-3's whole job directory is a link to a job directory elsewhere."""
    job = job_dir(sweep, "rpp", 3)
    shutil.move(job, outside)
    job.symlink_to(outside, target_is_directory=True)


def _fifo(sweep: Path, outside: Path) -> None:
    """rppb-1's resource samples are a FIFO (a read would block the build)."""
    samples = job_dir(sweep, "rppb", 1) / "resources.jsonl"
    samples.unlink()
    os.mkfifo(samples)


def _link_in_roots(sweep: Path, outside: Path) -> None:
    """rppb-2's Ray temp root holds a link, as Ray's session_latest: the roots are not evidence."""
    (job_dir(sweep, "rppb", 2) / "roots" / "ray" / "session_latest").symlink_to(outside, target_is_directory=True)
    outside.mkdir()


# job -> (how it is made, the file its incident names)
VARIANTS = {
    "grpo-1": (_link_outside, "runtime.log: a symbolic link"),
    "grpo-2": (_link_inside, "run/eval/final.jsonl: a symbolic link"),
    "grpo-3": (_link_directory, "run/eval: a symbolic link"),
    "rpp-1": (_link_dangling, "logs/stdout.log: a symbolic link"),
    "rpp-2": (_link_metrics, "run/metrics.jsonl: a symbolic link"),
    "rpp-3": (_link_job_directory, "jobs/rpp-3: a symbolic link"),
    "rppb-1": (_fifo, "resources.jsonl: not a regular file"),
}
ACCEPTED = {"rppb-2", "rppb-3"}


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    """A 9-job sweep, one job per variant (two untouched: a link in the roots, and a control), built once
    without figures: (sweep, build result)."""
    root = tmp_path_factory.mktemp("links")
    sweep = make_sweep(root, seeds=(1, 2, 3), n_steps=3)
    _link_in_roots(sweep, root / "ray-session")
    for job, (make, _) in VARIANTS.items():
        make(sweep, root / f"outside-{job}")
    return sweep, build_bundle(sweep, figures=False)


def _incidents(bundle: Path) -> list[dict]:
    with open(bundle / "data" / "incidents.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_link_in_a_jobs_evidence_rejects_the_job_and_only_it(linked):
    _, result = linked
    accepted = {row["job"] for row in result.jobs if row["accepted"] == "yes"}
    assert accepted == ACCEPTED, [(r["job"], r["reason"]) for r in result.jobs]


@pytest.mark.parametrize("job", sorted(VARIANTS))
def test_each_link_is_an_evidence_link_incident_naming_the_file(linked, job):
    _, result = linked
    rows = [r for r in _incidents(result.bundle_dir) if r["job"] == job and r["kind"] == "evidence-link"]
    assert len(rows) == 1, _incidents(result.bundle_dir)
    assert VARIANTS[job][1] in rows[0]["title"] and "never followed" in rows[0]["title"]
    reason = next(r["reason"] for r in result.jobs if r["job"] == job)
    assert reason.startswith(VARIANTS[job][1]), reason


def test_the_bundle_carries_no_byte_read_through_a_link(linked):
    _, result = linked
    runs = result.bundle_dir / "data" / "runs"
    assert not (runs / "grpo-1" / "logs" / "runtime.log").exists()
    assert not (runs / "grpo-2" / "eval" / "final.jsonl").exists()
    assert not (runs / "grpo-3" / "eval").exists()
    assert not (runs / "rpp-2" / "metrics.jsonl").exists()
    assert not (runs / "rpp-3").exists()  # a linked job directory: nothing of it
    assert (runs / "grpo-1" / "job.json").is_file()  # the rest of a rejected job is kept
    with open(result.bundle_dir / "data" / "artifacts.csv", newline="") as handle:
        assert not [r for r in csv.DictReader(handle) if r["job"] == "rpp-3"]


def test_the_bundle_sealed_with_link_rejections_audits_clean(linked):
    _, result = linked
    notes = []
    assert [str(p) for p in audit_bundle(result.archive, notes=notes)] == []
    # each link rejection is said: the bundle cannot show the link (nor carries the rest of what the build did not
    # read), and a forged link incident is how a valid run would be hidden; rpp-3's whole directory is the link
    noted = sorted(note.split()[1] for note in notes if note.startswith("rejection: "))
    assert noted == sorted(VARIANTS), notes
    assert all("for a link in its evidence" in note and "never followed" in note for note in notes), notes


def test_a_job_judged_alone_is_not_accepted_through_a_link(linked):
    """What the launcher asks before re-running a job: the same rule."""
    sweep, _ = linked
    evidence = evaluate_job(job_dir(sweep, "grpo", 2))
    assert not evidence.accepted and evidence.failures[0].kind == "evidence-link"
    assert evaluate_job(job_dir(sweep, "rppb", 2)).accepted


def test_python_m_evidence_build_rejects_a_linked_job_and_its_bundle_audits_clean(tmp_path):
    """The reviewer's B7 through the entry points: runtime.log and the final responses linked to files outside."""
    sweep = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=(1,), n_steps=3)
    _link_outside(sweep, tmp_path / "outside.log")
    final = job_dir(sweep, "rpp", 1) / "run" / "eval" / "final.jsonl"
    shutil.move(final, tmp_path / "outside_final.jsonl")
    final.symlink_to(tmp_path / "outside_final.jsonl")
    build = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    assert "accepted 0/2" in build.stdout, build.stdout
    kinds = {(r["job"], r["kind"]) for r in _incidents(sweep / "bundle")}
    assert {("grpo-1", "evidence-link"), ("rpp-1", "evidence-link")} <= kinds
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(sweep / "bundle.tar.gz")], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    # each link rejection is a note the bundle cannot re-derive, which --strict counts
    assert [line.split()[1] for line in audited.stdout.splitlines() if line.startswith("rejection: ")] \
        == ["grpo-1", "rpp-1"], audited.stdout
    strict = subprocess.run([sys.executable, "-m", "evidence", "audit", "--strict", str(sweep / "bundle.tar.gz")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert strict.returncode == 1 and strict.stdout.rstrip().endswith("0 finding(s), 2 not re-derived (--strict)"), \
        strict.stdout[-2000:]
