"""Live progress of a sweep: jobs queued / running / done / failed, each running job's step, phase
and latest reward. On a terminal a table redrawn in place (elapsed time, ETA); anywhere else (a
pipe, ``tee``, ``nohup``, a Slurm log) one plain line per state change and step milestone."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from facts import METRICS_LOG, run_dir_of_job
from facts.metrics import RAW_REWARD_KEY
from facts.ordering import natural_key
from facts.states import FAILED, RUNNING, VIEW_DONE, VIEW_QUEUED

MILESTONES = 4  # plain output reports steps at each quarter of the run
TAIL_BYTES = 65536


def completed_steps(job_dir: Path) -> int:
    """Finished training steps: complete lines of the run's metrics.jsonl."""
    path = run_dir_of_job(job_dir) / METRICS_LOG
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def latest_reward(job_dir: Path) -> float | None:
    """The mean training reward of the run's last complete metrics line, if any."""
    try:
        with open(run_dir_of_job(job_dir) / METRICS_LOG, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            lines = f.read().split(b"\n")[:-1]  # the text after the last newline may be half written
    except OSError:
        return None
    for line in reversed(lines):
        try:
            value = json.loads(line).get(RAW_REWARD_KEY)
        except (ValueError, AttributeError):
            continue
        return value if isinstance(value, (int, float)) else None
    return None


@dataclass
class JobProgress:
    """What the launcher shows of one job; ``poll`` reads its run directory."""

    name: str
    job_dir: Path
    n_updates: int
    state: str = VIEW_QUEUED
    started: float | None = None
    step: int = 0
    reward: float | None = None
    milestone: int = 0  # the last quarter reported by the plain output

    def poll(self) -> None:
        if self.state != VIEW_QUEUED:
            self.step = completed_steps(self.job_dir)
            self.reward = latest_reward(self.job_dir)

    @property
    def phase(self) -> str:
        """queued, eval (initial) before the first step, train, eval (final) after the last, or the end state."""
        if self.state != RUNNING:
            return self.state.lower()
        if self.step == 0:
            return "eval/train"  # the initial-checkpoint eval, then the first steps
        return "train" if self.step < self.n_updates else "eval"


@dataclass
class SweepProgress:
    """Every job of one submission, in natural order, and the sweep's clock."""

    sweep_dir: Path
    jobs: dict[str, JobProgress]
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, sweep_dir: Path, job_dirs: dict[str, Path], n_updates: dict[str, int]) -> SweepProgress:
        names = sorted(job_dirs, key=natural_key)
        return cls(sweep_dir, {n: JobProgress(n, job_dirs[n], n_updates[n]) for n in names})

    def set_state(self, name: str, state: str) -> None:
        job = self.jobs[name]
        if state == RUNNING and job.started is None:
            job.started = time.monotonic()
        job.state = state

    def eta_s(self) -> float | None:
        """Remaining seconds at the rate so far: elapsed x (steps left / steps done)."""
        done = sum(j.step for j in self.jobs.values())
        total = sum(j.n_updates for j in self.jobs.values())
        if done == 0:
            return None
        return (time.monotonic() - self.started) * (total - done) / done

    def table(self, title: str) -> Group:
        """The terminal view: counts, elapsed and ETA in the heading, one row per job."""
        for job in self.jobs.values():
            job.poll()
        counts = {s: sum(1 for j in self.jobs.values() if j.state == s) for s in (VIEW_QUEUED, RUNNING, VIEW_DONE)}
        # Every other state ended the job without success (FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...).
        counts[FAILED] = len(self.jobs) - sum(counts.values())
        eta = self.eta_s()
        heading = (f"{title}: queued {counts[VIEW_QUEUED]} | running {counts[RUNNING]} | done {counts[VIEW_DONE]} | "
                   f"failed {counts[FAILED]}")
        clock = (f"elapsed {_clock(time.monotonic() - self.started)} | ETA {_clock(eta) if eta is not None else '—'}"
                 f" | sweep {self.sweep_dir}")
        table = Table()
        for column in ("job", "state", "phase", "step", "reward", "elapsed"):
            table.add_column(column, justify="right" if column in ("step", "reward", "elapsed") else "left")
        for job in self.jobs.values():
            running = job.state != VIEW_QUEUED
            table.add_row(job.name, job.state, job.phase, f"{job.step}/{job.n_updates}" if running else "",
                          f"{job.reward:.3f}" if job.reward is not None else "",
                          _clock(time.monotonic() - job.started) if job.started is not None else "")
        # Heading and path as lines of their own: a table title or caption wraps to the table's width.
        return Group(Text(heading), Text(clock), table)

    def events(self) -> list[str]:
        """Plain lines for what changed since the last call: a job started, reached a quarter of its
        steps, finished or failed (the caller reports state changes through ``set_state``)."""
        lines = []
        for job in self.jobs.values():
            if job.state == VIEW_QUEUED:
                continue
            job.poll()
            quarter = job.step * MILESTONES // max(1, job.n_updates)
            if quarter > job.milestone and job.step < job.n_updates:
                reward = f" reward {job.reward:.3f}" if job.reward is not None else ""
                lines.append(f"{job.name}: step {job.step}/{job.n_updates}{reward}")
            job.milestone = max(job.milestone, quarter)
        return lines


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


def progress_table(title: str, states: dict[str, str], job_dirs: dict[str, Path], n_updates: dict[str, int]) -> Group:
    """One snapshot of ``states`` as the terminal table (for back ends that keep no ``SweepProgress``)."""
    names = sorted(states, key=natural_key)
    view = SweepProgress.of(next(iter(job_dirs.values())).parent.parent if job_dirs else Path("."),
                            {n: job_dirs[n] for n in names}, {n: n_updates[n] for n in names})
    for name in names:
        view.jobs[name].state = states[name]
    return view.table(title)
