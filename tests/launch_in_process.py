"""``python launch.py ...`` run inside the test process: the same script, its ``__main__`` block
included (the one-line override check, then the Hydra app), without a new interpreter.

For dry runs, which start nothing: a fresh interpreter costs 2-4 s of imports per call, the checks
themselves a fraction of a second. tests/launcher/test_launcher_dry_run.py keeps one golden subprocess test.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import subprocess
import sys
from pathlib import Path

from tests.sweeps import REPO


def launch_in_process(out_dir: Path, *args: str, multirun: bool = True,
                      env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``launch.py [-m] *args`` here; returns its exit code and what it printed.

    ``out_dir`` becomes ``hydra.sweep.dir`` (multirun) or ``hydra.run.dir`` (single run); ``env``
    is added to ``os.environ`` for the call only (as ``tests.sweeps.launch`` adds it for its process).

    The script's last call, ``exit_now`` (facts/process_exit.py: ``os._exit`` without the interpreter's teardown),
    would end this process too: here it is ``sys.exit``, the exit it stands for."""
    from hydra.core.global_hydra import GlobalHydra

    import facts.process_exit

    dir_key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    argv = ["launch.py", *(["-m"] if multirun else []), *args, f"{dir_key}={out_dir}"]
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    saved_env = {key: os.environ.get(key) for key in env or {}}
    code = 0
    exit_now = facts.process_exit.exit_now
    try:
        facts.process_exit.exit_now = sys.exit
        os.environ.update(env or {})
        sys.argv = argv
        os.chdir(REPO)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            runpy.run_path(str(REPO / "launch.py"), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        facts.process_exit.exit_now = exit_now
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        GlobalHydra.instance().clear()
    return subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())
