"""What ``launch.py experiment=<name>`` leaves beside a confirm sweep, for synthetic experiments: the probe
stage (a built sweep with ``probe.json``, its numbers computed here from the probe's ``metrics.jsonl``), the
pre-registration digest in every stage's ``sweep.json``, every job's ``job.json`` and ``probe.json``, and each run's
CPUs in its ``run.json`` config. A spec
that declares the probe's checks gets them: the staleness check's fresh probe arm (``<algo>-fresh``) and every probe
run's logged ``train/sampler_logp_gap`` (``off_policy``), the gradient check's ``gradient_check.json`` (``gradient``).

The probe record is computed from the definitions (mean seconds per step after the first step, the
largest peak memory, CPU-hours = steps x s/step x CPUs / 3600 over the planned runs; the staleness levels as
the mean gap over the probe steps, passed when the stale one is positive and at least min_ratio x the fresh one;
the gradient check passed when finite with cosine >= min_cosine), never by the code under test.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path

import yaml

from benchmarks.synthetic_sweep import make_sweep
from evidence.seal.bundle import build_bundle

CPUS = 2


def set_cpus(sweep: Path, cpus: int = CPUS) -> None:
    """Every run's ``run.json`` config says its job's CPUs (``workload.cpus_per_job``), as the trainer writes it."""
    for path in sorted((sweep / "jobs").glob("*/run/run.json")):
        record = json.loads(path.read_text())
        record["config"].setdefault("workload", {})["cpus_per_job"] = cpus
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def stamp(path: Path, digest: str) -> None:
    """``path`` (a JSON record) carries ``experiment_sha256``: ``digest``."""
    record = json.loads(path.read_text())
    record["experiment_sha256"] = digest
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def register(stage: Path, spec_text: str) -> str:
    """A stage's ``sweep.json`` and every job's ``job.json`` (grid and certificate jobs) record the spec's SHA256,
    as the launcher plans an experiment's stages (the pre-registration digest)."""
    digest = hashlib.sha256(spec_text.encode()).hexdigest()
    for path in [stage / "sweep.json", *sorted(stage.glob("*/*/job.json"))]:
        stamp(path, digest)
    return digest


