"""Where the repository's own files are: the root (the trainer's working directory, git's tree), the
Hydra config tree and the input manifests. The one place that turns this file's location into paths."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
MANIFESTS_DIR = REPO_ROOT / "manifests"
LAUNCH_SCRIPT = REPO_ROOT / "launch.py"  # the Hydra app: `python launch.py`, `proofgrid run` (a checkout's only)
# The launcher hands a job the source commit it checked (the trainer records it in run.json).
SOURCE_COMMIT_ENV = "PROOFGRID_SOURCE_COMMIT"
