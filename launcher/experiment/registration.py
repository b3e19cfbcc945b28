"""Pre-registration: the spec's SHA256 and the run's overrides, recorded as the first job starts and
never rewritten; a changed spec (or other overrides) in a directory that already ran is refused, and so
is a directory that ran but lost its registration (its runs are never reused under an unregistered spec)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import yaml

from evidence.statistics.descriptive import CI_LEVEL
from evidence.verdict.sizing import design_record
from facts import atomic_write_json, sha256_file, sweep_jobs_dir
from facts.files import EXPERIMENT_FILE, STAGES
from facts.sweep_plan import PLAN_DIGEST_FIELD, plan_digest, plan_jobs
from launcher.experiment.experiment_errors import ExperimentError
from launcher.grid import LAUNCHER_KEYS
from study.spec import Study

REGISTRATION = "registration.json"


def _flat(node, prefix: str = "") -> dict[str, object]:
    if isinstance(node, dict):
        out: dict[str, object] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: node}


def spec_changes(old_text: str, new_text: str) -> list[str]:
    """``key: old -> new`` for every setting of the spec that differs."""
    old, new = _flat(yaml.safe_load(old_text) or {}), _flat(yaml.safe_load(new_text) or {})
    return [f"{k}: {old.get(k, '(absent)')} -> {new.get(k, '(absent)')}"
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def overrides_for_record(overrides: list[str]) -> list[str]:
    """What defines the runs besides the spec (whose SHA256 covers experiment.*): the trainer overrides, sorted."""
    return sorted(o for o in overrides
                  if o.split("=", 1)[0].lstrip("+~").split(".")[0] not in (*LAUNCHER_KEYS, "hydra", "experiment"))


def ran_without_registration(exp_dir: Path) -> str | None:
    """What in ``exp_dir`` shows that an experiment ran there (the spec the first job registered, a stage's
    jobs), or None: a dry run leaves neither."""
    if (exp_dir / EXPERIMENT_FILE).is_file():
        return EXPERIMENT_FILE
    for stage in STAGES:
        if sweep_jobs_dir(exp_dir / stage).is_dir():
            return f"{stage}/{sweep_jobs_dir(exp_dir / stage).name}/"
    return None


def read_registration(path: Path) -> dict:
    """``registration.json``, checked: a JSON object with the spec's SHA256 (64 hex digits) and the
    overrides (a list of strings); anything else is one line naming the file and the fix."""
    fix = (f"restore it (its spec_sha256 is the SHA256 of the {EXPERIMENT_FILE} beside it), or run the experiment "
           f"in a new hydra.run.dir")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ExperimentError(f"{path}: not a readable registration ({exc.__class__.__name__}); {fix}") from None
    if not isinstance(record, dict):
        raise ExperimentError(f"{path}: not a registration record (a JSON object); {fix}")
    sha, overrides = record.get("spec_sha256"), record.get("overrides")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise ExperimentError(f"{path}: spec_sha256 is {'missing' if sha is None else 'not a SHA256'}; {fix}")
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ExperimentError(f"{path}: overrides is {'missing' if overrides is None else 'not a list of strings'}; "
                              f"{fix}")
    return record


def check_registration(exp_dir: Path, study: Study, overrides: list[str]) -> None:
    """Refuse a changed spec (or other run settings) in an experiment directory that already ran."""
    path = exp_dir / REGISTRATION
    if not path.is_file():
        ran = ran_without_registration(exp_dir)
        if ran:
            raise ExperimentError(f"{exp_dir.name} has run an experiment ({ran}) but its {REGISTRATION} is gone: its "
                                  f"finished runs cannot be reused under a spec nobody registered; restore "
                                  f"{REGISTRATION}, or run the experiment in a new hydra.run.dir")
        return
    record = read_registration(path)
    if record["spec_sha256"] != study.sha256:
        old = (exp_dir / EXPERIMENT_FILE).read_text() if (exp_dir / EXPERIMENT_FILE).is_file() else ""
        changed = spec_changes(old, study.text) or ["the text"]
        more = f" (+{len(changed) - 2} more)" if len(changed) > 2 else ""
        raise ExperimentError(f"{exp_dir.name} was pre-registered with another spec ({'; '.join(changed[:2])}{more}); "
                              f"a pre-registered spec cannot change: restore it, or run it in a new hydra.run.dir")
    if record["overrides"] != overrides:
        raise ExperimentError(f"{exp_dir.name} ran with overrides [{' '.join(record['overrides'])}], not "
                              f"[{' '.join(overrides)}]; repeat them to resume, or use a new hydra.run.dir")


def register(exp_dir: Path, study: Study, overrides: list[str], sweeps: list | None = None) -> None:
    """Record the spec's SHA256 as the first job starts (never rewritten once there), with the plan of every stage
    as planned then (``plans_record``: ``sweeps``, each a stage's planned ``Sweep``)."""
    if (exp_dir / REGISTRATION).is_file():
        return
    exp_dir.mkdir(parents=True, exist_ok=True)
    (exp_dir / EXPERIMENT_FILE).write_text(study.text)
    plans = plans_record(sweeps or [])
    atomic_write_json(exp_dir / REGISTRATION, {
        "experiment": study.name, "spec_sha256": sha256_file(exp_dir / EXPERIMENT_FILE), "overrides": overrides,
        "registered": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **({"plans": plans, PLAN_DIGEST_FIELD: plan_digest(plans)} if plans else {}),
        **({"sizing": sizing_record(study)} if study.experiment.sizing is not None else {})})


def plans_record(sweeps: list) -> dict:
    """Each stage's plan as the launcher plans it before the first job starts: its digest (``facts.sweep_plan``) and its
    jobs. A stage whose jobs depend on an earlier result is planned as the budget counts it (the confirm stage at
    each arm's first tuning value; a sized design's first look), and its later plans are recorded in its own
    ``sweep.json`` (``earlier_plans``) before their jobs start."""
    return {sweep.stage: {PLAN_DIGEST_FIELD: plan_digest(sweep.plan()), "jobs": plan_jobs(sweep.plan())}
            for sweep in sweeps}


def sizing_record(study: Study) -> dict:
    """Seeds in waves: the design as registered before any seed runs (``evidence.verdict.sizing.design_record``: the
    waves, the spending rule, the looks' weights and boundaries at the rule's α, what the design claims)."""
    sizing = study.experiment.sizing
    return {"n": "auto", "spending": sizing.spending, **design_record(sizing, 1 - CI_LEVEL)}
