"""An experiment's bundle: its ``verdict.json`` recomputes from the CSVs and ``data/experiment.yaml``
(``evidence.verdict.recompute``); the earlier stages its spec runs are there (the probe always, tuning when
the spec tunes), each passes the run and recomputation checks, its problems named under
``data/stages/<name>/``, and the probe's record recomputes from the probe's runs and the plan
(``evidence.verdict.probe``). Every record the launcher wrote before the results it guards (each run's
``job.json``, certificate and earlier stages' runs included, each stage's ``sweep.json``, ``probe.json``) carries the
pre-registered spec's SHA256, and it is the SHA256 of ``data/experiment.yaml``: a criterion loosened after the
results, with ``sweep.json``'s link recomputed, still disagrees with every run's own record."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from evidence.audit.recomputation import check_recomputation
from evidence.audit.runs import check_runs
from evidence.dataset import BundleData
from evidence.fileio import JSONError, read_json, sha256_file
from evidence.problems import Problem
from evidence.verdict.probe import check_probe, check_stages_present
from evidence.verdict.recompute import check_verdict
from evidence.verdict.spec_jobs import design_problems, stage_of
from evidence.verdict.stages import earlier_stage
from facts.files import (
    BUNDLE_PAYLOAD,
    EXPERIMENT_DIGEST_FIELD,
    EXPERIMENT_FILE,
    JOB_RECORD,
    PROBE_RECORD,
    PROBE_STAGE,
    STAGES_DIR,
    SWEEP_RECORD,
)


def _inside(problem: Problem, stage_dir: str) -> Problem:
    """A stage's problem named as the confirm bundle holds it (``data/x`` -> ``data/stages/<name>/x``)."""
    return replace(problem, file=problem.file.replace(f"{BUNDLE_PAYLOAD}/", stage_dir, 1),
                   where=problem.where.replace(f"{BUNDLE_PAYLOAD}/", stage_dir),
                   reason=problem.reason.replace(f"{BUNDLE_PAYLOAD}/", stage_dir))


def registered_records(data_dir: Path, data: BundleData) -> list[Path]:
    """The records written before the results they guard, each carrying the pre-registration digest: every
    ``job.json`` of the payload (grid, certificate and earlier stages' runs, their attempts and ranks), each earlier
    stage's ``sweep.json``, the probe's ``probe.json`` (the confirm stage's ``sweep.json``: ``check_verdict``)."""
    stages = [data_dir / STAGES_DIR / name / SWEEP_RECORD for name in sorted(data.stages)]
    probe = data_dir / STAGES_DIR / PROBE_STAGE / PROBE_RECORD
    return sorted({*data_dir.rglob(JOB_RECORD), *stages, *([probe] if probe.is_file() else [])})


def _recorded_digests(data_dir: Path, paths) -> list[tuple[str, object, JSONError | None]]:
    """(bag-relative name, its ``experiment_sha256`` or None, the read error) of each record at ``paths``."""
    found = []
    for path in paths:
        rel = f"{BUNDLE_PAYLOAD}/{path.relative_to(data_dir).as_posix()}"
        try:
            record = read_json(path)
        except JSONError as exc:
            found.append((rel, None, exc))
            continue
        found.append((rel, record.get(EXPERIMENT_DIGEST_FIELD) if isinstance(record, dict) else None, None))
    return found


def _shown(digest) -> str:
    return digest[:12] if isinstance(digest, str) else repr(digest)


