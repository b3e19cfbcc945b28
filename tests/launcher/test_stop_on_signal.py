"""The scheduler's warning (USR2/TERM) stops a data-parallel trainer at a step boundary with a
checkpoint, and the resumed run is bit-identical to an uninterrupted one (no Slurm needed here;
tests/launcher/test_slurm.py does the same through the cluster)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.trainer_runs import REPO, read_metrics, run_trainer, trainer_cmd, without_perf
from trainer.preemption import CHECKPOINT_SIGNALS, EXIT_CHECKPOINTED

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

# No periodic checkpoint before the end: every step kept across the stop was saved on the signal.
DP2 = ("algo=rpp", "seed=7", "dp_size=2", "workload.n_updates=40", "workload.checkpoint_every=100",
       "workload.eval.n_prompts=4")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dp2") / "uninterrupted"
    run_trainer(out, *DP2)
    return out


@contextlib.contextmanager
def _killed_at_exit(proc: subprocess.Popen):
    """``proc``, and its whole process group killed if it is still running when the block ends."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _start_like_the_runtime(out: Path) -> subprocess.Popen:
    """The trainer as the job runtime starts it: own process group, warning signals blocked."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, CHECKPOINT_SIGNALS)
    try:
        return subprocess.Popen(trainer_cmd(out, *DP2), cwd=REPO, env={**os.environ, "PYTHONNOUSERSITE": "1"},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _steps(out: Path) -> int:
    path = out / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _resume_and_compare(out: Path, reference: Path) -> str:
    """Run ``out`` to the end again; its metrics and eval must equal ``reference``'s. Returns the log."""
    resumed = run_trainer(out, *DP2)
    assert without_perf(read_metrics(out)) == without_perf(read_metrics(reference))
    assert json.loads((out / "eval.json").read_text()) == json.loads((reference / "eval.json").read_text())
    return resumed.stderr


def test_a_dp2_trainer_warned_mid_run_checkpoints_at_its_current_step_and_resumes_bit_identically(
        tmp_path, uninterrupted):
    out = tmp_path / "warned"
    with _killed_at_exit(_start_like_the_runtime(out)) as proc:
        deadline = time.monotonic() + 300
        while _steps(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR2)  # submitit's time-limit warning
        log, _ = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_CHECKPOINTED, log[-3000:]
    at_step = _steps(out)
    assert 3 <= at_step < 40, f"the warning must land mid-run (stopped after {at_step} steps)"
    # Both ranks stopped after the same step, and rank 0 saved exactly that step.
    assert (out / "checkpoints" / "latest").read_text().strip() == f"step_{at_step:06d}"
    assert (f"stopping before step {at_step} of 40 for a requeue; checkpoint step_{at_step:06d} holds steps "
            f"0-{at_step - 1}") in log
    assert "Traceback" not in log, log[-3000:]
    assert f"resumed from step_{at_step:06d}" in _resume_and_compare(out, uninterrupted)


def test_a_warning_held_while_the_dp2_trainer_starts_is_not_lost(tmp_path, uninterrupted):
    # Sent before the ranks exist: the parent holds it, forwards it once they are spawned, and the
    # ranks hold it until their handler is set; they stop before the first step.
    out = tmp_path / "early"
    with _killed_at_exit(_start_like_the_runtime(out)) as proc:
        proc.send_signal(signal.SIGTERM)  # what preemption sends
        log, _ = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_CHECKPOINTED, log[-3000:]
    assert _steps(out) == 0 and "stopping before step 0 of 40 for a requeue; no step done, nothing checkpointed" in log
    _resume_and_compare(out, uninterrupted)
