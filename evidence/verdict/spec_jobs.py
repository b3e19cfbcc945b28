"""The jobs a pre-registered spec plans, held to the bundle: what must run is fixed by the spec before any result
exists, and the spec's SHA256 is registered (a forger cannot change it), so a planned job missing from the bundle is a
finding whatever its ``sweep.json`` and records were rewritten to say.

Per stage (``design_problems``):

    probe     every spec arm at the first seed;
    tuning    every spec arm at each value of its declared grid, over the tuning seeds (an edge extension adds one);
    confirm   every spec arm over the spec's seeds; seeds in waves: the first wave, and once any seed of a later
              wave is in the bundle, every seed through that wave (the two-look sized design's second wave: up to
              the size its first look gave, ``verdict.json``'s ``sizing.looks[0].required_seeds``, recomputed by the
              verdict's check);
    certify   a stage the spec certifies (``certify: {stages: [...]}``): per spec arm, its first seed's job again
              from scratch and its last seed's job stopped and resumed (``facts.certify``), in ``sweep.json``'s
              certificate jobs.

A job is in the bundle when ``index.csv`` lists it and its copy (``runs/<job>/job.json``) is there. What stays out of
reach: a design's bundle as sealed after look k, wave k + 1 not yet run, is one the launcher writes
(``next-wave-pending``); a forger who presents it after the next wave ran shows a pending verdict, never a
decision, and only a record outside the bundle (a log of the bundles released) tells the two apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from evidence.dataset import BundleData
from evidence.fileio import JSONError, read_json
from evidence.problems import Problem, VerdictError
from facts.certify import CERTIFY_FIELD, RERUN, RESUME
from facts.files import (
    BUNDLE_RUNS_DIR,
    CONFIRM_STAGE,
    INDEX_TABLE,
    JOB_RECORD,
    PROBE_STAGE,
    STAGE_FIELD,
    SWEEP_RECORD,
    TUNING_STAGE,
    VERDICT_FILE,
)
from study.spec import Study, arm_owner, parse_study, same_overrides

KIND = "design"


def spec_study(text: str) -> Study:
    """The spec as the launcher ran it (``data/experiment.yaml``), parsed as a study (its probe, tuning seeds and
    certified stages too)."""
    spec = yaml.safe_load(text)
    if isinstance(spec, Mapping) and "criterion" not in spec and isinstance(spec.get("experiment"), Mapping):
        spec = spec["experiment"]
    return parse_study(dict(spec), "bundle")


def _present(data_dir: Path, data: BundleData) -> dict[str, set[int]]:
    """Spec-independent: each arm label's seeds whose job ``index.csv`` lists and whose copy the bundle carries."""
    found: dict[str, set[int]] = {}
    for row in data.index:
        job, arm = row.get("job"), row.get("arm") or row.get("algo")
        if job and arm and (data_dir / BUNDLE_RUNS_DIR / job / JOB_RECORD).is_file():
            try:
                found.setdefault(arm, set()).add(int(row["seed"]))
            except (KeyError, ValueError):
                continue
    return found


def _owned(study: Study, data: BundleData, present: dict[str, set[int]]) -> dict[str, set[int]]:
    """Per spec arm, the seeds of the sweep's arms it owns (``arm_owner``) that are in the bundle."""
    owned: dict[str, set[int]] = {name: set() for name in study.experiment.arms}
    for label, (_, overrides) in data.arms.items():
        name = arm_owner(study.experiment.arms, overrides)
        if name is not None:
            owned[name] |= present.get(label, set())
    return owned


def _confirm_seeds(study: Study, data_dir: Path, seen: set[int]) -> tuple[list[int], str]:
    """The seeds the confirm stage's design needs in this bundle, and how the spec says so: for seeds in waves, every
    seed through the last wave any of whose seeds is in the bundle (the two-look design's second wave through the
    size its first look gave: ``verdict.json``'s ``sizing.looks[0].required_seeds``, recomputed by the verdict's
    check)."""
    experiment = study.experiment
    sizing = experiment.sizing
    if sizing is None:
        return list(experiment.seeds), f"the spec's seeds {list(experiment.seeds)}"
    ends = sizing.ends
    begun = max((k for k, end in enumerate(ends) if any((ends[k - 1] if k else 0) < s <= end for s in seen)),
                default=0)
    first = f"the first wave, seeds 1..{sizing.min}"
    if begun == 0:
        return list(experiment.seeds[:sizing.min]), first
    if sizing.resized:
        try:
            need = int((read_json(data_dir / VERDICT_FILE).get("sizing") or {})["looks"][0]["required_seeds"])
        except (JSONError, AttributeError, IndexError, KeyError, TypeError, ValueError):
            return list(experiment.seeds[:sizing.min]), first
        return list(experiment.seeds[:need]), f"the sized design's second look, seeds 1..{need} (its first look sized it)"
    return list(experiment.seeds[:ends[begun]]), f"the design's waves 1..{begun + 1}, seeds 1..{ends[begun]}"


