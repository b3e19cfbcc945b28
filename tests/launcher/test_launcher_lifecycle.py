"""Real launches of the toy workload that pin the launcher's lifecycle: concurrent launchers,
signals, a runtime killed with SIGKILL, data parallelism, odd sweep-dir names, and the restart
point after a bad metrics line."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from facts.processes import process_start_ticks
from launcher.directory_locks import RUN_LOCK
from launcher.job_spec import hydra_value
from launcher.ray_runtime import leftover_processes
from tests.sweeps import REPO, index_rows, job_records, launch

pytestmark = pytest.mark.slow

SHORT = ("workload.n_updates=2", "workload.checkpoint_every=1", "workload.eval.n_prompts=2")
LONG = ("workload.n_updates=500", "workload.checkpoint_every=50", "workload.eval.n_prompts=2")


def _start(sweep_dir: Path | None, *args: str, port_base: str, cwd: Path = REPO) -> subprocess.Popen:
    """``launch.py -m args`` into ``sweep_dir`` (None: Hydra's default, timestamped one under ``cwd``)."""
    where = [f"hydra.sweep.dir={hydra_value(str(sweep_dir))}"] if sweep_dir is not None else []
    cmd = [sys.executable, str(REPO / "launch.py"), "-m", *args, *where]
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PROOFGRID_PORT_BASE": port_base})


def _wait_for_trainer(job_dir: Path, timeout: float = 240) -> tuple[int, int]:
    """(runtime pid, trainer pid) once the trainer has started and written a training step."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            record = json.loads((job_dir / "job.json").read_text())
            holder = int((job_dir / "run" / RUN_LOCK).read_text())
        except (OSError, ValueError):
            time.sleep(0.2)
            continue
        if holder != record.get("runtime_pid") and (job_dir / "run" / "metrics.jsonl").is_file():
            return record["runtime_pid"], holder
        time.sleep(0.2)
    raise AssertionError(f"no trainer started in {job_dir}")


def _gone(pid: int, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while process_start_ticks(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    return process_start_ticks(pid) is None


@pytest.mark.parametrize(("sig", "port_base"), [(signal.SIGTERM, "29000"), (signal.SIGINT, "29200"),
                                                (signal.SIGHUP, "29400")])
def test_a_signalled_launcher_stops_its_jobs_and_says_how_to_resume_in_one_line(tmp_path, sig, port_base):
    # SIGHUP's launch takes Hydra's default, timestamped directory: the advice must pin it, since the
    # same command again would start a new sweep from scratch.
    sweep_dir = tmp_path / "s" if sig != signal.SIGHUP else None
    launcher = _start(sweep_dir, "algo=grpo", "seed=1", *LONG, port_base=port_base, cwd=tmp_path)
    if sweep_dir is None:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("outputs/sweeps/*/jobs/grpo-1")) and time.monotonic() < deadline:
            time.sleep(0.2)
        sweep_dir = next(tmp_path.glob("outputs/sweeps/*"))
    if sig == signal.SIGTERM:  # also: of two launchers started together into one sweep dir, one is refused
        other = _start(sweep_dir, "algo=grpo", "seed=1", *LONG, port_base=port_base)
        deadline = time.monotonic() + 120
        while launcher.poll() is None and other.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        refused, launcher = (launcher, other) if launcher.poll() is not None else (other, launcher)
        _, err = refused.communicate(timeout=10)
        assert refused.returncode == 2 and "another launcher" in err and "Traceback" not in err, err
    _, trainer = _wait_for_trainer(sweep_dir / "jobs" / "grpo-1")
    launcher.send_signal(sig)
    _, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 128 + sig, (launcher.returncode, err[-2000:])
    errors = [ln for ln in err.splitlines() if "proofgrid: error" in ln]
    assert len(errors) == 1 and errors[0].startswith("proofgrid: error: stopped by " + signal.Signals(sig).name)
    assert "Traceback" not in err, err
    # Said at once, before the jobs' teardown: what it is doing and what a second signal does.
    assert "stopping 1 running job(s) at their next step" in err and "Ctrl-C again to kill them now" in err, err
    resume = [sys.executable, str(REPO / "launch.py"), "-m", "algo=grpo", "seed=1", *LONG, f"hydra.sweep.dir={hydra_value(str(sweep_dir.resolve()))}"]
    assert f"to resume (accepted jobs are kept, the others restart from their last checkpoint, where their trainer saved one): " \
           f"{shlex.join(resume)};" in errors[0], errors[0]
    # the status command beside it names the same absolute directory (a relative one breaks after a cd)
    assert errors[0].endswith(f"; python -m launcher status {sweep_dir.resolve()} shows each job"), errors[0]
    assert (sweep_dir / "resume.txt").read_text() == shlex.join(resume) + "\n"
    assert _gone(trainer)
    assert leftover_processes(sweep_dir / "jobs" / "grpo-1") == []
    assert job_records(sweep_dir)["grpo-1"]["state"] == "CANCELLED"
    status = subprocess.run([sys.executable, "-m", "launcher", "status", str(sweep_dir)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert shlex.join(resume) in " ".join(status.stdout.split()), status.stdout


def test_a_runtime_killed_with_sigkill_takes_its_trainer_along_and_the_job_fails_with_its_cause(tmp_path):
    sweep_dir = tmp_path / "s"
    proc = _start(sweep_dir, "algo=rpp", "seed=3", *LONG, port_base="29600")
    runtime, trainer = _wait_for_trainer(sweep_dir / "jobs" / "rpp-3")
    os.kill(runtime, signal.SIGKILL)
    assert _gone(trainer), "the trainer outlived its killed runtime"
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]
    record = job_records(sweep_dir)["rpp-3"]
    assert record["state"] == "FAILED" and "SIGKILL" in record["failure"]
    # the cause reaches the output as it happens (off a terminal: the plain progress line on stdout)
    assert any(ln.startswith("rpp-3: FAILED") and "SIGKILL" in ln for ln in out.splitlines()), out[-3000:]
    assert index_rows(sweep_dir)["rpp-3"]["accepted"] == "no"
    assert "SIGKILL" in (sweep_dir / "bundle" / "data" / "incidents.csv").read_text()  # and the incident record


def test_data_parallel_dp_size_2_runs_through_the_launcher_and_is_accepted(tmp_path):
    sweep_dir = tmp_path / "dp"
    proc = launch(sweep_dir, "algo=rppb", "seed=5", "dp_size=2", "workload.cpus_per_job=2", *SHORT,
                  env={"PROOFGRID_PORT_BASE": "29800"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    record = job_records(sweep_dir)["rppb-5"]
    assert record["state"] == "COMPLETED" and record["cleanup"] == []
    assert json.loads((sweep_dir / "jobs" / "rppb-5" / "run" / "run.json").read_text())["dp_size"] == 2
    assert index_rows(sweep_dir)["rppb-5"]["accepted"] == "yes"


def test_a_sweep_dir_with_a_comma_a_quote_and_non_ascii_works_and_a_bad_metrics_line_restarts_the_run(tmp_path):
    sweep_dir = tmp_path / "a,b it's é"
    first = _start(sweep_dir, "algo=grpo", "seed=7", *SHORT, port_base="30000")
    out, err = first.communicate(timeout=900)
    assert first.returncode == 0, out[-2000:] + err[-3000:]
    assert index_rows(sweep_dir)["grpo-7"]["accepted"] == "yes"

    # A bad line before the last checkpoint (step 2): resuming after it would keep it forever.
    metrics = sweep_dir / "jobs" / "grpo-7" / "run" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    lines[0] = lines[0].replace('"train/loss": ', '"train/loss": NaN, "was": ', 1)
    metrics.write_text("\n".join(lines) + "\n")
    again = _start(sweep_dir, "algo=grpo", "seed=7", *SHORT, port_base="30000")
    out, err = again.communicate(timeout=900)
    assert again.returncode == 0, out[-2000:] + err[-3000:]
    assert "restarts from step 0" in out
    assert index_rows(sweep_dir)["grpo-7"]["accepted"] == "yes"
    assert (sweep_dir / "jobs" / "grpo-7" / "attempts" / "0" / "run" / "checkpoints").is_dir()  # kept, not deleted
    assert "NaN" not in metrics.read_text()
