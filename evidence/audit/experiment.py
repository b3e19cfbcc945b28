"""An experiment's bundle: its ``verdict.json`` recomputes from the CSVs and ``data/experiment.yaml``
(``evidence.verdict.recompute``); the earlier stages its spec runs are there (the probe always, tuning when
the spec tunes), each passes the run and recomputation checks, its problems named under
``data/stages/<name>/``, and the probe's record recomputes from the probe's runs and the plan
(``evidence.verdict.probe``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from evidence.audit.recomputation import check_recomputation
from evidence.audit.runs import check_runs
from evidence.dataset import BundleData
from evidence.problems import Problem
from evidence.verdict.probe import check_probe, check_stages_present
from evidence.verdict.recompute import check_verdict
from facts.files import BUNDLE_PAYLOAD


def _inside(problem: Problem, stage_dir: str) -> Problem:
    """A stage's problem named as the confirm bundle holds it (``data/x`` -> ``data/stages/<name>/x``)."""
    return replace(problem, file=problem.file.replace(f"{BUNDLE_PAYLOAD}/", stage_dir, 1),
                   where=problem.where.replace(f"{BUNDLE_PAYLOAD}/", stage_dir),
                   reason=problem.reason.replace(f"{BUNDLE_PAYLOAD}/", stage_dir))


def check_experiment(data_dir: Path, data: BundleData) -> list[Problem]:
    """The verdict recomputes; the spec's earlier stages are there; every earlier stage's runs and tables
    recompute, and so does the probe's record."""
    problems = check_verdict(data_dir, data)
    if data.experiment is not None:
        problems += check_stages_present(data) + check_probe(data_dir, data)
    for name, stage in data.stages.items():
        inside = f"{BUNDLE_PAYLOAD}/stages/{name}/"
        for check in (check_runs, check_recomputation):
            problems += [_inside(p, inside) for p in check(data_dir / "stages" / name, stage)]
    return problems
