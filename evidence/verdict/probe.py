"""The probe stage's numbers from its own runs, and their audit: each arm's seconds per step and peak memory,
the staleness check's levels, the gradient check's outcome and the plan's cost against the spec's budget.

The launcher records them in ``probe.json`` (``launcher.experiment.probe_checks``, ``budget``) from the probe stage's
built bundle; the confirm bundle carries that bundle and the record under ``data/stages/probe/``, and
``check_probe`` recomputes every number of the record from the probe's runs and the later stages' records.
A declared check that fails on the probe's own evidence (``failed_checks``) is where the launcher stops: the
confirm stage's build refuses to seal past it (``refuse_failed_probe``) and the audit names it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from evidence.dataset import BundleData
from evidence.fileio import JSONError, read_json
from evidence.problems import Problem, VerdictError
from facts.files import (
    BUNDLE_PAYLOAD,
    CONFIRM_STAGE,
    GRADIENT_RECORD,
    PROBE_RECORD,
    PROBE_STAGE,
    STAGES_DIR,
    STEPS_TABLE,
    TUNING_STAGE,
)
from facts.metrics import PEAK_MEM_GIB_KEY, SAMPLER_LOGP_GAP_KEY, STEP_S_KEY
from study.spec import Study, parse_study, same_overrides

DEFAULT_MIN_COSINE = 0.9
DEFAULT_MIN_RATIO = 2.0
DEFAULT_STALENESS_METRIC = SAMPLER_LOGP_GAP_KEY
# The budget's record: what the plan costs at the probe's slowest step (``plan_cost``).
COST_FIELDS = ("step_s", "runs", "steps", "cpu_hours", "gpu_hours", "longest_run_minutes")


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def arm_steps(data: BundleData, label: str) -> list[dict]:
    """Every accepted step record of arm ``label``, run by run."""
    return [row for (arm, _), rows in data.steps.items() if arm == label for row in rows]


def step_seconds(steps: Sequence[Mapping]) -> float:
    """Seconds per step: the mean of ``perf/step_s`` over the steps after the first (which also warms
    up), or over the one step there is."""
    return mean([r[STEP_S_KEY] for r in steps[1:] or steps])


def peak_memory(steps: Sequence[Mapping]) -> float:
    """Peak memory in GiB: the largest ``perf/peak_mem_gib`` of any step (0 when none logged it)."""
    return max((r.get(PEAK_MEM_GIB_KEY) or 0.0 for r in steps), default=0.0)


def arm_costs(data: BundleData) -> dict[str, dict]:
    """Per probe arm with accepted steps: its overrides, seconds per step and peak memory."""
    out = {}
    for label, (_, overrides) in data.arms.items():
        steps = arm_steps(data, label)
        if steps:
            out[label] = {"overrides": overrides, "step_s": step_seconds(steps), "peak_mem_gib": peak_memory(steps)}
    return out


def staleness_levels(study: Study, data: BundleData, arms: Mapping[str, Mapping]) -> tuple[float, float]:
    """(stale, fresh): the staleness metric's mean over the probe steps of the checked arm as the spec runs
    it and of its fresh probe arm (its overrides plus ``staleness_check.settings``)."""
    stale = study.probe["staleness_check"]
    own = study.experiment.arms[stale["arm"]]
    fresh = {**own, **stale["settings"]}
    metric = stale.get("metric", DEFAULT_STALENESS_METRIC)

    def level(fresh_arm: bool) -> float:
        labels = [lb for lb, a in arms.items() if same_overrides(own, a["overrides"])
                  and same_overrides(fresh, a["overrides"]) == fresh_arm]
        if len(labels) != 1:
            raise VerdictError(f"the probe has {len(labels)} {'fresh' if fresh_arm else 'stale'} arm(s) of "
                               f"{stale['arm']} for the staleness check, not one")
        return mean([r[metric] for r in arm_steps(data, labels[0])])

    return level(False), level(True)


def staleness_passes(stale: float, fresh: float, ratio: float) -> bool:
    """Staleness has an effect: the stale level is positive and at least ``ratio`` times the fresh one."""
    return stale > 0 and stale >= ratio * fresh


def plan_cost(step_s: float, runs: Sequence[tuple[int, int]]) -> dict:
    """The plan at ``step_s`` seconds per step, for ``runs`` as (steps, CPUs) each: CPU-hours =
    sum(steps x step_s x CPUs) / 3600, GPU-hours (one device per run) = sum(steps x step_s) / 3600, and
    the longest run in minutes. Evaluation time is not in the step cost."""
    return {"step_s": step_s, "runs": len(runs), "steps": sum(n for n, _ in runs),
            "cpu_hours": sum(n * step_s * cpus for n, cpus in runs) / 3600,
            "gpu_hours": sum(n * step_s for n, _ in runs) / 3600,
            "longest_run_minutes": max((n for n, _ in runs), default=0) * step_s / 60}


def over_budget(cost: Mapping, budget: Mapping) -> list[tuple[str, float, float]]:
    """(budget key, need, cap) for every cap of the spec's budget that the plan's cost exceeds."""
    needs = {"wall_minutes_per_run": cost["longest_run_minutes"], "cpu_hours": cost["cpu_hours"],
             "gpu_hours": cost["gpu_hours"]}
    return [(key, needs[key], float(budget[key])) for key in needs if budget.get(key) is not None
            and needs[key] > float(budget[key])]


def gradient_passes(measured: Mapping, floor: float) -> bool:
    """Both arms' gradients agree at staleness 0: finite, and their cosine at least ``floor``."""
    cosine = measured.get("cosine")
    return measured.get("finite") is True and isinstance(cosine, (int, float)) and not isinstance(cosine, bool) \
        and cosine >= floor