def mark_stage(stage: Path, name: str, spec_text: str) -> None:
    """A stage's sweep as the launcher leaves it: the spec as run beside it, its ``sweep.json`` naming the stage."""
    (stage / "experiment.yaml").write_text(spec_text, encoding="utf-8")
    record = json.loads((stage / "sweep.json").read_text())
    record["stage"] = name
    (stage / "sweep.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def probe_record(probe: Path, spec: dict, confirm_steps: int, tuning_steps: int | None) -> dict:
    """``probe.json`` as the launcher writes it, from the probe's own metrics and the planned later runs."""
    arms, gaps = {}, {}
    for label, overrides in json.loads((probe / "sweep.json").read_text())["arms"].items():
        metrics = probe / "jobs" / f"{label}-{seed_list(spec)[0]}" / "run" / "metrics.jsonl"
        steps = [json.loads(line) for line in metrics.read_text().splitlines()]
        timed = [s["perf/step_s"] for s in steps[1:]]
        arms[label] = {"overrides": overrides, "step_s": sum(timed) / len(timed),
                       "peak_mem_gib": max(s["perf/peak_mem_gib"] for s in steps)}
        if "train/sampler_logp_gap" in steps[0]:
            gaps[label] = sum(s["train/sampler_logp_gap"] for s in steps) / len(steps)
    step_s = max(a["step_s"] for a in arms.values())

    def cost(n_seeds: int) -> dict:
        runs = [confirm_steps] * (len(spec["arms"]) * n_seeds)
        if spec.get("tuning"):
            values = spec["tuning"]["values"]
            per_arm = sum(len(v) for v in values.values()) if isinstance(values, dict) else len(values) * len(spec["arms"])
            runs += [tuning_steps] * (per_arm * len(spec.get("tuning_seeds", seed_list(spec))))
        return {"step_s": step_s, "runs": len(runs), "steps": sum(runs), "cpu_hours": sum(runs) * step_s * CPUS / 3600,
                "gpu_hours": sum(runs) * step_s / 3600, "longest_run_minutes": max(runs) * step_s / 60}

    sized = isinstance(spec["seeds"], dict)  # seeds in waves: the largest plan, and the first wave's
    waves = (spec["seeds"]["waves"] if "waves" in spec["seeds"] else
             [spec["seeds"]["min"], spec["seeds"]["max"] - spec["seeds"]["min"]]) if sized else None
    budget = {**cost(sum(waves) if sized else len(spec["seeds"])), "budget": spec.get("budget") or {}}
    if sized:
        budget["first_look"] = cost(waves[0])
    checks = {}
    stale = (spec.get("probe") or {}).get("staleness_check")
    if stale:
        algo = spec["arms"][stale["arm"]]["algo"]
        ratio = float(stale.get("min_ratio", 2.0))
        level, fresh = gaps[algo], gaps[f"{algo}-fresh"]
        checks["staleness"] = {"metric": stale.get("metric", "train/sampler_logp_gap"), "stale": level, "fresh": fresh,
                               "min_ratio": ratio, "passed": level > 0 and level >= ratio * fresh}
    grad = (spec.get("probe") or {}).get("gradient_check")
    if grad:
        measured = json.loads((probe / "gradient_check.json").read_text())
        floor = float(grad.get("min_cosine", 0.9))
        checks["gradient"] = {**measured, "min_cosine": floor,
                              "passed": measured["finite"] is True and measured["cosine"] >= floor}
    return {"arms": arms, "checks": checks, "budget": budget}


def gradient_record(cosine: float, finite: bool = True) -> dict:
    """``gradient_check.json`` as ``python -m trainer.gradient_probe`` writes it (norms and counts made up, the cosine given)."""
    return {"staleness": 0, "responses": 32, "valid_tokens": 1536, "baseline": {"algo": "grpo", "grad_norm": 1.25},
            "treatment": {"algo": "rppb", "grad_norm": 1.31}, "cosine": cosine, "relative_difference": 0.21,
            "finite": finite}


def seed_list(spec: dict) -> list[int]:
    """The spec's seeds: its list, or seeds in waves' first wave (1..min), which the tuning stage defaults to."""
    seeds = spec["seeds"]
    if not isinstance(seeds, dict):
        return seeds
    return list(range(1, (seeds["waves"][0] if "waves" in seeds else seeds["min"]) + 1))


def add_launcher_stages(confirm: Path, spec_text: str, tuning_steps: int | None = None, probe_steps: int = 3,
                        off_policy=None, gradient: dict | None = None) -> Path:
    """Beside ``confirm`` (a sweep of the experiment's arms, the spec written into it): the built probe stage
    of every confirm arm at its first seed (and the staleness check's fresh arm, ``off_policy`` giving its runs'
    staleness and gap as make_sweep's does), with ``gradient`` as its ``gradient_check.json`` and ``probe.json``;
    the registration link; each run's CPUs. Returns the probe stage's directory."""
    spec = yaml.safe_load(spec_text)
    confirm_record = json.loads((confirm / "sweep.json").read_text())
    arms = {label: {k: v for k, v in overrides.items() if k != "workload.lr"}
            for label, overrides in confirm_record["arms"].items()}
    arms = {overrides["algo"]: overrides for overrides in arms.values()}  # the probe runs without the tuned value
    stale = (spec.get("probe") or {}).get("staleness_check")
    if stale:  # the checked arm at staleness 0: its overrides and the check's settings (as override text)
        own = spec["arms"][stale["arm"]]
        arms[f"{own['algo']}-fresh"] = {**own, **{k: str(v) for k, v in stale["settings"].items()}}
    probe = make_sweep(confirm.parent, seeds=(seed_list(spec)[0],), n_steps=probe_steps, name="probe", arms=arms,
                       off_policy=off_policy)
    set_cpus(probe)
    digest = register(probe, spec_text)
    mark_stage(probe, "probe", spec_text)  # as the launcher runs a stage: the spec beside it, its sweep.json says so
    build_bundle(probe, figures=False)
    if gradient is not None:
        (probe / "gradient_check.json").write_text(json.dumps(gradient, indent=2, sort_keys=True) + "\n")
    record = {"experiment_sha256": digest, **probe_record(probe, spec, confirm_record["n_updates"], tuning_steps)}
    (probe / "probe.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    set_cpus(confirm)
    register(confirm, spec_text)
    return probe


def paired_experiment(tmp_path: Path, spec: str, base: dict[int, float], differences: dict[int, int]) -> Path:
    """A confirm stage of arms grpo and rppb whose final pass@1 differ by ``differences[seed]`` points on top of
    ``base[seed]``, carrying ``spec`` and the launcher's stage records: the design a verdict test reads."""
    confirm = make_sweep(tmp_path, seeds=tuple(differences), name="confirm",
                         arms={"grpo": {"algo": "grpo"}, "rppb": {"algo": "rppb"}},
                         final_pass1=lambda arm, seed: base[seed] + (differences[seed] / 100 if arm == "rppb" else 0))
    (confirm / "experiment.yaml").write_text(spec, encoding="utf-8")
    add_launcher_stages(confirm, spec)
    return confirm


def z_by_hand(d: list[float]) -> float:
    """A stage's statistic written out: the paired t of ``d``, mapped to a standard normal by its own t distribution."""
    import math

    from scipy import stats as sps

    t = sum(d) / len(d) / (statistics.stdev(d) / math.sqrt(len(d)))
    return float(sps.norm.isf(sps.t.sf(t, len(d) - 1)))
