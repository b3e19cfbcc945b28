"""What one job is: a grid cell of the sweep, expanded into a trainer command and its resources.

A ``JobSpec`` is plain data (picklable for submitit, JSON for the local runner and the records).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from facts import sweep_job_dir


@dataclass(frozen=True)
class JobSpec:
    name: str  # "<arm>-<seed>", the job directory's name
    algo: str  # short name: grpo | rpp | rppb
    seed: int
    sweep_dir: str  # absolute
    trainer_overrides: tuple[str, ...]  # Hydra overrides of the grid cell, e.g. ("algo=rpp", "seed=42")
    cpus: int  # CPUs the job needs: trainer plus its reward workers
    ray_cpus: int  # 0 = the workload does not use Ray
    n_updates: int
    source_commit: str | None
    gpu_model: str | None = None  # e.g. "A40": checked against the visible device inside the job
    arm: str = ""  # the arm's label (launcher.grid); "" in records older than arms: the algo's short name
    arm_overrides: dict[str, str] = field(default_factory=dict)  # the arm's settings, as written
    share_initial_eval: bool = False  # one of several jobs: the initial checkpoint is evaluated once per sweep

    @property
    def arm_label(self) -> str:
        return self.arm or self.algo

    def identity(self) -> dict:
        """What ``job.json`` records about which job this is (the arm contract)."""
        return {"algo": self.algo, "seed": self.seed, "arm": self.arm_label, "arm_overrides": dict(self.arm_overrides)}

    @property
    def job_dir(self) -> Path:
        return sweep_job_dir(self.sweep_dir, self.name)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        data = json.loads(text)
        data["trainer_overrides"] = tuple(data["trainer_overrides"])
        return cls(**data)
