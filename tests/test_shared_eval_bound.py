"""A sweep's shared initial evaluation is bound to what each job read: a symbolic link where it lives is
refused (by the trainer that would read or write through it, and by the evidence, which never follows or
copies it), and a shared evaluation replaced after a job read it is judged against the bytes its readers
recorded (every job's eval.json names the SHA256 it read): no job of that evaluation is accepted, and the
jobs whose digest differs are named. Through ``launch.py -m`` and ``python -m evidence build`` / ``audit``."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from facts import sha256_file
from tests.sweeps import REPO, launch
from tests.test_initial_eval_once import SYNTHETIC_IDENTITY, _synthetic_responses
from trainer.evaluate import SharedEvaluationLinkError, identity_key, shared_initial_eval

SMALL = ("workload.n_updates=2", "workload.checkpoint_every=2")


@pytest.mark.parametrize("linked", ["initial_eval", "key", "eval.json", "lock"])
def test_the_trainer_refuses_a_link_where_the_shared_evaluation_lives(tmp_path, linked):
    sweep, outside = tmp_path / "sweep", tmp_path / "outside"
    first = shared_initial_eval(outside, SYNTHETIC_IDENTITY, _synthetic_responses)  # a sound one, elsewhere
    key12 = identity_key(SYNTHETIC_IDENTITY)[:12]
    (sweep / "initial_eval").mkdir(parents=True)
    if linked == "initial_eval":
        (sweep / "initial_eval").rmdir()
        (sweep / "initial_eval").symlink_to(outside / "initial_eval")
    elif linked == "key":
        (sweep / "initial_eval" / key12).symlink_to(outside / "initial_eval" / key12)
    elif linked == "eval.json":
        (sweep / "initial_eval" / key12).mkdir()
        shutil.copy(outside / "initial_eval" / key12 / "responses.jsonl", sweep / "initial_eval" / key12)
        (sweep / "initial_eval" / key12 / "eval.json").symlink_to(outside / "initial_eval" / key12 / "eval.json")
    else:
        (sweep / "initial_eval" / f"{key12}.lock").symlink_to(outside / "elsewhere.lock")
    before = sorted(p.relative_to(outside) for p in outside.rglob("*"))
    with pytest.raises(SharedEvaluationLinkError, match="is a symbolic link: a sweep's shared initial evaluation "
                                                        "lives inside the sweep; remove the link"):
        shared_initial_eval(sweep, SYNTHETIC_IDENTITY, lambda path: pytest.fail("evaluated through a link"))
    assert sorted(p.relative_to(outside) for p in outside.rglob("*")) == before  # nothing written outside
    assert first.computed


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Path:
    sweep_dir = tmp_path_factory.mktemp("bound") / "sweep"
    result = launch(sweep_dir, "algo=grpo,rpp", "seed=1", *SMALL)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return sweep_dir


def _build(sweep: Path) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    shutil.rmtree(sweep / "bundle", ignore_errors=True)
    (sweep / "bundle.tar.gz").unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    with open(sweep / "bundle" / "data" / "index.csv", newline="") as f:
        return proc, {row["job"]: row for row in csv.DictReader(f)}


def _copy(ran: Path, tmp_path: Path) -> tuple[Path, Path]:
    sweep = Path(shutil.copytree(ran, tmp_path / "sweep", symlinks=True))
    (shared,) = [p for p in (sweep / "initial_eval").iterdir() if p.is_dir()]
    return sweep, shared


def test_a_shared_evaluation_replaced_after_a_job_read_it_accepts_no_job_and_names_the_reader(ran, tmp_path):
    sweep, shared = _copy(ran, tmp_path)
    record = json.loads((shared / "eval.json").read_text())
    record["initial"]["pass@1"] = round(record["initial"]["pass@1"] / 2, 6)  # a lower control: a larger "gain"
    (shared / "eval.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    digest = sha256_file(shared / "eval.json")
    honest = json.loads((sweep / "jobs" / "grpo-1" / "run" / "eval.json").read_text())["initial"]["shared"]["sha256"]
    # rpp-1 started after the replacement: it read (and recorded) the replaced bytes, grpo-1 the first ones
    path = sweep / "jobs" / "rpp-1" / "run" / "eval.json"
    entry = json.loads(path.read_text())
    entry["initial"] = {**record["initial"], "shared": {**entry["initial"]["shared"], "sha256": digest}}
    path.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
    proc, rows = _build(sweep)
    assert proc.returncode != 0 or rows
    assert {job: row["accepted"] for job, row in rows.items()} == {"grpo-1": "no", "rpp-1": "no"}
    reason = f"replaced after a run read it: grpo-1 read {honest[:12]}, the file is {digest[:12]}"
    text = (sweep / "bundle" / "data" / "index.csv").read_text() + (sweep / "bundle" / "data" / "report.md").read_text()
    assert reason in text, text[-3000:]


def test_a_link_planted_at_the_shared_evaluation_is_never_followed_by_the_evidence(ran, tmp_path):
    sweep, shared = _copy(ran, tmp_path)
    outside = tmp_path / "outside"
    shutil.move(shared, outside)
    shared.symlink_to(outside)
    proc, rows = _build(sweep)
    assert {job: row["accepted"] for job, row in rows.items()} == {"grpo-1": "no", "rpp-1": "no"}
    text = (sweep / "bundle" / "data" / "index.csv").read_text()
    assert f"initial_eval/{shared.name} is a symbolic link: a shared evaluation lives inside its sweep" in text
    assert not (sweep / "bundle" / "data" / "initial_eval").exists()  # nothing copied through the link
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(sweep / "bundle.tar.gz")], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert audited.returncode in (0, 1) and "Traceback" not in audited.stderr, audited.stderr[-2000:]
