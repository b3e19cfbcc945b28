"""Helpers that run the real trainer on the shipped toy workload (no mocks, real files)."""

from __future__ import annotations

import json
import os
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


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def without_perf(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(PERF_PREFIX)} for r in records]
