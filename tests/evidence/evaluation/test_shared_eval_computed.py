"""A shared initial evaluation is this sweep's only when one of its jobs records having computed it (adv B2, the
evidence side): the trainer appends the reference of each shared evaluation it computes (path, key, the SHA256 of
the eval.json it writes) to its run's ``initial_eval_computed.jsonl`` before that eval.json is in place, and the
bundle keeps the record in ``runs/<job>/``. One that no job of the sweep records computing (planted in the sweep
directory before the sweep started, or replaced consistently afterwards) rejects every job that read it, an
automatic incident naming the shared directory, and is an audit finding in the bundle."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep, share_initial_eval
from evidence import audit_bundle, build_bundle
from facts.repo import REPO_ROOT
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
JOBS = ("grpo-42", "rpp-42")
COMPUTED = "initial_eval_computed.jsonl"
NOT_COMPUTED = "no job of this sweep is recorded as having computed it"


def _sweep(root: Path, computed_by: str | None = "first") -> tuple[Path, str]:
    sweep = make_sweep(root, algos=("grpo", "rpp"), seeds=(42,), n_steps=3)
    shared = share_initial_eval(sweep, JOBS, computed_by=computed_by)
    return sweep, f"initial_eval/{shared.name}"


def _index(bundle: Path) -> dict[str, dict]:
    with open(bundle / "data" / "index.csv", newline="") as f:
        return {row["job"]: row for row in csv.DictReader(f)}


def _incidents(bundle: Path) -> str:
    return (bundle / "data" / "incidents.csv").read_text()


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> tuple[Path, str]:
    """grpo-42 computed the shared evaluation, rpp-42 reused it: (bundle dir, the shared directory)."""
    sweep, shared = _sweep(tmp_path_factory.mktemp("honest"))
    return build_bundle(sweep, figures=False).bundle_dir, shared


def test_a_shared_evaluation_a_job_of_the_sweep_computed_accepts_its_readers_and_audits_clean(honest):
    bundle, _ = honest
    assert {job: row["accepted"] for job, row in _index(bundle).items()} == {"grpo-42": "yes", "rpp-42": "yes"}
    assert (bundle / "data" / "runs" / "grpo-42" / COMPUTED).is_file()
    assert not (bundle / "data" / "runs" / "rpp-42" / COMPUTED).exists()
    assert audit_bundle(bundle) == []


def _plant_unrecorded(sweep: Path, shared: str) -> None:
    pass  # share_initial_eval(computed_by=None): the evaluation was there before any job ran


def _record_other_bytes(sweep: Path, shared: str) -> None:
    """A job did compute an evaluation there, but not these bytes (replaced consistently, readers rewritten)."""
    log = sweep / "jobs" / "grpo-42" / "run" / COMPUTED
    entry = json.loads(log.read_text())
    log.write_text(json.dumps({**entry, "sha256": "0" * 64}) + "\n")


def _record_other_path(sweep: Path, shared: str) -> None:
    log = sweep / "jobs" / "grpo-42" / "run" / COMPUTED
    entry = json.loads(log.read_text())
    log.write_text(json.dumps({**entry, "path": "initial_eval/0123456789ab/eval.json"}) + "\n")


def _record_outside_a_job(sweep: Path, shared: str) -> None:
    """The record beside the planted evaluation itself, or in a directory that is no job's run: never read."""
    source = sweep / "jobs" / "grpo-42" / "run" / COMPUTED
    shutil.copy(source, sweep / shared / COMPUTED)
    (sweep / "jobs" / "grpo-42" / "run2").mkdir()
    shutil.move(source, sweep / "jobs" / "grpo-42" / "run2" / COMPUTED)


UNRECORDED = {
    "planted before the sweep": (None, _plant_unrecorded),
    "recorded with other bytes": ("first", _record_other_bytes),
    "recorded at another path": ("first", _record_other_path),
    "recorded outside any job's run": ("first", _record_outside_a_job),
}


@pytest.mark.parametrize("computed_by,edit", UNRECORDED.values(), ids=UNRECORDED.keys())
def test_a_shared_evaluation_no_job_of_the_sweep_computed_rejects_every_job_that_read_it(tmp_path, computed_by,
                                                                                          edit):
    sweep, shared = _sweep(tmp_path, computed_by)
    edit(sweep, shared)
    bundle = build_bundle(sweep, figures=False).bundle_dir
    index = _index(bundle)
    assert {job: row["accepted"] for job, row in index.items()} == {"grpo-42": "no", "rpp-42": "no"}
    for job in JOBS:
        assert f"{shared}/eval.json: {NOT_COMPUTED}" in index[job]["reason"], index[job]["reason"]
        assert f"remove {shared}/ and run its jobs again" in index[job]["reason"]
    assert f"{shared}/eval.json: {NOT_COMPUTED}" in _incidents(bundle)
    assert audit_bundle(bundle) == []  # the rejection is honest: the audit re-checks the same record


def test_a_bundle_whose_computing_record_is_removed_is_a_finding_naming_the_shared_evaluation(honest, tmp_path):
    bag = Path(shutil.copytree(honest[0], tmp_path / "bag"))
    (bag / "data" / "runs" / "grpo-42" / COMPUTED).unlink()
    reseal_bag(bag)
    findings = [str(f) for f in audit_bundle(bag)]
    assert any(f.startswith(f"data/{honest[1]}/eval.json: {NOT_COMPUTED}") for f in findings), findings


def test_python_m_evidence_audit_names_a_shared_evaluation_recorded_with_other_bytes(honest, tmp_path):
    """Through the module: the computing record names other bytes than the shared eval.json holds, resealed."""
    bag = Path(shutil.copytree(honest[0], tmp_path / "bag"))
    log = bag / "data" / "runs" / "grpo-42" / COMPUTED
    log.write_text(json.dumps({**json.loads(log.read_text()), "sha256": "ab" * 32}) + "\n")
    reseal_bag(bag)
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bag)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"data/{honest[1]}/eval.json: {NOT_COMPUTED}" in done.stdout, done.stdout


def test_python_m_evidence_build_of_a_planted_evaluation_rejects_its_readers(tmp_path):
    sweep, shared = _sweep(tmp_path, computed_by=None)
    done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {job: row["accepted"] for job, row in _index(sweep / "bundle").items()} == {"grpo-42": "no",
                                                                                        "rpp-42": "no"}
    assert f"{shared}/eval.json: {NOT_COMPUTED}" in _incidents(sweep / "bundle")
