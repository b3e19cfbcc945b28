"""Reproducibility certificates through ``launch.py`` (certify=true): one tiny sweep of two arms x one seed, one arm
deterministic and one run with the trainer's test-only ``debug.os_seeded_draw`` (one draw from the OS per step), each
certified by a rerun from scratch and a stop-and-resume in jobs of their own. The deterministic arm reproduces bit for
bit; the other is caught, as a not-reproduced incident naming the first differing step and key; the certificate
jobs stay out of the grid and its statistics; the audit is clean, and names an edited certificate; the dry run
lists the certificate jobs."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from evidence import audit
from tests.launch_in_process import launch_in_process
from tests.sweeps import launch, reseal_bag

TINY = ("algo=grpo", "seed=7", "workload.n_updates=3", "workload.eval.n_prompts=4", "certify=true")
ARMS = ("debug.os_seeded_draw=false,true",)
GOOD, BAD = "grpo-os_seeded_draw_False-7", "grpo-os_seeded_draw_True-7"


@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    """The certified sweep, run once: (sweep_dir, the launch's CompletedProcess)."""
    sweep = tmp_path_factory.mktemp("certify") / "sweep"
    return sweep, launch(sweep, *TINY, *ARMS, timeout=900)


def _csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_deterministic_arm_reproduces_bit_for_bit_and_an_os_seeded_one_is_caught(certified):
    sweep, proc = certified
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # a failed certificate fails the launch
    assert "reproducibility certificates: 2/4 reproduced (exact, tolerance 0 on cpu" in proc.stdout
    assert f"NOT REPRODUCED: {BAD}.rerun does not reproduce {BAD}: metrics first differ at step" in proc.stdout
    assert "audit: clean" in proc.stdout
    data = sweep / "bundle" / "data"
    certs = {c["certificate_job"]: c for c in json.loads((data / "certificates.json").read_text())["certificates"]}
    assert set(certs) == {f"{GOOD}.rerun", f"{GOOD}.resume", f"{BAD}.rerun", f"{BAD}.resume"}
    for kind in ("rerun", "resume"):
        good = certs[f"{GOOD}.{kind}"]
        assert good["reproduced"] and all(good["checks"][c]["ok"] for c in ("run", "metrics", "checkpoint", "responses"))
        assert good["checks"]["metrics"]["steps"] == 3 and good["checks"]["responses"]["n"] > 0
        assert good["checks"]["checkpoint"]["original_sha256"] == good["checks"]["checkpoint"]["copy_sha256"]
        bad = certs[f"{BAD}.{kind}"]
        difference = bad["checks"]["metrics"]["first_difference"]
        assert not bad["reproduced"] and bad["checks"]["run"]["ok"] and difference is not None
        assert 0 <= difference["step"] < 3 and not difference["key"].startswith("perf/")
        assert difference["original"] != difference["copy"]
    # the resume job was stopped before step 1 + 7 mod 2 = 2 and resumed by a new trainer process
    resume = sweep / "certify" / f"{GOOD}.resume"
    assert certs[f"{GOOD}.resume"]["stop_at_step"] == 2
    assert json.loads((resume / "run" / "run.json").read_text())["resumed_from"] == {"checkpoint": "step_000002", "step": 2}
    assert json.loads((resume / "job.json").read_text())["planned_restart"] == {"exit_code": 75, "stopped_before_step": 2}
    assert "stopping before step 2 of 3" in (resume / "trainer.log").read_text()
    assert json.loads((sweep / "certify" / f"{GOOD}.rerun" / "run" / "run.json").read_text())["resumed_from"] is None
    incidents = [r for r in _csv(data / "incidents.csv") if r["kind"] == "not-reproduced"]
    assert sorted(r["title"].split(":")[0] for r in incidents) == [f"{BAD}.rerun does not reproduce {BAD}",
                                                                   f"{BAD}.resume does not reproduce {BAD}"]
    assert all(", key " in r["title"] and "first differ at step" in r["title"] for r in incidents)


def test_the_certificate_jobs_have_their_own_directories_and_stay_out_of_the_grid_and_its_statistics(certified):
    sweep, _ = certified
    assert sorted(p.name for p in (sweep / "jobs").iterdir()) == [GOOD, BAD]
    for name in (f"{GOOD}.rerun", f"{GOOD}.resume", f"{BAD}.rerun", f"{BAD}.resume"):
        job = sweep / "certify" / name
        assert (job / "roots").is_dir() and (job / "run" / "metrics.jsonl").is_file()
        assert json.loads((job / "job.json").read_text())["certify"]["of"] == name.rsplit(".", 1)[0]
    data = sweep / "bundle" / "data"
    assert sorted(r["job"] for r in _csv(data / "index.csv")) == [GOOD, BAD]
    assert {(r["arm"], r["seed"]) for r in _csv(data / "eval.csv")} == {(GOOD[:-2], "7"), (BAD[:-2], "7")}
    assert all(r["n_runs"] == "1" for r in _csv(data / "tables" / "eval_aggregate.csv"))  # one seed each, not three
    assert "## Reproducibility certificates" in (data / "report.md").read_text()


def test_the_audit_names_an_edited_certificate_in_a_resealed_bundle(certified, tmp_path):
    sweep, _ = certified
    bag = Path(shutil.copytree(sweep / "bundle", tmp_path / "bundle"))
    path = bag / "data" / "certificates.json"
    certs = json.loads(path.read_text())
    index = next(i for i, c in enumerate(certs["certificates"]) if c["certificate_job"] == f"{BAD}.rerun")
    certs["certificates"][index]["reproduced"] = True
    certs["reproduced"] = "3/4"
    path.write_text(json.dumps(certs, indent=1, sort_keys=True) + "\n")
    reseal_bag(bag)
    found = [f"{p.file}: {p.detail()}" for p in audit(bag)]
    assert f"data/certificates.json: certificates[{index}] ({BAD}.rerun).reproduced: recorded True, recomputed False " \
           "from the runs' files" in found, found
    assert "data/certificates.json: reproduced: recorded '3/4', recomputed '2/4' from the runs' files" in found, found


def test_a_certify_dry_run_lists_the_certificate_jobs_and_refuses_a_run_too_short_to_resume(tmp_path):
    proc = launch_in_process(tmp_path / "dry", "algo=grpo,rpp", "seed=1,2", "certify=true", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert [line.split(":")[0] for line in lines] == [
        "[0] grpo-1", "[1] grpo-2", "[2] rpp-1", "[3] rpp-2", "[4] grpo-1.rerun", "[5] grpo-2.resume",
        "[6] rpp-1.rerun", "[7] rpp-2.resume"]
    assert "(certificate: grpo-2 stopped before step" in lines[5] and "stop_at_step=" in lines[5]
    assert "(certificate: grpo-1 again from scratch, outside the grid)" in lines[4] and "stop_at_step" not in lines[4]
    assert "4 job(s) + 4 certificate job(s)" in proc.stdout
    record = json.loads((tmp_path / "dry" / "sweep.json").read_text())
    assert record["jobs"] == ["grpo-1", "grpo-2", "rpp-1", "rpp-2"] and set(record["certify"]["jobs"]) == {
        "grpo-1.rerun", "grpo-2.resume", "rpp-1.rerun", "rpp-2.resume"}
    short = launch_in_process(tmp_path / "short", "algo=grpo", "seed=1", "certify=true", "workload.n_updates=1",
                              "dry_run=true")
    assert short.returncode == 2 and "certify=true stops a run and resumes it, which needs workload.n_updates >= 2" \
        in short.stderr


def test_launcher_status_lists_the_certificate_jobs_after_the_grid_with_their_outcome(certified):
    import subprocess
    import sys

    from tests.sweeps import REPO

    sweep, _ = certified
    out = subprocess.run([sys.executable, "-m", "launcher", "status", str(sweep)], cwd=REPO, capture_output=True,
                         text=True, timeout=120).stdout
    rows = [line for line in out.splitlines() if "grpo-os_seeded_draw" in line]
    assert [next(w for w in row.split("│") if "-7" in w).strip() for row in rows] == [
        GOOD, BAD, f"{GOOD}.rerun", f"{GOOD}.resume", f"{BAD}.rerun", f"{BAD}.resume"]
    assert "certificate: reproduced" in rows[2] and "certificate: NOT reproduced" in rows[4]


def test_a_rerun_keeps_accepted_certificate_jobs_and_runs_a_rejected_one_again_from_scratch(certified, tmp_path):
    sweep, _ = certified
    copy = Path(shutil.copytree(sweep, tmp_path / "sweep", symlinks=True))
    job = copy / "certify" / f"{GOOD}.rerun"
    log = job / "run" / "metrics.jsonl"
    log.write_text(log.read_text().splitlines()[0] + "\n")  # a torn log: the evidence rejects the job
    proc = launch(copy, *TINY, *ARMS, timeout=900)
    assert "5 job(s) already accepted" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (job / "attempts" / "0" / "run" / "checkpoints").is_dir()  # its checkpoint kept aside, never resumed
    assert json.loads((job / "run" / "run.json").read_text())["resumed_from"] is None
    certs = {c["certificate_job"]: c for c in json.loads((copy / "bundle" / "data" / "certificates.json").read_text())
             ["certificates"]}
    assert certs[f"{GOOD}.rerun"]["reproduced"] and not certs[f"{BAD}.rerun"]["reproduced"]