def failed_checks(study: Study, stage: BundleData, stage_dir: Path) -> list[tuple[str, str]]:
    """(file, reason) of each check the spec declares that fails on the probe's own evidence, recomputed: the
    staleness levels from its runs' metrics (``steps.csv``), the gradient agreement from ``gradient_check.json``
    in ``stage_dir``. The launcher stops an experiment at such a check; a record that cannot be read is
    ``check_probe``'s finding, not a failure here."""
    out = []
    stale = study.probe.get("staleness_check")
    if stale:
        metric, ratio = stale.get("metric", DEFAULT_STALENESS_METRIC), float(stale.get("min_ratio", DEFAULT_MIN_RATIO))
        try:
            level, fresh = staleness_levels(study, stage, arm_costs(stage))
        except (VerdictError, KeyError, TypeError):
            level = fresh = None
        if level is not None and not staleness_passes(level, fresh, ratio):
            out.append((f"{BUNDLE_PAYLOAD}/{STEPS_TABLE}", f"staleness check: mean {metric} of {stale['arm']} over "
                        f"the probe steps, stale {level!r} vs fresh {fresh!r}, needs a positive stale mean at least "
                        f"{ratio:g}x the fresh one"))
    grad = study.probe.get("gradient_check")
    if grad:
        floor = float(grad.get("min_cosine", DEFAULT_MIN_COSINE))
        try:
            measured = read_json(stage_dir / GRADIENT_RECORD)
        except JSONError:
            measured = None
        if isinstance(measured, dict) and not gradient_passes(measured, floor):
            out.append((GRADIENT_RECORD, f"gradient check: {grad['treatment']} vs {grad['baseline']} at staleness 0 "
                        f"has cosine {measured.get('cosine')!r} (finite {measured.get('finite')!r}), needs finite "
                        f"gradients with cosine >= {floor:g}"))
    return out


def refuse_failed_probe(data_dir: Path, data: BundleData) -> None:
    """Build hook, after the data is loaded: an experiment's confirm bundle is not sealed on a probe whose declared
    check fails on its own evidence (``failed_checks``; the launcher stops there, so a verdict past it was forced).
    ``VerdictError`` (one line) names the check, its values and the file."""
    stage = data.stages.get(PROBE_STAGE)
    if data.experiment is None or stage is None:
        return
    try:
        study = _study(data.experiment)
    except (VerdictError, TypeError, ValueError, yaml.YAMLError):
        return  # the verdict's own parse refuses it
    failures = failed_checks(study, stage, Path(data_dir) / STAGES_DIR / PROBE_STAGE)
    if failures:
        file, reason = failures[0]
        raise VerdictError(f"the probe's {reason} ({STAGES_DIR}/{PROBE_STAGE}/{file.removeprefix(BUNDLE_PAYLOAD + '/')}"
                           f"); the launcher stops an experiment at a failed probe check: nothing sealed")


# ---- the audit ----------------------------------------------------------------------------------

def _close(a, b) -> bool:
    return (isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool)
            and not isinstance(b, bool) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12))


def _stage_cpus(stage: BundleData) -> int | None:
    """The CPUs of one run of a stage (its runs' ``run.json`` config: ``workload.cpus_per_job``), when they agree."""
    found = set()
    for record in stage.runs.values():
        workload = (record.get("config") or {}).get("workload") if isinstance(record, dict) else None
        cpus = workload.get("cpus_per_job") if isinstance(workload, dict) else None
        found.add(cpus if isinstance(cpus, int) and not isinstance(cpus, bool) else None)
    return found.pop() if len(found) == 1 else None


