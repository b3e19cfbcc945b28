"""Fixtures for the evidence tests: synthetic sweeps on disk (written by benchmarks/synthetic_sweep.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep
from evidence.seal.bundle import build_bundle


@pytest.fixture(scope="session")
def clean_build(tmp_path_factory):
    """One complete 3 x 3 sweep, built once without figures: (sweep_dir, BuildResult). Drawing and redrawing
    the figures is most of a build's and an audit's time; a test about anything else reads or tampers with this."""
    sweep = make_sweep(tmp_path_factory.mktemp("clean"))
    return sweep, build_bundle(sweep, figures=False)


@pytest.fixture(scope="session")
def clean_build_with_figures(tmp_path_factory):
    """The same sweep built with its figures: (sweep_dir, BuildResult)."""
    sweep = make_sweep(tmp_path_factory.mktemp("clean-with-figures"), figures=True)
    return sweep, build_bundle(sweep)


@pytest.fixture
def bundle_copy(clean_build, tmp_path) -> Path:
    """A private copy of the clean bundle directory (no figures), free to tamper with."""
    _, result = clean_build
    return Path(shutil.copytree(result.bundle_dir, tmp_path / "bundle"))


@pytest.fixture
def figures_bundle_copy(clean_build_with_figures, tmp_path) -> Path:
    """A private copy of the clean bundle directory with its figures, free to tamper with."""
    _, result = clean_build_with_figures
    return Path(shutil.copytree(result.bundle_dir, tmp_path / "bundle"))


@pytest.fixture
def sweep(tmp_path) -> Path:
    """A fresh complete sweep for tests that change its files before building."""
    return make_sweep(tmp_path)