def _certificate_problems(study: Study, stage: str, data: BundleData, where: str) -> list[Problem]:
    """A certified stage's ``sweep.json`` lists, per spec arm, its first seed's rerun and its last seed's resume."""
    if stage not in study.certify:
        return []
    jobs = (data.sweep.get(CERTIFY_FIELD) or {}).get("jobs") if isinstance(data.sweep.get(CERTIFY_FIELD), dict) else {}
    listed = {(entry.get("arm"), entry.get("kind"), entry.get("seed")) for entry in (jobs or {}).values()
              if isinstance(entry, dict)}
    owners = {label: arm_owner(study.experiment.arms, overrides) for label, (_, overrides) in data.arms.items()}
    seeds = sorted({int(r["seed"]) for r in data.index if str(r.get("seed", "")).lstrip("-").isdigit()})
    problems = []
    for name in study.experiment.arms:
        labels = [label for label, owner in owners.items() if owner == name]
        for kind, seed in ((RERUN, seeds[0] if seeds else None), (RESUME, seeds[-1] if seeds else None)):
            if not any((label, kind, seed) in listed for label in labels):
                problems.append(Problem(where, f"the spec certifies the {stage} stage, but no {kind} certificate job "
                                               f"of spec arm {name} (seed {seed}) is planned in it", kind=KIND))
    return problems


def design_problems(data_dir: Path, data: BundleData, stage: str, text: str, where: str) -> list[Problem]:
    """Every job the spec (``text``) plans for ``stage`` is in this stage's payload (``data_dir``, ``data``);
    ``where`` names the payload (``data/`` or ``data/stages/<name>/``) in a problem."""
    try:
        study = spec_study(text)
    except (VerdictError, TypeError, ValueError, yaml.YAMLError):
        return []  # the verdict's own parse names a spec it cannot read
    present = _present(data_dir, data)
    owned = _owned(study, data, present)
    experiment, problems = study.experiment, []
    index = f"{where}{INDEX_TABLE}"
    if stage == TUNING_STAGE and experiment.tuning is not None:
        for name, values in experiment.tuning.values.items():
            have = {label for label, (_, o) in data.arms.items() if arm_owner(experiment.arms, o) == name}
            for value in values:
                runs = {label for label in have if same_overrides({experiment.tuning.setting: value}, data.arms[label][1])}
                missing = [s for s in study.tuning_seeds
                           if not any(s in present.get(label, set()) for label in runs)]
                if missing:
                    problems.append(Problem(index, f"spec arm {name} at {experiment.tuning.setting}={value}: seed(s) "
                                                   f"{missing} of the tuning grid the spec plans have no run in this "
                                                   "bundle (never run, or removed)", kind=KIND))
    else:
        if stage == PROBE_STAGE:
            seeds, why = list(experiment.seeds[:1]), "the probe's first seed"
        else:
            seeds, why = _confirm_seeds(study, data_dir, set().union(*owned.values()) if owned else set())
        for name, have in owned.items():
            missing = [s for s in seeds if s not in have]
            if missing:
                problems.append(Problem(index, f"spec arm {name}: seed(s) {missing} of {why} have no run in this "
                                               "bundle (planned by the pre-registered spec; never run, or removed)",
                                        kind=KIND))
    problems += _certificate_problems(study, stage, data, f"{where}{SWEEP_RECORD}")
    return problems


def stage_of(data: BundleData, default: str = CONFIRM_STAGE) -> str:
    """The stage a payload is: its ``sweep.json`` says (a sweep planned before it did: ``default``)."""
    stage = data.sweep.get(STAGE_FIELD) if isinstance(data.sweep, dict) else None
    return stage if stage in (PROBE_STAGE, TUNING_STAGE, CONFIRM_STAGE) else default
