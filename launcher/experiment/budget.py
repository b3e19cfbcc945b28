"""The spec's budget against the plan: the probe's measured step cost times every planned step, and
the wall cap per run (a Slurm run's time limit)."""

from __future__ import annotations

import math

from omegaconf import DictConfig

from evidence.verdict.probe import over_budget, plan_cost
from facts.backends import SLURM
from launcher.experiment.experiment_errors import ExperimentError
from study.spec import Study


def check_budget(study: Study, record: dict, planned: list, first_look: list | None = None) -> dict:
    """The plan's cost at the probe's slowest step (``evidence.verdict.probe.plan_cost``: every planned
    step, times each job's CPUs or one device per job), with the spec's budget; refused when above the
    budget, or when one run would exceed the wall cap. Evaluation time is not in the step cost.
    A sized design's plan is its largest (every arm over ``max`` seeds), recorded with the cost of its first
    look (``first_look``: ``min`` seeds), which alone must fit: the second look is checked when it is sized."""
    step_s = max(a["step_s"] for a in record["arms"].values())
    # every planned job, a stage's certificate jobs (the spec's certify block) among them
    cost = plan_cost(step_s, [(spec.n_updates, spec.cpus) for sweep in planned for spec in sweep.all_specs])
    out = {**cost, "budget": dict(study.budget)}
    if first_look is not None:
        out["first_look"] = plan_cost(step_s, [(spec.n_updates, spec.cpus) for sweep in first_look
                                               for spec in sweep.all_specs])
        cost = out["first_look"]
    for key, need, cap in over_budget(cost, study.budget):
        if key == "wall_minutes_per_run":
            raise ExperimentError(f"budget: a run needs about {need:.1f} min at the probe's {step_s:.2f} s/step, over "
                                  f"the wall cap of {cap:g} min; raise budget.wall_minutes_per_run or shorten the runs")
        what = "the first look's plan" if first_look is not None else "the plan"
        raise ExperimentError(f"budget: {what} needs about {need:.3g} {key.replace('_', '-')} ({cost['runs']} runs, "
                              f"{cost['steps']} steps at the probe's {step_s:.2f} s/step), over the budget of "
                              f"{cap:g}; raise budget.{key} or plan fewer runs")
    return out


def wall_cap(study: Study, cluster: DictConfig) -> list[str]:
    """The budget's wall cap per run as the Slurm time limit (local runs have no scheduler limit)."""
    cap = study.budget.get("wall_minutes_per_run")
    if cap is None or str(cluster.kind) != SLURM:
        return []
    minutes = math.ceil(cap)
    return [f"cluster.time={minutes // 60:02d}:{minutes % 60:02d}:00"]
