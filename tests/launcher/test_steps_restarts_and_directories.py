"""What a person sees, round two (issue 23, item 9), through ``launch.py``: the trainer's log counts steps
as metrics.jsonl, TensorBoard and steps.csv do (from 0); a re-run's incident says whether it resumed from
a checkpoint or restarted from scratch; refused commands and experiments leave no empty directory; an
experiment's smoke run and its full run get their own default directories."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sweeps import REPO, launch

ENV = {"OMP_NUM_THREADS": "1"}


def _launch_py(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "launch.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_the_trainer_log_counts_steps_from_0_as_metrics_tensorboard_and_steps_csv_do(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sweep = tmp_path / "steps"
    proc = launch(sweep, "algo=grpo", "seed=3", "workload.n_updates=3", "workload.eval.n_prompts=8", env=ENV)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    job = sweep / "jobs" / "grpo-3"
    logged = [(int(m[1]), int(m[2])) for m in re.finditer(r"step (\d+) of (\d+) reward=", (job / "trainer.log").read_text())]
    assert logged == [(0, 3), (1, 3), (2, 3)]
    metrics = [json.loads(line)["step"] for line in (job / "run" / "metrics.jsonl").read_text().splitlines()]
    events = set()
    for path in (job / "run" / "tensorboard").glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(path))
        acc.Reload()
        if "train/loss" in acc.Tags()["scalars"]:
            events |= {e.step for e in acc.Scalars("train/loss")}
    with open(sweep / "bundle" / "data" / "steps.csv", newline="") as f:
        table = [int(row["step"]) for row in csv.DictReader(f)]
    assert metrics == sorted(events) == table == [s for s, _ in logged]
    assert json.loads((job / "run" / "run.json").read_text())["resumed_from"] is None  # started at step 0


def test_a_rerun_says_whether_it_resumed_from_a_checkpoint_or_restarted_from_scratch(tmp_path):
    """lr=1e30 blows the weights up at the first update: every run fails at step 1. With a checkpoint
    after every step the re-run resumes from step_000001; without one it starts from scratch."""
    sweep = tmp_path / "rerun"
    grid = ("algo=grpo", "seed=5", "workload.lr=1e30", "workload.n_updates=3", "workload.eval.n_prompts=8",
            "workload.checkpoint_every=1,10")
    first = launch(sweep, *grid, env=ENV)
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]
    again = launch(sweep, *grid, env=ENV)
    assert again.returncode == 1, again.stdout[-2000:] + again.stderr[-2000:]
    with open(sweep / "bundle" / "data" / "incidents.csv", newline="") as f:
        earlier = {r["job"]: r["action"] for r in csv.DictReader(f) if r["kind"] == "earlier-attempt"}
    runs = {job.name: json.loads((job / "run" / "run.json").read_text()) for job in (sweep / "jobs").iterdir()}
    saved = next(name for name, run in runs.items() if run["config"]["workload"]["checkpoint_every"] == 1)
    unsaved = next(name for name in runs if name != saved)
    assert runs[saved]["resumed_from"] == {"checkpoint": "step_000001", "step": 1}
    assert runs[unsaved]["resumed_from"] is None
    assert earlier == {saved: "re-run; resumed from its checkpoint step_000001 (continuing at step 1)",
                       unsaved: "re-run from scratch (step 0): there was no checkpoint to resume from"}
    assert "resumed from its last checkpoint" not in (sweep / "bundle" / "data" / "report.md").read_text()
    log = (sweep / "jobs" / saved / "trainer.log").read_text()
    assert "resumed from step_000001: continuing at step 1 of 3" in log


@pytest.mark.slow  # runs launch.py: a process per command
def test_refused_commands_and_experiments_leave_no_empty_directory(tmp_path):
    for args in (("workload.n_updates=-1",), ("experiment=nope",), ("-m", "algo=grpo,nope"),
                 ("-m", "workload.n_updates=-1", "dry_run=true"), ("formal=true", "seed=-3")):
        proc = _launch_py(tmp_path, *args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
        assert list(tmp_path.iterdir()) == [], (args, sorted(p for p in tmp_path.rglob("*")))
    proc = _launch_py(tmp_path, "experiment=loss_norm", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.iterdir()) == []  # an experiment's dry run writes nothing, not even its directory


@pytest.mark.slow  # runs launch.py: a process per command
def test_an_experiments_smoke_run_and_full_run_get_their_own_default_directories(tmp_path):
    smoke = ("workload.n_updates=8", "workload.eval.n_prompts=16")
    digest = hashlib.sha256(b"workload.eval.n_prompts=16\nworkload.n_updates=8").hexdigest()[:8]
    made = set()
    for args in ((), smoke, (*smoke[::-1], "cluster=local")):
        proc = _launch_py(tmp_path, "experiment=loss_norm", *args, "dry_run=true")
        assert proc.returncode == 0, proc.stderr
        # the dry run names the directory a run would use, and makes none
        (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("directory: ")]
        made.add(Path(line.split(": ", 1)[1].split(" (", 1)[0]).relative_to(tmp_path / "outputs" / "experiments").as_posix())
    assert not (tmp_path / "outputs").exists()
    made = sorted(made)
    assert made == ["loss_norm", f"loss_norm-{digest}"]  # the order of the overrides, or a launcher setting: the same