def check_registration_digests(data_dir: Path, data: BundleData) -> list[Problem]:
    """Every record of ``registered_records`` carries, as ``experiment_sha256``, the SHA256 of the bundle's spec: a
    finding names each record without it or with another digest (the record's and the spec's)."""
    try:
        spec = sha256_file(data_dir / EXPERIMENT_FILE)
    except OSError:
        return []  # check_verdict names a spec it cannot read
    problems = []
    for rel, recorded, error in _recorded_digests(data_dir, registered_records(data_dir, data)):
        if error is not None:
            problems.append(Problem(rel, f"{error}: it cannot carry the pre-registered spec's {EXPERIMENT_DIGEST_FIELD}"))
        elif recorded is None:
            problems.append(Problem(rel, f"no {EXPERIMENT_DIGEST_FIELD}: the launcher records the pre-registered "
                                         f"spec's SHA256 ({spec[:12]}, {BUNDLE_PAYLOAD}/{EXPERIMENT_FILE}'s) in every "
                                         f"run's and stage's records before its results exist"))
        elif recorded != spec:
            problems.append(Problem(rel, f"{EXPERIMENT_DIGEST_FIELD} {_shown(recorded)} differs from the SHA256 of "
                                         f"{BUNDLE_PAYLOAD}/{EXPERIMENT_FILE}, {spec[:12]}: this record was written "
                                         f"under another spec (one changed after its runs)"))
    return problems


def check_spec_not_removed(data_dir: Path, data: BundleData) -> list[Problem]:
    """A bundle without ``data/experiment.yaml`` whose records name an experiment's spec (``sweep.json`` or any
    run's record carrying ``experiment_sha256``) had its spec and verdict removed: the runs were planned under a
    pre-registration the bundle no longer carries. One finding per record (an unreadable one is the records and
    runs checks')."""
    paths = [data_dir / SWEEP_RECORD, *registered_records(data_dir, data)]
    return [Problem(rel, f"{EXPERIMENT_DIGEST_FIELD} {_shown(recorded)}: planned under an experiment's spec, but the "
                         f"bundle has no {BUNDLE_PAYLOAD}/{EXPERIMENT_FILE} (the spec and its verdict were removed)")
            for rel, recorded, _ in _recorded_digests(data_dir, paths) if recorded is not None]


def check_stage_specs(data_dir: Path, data: BundleData) -> list[Problem]:
    """Each earlier stage's copy of the spec (``data/stages/<name>/experiment.yaml``, which its own bundle carries) is
    the bundle's spec, byte for byte."""
    problems = []
    for name, stage in sorted(data.stages.items()):
        if stage.experiment is not None and stage.experiment != data.experiment:
            problems.append(Problem(f"{BUNDLE_PAYLOAD}/{STAGES_DIR}/{name}/{EXPERIMENT_FILE}",
                                    f"differs from {BUNDLE_PAYLOAD}/{EXPERIMENT_FILE}: the stage ran under another spec"))
    return problems


def check_design(data_dir: Path, data: BundleData) -> list[Problem]:
    """Every job the pre-registered spec plans is in the bundle, stage by stage (``evidence.verdict.spec_jobs``)."""
    data_dir = Path(data_dir)
    problems = design_problems(data_dir, data, stage_of(data), data.experiment, f"{BUNDLE_PAYLOAD}/")
    for name, stage in sorted(data.stages.items()):
        problems += design_problems(data_dir / STAGES_DIR / name, stage, name, data.experiment,
                                    f"{BUNDLE_PAYLOAD}/{STAGES_DIR}/{name}/")
    return problems


def check_experiment(data_dir: Path, data: BundleData) -> list[Problem]:
    """The verdict recomputes; the spec's earlier stages are there; every earlier stage's runs and tables
    recompute, and so does the probe's record; every run's and stage's record carries the spec's SHA256; every job
    the spec plans is in the bundle. An earlier stage's own bundle (its spec, no verdict) is held to the same spec."""
    problems = check_verdict(data_dir, data)
    if data.experiment is not None and earlier_stage(data.sweep):
        problems += check_registration_digests(Path(data_dir), data) + check_design(data_dir, data)
    elif data.experiment is not None:
        problems += (check_stages_present(data) + check_probe(data_dir, data)
                     + check_registration_digests(Path(data_dir), data) + check_stage_specs(Path(data_dir), data)
                     + check_design(data_dir, data))
    else:
        problems += check_spec_not_removed(Path(data_dir), data)
    for name, stage in data.stages.items():
        inside = f"{BUNDLE_PAYLOAD}/stages/{name}/"
        for check in (check_runs, check_recomputation):
            problems += [_inside(p, inside) for p in check(data_dir / "stages" / name, stage)]
    return problems
