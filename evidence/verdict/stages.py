"""An experiment's stages as its directory holds them and its confirm bundle carries them.

``<experiment dir>/`` holds one sibling sweep per stage (``probe/``, ``tuning/`` when the spec tunes,
``confirm/``), each with its own sealed bundle; the launcher writes the probe's checks
(``probe.json``, ``gradient_check.json``) at the probe stage's root. The confirm stage's build
carries the spec as run and every earlier stage's ``bundle/data/`` (with those records) into its
own ``data/stages/<stage>/``, where the audit checks them too.
"""

from __future__ import annotations

from pathlib import Path

from evidence.fileio import write_text
from evidence.verdict.spec import parse_experiment
from facts.bundle_layout import EARLIER_STAGES, STAGE_RECORDS
from facts.files import (
    BUNDLE_DIR,
    CONFIRM_STAGE,
    EXPERIMENT_FILE,
    GRADIENT_RECORD,
    INDEX_TABLE,
    PROBE_RECORD,
    PROBE_STAGE,
    STAGES_DIR,
    TUNING_STAGE,
    bundle_payload_dir,
)

STAGES = (PROBE_STAGE, TUNING_STAGE, CONFIRM_STAGE)
__all__ = ["CONFIRM_STAGE", "EARLIER_STAGES", "GRADIENT_RECORD", "PROBE_RECORD", "PROBE_STAGE", "STAGES",
           "STAGE_RECORDS", "TUNING_STAGE", "add_experiment"]


def add_experiment(sweep_dir: Path, data_dir: Path) -> None:
    """Build hook, before the data is loaded: carry ``<sweep_dir>/experiment.yaml`` (the spec as run) and
    every earlier stage's sealed evidence (``<experiment dir>/<stage>/bundle/data/``: stages are sibling
    sweeps; the probe's checks with it) into the bundle's ``data/stages/<stage>/`` (audited as well)."""
    spec = Path(sweep_dir) / EXPERIMENT_FILE
    if not spec.is_file():
        return
    text = spec.read_text(encoding="utf-8")
    experiment = parse_experiment(text)
    write_text(Path(data_dir) / EXPERIMENT_FILE, text)
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
