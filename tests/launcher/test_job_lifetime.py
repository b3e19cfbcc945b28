"""Who may run where, and for how long: one launcher per sweep directory, one trainer per run
directory, no trainer outliving its runtime, and a dead local job marked FAILED with its cause."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from facts.processes import local_runtime_alive, process_start_ticks, runtime_identity
from launcher.directory_locks import RUN_LOCK, LockHeld, lock_job_run_dir, sweep_lock
from launcher.errors import JobFailed
from launcher.job_spec import JobSpec
from launcher.liveness import mark_dead_local_jobs
from launcher.runtime import run_job
from tests.sweeps import REPO
from tests.trainer_runs import train_in_process

HOLD = """
import sys, time
from pathlib import Path
from launcher.directory_locks import {fn}
{call}
print("held", flush=True)
time.sleep(60)
"""


def _holder(fn: str, call: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(fn=fn, call=call)], cwd=REPO, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _spec(tmp_path) -> JobSpec:
    return JobSpec(name="grpo-1", algo="grpo", seed=1, sweep_dir=str(tmp_path), trainer_overrides=("algo=grpo", "seed=1"),
                   cpus=1, ray_cpus=0, n_updates=1, source_commit=None)


def test_a_second_launcher_in_a_held_sweep_dir_is_refused_at_once_and_admitted_once_the_first_dies(tmp_path):
    holder = _holder("sweep_lock", f"cm = sweep_lock(Path({str(tmp_path)!r})); cm.__enter__()")
    try:
        with pytest.raises(LockHeld, match=f"another launcher \\(pid {holder.pid}\\)"), sweep_lock(tmp_path):
            pass
    finally:
        holder.kill()
        holder.wait()
    with sweep_lock(tmp_path):  # the kernel dropped the dead holder's lock
        pass


def test_no_trainer_starts_in_a_run_dir_whose_lock_a_live_process_holds(tmp_path):
    """An orphaned trainer holds the run lock it inherited: the re-run's runtime must not start another."""
    spec = _spec(tmp_path)
    spec.job_dir.mkdir(parents=True)
    orphan = _holder("lock_job_run_dir", f"fd = lock_job_run_dir(Path({str(spec.job_dir)!r}))")
    try:
        with pytest.raises(JobFailed, match="may still be alive"):
            run_job(spec)
    finally:
        orphan.kill()
        orphan.wait()
    record = json.loads((spec.job_dir / "job.json").read_text())
    assert record["state"] == "FAILED" and str(orphan.pid) in record["failure"]
    assert not (spec.job_dir / "trainer.log").exists()  # no trainer was started
    os.close(lock_job_run_dir(spec.job_dir))  # and the lock is free again once the holder is gone


def test_a_trainer_started_by_hand_into_a_run_dir_another_trainer_holds_is_refused_in_one_line(tmp_path):
    out = tmp_path / "run"
    holder = _holder("lock_job_run_dir", f"fd = lock_job_run_dir(Path({str(tmp_path)!r}))")
    try:
        proc = train_in_process(out, "algo=grpo", "seed=1", check=False)  # trainer.__main__.main, as typed
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and f"pid {holder.pid}" in errors[0] and "may still be alive" in errors[0]
    assert not (out / "metrics.jsonl").exists()


def test_lock_files_are_never_followed_through_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    job_dir = tmp_path / "job"
    (job_dir / "run").mkdir(parents=True)
    (job_dir / "run" / RUN_LOCK).symlink_to(victim)
    with pytest.raises(OSError):
        lock_job_run_dir(job_dir)
    assert victim.read_text() == "precious\n"


TETHERED = """
import subprocess, sys
from launcher.runtime.trainer_processes import die_with_parent
import os
child = subprocess.Popen(["sleep", "60"], preexec_fn=die_with_parent(os.getpid()), start_new_session=True)
print(child.pid, flush=True)
child.wait()
"""


def test_a_process_started_like_the_trainer_dies_when_its_runtime_is_killed_with_sigkill():
    runtime = subprocess.Popen([sys.executable, "-c", TETHERED], cwd=REPO, stdout=subprocess.PIPE, text=True)
    trainer = int(runtime.stdout.readline())
    assert process_start_ticks(trainer) is not None
    os.kill(runtime.pid, signal.SIGKILL)
    runtime.wait()
    deadline = time.monotonic() + 10
    while process_start_ticks(trainer) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_start_ticks(trainer) is None, "the trainer outlived its runtime"


def _record(job_dir, **fields) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "job.json").write_text(json.dumps({"algo": "grpo", "seed": 1, "scheduler": "local", **fields}))


def test_a_running_record_whose_runtime_died_is_marked_failed_with_the_cause_from_its_log(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    job_dir = tmp_path / "jobs" / "grpo-1"
    _record(job_dir, state="RUNNING", **{**runtime_identity(os.getpid()), "runtime_pid": dead.pid})
    (job_dir / "runtime.log").write_text("Traceback (most recent call last):\n  File ...\n"
                                         "OSError: [Errno 28] No space left on device\n")
    marked = mark_dead_local_jobs([job_dir])
    record = json.loads((job_dir / "job.json").read_text())
    assert record["state"] == "FAILED" and "No space left on device" in record["failure"]
    assert marked == {"grpo-1": record["failure"]}
    from evidence.seal.bundle import refuse_jobs_in_flight

    refuse_jobs_in_flight(tmp_path)  # evidence build no longer waits for it


def test_a_reused_pid_is_not_mistaken_for_the_runtime(tmp_path):
    me = runtime_identity(os.getpid())
    assert local_runtime_alive(me)
    assert not local_runtime_alive({**me, "runtime_start_ticks": me["runtime_start_ticks"] - 1})
    assert not local_runtime_alive({**me, "boot_id": "another-boot"})
    assert not local_runtime_alive({**me, "node": socket.gethostname() + "-elsewhere"})


def test_a_live_runtime_is_left_alone(tmp_path):
    job_dir = tmp_path / "jobs" / "grpo-1"
    _record(job_dir, state="RUNNING", **runtime_identity(os.getpid()))
    assert mark_dead_local_jobs([job_dir]) == {}
    assert json.loads((job_dir / "job.json").read_text())["state"] == "RUNNING"


def test_launcher_status_marks_a_dead_local_job_failed_and_says_why(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    job_dir = tmp_path / "jobs" / "rpp-2"
    _record(job_dir, state="RUNNING", **{**runtime_identity(os.getpid()), "runtime_pid": dead.pid})
    (job_dir / "trainer.log").write_text("step 1\nRuntimeError: boom in the trainer\n")
    proc = subprocess.run([sys.executable, "-m", "launcher", "status", str(tmp_path)], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert "job rpp-2 FAILED" in proc.stderr and "boom in the trainer" in proc.stderr
    assert json.loads((job_dir / "job.json").read_text())["state"] == "FAILED"
