"""Every entry point started by a Python without the project's libraries (a bare ``python`` outside
``.venv``; here the venv's own interpreter with ``-S``, so no site-packages) prints one line naming the
missing library and the interpreter to use, never a ``ModuleNotFoundError`` traceback (issue 23, item 9)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.sweeps import REPO

ENTRY_POINTS = {
    "launch.py": (["launch.py", "-m", "algo=grpo"], "proofgrid: error: ", "run .venv/bin/python launch.py"),
    "launcher status": (["-m", "launcher", "status", "outputs"], "python -m launcher: error: ",
                        "run .venv/bin/python -m launcher"),
    "evidence audit": (["-m", "evidence", "audit", "bundle.tar.gz"], "python -m evidence: error: ",
                       "run .venv/bin/python -m evidence"),
    "evidence build": (["-m", "evidence", "build", "outputs"], "python -m evidence: error: ",
                       "run .venv/bin/python -m evidence"),
    "proofgrid audit": (["-m", "proofgrid", "audit", "bundle.tar.gz"], "proofgrid: error: ",
                        "run .venv/bin/proofgrid ..."),  # the command as typed
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_an_entry_point_outside_the_venv_is_one_line_naming_the_venvs_python(entry):
    args, prefix, advice = ENTRY_POINTS[entry]
    proc = subprocess.run([sys.executable, "-S", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(prefix) and " is not installed for " in proc.stderr and advice in proc.stderr
