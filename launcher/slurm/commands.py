"""How proofgrid runs Slurm's commands and reads their pipe-separated answers.

Every Slurm command proofgrid runs itself (``sacct``, ``squeue``, ``scontrol``, ``scancel``, the seal
job's ``sbatch``, ``sinfo``, ``sacctmgr``; the job array's own ``sbatch`` is submitit's) goes through
``run_slurm``, which never raises: a command that is not installed
here, one that does not answer within its timeout and one that exits non-zero all come back as a
``SlurmReply`` whose ``error`` is one line saying so. Each caller decides what that means for it
(a state query raises ``SchedulerUnavailable``, a profile check stays silent, a rename is best
effort). ``pipe_records`` reads the ``|``-separated lines that ``sacct -P``, ``squeue -o`` and
``sinfo -o`` print, by field names given once next to the format that asked for them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from launcher.errors import SchedulerUnavailable

# A Slurm command that has not answered after this long is treated as a controller that cannot answer.
TIMEOUT_S = 60.0


def not_on_path(commands: Sequence[str]) -> str:
    """The words for Slurm commands missing here (the launch's preflight says them too)."""
    are = "are" if len(commands) > 1 else "is"
    return (f"Slurm's {', '.join(commands)} on PATH, which {are} missing here; "
            "run from a Slurm login node (or load its module)")


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


@dataclasses.dataclass(frozen=True)
class SlurmReply:
    """What one Slurm command answered: ``error`` is None when it ran and exited 0, else one line
    naming the command and why it could not answer."""

    argv: tuple[str, ...]
    stdout: str = ""
    stderr: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def answer(self) -> str | None:
        """The command's stdout; None when it could not answer (for checks that then stay silent)."""
        return self.stdout if self.error is None else None

    def output(self) -> str:
        """The command's stdout; ``SchedulerUnavailable(error)`` when it could not answer."""
        if self.error is not None:
            raise SchedulerUnavailable(self.error)
        return self.stdout


def run_slurm(argv: Sequence[str], timeout_s: float = TIMEOUT_S) -> SlurmReply:
    """Run one Slurm command to its end (at most ``timeout_s``) and capture what it printed."""
    argv = tuple(str(a) for a in argv)
    if shutil.which(argv[0]) is None:
        return SlurmReply(argv, error=f"proofgrid needs {not_on_path([argv[0]])}")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return SlurmReply(argv, error=f"{argv[0]} did not answer within {timeout_s:g} s; is the Slurm controller up?")
    except OSError as exc:  # on PATH but not runnable (permissions, a broken module)
        return SlurmReply(argv, error=f"{argv[0]} could not run: {exc.strerror or exc}")
    if proc.returncode != 0:
        said = _one_line(proc.stderr) or f"exit {proc.returncode}"
        return SlurmReply(argv, proc.stdout, proc.stderr, f"{argv[0]} failed: {said}")
    return SlurmReply(argv, proc.stdout, proc.stderr)


# What Slurm's commands say when no controller answers (the profile is then not the problem).
NO_CONTROLLER = ("unable to contact slurm controller", "connect failure", "connection refused", "socket timed out",
                 "zero bytes were transmitted", "did not answer within")
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"  # where Slurm's commands look without SLURM_CONF
DEFAULT_CONTROLLER_PORT = "6817"


def no_controller(said: str | None) -> bool:
    """Does a Slurm command's error say that no controller answered (not that it refused something)?"""
    low = (said or "").lower()
    return any(fragment in low for fragment in NO_CONTROLLER)


def controller_address() -> str:
    """Where this machine's Slurm configuration says the controller is: ``SLURM_CONF=<path>``'s (or the default
    file's) ``SlurmctldHost`` and ``SlurmctldPort``, in words; what it cannot read is said as such."""
    path = os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF
    named = f"SLURM_CONF={path}" if os.environ.get("SLURM_CONF") else f"{path} (SLURM_CONF is not set)"
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"the address in {named}, which cannot be read ({exc.strerror}; a configless site serves it from the controller)"
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.split("#", 1)[0].strip().partition("=")
        if sep:
            settings.setdefault(key.strip().lower(), []).append(value.strip())
    hosts = settings.get("slurmctldhost") or settings.get("controlmachine") or ["(none named)"]
    port = (settings.get("slurmctldport") or [DEFAULT_CONTROLLER_PORT])[-1]
    return f"{', '.join(hosts)} port {port} (from {named})"


def no_controller_line(said: str) -> str:
    """The one line for a Slurm command that found no controller: where it looked, what it said, what to do."""
    return (f"no Slurm controller answers at {controller_address()}: {_one_line(said)}; the cluster profile is not "
            "the problem: start slurmctld or restore the network to it, or point SLURM_CONF at your cluster's "
            "slurm.conf; nothing was submitted")


def pipe_records(text: str, fields: Sequence[str]) -> Iterator[dict[str, str]]:
    """Each non-blank ``a|b|c`` line as ``{field: value}`` in the order of ``fields`` (a line with
    fewer values gets ``""`` for the missing ones; extra values are ignored)."""
    for line in text.splitlines():
        if line.strip():
            values = line.split("|")
            yield {name: values[i] if i < len(values) else "" for i, name in enumerate(fields)}
