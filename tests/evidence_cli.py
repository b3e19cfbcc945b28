"""``python -m evidence ...`` in the test process or as a process: the same ``main`` (argument parsing, output, exit
status), with or without a fresh interpreter.

A process costs about a second of imports and teardown before the command's own work (a reseal or an audit, a
fraction of a second on a small bundle); the tests that feed a command one forgery after another run it here, and
the process path is proven by the tests that call ``evidence_process`` (tests/test_console.py runs every command
both ways and compares their output).
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

from facts.repo import REPO_ROOT


def evidence_process(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m evidence <args>`` as a process of its own."""
    return subprocess.run([sys.executable, "-m", "evidence", *map(str, args)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout)


def evidence_in_process(*args) -> subprocess.CompletedProcess:
    """``python -m evidence <args>`` run here: its exit status (argparse's refusals included) and what it printed."""
    from evidence.__main__ import main

    argv = [str(a) for a in args]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess([sys.executable, "-m", "evidence", *argv], code, stdout.getvalue(),
                                       stderr.getvalue())
