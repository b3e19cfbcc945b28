"""The audit's recomputation of ``verdict.json``: the verdict the bundle's own CSVs and spec give, field by field.

A spec whose SHA256 differs from the pre-registered ``experiment_sha256`` in ``sweep.json`` is a
problem too, and so is a spec without that link, a verdict without its spec or a spec without its verdict.
"""

from __future__ import annotations

import math
from pathlib import Path

from evidence.dataset import EXPERIMENT_FILE, BundleData
from evidence.fileio import JSONError, read_json, sha256_file
from evidence.problems import Problem, VerdictError
from evidence.verdict.record import VERDICT_FILE, bundle_verdict
from evidence.verdict.stages import earlier_stage
from facts.files import SWEEP_RECORD

# Differing fields named one by one before the rest are counted.
MAX_DIFFERENCES = 10


def _differences(recorded, recomputed, path: str = "") -> list[str]:
    """Where two JSON values differ (floats within 1e-9 relative, as the table audit allows)."""
    if isinstance(recorded, dict) and isinstance(recomputed, dict):
        out = []
        for key in sorted(set(recorded) | set(recomputed)):
            where = f"{path}.{key}" if path else key
            if key not in recorded or key not in recomputed:
                out.append(f"{where} {'missing' if key not in recorded else 'not in the recomputation'}")
            else:
                out += _differences(recorded[key], recomputed[key], where)
        return out
    if isinstance(recorded, list) and isinstance(recomputed, list) and len(recorded) == len(recomputed):
        return [d for i, (a, b) in enumerate(zip(recorded, recomputed)) for d in _differences(a, b, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(recorded, numbers) and isinstance(recomputed, numbers) and not isinstance(recorded, bool) \
            and not isinstance(recomputed, bool):
        if math.isclose(recorded, recomputed, rel_tol=1e-9, abs_tol=1e-12):
            return []
    elif recorded == recomputed:
        return []
    return [f"{path}: recorded {recorded!r}, recomputed {recomputed!r}"]


def check_verdict(data_dir: Path, data: BundleData) -> list[Problem]:
    """A problem for every way ``verdict.json`` differs from what the bundle's CSVs and spec give.

    Also: a verdict without its spec or a spec without its verdict, a spec whose SHA256 differs from the
    one ``sweep.json`` pre-registered (``experiment_sha256``), and a spec without that link.
    """
    data_dir = Path(data_dir)
    rel_verdict, rel_spec = f"data/{VERDICT_FILE}", f"data/{EXPERIMENT_FILE}"
    has_verdict = (data_dir / VERDICT_FILE).is_file()
    if data.experiment is None:
        return [Problem(rel_verdict, f"present without {rel_spec}: nothing to recompute it from")] if has_verdict else []
    findings = []
    registered = data.sweep.get("experiment_sha256")
    if registered is None:
        findings.append(Problem(f"data/{SWEEP_RECORD}", "no experiment_sha256: an experiment's bundle carries the "
                                                        "pre-registration link of its spec (the launcher records it "
                                                        "in the confirm stage's sweep.json)"))
    elif registered != sha256_file(data_dir / EXPERIMENT_FILE):
        findings.append(Problem(rel_spec, "SHA256 differs from the pre-registered experiment_sha256 in sweep.json"))
    if earlier_stage(data.sweep):  # the probe's or tuning's own bundle: its spec, never a verdict
        return findings + ([Problem(rel_verdict, f"present in the {earlier_stage(data.sweep)} stage's bundle: only the "
                                                 "confirm stage's carries a verdict")] if has_verdict else [])
    if not has_verdict:
        return findings + [Problem(rel_verdict, "missing (the bundle carries an experiment spec)")]
    try:
        recorded = read_json(data_dir / VERDICT_FILE)
    except JSONError as exc:
        return findings + [Problem(rel_verdict, str(exc))]
    try:
        recomputed = bundle_verdict(data)
    except (VerdictError, OSError, KeyError, ValueError) as exc:
        return findings + [Problem(rel_verdict, f"cannot recompute ({exc})")]
    differences = _differences(recorded, recomputed)
    findings += [Problem(rel_verdict, f"does not recompute: {d}") for d in differences[:MAX_DIFFERENCES]]
    if len(differences) > MAX_DIFFERENCES:
        findings.append(Problem(rel_verdict, f"(+{len(differences) - MAX_DIFFERENCES} more differences)"))
    return findings
