"""The probe stage's checks on its few steps: finite loss and gradients, the step cost and peak memory of
every arm, and the spec's declared checks (staleness has an effect; both losses agree at staleness 0)."""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys

from evidence.dataset import BundleData
from evidence.verdict.probe import (
    DEFAULT_MIN_COSINE,
    DEFAULT_MIN_RATIO,
    DEFAULT_STALENESS_METRIC,
    arm_costs,
    arm_steps,
    gradient_passes,
    staleness_levels,
    staleness_passes,
)
from facts.files import BUNDLE_DIR, EXPERIMENT_DIGEST_FIELD, GRADIENT_RECORD, PROBE_STAGE
from facts.metrics import GRAD_NORM_KEY, LOSS_KEY
from facts.repo import REPO_ROOT
from launcher.experiment.experiment_errors import ExperimentFailed
from launcher.experiment.runner import Runner


def measure_arms(runner: Runner, data: BundleData) -> dict[str, dict]:
    """Per probe arm: its overrides, seconds per step and peak memory (``evidence.verdict.probe.arm_costs``);
    refused when an arm has no accepted probe run or logged a non-finite loss or gradient."""
    costs = arm_costs(data)
    for label in data.arms:
        steps = arm_steps(data, label)
        if (label, runner.study.experiment.seeds[0]) not in data.accepted or not steps:
            raise ExperimentFailed(f"probe failed: arm {label} has no accepted probe run (see "
                                   f"{runner.stage_dir(PROBE_STAGE).name}/{BUNDLE_DIR}/report.md)")
        for key in (LOSS_KEY, GRAD_NORM_KEY):
            if not all(isinstance(r.get(key), float) and math.isfinite(r[key]) for r in steps):
                raise ExperimentFailed(f"probe failed: arm {label} logged a non-finite {key}")
    return costs


def staleness_check(runner: Runner, data: BundleData, arms: dict[str, dict], stale: dict) -> dict:
    """The baseline's stale probe arm against its fresh one (``stale.settings``): the metric's mean over the
    probe steps must be positive and at least ``min_ratio`` times the fresh one's."""
    metric = stale.get("metric", DEFAULT_STALENESS_METRIC)
    stale_value, fresh_value = staleness_levels(runner.study, data, arms)
    ratio = float(stale.get("min_ratio", DEFAULT_MIN_RATIO))
    passed = staleness_passes(stale_value, fresh_value, ratio)
    if not passed:
        raise ExperimentFailed(f"probe failed: staleness has no effect on {metric} (stale {stale_value:.4g} vs "
                               f"fresh {fresh_value:.4g}, needs {ratio:g}x); raise the staleness or fix the sampler")
    return {"metric": metric, "stale": stale_value, "fresh": fresh_value, "min_ratio": ratio, "passed": passed}


def gradient_check(runner: Runner, grad: dict) -> dict:
    """Both arms' gradients on one staleness-0 batch, by ``python -m trainer.gradient_probe`` (a process of its own)."""
    study = runner.study
    shared = {**study.settings, **runner.user, **grad["settings"]}
    out = runner.stage_dir(PROBE_STAGE) / GRADIENT_RECORD
    argv = [sys.executable, "-m", "trainer.gradient_probe", "--out", str(out)]
    for role in ("baseline", "treatment"):
        argv += [f"--{role}", " ".join(shlex.quote(f"{k}={v}") for k, v in study.experiment.arms[grad[role]].items())]
    argv += [*(f"{k}={v}" for k, v in shared.items()), f"seed={study.experiment.seeds[0]}"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ExperimentFailed(f"probe failed: the gradient check did not run ({last})")
    return json.loads(out.read_text())


def gradient_agreement(runner: Runner, grad: dict) -> dict:
    """The gradient check's record: finite gradients whose cosine reaches ``min_cosine``, else refused."""
    out = gradient_check(runner, grad)
    floor = float(grad.get("min_cosine", DEFAULT_MIN_COSINE))
    passed = gradient_passes(out, floor)
    if not passed:
        raise ExperimentFailed(f"probe failed: {grad['treatment']} and {grad['baseline']} gradients disagree at "
                               f"staleness 0 (cosine {out['cosine']:.4f} < {floor:g}); check the treatment's loss")
    return {**out, "min_cosine": floor, "passed": passed}


def probe_checks(runner: Runner, data: BundleData) -> dict:
    """Finite loss and gradients, seconds per step and peak memory per arm, and the declared checks; the record
    carries the pre-registration digest it was checked under (before any later stage runs)."""
    probe = runner.study.probe
    record: dict = {EXPERIMENT_DIGEST_FIELD: runner.study.sha256, "arms": measure_arms(runner, data), "checks": {}}
    if probe.get("staleness_check"):
        record["checks"]["staleness"] = staleness_check(runner, data, record["arms"], probe["staleness_check"])
    if probe.get("gradient_check"):
        record["checks"]["gradient"] = gradient_agreement(runner, probe["gradient_check"])
    return record
