"""How often the launcher asks Slurm: one sacct and one squeue per look for the whole sweep, whatever
its size, on the real throwaway cluster; and the waiting launcher's looks backing off to the profile's
``cluster.poll_interval_s``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from facts import sweep_job_dir
from facts.files import JOB_RECORD
from facts.repo import REPO_ROOT
from launcher.slurm.slurm_states import look_intervals

REPO = REPO_ROOT


def _shims(where: Path, log: Path) -> dict[str, str]:
    """sacct and squeue that log each call and then exec the real command: the cluster stays real."""
    where.mkdir()
    for name in ("sacct", "squeue"):
        real = shutil.which(name)
        assert real, f"{name} not on PATH"
        shim = where / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexec "{real}" "$@"\n')
        shim.chmod(0o755)
    return {**os.environ, "PATH": f"{where}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.slow
@pytest.mark.usefixtures("slurm_cluster")
def test_launcher_status_asks_sacct_and_squeue_once_per_look_for_the_whole_sweep(tmp_path):
    tasks = 40
    partition = os.environ.get("PROOFGRID_SLURM_PARTITION", "debug")
    array = subprocess.run(["sbatch", "--parsable", f"--array=0-{tasks - 1}", f"--partition={partition}",
                            "--output=/dev/null", "--time=1", "--wrap", "true"],
                           capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    sweep = tmp_path / "sweep"
    for i in range(tasks):
        job_dir = sweep_job_dir(sweep, f"grpo-{i}")
        job_dir.mkdir(parents=True)
        (job_dir / JOB_RECORD).write_text(json.dumps({"scheduler": "slurm", "job_id": f"{array}_{i}",
                                                      "state": "PENDING", "algo": "grpo", "seed": i}))
    log = tmp_path / "calls.log"
    proc = subprocess.run([sys.executable, "-m", "launcher", "status", str(sweep)], cwd=REPO, capture_output=True,
                          text=True, env=_shims(tmp_path / "bin", log), timeout=120)
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    sacct = [c for c in calls if c.startswith("sacct")]
    squeue = [c for c in calls if c.startswith("squeue")]
    # One look, and a second only for tasks in a state a requeue can follow: never one per task.
    assert 1 <= len(sacct) == len(squeue) <= 2, calls
    assert all(f"-j {array}" in c for c in sacct), sacct
    records = [json.loads((sweep_job_dir(sweep, f"grpo-{i}") / JOB_RECORD).read_text()) for i in range(tasks)]
    assert all(r["state"] != "PENDING" or r.get("scheduler_reason") is not None for r in records)


def test_the_waiting_launchers_looks_back_off_to_the_profiles_poll_interval():
    def first(longest, n=8):
        intervals = look_intervals(longest)
        return [next(intervals) for _ in range(n)]

    assert first(60) == [2, 4, 8, 16, 32, 60, 60, 60]
    assert first(4) == [2, 4, 4, 4, 4, 4, 4, 4]
    assert first(1) == [1] * 8


def test_the_slurm_profile_says_how_often_it_looks_and_refuses_a_poll_interval_below_one_second(tmp_path):
    base = [sys.executable, "launch.py", "-m", "algo=grpo", "seed=1", "dry_run=true", "cluster=slurm",
            "cluster.partition=gpu"]
    env = {**os.environ, "PROOFGRID_SLURM_POLL_INTERVAL_S": "60"}
    shown = subprocess.run([*base, f"hydra.sweep.dir={tmp_path / 'a'}"], cwd=REPO, capture_output=True, text=True,
                           env=env)
    assert shown.returncode == 0, shown.stderr
    assert "# watch | one sacct and one squeue per look for the whole sweep" in shown.stdout
    assert "up to cluster.poll_interval_s=60 s" in shown.stdout
    refused = subprocess.run([*base, "cluster.poll_interval_s=0", f"hydra.sweep.dir={tmp_path / 'b'}"], cwd=REPO,
                             capture_output=True, text=True, env=env)
    assert refused.returncode != 0 and "cluster.poll_interval_s=0" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
