"""An experiment's stages as its directory holds them and its confirm bundle carries them.

``<experiment dir>/`` holds one sibling sweep per stage (``probe/``, ``tuning/`` when the spec tunes,
``confirm/``), each with its own sealed bundle; the launcher writes the probe's checks
(``probe.json``, ``gradient_check.json``) at the probe stage's root. The confirm stage's build
carries the spec as run and every earlier stage's ``bundle/data/`` (with those records) into its
own ``data/stages/<stage>/``, where the audit checks them too, and, for an experiment run as a chain of Slurm
jobs (``wait=false``), the chain's record (``chain.json``: each stage's arrays and the decision job after them).
"""

from __future__ import annotations

from pathlib import Path

from evidence.fileio import read_json, write_text
from facts.bundle_layout import EARLIER_STAGES, STAGE_RECORDS
from facts.files import (
    BUNDLE_DIR,
    CHAIN_RECORD,
    CONFIRM_STAGE,
    EXPERIMENT_FILE,
    GRADIENT_RECORD,
    INDEX_TABLE,
    PROBE_RECORD,
    PROBE_STAGE,
    STAGE_FIELD,
    STAGES,
    STAGES_DIR,
    SWEEP_RECORD,
    TUNING_STAGE,
    bundle_payload_dir,
)
from study.spec import parse_experiment

__all__ = ["CONFIRM_STAGE", "EARLIER_STAGES", "GRADIENT_RECORD", "PROBE_RECORD", "PROBE_STAGE", "STAGES",
           "STAGE_RECORDS", "TUNING_STAGE", "add_experiment",
           "earlier_stage"]


def earlier_stage(sweep: dict) -> str | None:
    """The earlier stage (probe, tuning) a sweep's record says the sweep is, or None (a confirm stage, a plain
    sweep): its bundle carries the spec its records name, and neither a verdict nor other stages."""
    stage = sweep.get(STAGE_FIELD) if isinstance(sweep, dict) else None
    return stage if stage in EARLIER_STAGES else None


def add_experiment(sweep_dir: Path, data_dir: Path) -> None:
    """Build hook, before the data is loaded: carry ``<sweep_dir>/experiment.yaml`` (the spec as run) and, for the
    confirm stage, every earlier stage's sealed evidence (``<experiment dir>/<stage>/bundle/data/``: stages are
    sibling sweeps; the probe's checks with it) into the bundle's ``data/stages/<stage>/`` (audited as well). An
    earlier stage's own bundle (its staged ``sweep.json`` names the stage) carries the spec alone."""
    spec = Path(sweep_dir) / EXPERIMENT_FILE
    if not spec.is_file():
        return
    text = spec.read_text(encoding="utf-8")
    experiment = parse_experiment(text)
    write_text(Path(data_dir) / EXPERIMENT_FILE, text)
    if earlier_stage(read_json(Path(data_dir) / SWEEP_RECORD)):
        return
    chain = Path(sweep_dir).parent / CHAIN_RECORD  # wait=false: each stage's arrays and the decision job after them
    if chain.is_file():
        write_text(Path(data_dir) / CHAIN_RECORD, chain.read_text(encoding="utf-8"))
    for stage in EARLIER_STAGES:
        if stage == TUNING_STAGE and experiment.tuning is None:
            continue
        root = Path(sweep_dir).parent / stage
        built = bundle_payload_dir(root / BUNDLE_DIR)
        if not (built / INDEX_TABLE).is_file():
            continue
        target_root = Path(data_dir) / STAGES_DIR / stage
        for path in sorted(p for p in built.rglob("*") if p.is_file() and not p.is_symlink()):
            target = target_root / path.relative_to(built)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
        for name in STAGE_RECORDS.get(stage, ()):
            if (root / name).is_file():
                write_text(target_root / name, (root / name).read_text(encoding="utf-8"))
