"""Why did a local job's runtime die, and marking it FAILED with that cause.

Whether it is alive is ``facts.processes`` (pid, start time, boot id). A record still in flight
whose runtime is gone died without writing its final state (disk full, a crash in the runtime, SIGKILL): it is
marked FAILED with the cause found in its logs, so that neither a re-run nor ``evidence build``
waits for it forever.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

from facts import JOBS_DIR
from facts.backends import LOCAL
from facts.failures import log_pointer
from facts.files import RUNTIME_LOG, TRAINER_LOG
from facts.processes import local_runtime_alive
from facts.states import FAILED, IN_FLIGHT_STATES
from launcher.job_records import read_job_record, update_job_record

TAIL_BYTES = 65536
# The last line of a Python traceback, or one of proofgrid's own one-line errors.
_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failed)\b.*"
                         r"|proofgrid[\w ]*: .*|Killed.*)$")


def last_error_line(log: Path) -> str | None:
    """The last error-looking line of a log (a traceback's final line, a one-line error)."""
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if _ERROR_LINE.match(line.strip()):
            return line.strip()[:300]
    return None


def death_cause(job_dir: Path, how: str) -> str:
    """``how`` the runtime ended, plus the error its own log or the trainer's ends with. ``job_dir`` is a
    job directory, or the directory of one rank of it (``jobs/<job>/ranks/rank<r>``)."""
    parts = Path(job_dir).parts  # named from the sweep's jobs/ on: <job>, or <job>/ranks/rank<r>
    job = "/".join(parts[len(parts) - parts[::-1].index(JOBS_DIR):]) if JOBS_DIR in parts[:-1] else parts[-1]
    for log in (RUNTIME_LOG, TRAINER_LOG):
        if line := last_error_line(Path(job_dir) / log):
            return f"{how}: {line} (see {log_pointer(job, log)})"
    return how


def mark_dead_local_jobs(job_dirs: list[Path], exit_code: int | None = None) -> dict[str, str]:
    """Mark every local job whose record is in flight but whose runtime is gone FAILED with its
    cause; returns ``{job name: cause}`` of the jobs marked. ``exit_code``: the runtime's, when
    the caller reaped it (negative: the signal that killed it)."""
    marked = {}
    for job_dir in job_dirs:
        record = read_job_record(job_dir)
        never_recorded = "state" not in record and exit_code not in (None, 0)
        if record.get("scheduler", LOCAL) != LOCAL or (record.get("state") not in IN_FLIGHT_STATES and not never_recorded):
            continue
        if local_runtime_alive(record):
            continue
        how = "died"
        if exit_code is not None:
            how = f"was killed by {signal.Signals(-exit_code).name}" if exit_code < 0 else f"exited with {exit_code}"
        cause = death_cause(job_dir, f"its job runtime (pid {record.get('runtime_pid')}) {how} without "
                                     "writing a final state")
        update_job_record(job_dir, {"state": FAILED, "failure": cause,
                                    **({"exit_code": exit_code} if exit_code is not None else {})})
        marked[Path(job_dir).name] = cause
    return marked
