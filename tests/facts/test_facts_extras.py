"""facts/extras.py: each extra a choice may need is one of pyproject.toml's, installed by the Makefile target it
names, and a missing module of it is found without importing anything."""

from __future__ import annotations

import re

from facts.extras import EXTRAS, extra_problem, missing_module
from tests.sweeps import REPO


def test_every_extra_is_a_pyproject_extra_installed_by_the_makefile_target_it_names():
    optional = (REPO / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^([\w-]+) = \[", optional, re.M))
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    for name, extra in EXTRAS.items():
        assert name == extra.name and name in extras
        assert extra.target.startswith("make ") and extra.target.split()[1] in targets
        assert f'-e ".[{name}]"' in (REPO / "Makefile").read_text()  # the target installs that very extra


def test_a_module_this_python_lacks_is_named_with_the_install_line():
    from facts import extras

    extras.EXTRAS["probe"] = extras.Extra("probe", ("json", "no_such_module_x"), "make probe")
    try:
        assert missing_module("probe") == "no_such_module_x"
        assert extra_problem("probe", "job a: trainer b") == (
            'job a: trainer b needs the probe extra, which is not installed here (no module no_such_module_x): '
            'pip install -e ".[probe]" (in a checkout: make probe)')
    finally:
        del extras.EXTRAS["probe"]