def planned_runs(study: Study, data: BundleData, seeds: int | None = None) -> list[tuple[int, int]] | str:
    """The later stages' runs as the launcher planned them when it checked the budget, as (steps, CPUs):
    each arm's declared tuning grid over the tuning seeds (the tuning stage's run length), then every arm
    over the seeds (the confirm stage's; its first ``seeds``: a sized design's first look), each with two
    certificate jobs per arm of a stage the spec certifies; a reason when the bundle's records cannot say."""
    arms = len(study.experiment.arms)
    # certify: {stages: [...]}: two certificate jobs (a rerun, a resume) per arm of a certified stage
    certificates = 2 * arms if CONFIRM_STAGE in study.certify else 0
    stages = [(data, arms * len(study.experiment.seeds[:seeds]) + certificates, "the confirm stage")]
    if study.experiment.tuning is not None:
        tuned = sum(len(values) for values in study.experiment.tuning.values.values())
        count = tuned * len(study.tuning_seeds) + (2 * tuned if TUNING_STAGE in study.certify else 0)
        if TUNING_STAGE in data.stages:
            stages.insert(0, (data.stages[TUNING_STAGE], count, "the tuning stage"))
    runs = []
    for stage, count, what in stages:
        cpus = _stage_cpus(stage)
        if cpus is None:
            return f"the CPUs per run of {what} (its runs' run.json workload.cpus_per_job) are not one number"
        runs += [(int(stage.sweep["n_updates"]), cpus)] * count
    return runs


def _study(text: str) -> Study:
    spec = yaml.safe_load(text)
    if isinstance(spec, Mapping) and "criterion" not in spec and isinstance(spec.get("experiment"), Mapping):
        spec = spec["experiment"]
    return parse_study(dict(spec), "bundle")


def _check_arms(recorded, recomputed: dict, where: str) -> list[Problem]:
    if not isinstance(recorded, dict) or set(recorded) != set(recomputed):
        return [Problem(where, f"arms {sorted(recorded) if isinstance(recorded, dict) else recorded!r} are not the "
                               f"probe's arms with accepted steps ({', '.join(sorted(recomputed))})")]
    out = []
    for label, want in recomputed.items():
        got = recorded[label] if isinstance(recorded[label], dict) else {}
        if got.get("overrides") != want["overrides"]:
            out.append(Problem(where, f"arms.{label}.overrides: recorded {got.get('overrides')!r}, the probe's "
                                      f"sweep.json has {want['overrides']!r}"))
        for key in ("step_s", "peak_mem_gib"):
            if not _close(got.get(key), want[key]):
                out.append(Problem(where, f"arms.{label}.{key}: recorded {got.get(key)!r}, recomputed {want[key]!r} "
                                          f"from the probe's runs"))
    return out


def _check_checks(study: Study, stage: BundleData, record: dict, stage_dir: Path, where: str) -> list[Problem]:
    checks = record.get("checks") if isinstance(record.get("checks"), dict) else {}
    out = []
    declared = {"staleness": "staleness_check", "gradient": "gradient_check"}
    for name, key in declared.items():
        if study.probe.get(key) and name not in checks:
            out.append(Problem(where, f"checks.{name} missing (the spec declares probe.{key})"))
    stale = checks.get("staleness")
    if study.probe.get("staleness_check") and isinstance(stale, dict):
        levels = staleness_levels(study, stage, arm_costs(stage))
        ratio = float(study.probe["staleness_check"].get("min_ratio", DEFAULT_MIN_RATIO))
        want = {"stale": levels[0], "fresh": levels[1], "min_ratio": ratio,
                "passed": staleness_passes(levels[0], levels[1], ratio)}
        for key, value in want.items():
            if not (_close(stale.get(key), value) or (isinstance(value, bool) and stale.get(key) is value)):
                out.append(Problem(where, f"checks.staleness.{key}: recorded {stale.get(key)!r}, recomputed {value!r}"))
    grad = checks.get("gradient")
    if study.probe.get("gradient_check") and isinstance(grad, dict):
        rel = f"{where.rsplit('/', 1)[0]}/{GRADIENT_RECORD}"
        try:
            measured = read_json(stage_dir / GRADIENT_RECORD)
        except JSONError as exc:
            return out + [Problem(rel, f"{exc} (the probe's gradient check is recorded in {PROBE_RECORD})")]
        floor = float(study.probe["gradient_check"].get("min_cosine", DEFAULT_MIN_COSINE))
        for key in ("cosine", "finite"):
            if grad.get(key) != measured.get(key):
                out.append(Problem(where, f"checks.gradient.{key}: recorded {grad.get(key)!r}, {GRADIENT_RECORD} "
                                          f"has {measured.get(key)!r}"))
        passed = gradient_passes(measured, floor)
        if grad.get("passed") is not passed or not _close(grad.get("min_cosine"), floor):
            out.append(Problem(where, f"checks.gradient: passed {grad.get('passed')!r} at min_cosine "
                                      f"{grad.get('min_cosine')!r}; recomputed {passed!r} at {floor:g}"))
    return out


