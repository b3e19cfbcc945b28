"""The main job end to end on this machine: the 3x3 toy sweep as local processes, the evidence
bundle, its audit, the learning claim, and a re-run that re-submits nothing; the local concurrency
cap, as a unit and with multi-CPU jobs. The end-to-end tests are marked slow."""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from tests.launch_in_process import launch_in_process
from tests.sweeps import GRID, index_rows, job_records, launch


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("sweep") / "main"
    proc = launch(sweep_dir, *GRID, env={"PROOFGRID_PORT_BASE": "23000"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sweep_dir, proc


@pytest.mark.slow
def test_every_job_ran_isolated_and_was_accepted(sweep):
    sweep_dir, _ = sweep
    records = job_records(sweep_dir)
    assert sorted(records) == sorted(f"{a}-{s}" for a in ("grpo", "rpp", "rppb") for s in (42, 1234, 2026))
    for name, r in records.items():
        assert r["state"] == "COMPLETED" and r["exit_code"] == 0, name
        assert r["cleanup"] == [], name
        assert r["roots"] == {"ray": "roots/ray", "cache": "roots/cache", "tmp": "roots/tmp", "output": "run"}
        cmd = json.loads((sweep_dir / "jobs" / name / "command.json").read_text())
        assert cmd["env"]["TMPDIR"] == str(sweep_dir / "jobs" / name / "roots" / "tmp")
        assert cmd["env"]["PYTHONNOUSERSITE"] == "1" and cmd["env"]["HF_HUB_OFFLINE"] == "1"
        public = (sweep_dir / "jobs" / name / "command.public.json").read_text()
        assert str(sweep_dir) not in public and "<JOB_DIR>" in public
    assert all(row["accepted"] == "yes" for row in index_rows(sweep_dir).values())


@contextlib.contextmanager
def pinned_to(cores: set[int]):
    """Run this process (and the processes it starts) on ``cores`` only."""
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


def two_cores() -> set[int]:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two usable cores to pin the launcher to")
    return set(cores[:2])


def most_at_once(records: dict[str, dict]) -> int:
    spans = [(r["started_at"], r["started_at"] + r["elapsed_s"]) for r in records.values()]
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


@pytest.mark.parametrize(("cpus_per_job", "max_parallel", "slots"), [(2, None, 1), (1, 1, 1), (1, None, 2)])
def test_local_slots_are_the_pinned_cores_over_the_job_cpus_capped_by_max_parallel(cpus_per_job, max_parallel, slots):
    from launcher.local import local_concurrency

    with pinned_to(two_cores()):
        assert local_concurrency(cpus_per_job, max_parallel) == slots


@pytest.mark.slow
def test_two_cpu_jobs_on_two_pinned_cores_run_one_at_a_time(tmp_path):
    # The bound (2 cores // 2 CPUs per job = 1) comes from the pinning, not from this machine's size;
    # two jobs of several seconds each would overlap if the cap were not applied.
    sweep_dir = tmp_path / "two-cpu"
    with pinned_to(two_cores()):
        proc = launch(sweep_dir, "algo=grpo", "seed=1,2", "workload.cpus_per_job=2", "workload.n_updates=2",
                      "workload.eval.n_prompts=2", env={"PROOFGRID_PORT_BASE": "23600"})
    records = job_records(sweep_dir)
    assert sorted(records) == ["grpo-1", "grpo-2"], proc.stderr[-2000:]
    assert all(r["state"] == "COMPLETED" for r in records.values()), proc.stderr[-2000:]
    assert most_at_once(records) == 1


@pytest.mark.slow
def test_every_algorithm_and_seed_beats_its_initial_checkpoint(sweep):
    sweep_dir, _ = sweep
    for name in job_records(sweep_dir):
        ev = json.loads((sweep_dir / "jobs" / name / "run" / "eval.json").read_text())
        assert ev["final"]["pass@1"] > ev["initial"]["pass@1"], (name, ev["initial"]["pass@1"], ev["final"]["pass@1"])
        assert 0.1 <= ev["initial"]["pass@1"] <= 0.6


@pytest.mark.slow
def test_the_bundle_is_sealed_and_audits_clean(sweep):
    sweep_dir, proc = sweep
    from evidence import audit_bundle

    assert audit_bundle(sweep_dir / "bundle.tar.gz") == []
    assert "audit: clean" in proc.stdout
    digest = (sweep_dir / "bundle.tar.gz.sha256").read_text().split()[0]
    assert digest in proc.stdout


@pytest.mark.slow
def test_the_launcher_prints_the_reports_one_sentence_result(sweep):
    sweep_dir, proc = sweep
    lines = (sweep_dir / "bundle" / "data" / "report.md").read_text().splitlines()
    sentence = lines[2]  # after the title: the result from the paired intervals of eval pass@1
    assert sentence.startswith(("No difference detected on eval pass@1: every 95 % interval", "On eval pass@1, "))
    assert "this design detects differences of" in sentence
    assert sentence in proc.stdout.splitlines()


@pytest.mark.slow
def test_rerunning_the_sweep_resubmits_nothing_and_reseals_the_same_bundle(sweep):
    sweep_dir, _ = sweep
    before = (sweep_dir / "bundle.tar.gz.sha256").read_text()
    mtimes = {n: (sweep_dir / "jobs" / n / "job.json").stat().st_mtime for n in job_records(sweep_dir)}
    proc = launch_in_process(sweep_dir, *GRID)  # it starts no process: launch.py's own code, in this one
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "9 job(s) already accepted" in proc.stdout
    assert {n: (sweep_dir / "jobs" / n / "job.json").stat().st_mtime for n in job_records(sweep_dir)} == mtimes
    assert (sweep_dir / "bundle.tar.gz.sha256").read_text() == before
