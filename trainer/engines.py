"""Rollout engines by name (``workload.engine``): where each engine class lives.

Torch-free, so the settings schema checks an engine name at plan time without importing an engine.
An SGLang engine registers here; the training loop never changes.
"""

from __future__ import annotations

import importlib

ENGINES = {"torch": "trainer.rollout:TorchEngine"}


def engine_class(name: str) -> type:
    """The class of engine ``name`` (imported on demand)."""
    try:
        module, cls = ENGINES[name].split(":")
    except KeyError:
        raise ValueError(f"unknown rollout engine {name!r}; choose one of {', '.join(sorted(ENGINES))}") from None
    return getattr(importlib.import_module(module), cls)
