"""Shared fixtures. The Slurm fixture uses a real throwaway cluster (scripts/slurm/cluster.sh):
the one CI's .ci/run started, or one it starts (and stops) itself."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CLUSTER_SH = REPO / "scripts" / "slurm" / "cluster.sh"

# Ray must never write ~/.ray/auth_token in tests (Ray 2.60 does unless auth is disabled).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def _cluster_env(state_dir: Path) -> dict[str, str]:
    """Variables exported by the cluster's env.sh."""
    env = {}
    for line in (state_dir / "env.sh").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running single-node Slurm cluster with accounting; yields its environment variables."""
    state_dir = Path(os.environ.get("PROOFGRID_SLURM_DIR", "/tmp/proofgrid-slurm"))
    started_here = False
    up = (state_dir / "env.sh").is_file() and subprocess.run(
        ["bash", str(CLUSTER_SH), "status", str(state_dir)], capture_output=True).returncode == 0
    if not up:
        for step in ("install", "start"):
            proc = subprocess.run(["bash", str(CLUSTER_SH), step, str(state_dir)] if step == "start"
                                  else ["bash", str(CLUSTER_SH), step], capture_output=True, text=True)
            if proc.returncode != 0:
                pytest.fail(f"could not {step} the throwaway Slurm cluster:\n{proc.stderr[-2000:]}")
        started_here = True
    env = _cluster_env(state_dir)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    if started_here:
        subprocess.run(["bash", str(CLUSTER_SH), "stop", str(state_dir)], capture_output=True)
