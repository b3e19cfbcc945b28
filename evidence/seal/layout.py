"""The payload's files against the bundle's layout (``facts.bundle_layout``): every file under a payload
directory that the build never writes there, and every file a layout pattern admits but that its run never
had (a rank it did not run, Ray's log of a job without Ray, the responses of a shared initial evaluation, an
attempt the launcher never numbered, a subset no evaluation names). The build refuses to seal one; the audit
names each."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from evidence.dataset import BundleData
from evidence.evaluation.shared import shared_initial_dir
from evidence.fileio import JSONError, read_json
from evidence.gates.certificate_jobs import certified_jobs
from facts.bundle_layout import payload_member
from facts.data_parallel_ranks import RANK_LOGS_FIELD, RANKS_DIR
from facts.files import (
    ATTEMPTS_DIR,
    BUNDLE_RUNS_DIR,
    CERTIFY_DIR,
    COMMAND_PUBLIC_RECORD,
    DATA_LEDGER,
    EVAL_RECORD,
    EVAL_SUBSETS_DIR,
    JOB_RECORD,
    LOGS_DIR,
    RAY_ADDRESS_ENV,
    RAY_START_LOG,
    RUN_RECORD,
    STAGES_DIR,
)
from facts.ledger_format import LEDGER_FIELD
from facts.states import COMPLETED

NOT_WRITTEN = "not a file the build writes (the bundle's layout, facts/bundle_layout.py, has no such member)"
EMPTY_DIR = "an empty directory: the build creates a directory only for the files it writes there"


def payload_files(data_dir: Path, empty_dirs: list[str] | None = None) -> list[str]:
    """Every regular file under ``data_dir``, ``/``-separated and relative to it, in sorted order; links are
    not followed (the bag check reports them) and a tree of any depth is walked without recursion. With
    ``empty_dirs``, every directory holding nothing is appended to it."""
    found, pending = [], [""]
    while pending:
        rel_dir = pending.pop()
        try:
            entries = list(os.scandir(data_dir / rel_dir if rel_dir else data_dir))
        except OSError:
            continue
        if not entries and rel_dir and empty_dirs is not None:
            empty_dirs.append(rel_dir)
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_symlink():
                continue
            if entry.is_dir():
                pending.append(rel)
            elif entry.is_file():
                found.append(rel)
    return sorted(found)


def _index_jobs(data: BundleData | None) -> dict[str | None, set[str]] | None:
    """The jobs of the payload's index and of each earlier stage's (by stage; None: the payload's own)."""
    if data is None:
        return None
    jobs = {None: {row.get("job") for row in data.index}}
    jobs.update({name: {row.get("job") for row in stage.index} for name, stage in data.stages.items()})
    return jobs


def unexpected_files(data_dir: Path, data: BundleData | None = None) -> list[tuple[str, str]]:
    """(path relative to ``data_dir``, why) of every file the build never writes there: outside the layout,
    or the copy of a job the index (``data``'s, when loaded) does not list; and of every empty directory
    (a name the build never creates: a claim in a directory's name, a stage no plain sweep has)."""
    jobs = _index_jobs(data)
    certified = _certificate_jobs(data)
    had = _RunFacts(data_dir)
    found, empty = [], []
    for rel in payload_files(data_dir, empty):
        member = payload_member(rel)
        if member is None:
            found.append((rel, NOT_WRITTEN))
            continue
        if (why := had.never_had(rel, member)) is not None:
            found.append((rel, why))
        if jobs is not None and member.get("job") is not None:
            stage = member.get("stage")
            listed = jobs.get(stage)
            if listed is not None and member["job"] not in listed:
                where = f"{STAGES_DIR}/{stage}/" if stage else ""
                found.append((rel, f"the copy of job {member['job']!r}, which {where}index.csv does not list"))
        if certified is not None and member.get("certjob") is not None:
            listed = certified.get(member.get("stage"))
            if listed is not None and member["certjob"] not in listed:
                where = f"{STAGES_DIR}/{member['stage']}/" if member.get("stage") else ""
                found.append((rel, f"the copy of certificate job {member['certjob']!r}, which {where}sweep.json's "
                                   "certify does not list"))
    return found + [(f"{rel}/", EMPTY_DIR) for rel in sorted(empty)]


def _certificate_jobs(data: BundleData | None) -> dict[str | None, set[str]] | None:
    """The certificate jobs sweep.json names, of the payload and of each earlier stage (by stage)."""
    if data is None:
        return None
    jobs = {None: set(certified_jobs(data.sweep))}
    jobs.update({name: set(certified_jobs(stage.sweep)) for name, stage in data.stages.items()})
    return jobs


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _RunFacts:
    """What each run copy of a payload had, read once from its own records: which ranks (run.json's
    ``rank_logs``, job.json's ``world_size``), whether it started a Ray (its command's env), whether its
    initial evaluation was shared (eval.json), its attempts; and which subsets the runs' final evaluations name."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self._json = cache(self._read)
        self._subsets = cache(self._named_subsets)
        self._attempts = cache(self._attempt_numbers)

    def _read(self, rel: str):
        try:
            return read_json(self.data_dir / rel)
        except (JSONError, OSError):
            return None

    def _record(self, rel: str) -> dict:
        value = self._json(rel)
        return value if isinstance(value, dict) else {}

    def never_had(self, rel: str, member: dict[str, str]) -> str | None:
        """Why ``rel`` (a layout member, ``member`` its placeholders) is a file its run never had, else None."""
        stage = f"{STAGES_DIR}/{member['stage']}/" if member.get("stage") else ""
        if member.get("subset12") is not None:
            return self._subset(stage, member["subset12"])
        if member.get("job") is not None:
            copy = f"{stage}{BUNDLE_RUNS_DIR}/{member['job']}"
        elif member.get("certjob") is not None:
            copy = f"{stage}{CERTIFY_DIR}/{member['certjob']}"
        else:
            return None
        inner = rel[len(copy) + 1:]
        if member.get("rank") is not None:
            return self._rank(copy, inner, int(member["rank"].removeprefix("rank")))
        if member.get("log") == RAY_START_LOG:
            return self._ray(copy)
        if member.get("eval_kind") == "initial":
            entry = self._record(f"{copy}/{EVAL_RECORD}").get("initial")
            if shared_initial_dir(entry) is not None:
                return (f"the responses of an initial evaluation the run did not compute: its {EVAL_RECORD} reads the "
                        f"shared {shared_initial_dir(entry)}/")
        if member.get("attempt") is not None:
            return self._attempt(copy, int(member["attempt"]))
        if inner == DATA_LEDGER and LEDGER_FIELD not in self._record(f"{copy}/{RUN_RECORD}"):
            return f"a data ledger of a run that declares none (its {RUN_RECORD} has no {LEDGER_FIELD})"
        return None

    def _rank(self, copy: str, inner: str, rank: int) -> str | None:
        if inner.startswith(f"{RANKS_DIR}/"):  # the trainer's step record of each rank of a run of several
            world = _int(self._record(f"{copy}/{RUN_RECORD}").get(RANK_LOGS_FIELD))
            world = world if world is not None and world >= 2 else 1
            if rank >= world:
                return f"a rank the run did not have (world size {world}: {RUN_RECORD}'s {RANK_LOGS_FIELD})"
            return None
        tasks = _int(self._record(f"{copy}/{JOB_RECORD}").get("world_size")) or 1  # logs/<rank>/: a further task's
        if rank == 0:
            return f"rank 0's logs are the job's own ({LOGS_DIR}/<log>), never {LOGS_DIR}/rank0/"
        if rank >= tasks:
            return f"a rank the job did not have (world size {tasks}: {JOB_RECORD}'s world_size)"
        return None

    def _ray(self, copy: str) -> str | None:
        command = self._json(f"{copy}/{COMMAND_PUBLIC_RECORD}")
        if command is None and self._record(f"{copy}/{JOB_RECORD}").get("state") != COMPLETED:
            return None  # a job that failed before its command: Ray's log says why Ray could not start
        env = command.get("env") if isinstance(command, dict) else None
        if isinstance(env, dict) and RAY_ADDRESS_ENV in env:
            return None
        return f"the log of a Ray the job never started (its {COMMAND_PUBLIC_RECORD}'s env has no {RAY_ADDRESS_ENV})"

    def _attempt_numbers(self, copy: str) -> tuple[int, ...]:
        try:
            names = [entry.name for entry in os.scandir(self.data_dir / copy / ATTEMPTS_DIR) if entry.is_dir()]
        except OSError:
            return ()
        return tuple(sorted(int(name) for name in names if name.isdigit()))

    def _attempt(self, copy: str, number: int) -> str | None:
        numbers = self._attempts(copy)
        if numbers != tuple(range(len(numbers))):
            return (f"attempt {number}, but the launcher numbers a job's attempts 0, 1, ... without a gap "
                    f"({ATTEMPTS_DIR}/ holds {', '.join(map(str, numbers))})")
        if not (self.data_dir / copy / ATTEMPTS_DIR / str(number) / JOB_RECORD).is_file():
            return f"an attempt without its record ({ATTEMPTS_DIR}/{number}/{JOB_RECORD}): every attempt the launcher keeps has one"
        return None

    def _named_subsets(self, stage: str) -> frozenset[str]:
        try:
            jobs = [entry.name for entry in os.scandir(self.data_dir / f"{stage}{BUNDLE_RUNS_DIR}") if entry.is_dir()]
        except OSError:
            return frozenset()
        digests = ((self._record(f"{stage}{BUNDLE_RUNS_DIR}/{job}/{EVAL_RECORD}").get("final") or {}) for job in jobs)
        return frozenset(d.get("subset_sha256") for d in digests if isinstance(d, dict)
                         and isinstance(d.get("subset_sha256"), str))

    def _subset(self, stage: str, prefix: str) -> str | None:
        if any(digest.startswith(prefix) for digest in self._subsets(stage)):
            return None
        return (f"a subset no run's final evaluation names ({BUNDLE_RUNS_DIR}/<job>/{EVAL_RECORD}'s final "
                f"subset_sha256; {EVAL_SUBSETS_DIR}/ keeps only those)")
