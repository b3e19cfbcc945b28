"""An arbitrary-override sweep (lr x algo x seed) end to end through `launch.py`: the local
launcher, and one job array on the real Slurm cluster whose submitted script is the dry run's and
whose every task is accepted (the suite's one full grid on Slurm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.sweeps import REPO, index_rows, job_records, launch

pytestmark = pytest.mark.slow

GRID = ("algo=grpo,rpp", "seed=1,2", "workload.lr=1e-4,3e-4")
SHORT = ("workload.n_updates=2", "workload.eval.n_prompts=8")
# An arm holds every non-seed override of its cell, the constant ones too.
ARMS = {f"{a}-lr{lr}": {"algo": a, "workload.lr": lr, "workload.n_updates": "2", "workload.eval.n_prompts": "8"}
        for a in ("grpo", "rpp") for lr in ("1e-4", "3e-4")}
JOBS = sorted(f"{arm}-{seed}" for arm in ARMS for seed in (1, 2))


def _evidence_reads_arms() -> bool:
    from evidence.gates.index import INDEX_COLUMNS

    return "arm" in INDEX_COLUMNS


def _check_records(sweep_dir) -> dict[str, dict]:
    records = job_records(sweep_dir)
    assert sorted(records) == JOBS
    for name, r in records.items():
        arm = name.rsplit("-", 1)[0]
        assert r["state"] == "COMPLETED" and r["exit_code"] == 0 and r["cleanup"] == [], name
        assert r["arm"] == arm and r["arm_overrides"] == ARMS[arm] and r["seed"] == int(name.rsplit("-", 1)[1])
        spec = json.loads((sweep_dir / "jobs" / name / "spec.json").read_text())
        assert spec["arm"] == arm and spec["arm_overrides"] == ARMS[arm]
        assert f"workload.lr={ARMS[arm]['workload.lr']}" in spec["trainer_overrides"]
        run = json.loads((sweep_dir / "jobs" / name / "run" / "run.json").read_text())
        assert json.dumps(run).count("0.0003" if "3e-4" in arm else "0.0001") >= 1, "the trainer got the arm's lr"
    sweep = json.loads((sweep_dir / "sweep.json").read_text())
    assert sweep["arms"] == ARMS and sweep["jobs"] == JOBS and sweep["algos"] == ["grpo", "rpp"]
    return records


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("arms") / "local"
    proc = launch(sweep_dir, *GRID, *SHORT, env={"PROOFGRID_PORT_BASE": "29000"})
    return sweep_dir, proc


def test_an_lr_x_algo_x_seed_sweep_runs_eight_jobs_of_four_arms_locally(local_sweep):
    sweep_dir, proc = local_sweep
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    _check_records(sweep_dir)
    assert all(f"{arm} " in proc.stdout or f"{arm}\n" in proc.stdout for arm in ARMS), "the summary groups by arm"


def test_launcher_status_groups_the_jobs_by_arm(local_sweep):
    sweep_dir, _ = local_sweep
    out = subprocess.run([sys.executable, "-m", "launcher", "status", str(sweep_dir)], cwd=REPO, capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if "-lr" in line]
    assert [next(j for j in JOBS if f" {j} " in row) for row in rows] == JOBS
    assert sum(1 for row in rows for arm in ARMS if row.split("│")[1].strip() == arm) == len(ARMS)  # once per arm
    # the sealed decision beside the scheduler's state, from the bundle's index
    index = index_rows(sweep_dir)
    assert [row.split("│")[8].strip() for row in rows] == [
        {"yes": "accepted", "no": "rejected"}[index[j]["accepted"]] for j in JOBS], rows


def test_rerunning_the_arm_sweep_resubmits_nothing(local_sweep):
    sweep_dir, first = local_sweep
    if first.returncode != 0 and not _evidence_reads_arms():
        pytest.skip("the evidence side of arms (branch verdict) is not merged: no job is accepted yet")
    before = {n: (sweep_dir / "jobs" / n / "job.json").read_text() for n in JOBS}
    proc = launch(sweep_dir, *GRID, *SHORT, env={"PROOFGRID_PORT_BASE": "29000"})
    assert "8 job(s) already accepted" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert {n: (sweep_dir / "jobs" / n / "job.json").read_text() for n in JOBS} == before


def test_the_evidence_accepts_every_job_of_every_arm(local_sweep):
    if not _evidence_reads_arms():
        pytest.skip("the evidence side of arms (branch verdict) is not merged")
    sweep_dir, proc = local_sweep
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = index_rows(sweep_dir)
    assert sorted(rows) == JOBS and all(r["accepted"] == "yes" and r["arm"] == r["job"].rsplit("-", 1)[0]
                                        for r in rows.values())


@pytest.mark.usefixtures("slurm_cluster")
def test_an_lr_x_algo_x_seed_sweep_is_one_slurm_array_submitting_the_dry_runs_script(tmp_path):
    from launcher.slurm.script import path_free_script

    dry = launch(tmp_path / "dry", *GRID, *SHORT, "cluster=slurm", "dry_run=true")
    assert dry.returncode == 0, dry.stderr
    planned = "\n".join(ln.removeprefix("# sbatch | ").removeprefix("# sbatch |")
                        for ln in dry.stdout.splitlines() if ln.startswith("# sbatch"))
    sweep_dir = tmp_path / "slurm"
    proc = launch(sweep_dir, *GRID, *SHORT, "cluster=slurm", env={"PROOFGRID_PORT_BASE": "30000"})
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    records = _check_records(sweep_dir)
    (submission,) = json.loads((sweep_dir / "sweep.json").read_text())["submissions"]
    assert sorted(submission["jobs"]) == JOBS
    assert {r["job_id"].split("_")[0] for r in records.values()} == {submission["array_job_id"]}
    assert sorted(r["array_index"] for r in records.values()) == list(range(8))
    assert all(r["scheduler"] == "slurm" for r in records.values())
    assert proc.returncode == 0 and all(row["accepted"] == "yes" for row in index_rows(sweep_dir).values()), \
        proc.stdout[-2000:] + proc.stderr[-2000:]
    sbatch = json.loads((sweep_dir / "jobs" / JOBS[0] / "command.json").read_text())["sbatch"]
    folder = sweep_dir / ".submitit" / "run-0"
    assert path_free_script(sbatch, folder).rstrip("\n") == planned.rstrip("\n"), "the dry run printed another script"
