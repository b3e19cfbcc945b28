"""The sanitiser's over- and under-matches (issue 33 item 5): a model's arithmetic is no machine path; what only looks
like a leak in a file sealed byte for byte as a model wrote it (its responses) or a dataset holds it is a note and
the sweep is sealed, while this machine's own identity there still refuses; the user and host names a job's runtime
recorded are sealed out by a build on a machine that does not know them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import job_dir, make_sweep
from evidence import audit_bundle, build_bundle
from evidence.seal.bundle import LeakError
from evidence.seal.sanitize import MACHINE_LEAK_KINDS, Sanitizer, payload_findings
from facts.bundle_layout import verbatim_member
from facts.files import MACHINE_NAMES

# A model's arithmetic and expressions: no path names anything in them.
NOT_PATHS = ["/*/+", " /2/4", "12 /3/4 = 1", "(a+b)/c/d", "x = /x/y", "1 /2/3/4/5", "ratio /7/+/-"]
# A path's shape: a component holding a name.
PATHS = ["/fsx/jdoe/run", "/1/2/3.pt", "/u/jdoe/x", "/2/4/alice", "/data/x"]


@pytest.mark.parametrize("text", NOT_PATHS)
def test_a_models_arithmetic_is_no_machine_path(text):
    clean = Sanitizer()
    assert clean.clean(f"so {text} done") == f"so {text} done" and clean.scan(text) == []


@pytest.mark.parametrize("path", PATHS)
def test_a_path_that_names_something_is_still_one(path):
    assert Sanitizer().clean(f"see {path} ok") == "see <PATH> ok"


def test_the_verbatim_files_are_the_models_and_the_datasets_text():
    assert verbatim_member("runs/grpo-1/eval/final.jsonl") and verbatim_member("runs/grpo-1/eval/initial.jsonl")
    assert verbatim_member("initial_eval/0123456789ab/responses.jsonl")
    assert verbatim_member("eval_subset/0123456789ab.json")
    assert verbatim_member("stages/probe/runs/grpo-1/eval/final.jsonl")
    assert verbatim_member("certify/grpo-1.rerun/eval/final.jsonl")
    for rel in ("runs/grpo-1/logs/trainer.log", "runs/grpo-1/metrics.jsonl", "runs/grpo-1/eval.json", "report.md"):
        assert not verbatim_member(rel), rel


def test_in_a_verbatim_file_only_this_machines_secrets_and_directories_refuse():
    clean = Sanitizer.from_environment(env={"HF_TOKEN": "hf_" + "q7" * 12, "HOME": "/home/qbrandt"},
                                       literals={"/srv/sweeps/s1": "<SWEEP_DIR>"}, hosts=["cn042"], users=["qbrandt"])
    text = ("mail jdoe@example.org, data in /fsx/jdoe/run, key sk-" + "a" * 24 + " on cn042 by qbrandt@cn042\n"
            "/srv/sweeps/s1/jobs/x and hf_" + "q7" * 12 + "\n")
    problems = clean.scan(text, "data/runs/grpo-1/eval/final.jsonl")
    leaks, notes = payload_findings("data/runs/grpo-1/eval/final.jsonl", problems)
    assert {p.kind for p in leaks} == {"machine path", "secret value"} == set(MACHINE_LEAK_KINDS)
    assert {p.kind for p in notes} >= {"e-mail address", "absolute machine path", "host name", "user name"}
    # Anywhere else every one of them is a leak.
    assert payload_findings("data/runs/grpo-1/logs/trainer.log", problems) == (problems, [])


def _plant_responses(sweep: Path, job: str, extra: str) -> bytes:
    """Put ``extra`` before every final response of ``job`` (its last number, the answer, unchanged)."""
    path = sweep / "jobs" / job / "run" / "eval" / "final.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        record["response"] = f"{extra} {record['response']}"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path.read_bytes()


# What a model may well write: arithmetic, an address, a path of some site's layout, a key's shape.
MODEL_TEXT = "Compute 8 /2/4 and /*/+ first; mail jdoe@example.org; data in /fsx/jdoe/run; key sk-" + "b" * 24 + "."


@pytest.mark.slow
def test_responses_that_only_look_like_leaks_are_sealed_as_written_with_notes_through_the_cli(tmp_path):
    sweep = make_sweep(tmp_path)
    planted = _plant_responses(sweep, "grpo-42", MODEL_TEXT)
    done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    notes = [line for line in done.stdout.splitlines() if line.startswith("note: ")]
    rel = "data/runs/grpo-42/eval/final.jsonl"
    assert f"note: {rel}: leak: e-mail address: jdoe@example.org (a model's response or the dataset's text, " \
           "sealed as written)" in notes, done.stdout[-3000:]
    assert any(f"{rel}: leak: absolute machine path: /fsx/jdoe/run" in n for n in notes), notes
    assert not any("/2/4" in n or "/*/+" in n for n in notes)  # arithmetic is no path at all
    assert (sweep / "bundle" / rel).read_bytes() == planted  # byte for byte: the audit re-scores them
    audited = subprocess.run([sys.executable, "-m", "evidence", "audit", str(sweep / "bundle.tar.gz")],
                             capture_output=True, text=True, timeout=600)
    assert audited.returncode == 0, audited.stdout[-3000:]
    assert "jdoe@example.org (a model's response or the dataset's text, sealed as written)" in audited.stdout


def test_a_response_holding_this_machines_own_path_or_secret_still_refuses_the_seal(tmp_path, monkeypatch):
    sweep = make_sweep(tmp_path)
    monkeypatch.setenv("WANDB_API_KEY", "w4ndb-" + "k9" * 12)
    _plant_responses(sweep, "rpp-42", f"saved under {sweep}/jobs/rpp-42 with w4ndb-{'k9' * 12}")
    with pytest.raises(LeakError) as caught:
        build_bundle(sweep, figures=False)
    reasons = [str(p) for p in caught.value.problems]
    assert f"data/runs/rpp-42/eval/final.jsonl: leak: machine path: {sweep}/jobs/rpp-42" in reasons, reasons
    assert "data/runs/rpp-42/eval/final.jsonl: leak: secret value: $WANDB_API_KEY (w4n…)" in reasons, reasons
    assert not (sweep / "bundle").exists()


def test_the_names_a_jobs_runtime_recorded_are_sealed_out_where_the_build_does_not_know_them(tmp_path):
    names = {"users": ["qbrandt"], "hosts": ["cn042", "login1.hpc.example.edu"]}
    log_line = ("USER=qbrandt SLURM_JOB_USER=qbrandt HOSTNAME=login1.hpc.example.edu ssh qbrandt@cn042 "
                "submitted from login1.hpc.example.edu\n")
    logs = {}
    for recorded in (False, True):
        sweep = make_sweep(tmp_path / str(recorded))
        (job_dir(sweep, "grpo", 42) / "runtime.log").write_text(log_line)
        if recorded:
            (job_dir(sweep, "grpo", 42) / MACHINE_NAMES).write_text(json.dumps(names))
        result = build_bundle(sweep, figures=False)
        logs[recorded] = (result.bundle_dir / "data" / "runs" / "grpo-42" / "logs" / "runtime.log").read_text()
        assert not (result.bundle_dir / "data" / "runs" / "grpo-42" / MACHINE_NAMES).exists()  # never bundled
    assert "qbrandt" in logs[False] and "login1" in logs[False]  # the gap: this machine knows neither
    assert logs[True] == ("USER=<USER> SLURM_JOB_USER=<USER> HOSTNAME=<HOST> ssh <USER>@<HOST> submitted from "
                          "<HOST>\n"), logs[True]
    assert audit_bundle(tmp_path / "True" / "sweep" / "bundle") == []
