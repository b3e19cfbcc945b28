"""The sweep grid as ``sweep.json`` records it, and the algorithms' display names and order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evidence.fileio import JSONError, read_json
from facts import ALGO_ORDER, DISPLAY_NAMES, algo_sort_key

ALGO_NAMES = DISPLAY_NAMES
__all__ = ["ALGO_NAMES", "ALGO_ORDER", "algo_name", "algo_sort_key", "job_name"]


class SweepError(Exception):
    """A sweep directory that cannot be read as one (one-line message)."""


def algo_name(algo: str) -> str:
    return ALGO_NAMES.get(algo, algo)


def job_name(algo: str, seed: int) -> str:
    """The job directory name of one grid cell."""
    return f"{algo}-{seed}"


@dataclass(frozen=True)
class Sweep:
    """What ``sweep.json`` declares: the grid, its length, and the commit it ran."""

    dir: Path
    record: dict
    algos: tuple[str, ...]
    seeds: tuple[int, ...]
    n_updates: int
    source_commit: str | None
    eval_responses: int | None  # expected responses per checkpoint, when the sweep declares it
    created: str | None  # YYYY-MM-DD, when the sweep declares it

    @property
    def jobs(self) -> list[tuple[str, int]]:
        return [(a, s) for a in self.algos for s in self.seeds]


def read_sweep(sweep_dir: str | Path) -> Sweep:
    """Read and check ``<sweep_dir>/sweep.json``."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise SweepError(f"{sweep_dir}: not a directory")
    try:
        record = read_json(sweep_dir / "sweep.json")
    except JSONError as exc:
        raise SweepError(f"sweep.json: {exc}") from None
    if not isinstance(record, dict):
        raise SweepError("sweep.json: not a JSON object")
    algos, seeds, n_updates = record.get("algos"), record.get("seeds"), record.get("n_updates")
    # The launcher records the distinct values of the grid; one length is one comparable grid.
    if isinstance(n_updates, list) and len(n_updates) == 1:
        n_updates = n_updates[0]
    elif isinstance(n_updates, list):
        raise SweepError(f"sweep.json: runs of different lengths {n_updates} are not one comparable grid")
    if not isinstance(algos, list) or not algos or not all(isinstance(a, str) and a for a in algos):
        raise SweepError("sweep.json: 'algos' must be a non-empty list of names")
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise SweepError("sweep.json: 'seeds' must be a non-empty list of integers")
    if not isinstance(n_updates, int) or isinstance(n_updates, bool) or n_updates < 1:
        raise SweepError("sweep.json: 'n_updates' must be a positive integer")
    if len(set(algos)) != len(algos) or len(set(seeds)) != len(seeds):
        raise SweepError("sweep.json: repeated algo or seed")
    commit = record.get("source_commit")
    eval_responses = record.get("eval_responses")
    created = record.get("created")
    return Sweep(
        dir=sweep_dir,
        record=record,
        algos=tuple(sorted(algos, key=algo_sort_key)),
        seeds=tuple(seeds),
        n_updates=n_updates,
        source_commit=commit if isinstance(commit, str) and commit else None,
        eval_responses=eval_responses if isinstance(eval_responses, int) and not isinstance(eval_responses, bool) else None,
        created=created[:10] if isinstance(created, str) and len(created) >= 10 else None,
    )
