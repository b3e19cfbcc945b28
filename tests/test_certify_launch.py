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
import subprocess
import sys
from pathlib import Path

import pytest

from evidence import audit_bundle
from tests.evidence_cli import evidence_in_process
from tests.launch_in_process import launch_in_process
from tests.sweeps import REPO, launch, reseal_bag

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
    found = [f"{p.file}: {p.detail()}" for p in audit_bundle(bag)]
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


# ---- the certificate's own evidence: what a copy of the original's files does not carry (issue 33, item 3) ----------

def _evidence(*args) -> subprocess.CompletedProcess:
    """``python -m evidence <args>`` in this process (tests/evidence_cli.py)."""
    return evidence_in_process(*args)


def _copy_over(sweep: Path, names: tuple[str, ...]) -> None:
    """The original's (BAD's) files ``names`` (relative to its job directory) over both of its certificate jobs'."""
    for kind in ("rerun", "resume"):
        for name in names:
            source, target = sweep / "jobs" / BAD / name, sweep / "certify" / f"{BAD}.{kind}" / name
            if target.is_dir():
                shutil.rmtree(target)
            if source.is_dir():
                shutil.copytree(source, target)
            else:
                shutil.copyfile(source, target)


COPIED = {  # what is copied over the certificate jobs -> what the rerun's certificate then says first
    "metrics only": (("run/metrics.jsonl",), "its data ledger does not hold: certify/"),
    "the reported copy": (("run/metrics.jsonl", "run/eval.json", "run/eval", "run/checkpoints", "run/tensorboard",
                           "trainer.log"), "its data ledger does not hold: certify/"),
    "every file of the run and the job": (("run", "trainer.log", "job.json"),
                                          "its job.json is not the certificate job's"),
}


@pytest.mark.parametrize("variant", list(COPIED))
def test_the_original_s_files_copied_over_its_certificate_jobs_do_not_make_them_reproduce(certified, tmp_path, variant):
    """The reported attack: the os-seeded arm's certificates (0/2) became 2/2, audit clean, once the original's
    metrics, evaluation, responses, checkpoints, event files and log were copied over the certificate jobs' and the
    bundle rebuilt. Each copy now fails its certificate, naming what gives it away; the audit agrees."""
    sweep, _ = certified
    copy = Path(shutil.copytree(sweep, tmp_path / "sweep", symlinks=True))
    names, said = COPIED[variant]
    _copy_over(copy, names)
    assert _evidence("build", copy, "--no-figures").returncode == 0
    certs = {c["certificate_job"]: c for c in json.loads((copy / "bundle" / "data" / "certificates.json").read_text())
             ["certificates"]}
    assert [c["reproduced"] for c in certs.values()] == [True, True, False, False]
    assert certs[f"{BAD}.rerun"]["first_difference"].startswith(said), certs[f"{BAD}.rerun"]["first_difference"]
    assert not certs[f"{BAD}.resume"]["reproduced"]
    audit = _evidence("audit", copy / "bundle.tar.gz")
    assert audit.returncode == 0, audit.stdout[-2000:]


PLANNED = {  # a planned job removed from the sweep before a rebuild -> what the build and the audit name
    "a certificate job deleted": (lambda s: shutil.rmtree(s / "certify" / f"{GOOD}.resume"),
                                  [f"certify/{GOOD}.resume/job.json: planned (plan "]),
    "a grid job renamed": (lambda s: (s / "jobs" / BAD).rename(s / "jobs" / f"{BAD[:-2]}-8"),
                           [f"runs/{BAD}/job.json: planned (plan ",
                            f"runs/{BAD[:-2]}-8/job.json: a job the sweep's plan does not list"]),
}


