"""The exact command that resumes a sweep (or an experiment): the one that started it, its directory
pinned. "Re-run the same command" is wrong advice with the default, timestamped ``hydra.sweep.dir``:
that starts a new sweep from scratch. The command is recorded in ``<sweep>/resume.txt`` (never in the
bundle: it holds this machine's paths) so that ``python -m launcher status`` can print it later.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from facts.files import RESUME_COMMAND
from launcher.job_spec import hydra_value

DIR_KEYS = ("hydra.sweep.dir", "hydra.run.dir")
MULTIRUN_FLAGS = ("-m", "--multirun")


def resume_command(top_dir: str | Path, argv: list[str] | None = None) -> str | None:
    """``argv`` (default: this process's own command line, interpreter included) with any directory
    override replaced by ``top_dir``'s absolute path: ``hydra.sweep.dir`` for a ``-m`` sweep,
    ``hydra.run.dir`` for a single job or an experiment. None when ``argv`` is not a ``launch.py`` command
    (the launcher called from Python)."""
    argv = list(sys.orig_argv if argv is None else argv)
    script = next((i for i, a in enumerate(argv) if Path(a).name == "launch.py"), None)
    if script is None:
        return None
    kept = [a for a in argv if a.split("=", 1)[0].lstrip("+~") not in DIR_KEYS]
    key = DIR_KEYS[0] if any(a in MULTIRUN_FLAGS for a in argv[script + 1:]) else DIR_KEYS[1]
    return shlex.join([*kept, f"{key}={hydra_value(str(Path(top_dir).resolve()))}"])


def resume_advice(top_dir: str | Path) -> str:
    """How to resume ``top_dir``: its recorded command, else how to write one."""
    command = recorded_resume_command(top_dir) or resume_command(top_dir)
    if command:
        return command
    return f"the command that started it, with hydra.sweep.dir={Path(top_dir).resolve()} (hydra.run.dir for an experiment)"


def record_resume_command(top_dir: str | Path) -> None:
    """Write ``<top_dir>/resume.txt`` once ``top_dir`` exists (a refused command makes no directory)."""
    command = resume_command(top_dir)
    if command and Path(top_dir).is_dir():
        (Path(top_dir) / RESUME_COMMAND).write_text(command + "\n")


def recorded_resume_command(sweep_dir: str | Path) -> str | None:
    """The command recorded for ``sweep_dir``, or for the experiment whose stage it is (a parent)."""
    for directory in (Path(sweep_dir), *Path(sweep_dir).resolve().parents[:2]):
        path = directory / RESUME_COMMAND
        if path.is_file():
            return path.read_text().strip() or None
    return None
