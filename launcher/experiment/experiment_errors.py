"""The experiment runner's two ways to stop: a refusal before a stage starts, and a stage whose result stops it."""

from __future__ import annotations

from launcher.errors import LauncherError, PreflightError


class ExperimentError(PreflightError):
    """A spec, an experiment directory or a stage result that stops the experiment (one line)."""


class ExperimentFailed(LauncherError):
    """A stage ran and its result stops the experiment (a failed probe, rejected jobs): one line."""