@pytest.mark.parametrize("variant", list(PLANNED))
def test_a_planned_job_deleted_or_renamed_before_a_rebuild_is_a_finding_of_the_build_and_the_audit(certified, tmp_path,
                                                                                                   variant):
    sweep, _ = certified
    copy = Path(shutil.copytree(sweep, tmp_path / "sweep", symlinks=True))
    edit, named = PLANNED[variant]
    edit(copy)
    build = _evidence("build", copy, "--no-figures")
    assert build.returncode == 1, build.stdout[-2000:] + build.stderr[-2000:]
    plan_lines = [line for line in build.stdout.splitlines() if line.startswith("plan: ")]
    assert any(named[0].split("/", 1)[-1] in line for line in plan_lines), plan_lines
    audit = _evidence("audit", copy / "bundle.tar.gz")
    assert audit.returncode == 1
    for finding in named:
        assert any(line.startswith(f"data/{finding}") for line in audit.stdout.splitlines()), (finding, audit.stdout)


def test_the_plan_and_each_job_s_identity_are_bound_before_the_jobs_ran(certified):
    """sweep.json's plan lists every job (grid and certificate), its digest is in every job's spec.json, job.json and
    run.json; each job has a nonce of its own, which its trainer's data ledger records in every process's start line;
    the resume job's ledger shows its two processes, the second resumed at the planned step."""
    import hashlib

    sweep, _ = certified
    record = json.loads((sweep / "sweep.json").read_text())
    digest = hashlib.sha256(json.dumps(record["plan"], sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert record["plan_sha256"] == digest
    assert [e["job"] for e in record["plan"]["jobs"]] == [GOOD, BAD, f"{GOOD}.rerun", f"{GOOD}.resume", f"{BAD}.rerun",
                                                         f"{BAD}.resume"]
    nonces = set()
    for entry in record["plan"]["jobs"]:
        job = sweep / ("certify" if "certify" in entry else "jobs") / entry["job"]
        spec, rec, run = (json.loads((job / name).read_text()) for name in ("spec.json", "job.json", "run/run.json"))
        assert spec["plan_sha256"] == rec["plan_sha256"] == run["plan_sha256"] == digest
        assert spec["job_nonce"] == rec["job_nonce"] and len(rec["job_nonce"]) == 32
        nonces.add(rec["job_nonce"])
        starts = [json.loads(line)["start"] for line in (job / "run" / "data_ledger.jsonl").read_text().splitlines()
                  if "start" in json.loads(line)]
        assert {s["job_nonce"] for s in starts} == {rec["job_nonce"]}
        assert [s["resumed_from"] for s in starts] == ([0, 2] if entry["job"].endswith(".resume") else [0])
        assert run["data_ledger"]["plan_sha256"] == starts[0]["plan_sha256"]
    assert len(nonces) == 6
    # the dry run's commands carry neither the nonce nor the plan's digest (the goldens stay as they were)
    assert "PROOFGRID_JOB_NONCE" not in (sweep / "commands.txt").read_text()


def test_a_reordered_row_in_a_real_run_s_ledger_rejects_it_through_the_build(certified, tmp_path):
    """The real trainer's ledger of the deterministic arm's job, one step's rows reversed (a data order that changed
    on resume, verl#3457's class): python -m evidence build rejects the job naming the step; the audit agrees."""
    sweep, _ = certified
    copy = Path(shutil.copytree(sweep, tmp_path / "sweep", symlinks=True))
    path = copy / "jobs" / GOOD / "run" / "data_ledger.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    line = next(x for x in lines if x.get("step") == 1)
    line["rows"] = line["rows"][::-1]
    path.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
    assert _evidence("build", copy, "--no-figures").returncode == 0
    rows = {r["job"]: r for r in _csv(copy / "bundle" / "data" / "index.csv")}
    assert rows[GOOD]["accepted"] == "no"
    assert "run/data_ledger.jsonl: line 3, step 1: its chain does not follow from the steps before it" in rows[GOOD]["reason"]
    assert _evidence("audit", copy / "bundle.tar.gz").returncode == 0
