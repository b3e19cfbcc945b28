"""The plan (``evidence.gates.plan_binding``): every job the sweep's plan lists has its copy in the bundle, every copy carries the
plan it was prepared under, and the plan hashes to the digest its jobs carry; for the payload and each earlier stage."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from evidence.dataset import BundleData
from evidence.gates.plan_binding import bundle_plan_problems
from evidence.problems import Problem
from facts.files import BUNDLE_PAYLOAD, STAGES_DIR


def check_plan(data_dir: Path, data: BundleData) -> list[Problem]:
    """``bundle_plan_problems`` of the payload, then of each earlier stage (named ``data/stages/<name>/...``)."""
    problems = bundle_plan_problems(data_dir, data.sweep)
    for name, stage in data.stages.items():
        inside = f"{BUNDLE_PAYLOAD}/{STAGES_DIR}/{name}/"
        problems += [replace(p, file=p.file.replace(f"{BUNDLE_PAYLOAD}/", inside, 1))
                     for p in bundle_plan_problems(Path(data_dir) / STAGES_DIR / name, stage.sweep)]
    return problems
