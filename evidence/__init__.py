"""evidence: validate every job of a sweep from its files, decide acceptance, compute seed 000's
statistics, and seal an auditable, path-free BagIt bundle. Reads files only; never imports
``trainer`` or ``launcher``.

Public API::

    build_bundle(sweep_dir, last_k=10, figures=True) -> BuildResult
    audit_bundle(path, public_key=None) -> list[Problem]   (Finding is the same class; [] means clean; a key verifies the signature)
    validate_metrics(path, algo, n_updates, name=None) -> MetricsLog
    evaluate_job(job_dir, algo=None, seed=None, n_updates=None, eval_responses=None, digests=False, arm=None) -> JobEvidence
    parse_experiment(spec) -> Experiment            (one-line VerdictError on a bad criterion or tuning block)
    select_from_bundle(experiment, tuning_bundle_dir) -> {arm: Selection}   (tuning stage; .edge flags the grid edge)
    extend_grid(values, side) -> str                (the one value an edge winner's grid is extended by)
    check_logged(experiment, data)                  (a criterion/tuning metric no accepted run logs: VerdictError)
    compare_paths(path_a, path_b, metrics=None, last_k=10, force=False, csv_path=None, more=()) -> markdown (CompareError)
    load(sweep_or_bundle, last_k=10) -> Results      (index, steps, evaluations, incidents, tables: pyarrow tables; LoadError)
    export(sweep_or_bundle, to, out=None, ...) -> ExportResult   (W&B offline runs or an MLflow file store; ExportError)

The packages, one concern each (docs/architecture.md): ``gates`` (a job judged from its files), ``evaluation``
(an evaluation re-derived), ``statistics``, ``report``, ``verdict`` (a pre-registered experiment's verdict),
``seal`` (the bundle), ``audit`` (a bundle re-checked from its own files) and ``tools`` (compare, load, export);
``problems``, ``fileio``, ``dataset`` and ``sweep`` are what they all share.
"""

import importlib

# Each public name and the module it lives in, imported on first use (PEP 562): a launcher that only
# plans (``launch.py ... dry_run=true``) reads a few of the leaf modules and never loads the build,
# the audit or the tables (bagit, the report, the figures: about half a second).
_HOMES = {
    "audit_bundle": "evidence.audit", "BuildResult": "evidence.seal.bundle", "build_bundle": "evidence.seal.bundle",
    "compare_paths": "evidence.tools.compare", "load": "evidence.tools.load", "Results": "evidence.tools.load",
    "export": "evidence.tools.export", "ExportResult": "evidence.tools.export",
    "JobEvidence": "evidence.gates.index", "evaluate_job": "evidence.gates.index",
    "MetricsLog": "evidence.gates.metrics_log", "Violation": "evidence.gates.metrics_log",
    "validate_metrics": "evidence.gates.metrics_log",
    **{name: "evidence.problems" for name in ("CompareError", "EvidenceError", "ExportError", "IncidentsFileError",
                                              "LeakError", "LoadError", "Problem", "SigningError", "SweepError", "UsageError",
                                              "VerdictError")},
    # An audit finding is the one problem shape (the name the audit's API has always used).
    "Finding": "evidence.problems:Problem",
    **{name: "evidence.verdict" for name in ("Experiment", "Selection", "check_logged", "experiment_verdict",
                                             "extend_grid", "parse_experiment", "select_from_bundle")},
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'evidence' has no attribute {name!r}")
    module, _, attribute = home.partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


__all__ = sorted(_HOMES)
