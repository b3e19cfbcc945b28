"""An experiment's stages as its directory holds them and its confirm bundle carries them.

``<experiment dir>/`` holds one sibling sweep per stage (``probe/``, ``tuning/`` when the spec tunes,
``confirm/``), each with its own sealed bundle; the launcher writes the probe's checks
(``probe.json``, ``gradient_check.json``) at the probe stage's root. The confirm stage's build
carries the spec as run and every earlier stage's ``bundle/data/`` (with those records) into its
own ``data/stages/<stage>/``, where the audit checks them too.
"""

from __future__ import annotations

from pathlib import Path

from evidence.dataset import EXPERIMENT_FILE
from evidence.fileio import write_text
from evidence.verdict.spec import parse_experiment
from facts.files import BUNDLE_DIR, INDEX_TABLE, bundle_payload_dir

PROBE_STAGE, TUNING_STAGE, CONFIRM_STAGE = "probe", "tuning", "confirm"
STAGES = (PROBE_STAGE, TUNING_STAGE, CONFIRM_STAGE)
# An experiment's stages before confirm, whose evidence (their whole data/) the confirm stage's bundle carries.
EARLIER_STAGES = (PROBE_STAGE, TUNING_STAGE)
PROBE_RECORD = "probe.json"  # per arm: step cost, peak memory; the declared checks and the budget
GRADIENT_RECORD = "gradient_check.json"  # both arms' gradients on one staleness-0 batch
# Records the launcher writes at a stage's root (the probe's checks), carried beside its data.
STAGE_RECORDS = {PROBE_STAGE: (PROBE_RECORD, GRADIENT_RECORD)}


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
        target_root = Path(data_dir) / "stages" / stage
        for path in sorted(p for p in built.rglob("*") if p.is_file() and not p.is_symlink()):
            target = target_root / path.relative_to(built)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
        for name in STAGE_RECORDS.get(stage, ()):
            if (root / name).is_file():
                write_text(target_root / name, (root / name).read_text(encoding="utf-8"))
