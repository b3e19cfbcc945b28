"""The root of every error the trainer raises, as ``launcher.errors.LauncherError`` is the launcher's and
``evidence.problems.EvidenceError`` the evidence's.

Each message is one line naming the problem and its fix. The entry points (``python -m trainer``,
``python -m trainer.external``) print it as ``error: ...`` instead of a traceback. A subclass keeps a second
base (``ValueError``, ``RuntimeError``) where callers catch that. This module imports nothing, so every
trainer module may raise it.
"""

from __future__ import annotations

__all__ = ["TrainerError"]


class TrainerError(Exception):
    """Something the trainer refuses or cannot do, in one line with its fix."""
