"""Where a rejected job's re-run starts: its last checkpoint, unless the metrics log is bad before it.

A resumed run keeps the metrics lines before its checkpoint and appends the rest. A line the
evidence refuses (non-finite, missing keys, torn) *before* the checkpoint's step would therefore be
kept by every re-run, and the job rejected forever. Such a checkpoint is moved into the attempt's
archive (nothing is deleted), with the run's TensorBoard events, and the re-run starts from scratch.
Only the newest checkpoint is kept by the trainer, so there is no earlier one to fall back to.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from evidence.gates.metrics_log import validate_metrics
from facts import CHECKPOINTS_DIR, JOB_RUN_DIR, METRICS_LOG, run_dir_of_job
from facts.files import TENSORBOARD_DIR, TRAINER_STATE

RUN_STATE_DIRS = (CHECKPOINTS_DIR, TENSORBOARD_DIR)  # what a resume reads or appends to


def checkpoint_step(run_dir: Path) -> int | None:
    """The step of the checkpoint a resume would load, or None."""
    # The trainer's checkpoint module imports torch: only a re-run of a rejected job pays for it.
    from trainer.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(run_dir / CHECKPOINTS_DIR)
    if ckpt is None:
        return None
    try:
        return int(json.loads((ckpt / TRAINER_STATE).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def discard_checkpoint_past_bad_metrics(job_dir: Path, algo: str, n_updates: int, attempt_dir: Path) -> str | None:
    """Move the run's checkpoints (and TensorBoard events) to ``attempt_dir/run/`` when the metrics
    log is not clean up to the checkpoint's step; returns what was done, or None."""
    run_dir = run_dir_of_job(job_dir)
    step = checkpoint_step(run_dir)
    if step is None:
        return None
    clean = validate_metrics(run_dir / METRICS_LOG, algo, n_updates).valid_steps
    if clean >= step:
        return None  # the resume drops the lines from the checkpoint on: what stays is clean
    run_dir_of_job(attempt_dir).mkdir(parents=True, exist_ok=True)
    for name in RUN_STATE_DIRS:
        if (run_dir / name).exists():
            shutil.move(str(run_dir / name), str(run_dir_of_job(attempt_dir) / name))
    return (f"the metrics log is valid only up to step {clean}, before the checkpoint of step {step}; "
            f"that checkpoint moved to {attempt_dir.relative_to(job_dir)}/{JOB_RUN_DIR}/ and the job restarts from step 0")
