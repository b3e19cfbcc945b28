"""Helpers that run the real trainer on the shipped toy workload (no mocks, real files)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PERF_PREFIX = "perf/"


def trainer_cmd(out: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "trainer", f"output_dir={out}", *overrides]


def run_trainer(out: Path, *overrides: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONNOUSERSITE": "1"}
    proc = subprocess.run(trainer_cmd(out, *overrides), cwd=REPO, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"trainer failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


@contextlib.contextmanager
def _process_state_restored():
    """What a trainer run sets for its whole process (torch's determinism switch and thread count,
    the global RNGs, the environment, the root logger), put back afterwards for the next test."""
    import torch

    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    threads = torch.get_num_threads()
    rng = torch.get_rng_state(), random.getstate()
    env = dict(os.environ)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_num_threads(threads)
        torch.set_rng_state(rng[0])
        random.setstate(rng[1])
        os.environ.clear()
        os.environ.update(env)
        root.handlers[:], root.level = handlers, level


def train_in_process(out: Path, *overrides: str, check: bool = True) -> subprocess.CompletedProcess:
    """``python -m trainer output_dir=<out> *overrides`` run in this process: the same entry function
    (``trainer.__main__.main``), without 3-4 s of interpreter and library start-up per run. For one-rank
    runs that need no process of their own (nothing kills or signals them); ``run_trainer`` starts one."""
    from trainer.__main__ import main

    argv = [f"output_dir={out}", *overrides]
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_cwd = os.getcwd()
    with _process_state_restored():
        try:
            os.chdir(REPO)
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = main(argv)
        finally:
            os.chdir(saved_cwd)
    proc = subprocess.CompletedProcess(["trainer", *argv], code, stdout.getvalue(), stderr.getvalue())
    if check and proc.returncode != 0:
        raise AssertionError(f"trainer failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def without_perf(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(PERF_PREFIX)} for r in records]


def read_eval(run_dir: Path) -> dict:
    """``eval.json`` without the initial entry's ``shared`` reference: a job of a sweep reuses the
    sweep's one initial evaluation and says where it lies; a run on its own computes the same values
    itself, so the two compare equal on everything else."""
    record = json.loads((run_dir / "eval.json").read_text())
    record["initial"].pop("shared", None)
    return record

