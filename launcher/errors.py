"""The errors every layer of the launcher raises, as one family (bagit's ``BagError`` is the model).

Each message is one line naming the problem and its fix; the class says how far things got when it
was raised. This module imports nothing of the launcher, so every module may raise them.
"""

from __future__ import annotations

# One launcher per sweep directory and one trainer per run directory are one lock and one error,
# the trainer's own (the trainer never imports the launcher).
from trainer.run_lock import LockHeld

__all__ = ["GridError", "JobFailed", "LauncherError", "LockHeld", "PortLockError", "PreflightError",
           "SchedulerUnavailable"]


class LauncherError(RuntimeError):
    """Something the launcher refuses or cannot do, in one line with its fix."""


class PreflightError(LauncherError):
    """A check failed before submission; nothing was started."""


class GridError(PreflightError, ValueError):
    """A grid that cannot be run as one sweep (one line: the problem and the fix)."""


class PortLockError(LauncherError):
    """The port-claim location or settings cannot be trusted or used (one line: what and the fix)."""


class SchedulerUnavailable(LauncherError):
    """The scheduler could not be asked (e.g. the Slurm controller or accounting is unreachable)."""


class JobFailed(LauncherError):
    """The job ended without completing (the job record says how far it got and why)."""