def _check_budget(study: Study, data: BundleData, record: dict, arms: dict, where: str) -> list[Problem]:
    budget = record.get("budget")
    if not isinstance(budget, dict):
        return [Problem(where, "budget missing (the launcher checks the plan against the spec's budget after the probe)")]
    if not arms:
        return []
    runs = planned_runs(study, data)
    if isinstance(runs, str):
        return [Problem(where, f"budget cannot be recomputed: {runs}")]
    step_s = max(a["step_s"] for a in arms.values())
    cost = plan_cost(step_s, runs)
    out = [Problem(where, f"budget.{key}: recorded {budget.get(key)!r}, recomputed {cost[key]!r} from the probe's "
                          f"runs and the plan")
           for key in COST_FIELDS if not _close(budget.get(key), cost[key])]
    if budget.get("budget") != study.budget:
        out.append(Problem(where, f"budget.budget: recorded {budget.get('budget')!r}, the spec's is {study.budget!r}"))
    sizing = study.experiment.sizing
    if sizing is not None:  # the sized design: its largest plan is recorded; its first look must fit
        first = plan_cost(step_s, planned_runs(study, data, sizing.min))
        got = budget.get("first_look") if isinstance(budget.get("first_look"), dict) else {}
        out += [Problem(where, f"budget.first_look.{key}: recorded {got.get(key)!r}, recomputed {first[key]!r} from "
                               f"the probe's runs and the first look's plan")
                for key in COST_FIELDS if not _close(got.get(key), first[key])]
        cost = first
    for key, need, cap in over_budget(cost, study.budget):
        out.append(Problem(where, f"the plan needs {need:.4g} ({key.replace('_', ' ')}) at the probe's "
                                  f"{cost['step_s']:.4g} s/step, over the spec's budget.{key} of {cap:g}: the launcher "
                                  f"stops an experiment here"))
    return out


def check_probe(data_dir: Path, data: BundleData) -> list[Problem]:
    """An experiment bundle's probe: its stage and ``probe.json`` are there, and every number of the
    record recomputes from the probe's own runs (seconds per step, peak memory, the staleness levels),
    its gradient record, and the plan the later stages' records give (the budget, over it a finding)."""
    stage_rel = f"{BUNDLE_PAYLOAD}/{STAGES_DIR}/{PROBE_STAGE}"
    stage = data.stages.get(PROBE_STAGE)
    if stage is None:
        return [Problem(stage_rel, "missing: an experiment's bundle carries its probe stage (the launcher probes "
                                   "every arm before anything long runs)")]
    where = f"{stage_rel}/{PROBE_RECORD}"
    stage_dir = Path(data_dir) / STAGES_DIR / PROBE_STAGE
    try:
        record = read_json(stage_dir / PROBE_RECORD)
    except JSONError as exc:
        return [Problem(where, str(exc))]
    if not isinstance(record, dict):
        return [Problem(where, "not a JSON object")]
    try:
        study = _study(data.experiment)
    except (VerdictError, TypeError, ValueError, yaml.YAMLError) as exc:
        return [Problem(f"{BUNDLE_PAYLOAD}/experiment.yaml", f"not a spec the launcher runs ({exc})")]
    arms = arm_costs(stage)
    failed = [Problem(f"{stage_rel}/{file.removeprefix(BUNDLE_PAYLOAD + '/')}", f"{reason}: the check fails on the "
                      "probe's own evidence, and the launcher stops an experiment here")
              for file, reason in failed_checks(study, stage, stage_dir)]
    try:
        return (_check_arms(record.get("arms"), arms, where) + _check_checks(study, stage, record, stage_dir, where)
                + failed + _check_budget(study, data, record, arms, where))
    except (VerdictError, KeyError, TypeError, ValueError) as exc:
        return [Problem(where, f"cannot recompute ({exc})")]


def check_stages_present(data: BundleData) -> list[Problem]:
    """An experiment bundle carries the tuning stage its spec declares (the probe's: ``check_probe``)."""
    try:
        study = _study(data.experiment)
    except (VerdictError, TypeError, ValueError, yaml.YAMLError):
        return []  # named by check_probe
    if study.experiment.tuning is not None and TUNING_STAGE not in data.stages:
        return [Problem(f"{BUNDLE_PAYLOAD}/{STAGES_DIR}/{TUNING_STAGE}",
                        "missing: the spec tunes, and the verdict's selection is recomputed from this stage")]
    return []
