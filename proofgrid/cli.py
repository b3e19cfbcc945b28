"""``proofgrid run | status | cancel | build | audit | validate | compare | export``.

Each command is the entry point it names, with the remaining arguments unchanged: ``run`` is
``python launch.py`` (Hydra's app: the process becomes it, so Ctrl-C, exit codes and the resume
command are the launcher's own), ``status`` and ``cancel`` are ``python -m launcher status|cancel``,
the others ``python -m evidence <command>``. Nothing is imported before a command is chosen, so the
evidence commands load neither the trainer nor the launcher (an audit needs no torch, transformers or
Ray: the reviewer's install is ``pip install proofgrid``, without the ``train`` extra).
"""

from __future__ import annotations

import importlib.util
import os
import sys

from facts.repo import LAUNCH_SCRIPT

PROG = "proofgrid"
# (command, what it does, the entry point it runs)
COMMANDS = (
    ("run", "run a sweep (-m) or one job: proofgrid run -m algo=grpo,rpp seed=1,2", f"python {LAUNCH_SCRIPT.name}"),
    ("status", "each job's state, step and decision: proofgrid status <sweep_dir>", "python -m launcher status"),
    ("cancel", "cancel a Slurm sweep's queued and running jobs: proofgrid cancel <sweep_dir>",
     "python -m launcher cancel"),
    ("build", "validate a sweep and seal its bundle: proofgrid build <sweep_dir>", "python -m evidence build"),
    ("audit", "audit a bundle directory or bundle.tar.gz", "python -m evidence audit"),
    ("validate", "validate one job or run directory", "python -m evidence validate"),
    ("compare", "compare two or more sweeps or bundles, per arm", "python -m evidence compare"),
    ("export", "the accepted runs as W&B offline runs or an MLflow file store", "python -m evidence export"),
    ("sign", "sign a bundle.tar.gz (or --generate-key a key pair); audit --public-key verifies it",
     "python -m evidence sign"),
)
LAUNCHER_COMMANDS = ("status", "cancel")
EVIDENCE_COMMANDS = ("build", "audit", "validate", "compare", "export", "sign")
TRAIN_INSTALL = 'pip install -e ".[train]" in a checkout (make venv)'
EXIT_USAGE = 2


def usage() -> str:
    width = max(len(name) for name, _, _ in COMMANDS)
    lines = [f"usage: {PROG} <command> [args ...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {what} ({runs})" for name, what, runs in COMMANDS]
    lines += ["", f"`{PROG} <command> --help` shows the command's own options."]
    return "\n".join(lines)


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _needs_training_install(command: str) -> str | None:
    """One line when a launcher command runs in an install without the ``train`` extra (Hydra, torch)."""
    if importlib.util.find_spec("hydra") is None or importlib.util.find_spec("torch") is None:
        return f"{PROG} {command} needs the training install (Hydra, torch), which is not here: {TRAIN_INSTALL}"
    return None


def run(args: list[str]) -> int:
    """``python launch.py <args>``: this process becomes it (os.execv), exactly as if typed."""
    script = LAUNCH_SCRIPT
    if (problem := _needs_training_install("run")) is not None:
        return _error(problem)
    if not script.is_file():
        return _error(f"{PROG} run needs a checkout of proofgrid (its {script.name} and conf/); this install "
                      f"has none: clone the repository and {TRAIN_INSTALL}")
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, str(script), *args])
    return 0  # not reached


def launcher_command(command: str, args: list[str]) -> int:
    if (problem := _needs_training_install(command)) is not None:
        return _error(problem)
    if len(args) != 1 or args[0].startswith("-"):
        return _error(f"usage: {PROG} {command} <sweep_dir>")
    from launcher.entry_points import main as launcher_main

    return launcher_main([command, *args])


def evidence_command(command: str, args: list[str]) -> int:
    from evidence.__main__ import main as evidence_main

    return evidence_main([command, *args], prog=PROG)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args:
        print(usage(), file=sys.stderr)
        return EXIT_USAGE
    command, rest = args[0], args[1:]
    if command in ("-h", "--help", "help"):
        print(usage())
        return 0
    if command == "run":
        return run(rest)
    if command in LAUNCHER_COMMANDS:
        return launcher_command(command, rest)
    if command in EVIDENCE_COMMANDS:
        return evidence_command(command, rest)
    known = ", ".join(name for name, _, _ in COMMANDS)
    return _error(f"unknown command {command!r}; the commands are {known} ({PROG} --help)")


if __name__ == "__main__":
    sys.exit(main())
