"""Live tracking at plan time: ``tracking.live`` (wandb | mlflow | tensorboard) checked and turned into each
job's ``JobSpec.tracking``, which the job runtime's follower (``launcher.runtime.follower``) logs to.

Refused in one line before anything runs: a tracker whose library is not installed (naming the Makefile target
of its extra, ``facts.extras``), and ``tracking.uri`` set for W&B (W&B's server is its own setting,
``WANDB_BASE_URL``, and its credentials the user's). Unset, MLflow writes a file store and TensorBoard its event
files under ``<sweep>/tracking/<tool>/`` (``facts.trackers.LIVE_DIR``); a relative ``tracking.uri`` directory is
taken from the directory the launcher was started in.
"""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig

from facts.extras import extra_problem
from facts.trackers import DEFAULT_PROJECT, LIVE_DIR, LIVE_EXTRAS
from launcher.errors import PreflightError

URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")  # http:, https:, file:, sqlite:, databricks: (not C:)


def live_tracking(root_cfg: DictConfig, sweep_dir: Path) -> dict | None:
    """``JobSpec.tracking`` of every job of the sweep (``{"live", "uri", "project"}``), or None when off."""
    settings = root_cfg.get("tracking") or {}
    tool = settings.get("live")
    if not tool:
        return None
    extra = LIVE_EXTRAS.get(str(tool))
    problem = extra and extra_problem(extra, f"tracking.live={tool}")
    if problem:
        raise PreflightError(problem)
    uri = settings.get("uri")
    if tool == "wandb" and uri:
        raise PreflightError(f"tracking.uri={uri} is refused for tracking.live=wandb: W&B's server is its own "
                             "setting (WANDB_BASE_URL in the environment); drop tracking.uri")
    if not uri:
        uri = Path(sweep_dir) / LIVE_DIR / str(tool)
    elif tool == "tensorboard" or not URI_SCHEME.match(str(uri)):
        uri = Path(str(uri)).expanduser().resolve()  # a directory: absolute, as every job sees it
    if isinstance(uri, Path) and tool == "mlflow":
        uri = uri.as_uri()  # a directory is a file store to MLflow
    return {"live": str(tool), "uri": str(uri), "project": str(settings.get("project") or DEFAULT_PROJECT)}
