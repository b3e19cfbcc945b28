"""The spec's budget against the plan: the probe's measured step cost times every planned step, and
the wall cap per run (a Slurm run's time limit)."""

from __future__ import annotations

import math

from omegaconf import DictConfig

from evidence.verdict.spec import Study
from facts.backends import SLURM
from launcher.experiment.errors import ExperimentError


def check_budget(study: Study, record: dict, planned: list) -> dict:
    """Planned hours = the probe's slowest step cost x every planned step, times each job's CPUs
    (``cpu_hours``) or one device per job (``gpu_hours``); refused when above the spec's budget, or
    when one run would exceed the wall cap. Evaluation time is not in the step cost."""
    step_s = max(a["step_s"] for a in record["arms"].values())
    budget = study.budget
    runs = [(spec.n_updates, spec.cpus) for sweep in planned for spec in sweep.specs]
    longest_min = max((n for n, _ in runs), default=0) * step_s / 60
    cpu_h = sum(n * step_s * cpus for n, cpus in runs) / 3600
    gpu_h = sum(n * step_s for n, _ in runs) / 3600
    out = {"step_s": step_s, "runs": len(runs), "steps": sum(n for n, _ in runs), "cpu_hours": cpu_h,
           "gpu_hours": gpu_h, "longest_run_minutes": longest_min, "budget": dict(budget)}
    cap = budget.get("wall_minutes_per_run")
    if cap is not None and longest_min > cap:
        raise ExperimentError(f"budget: a run needs about {longest_min:.1f} min at the probe's {step_s:.2f} s/step, over "
                              f"the wall cap of {cap:g} min; raise budget.wall_minutes_per_run or shorten the runs")
    for unit, need in (("cpu_hours", cpu_h), ("gpu_hours", gpu_h)):
        if budget.get(unit) is not None and need > budget[unit]:
            raise ExperimentError(f"budget: the plan needs about {need:.3g} {unit.replace('_', '-')} ({len(runs)} runs, "
                                  f"{out['steps']} steps at the probe's {step_s:.2f} s/step), over the budget of "
                                  f"{budget[unit]:g}; raise budget.{unit} or plan fewer runs")
    return out


def wall_cap(study: Study, cluster: DictConfig) -> list[str]:
    """The budget's wall cap per run as the Slurm time limit (local runs have no scheduler limit)."""
    cap = study.budget.get("wall_minutes_per_run")
    if cap is None or str(cluster.kind) != SLURM:
        return []
    minutes = math.ceil(cap)
    return [f"cluster.time={minutes // 60:02d}:{minutes % 60:02d}:00"]
