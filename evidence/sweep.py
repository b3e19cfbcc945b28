"""The sweep grid as ``sweep.json`` records it: its arms and seeds, and the display names and order.

A job is (arm, seed). An arm is the set of non-seed overrides of its grid cell, recorded by the
launcher as ``sweep.json``'s ``"arms": {"<label>": {"algo": "rpp", "workload.lr": "3e-4"}}``; a
sweep without that record (older sweeps) has one arm per algorithm, labelled by its short name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from evidence.fileio import JSONError, read_json
from evidence.problems import SweepError
from facts import ALGO_ORDER, DISPLAY_NAMES, algo_sort_key
from facts.files import SWEEP_RECORD

ALGO_NAMES = DISPLAY_NAMES
__all__ = ["ALGO_NAMES", "ALGO_ORDER", "algo_name", "algo_sort_key", "job_name"]


def algo_name(algo: str) -> str:
    return ALGO_NAMES.get(algo, algo)


def job_name(arm: str, seed: int) -> str:
    """The job directory name of one grid cell: ``<arm>-<seed>`` (``grpo-42`` when only algo varies)."""
    return f"{arm}-{seed}"


# The arm contract's labels are filesystem-safe: they name job directories.
_ARM_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]*")


def read_arms(record: dict) -> dict[str, tuple[str, dict[str, str]]]:
    """``{label: (algo short name, overrides)}`` in report order, from a ``sweep.json`` record.

    Without an ``arms`` record each algorithm is an arm labelled by its short name. An arm's
    algo is its ``algo`` override, else the sweep's only algorithm. Raises ``SweepError``.
    """
    algos = record.get("algos")
    arms = record.get("arms")
    if arms is None:
        arms = {a: {"algo": a} for a in algos or []}
    if not isinstance(arms, dict) or not arms:
        raise SweepError("sweep.json: 'arms' must be a non-empty mapping of arm labels to override mappings")
    out = {}
    for label, overrides in arms.items():
        if not isinstance(label, str) or not _ARM_LABEL.fullmatch(label):
            raise SweepError(f"sweep.json: arm label {label!r} is not a filesystem-safe name")
        if not isinstance(overrides, dict) or not all(isinstance(k, str) for k in overrides):
            raise SweepError(f"sweep.json: arm {label}: overrides must be a mapping of setting names to values")
        overrides = {k: str(v) for k, v in sorted(overrides.items())}
        algo = overrides.get("algo")
        if algo is None and isinstance(algos, list) and len(algos) == 1:
            algo = algos[0]
        if algo is None:
            raise SweepError(f"sweep.json: arm {label} has no 'algo' override and the sweep has several algorithms")
        if isinstance(algos, list) and algo not in algos:
            raise SweepError(f"sweep.json: arm {label} runs algo {algo}, which 'algos' does not list")
        out[label] = (algo, overrides)
    return {label: out[label] for label in sorted(out, key=lambda a: (algo_sort_key(out[a][0]), a))}


def arm_name(arm: str, algo: str) -> str:
    """How the report names an arm: the algorithm's display name when the arm is just the algorithm."""
    return algo_name(algo) if arm == algo else arm


@dataclass(frozen=True)
class Sweep:
    """What ``sweep.json`` declares: the grid (arms x seeds), its length, and the commit it ran."""

    dir: Path
    record: dict
    algos: tuple[str, ...]
    seeds: tuple[int, ...]
    n_updates: int
    source_commit: str | None
    eval_responses: int | None  # expected responses per checkpoint, when the sweep declares it
    created: str | None  # YYYY-MM-DD, when the sweep declares it
    arms: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)  # label -> (algo, overrides)

    @property
    def jobs(self) -> list[tuple[str, int]]:
        """Every grid cell as (arm label, seed), in report order."""
        return [(a, s) for a in self.arms for s in self.seeds]

    def arm_algo(self, arm: str) -> str:
        return self.arms[arm][0]


def read_sweep(sweep_dir: str | Path) -> Sweep:
    """Read and check ``<sweep_dir>/sweep.json``."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise SweepError(f"{sweep_dir}: not a directory")
    try:
        record = read_json(sweep_dir / SWEEP_RECORD)
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
        arms=read_arms(record),
    )
