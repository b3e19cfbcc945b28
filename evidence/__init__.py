"""evidence: validate every job of a sweep from its files, decide acceptance, compute seed 000's
statistics, and seal an auditable, path-free BagIt bundle. Reads files only; never imports
``trainer`` or ``launcher``.

Public API::

    build_bundle(sweep_dir, last_k=10, figures=True) -> BuildResult
    audit(path, public_key=None) -> list[Problem]   (Finding is the same class; [] means clean; a key verifies the signature)
    validate_metrics(path, algo, n_updates, name=None) -> MetricsLog
    evaluate_job(job_dir, algo=None, seed=None, n_updates=None, eval_responses=None, digests=False, arm=None) -> JobEvidence
    parse_experiment(spec) -> Experiment            (one-line VerdictError on a bad criterion or tuning block)
    select_from_bundle(experiment, tuning_bundle_dir) -> {arm: Selection}   (tuning stage; .edge flags the grid edge)
    extend_grid(values, side) -> str                (the one value an edge winner's grid is extended by)
    check_logged(experiment, data)                  (a criterion/tuning metric no accepted run logs: VerdictError)
    compare_paths(path_a, path_b, metrics=None, last_k=10, force=False, csv_path=None, more=()) -> markdown (CompareError)
    load(sweep_or_bundle, last_k=10) -> Results      (index, steps, evaluations, incidents, tables: pyarrow tables; LoadError)
    export(sweep_or_bundle, to, out=None, ...) -> ExportResult   (W&B offline runs or an MLflow file store; ExportError)
"""

import importlib
import sys
import types

# Each public name and the module it lives in, imported on first use (PEP 562): a launcher that only
# plans (``launch.py ... dry_run=true``) reads a few of the leaf modules and never loads the build,
# the audit or the tables (bagit, the report, the figures: about half a second).
_HOMES = {
    "audit": "evidence.audit", "BuildResult": "evidence.bundle", "build_bundle": "evidence.bundle",
    "compare_paths": "evidence.compare", "load": "evidence.results", "Results": "evidence.results",
    "export": "evidence.tracking", "ExportResult": "evidence.tracking",
    "JobEvidence": "evidence.index", "evaluate_job": "evidence.index",
    "MetricsLog": "evidence.metrics_log", "Violation": "evidence.metrics_log", "validate_metrics": "evidence.metrics_log",
    **{name: "evidence.problems" for name in ("CompareError", "EvidenceError", "ExportError", "IncidentsFileError",
                                              "LeakError", "LoadError", "Problem", "SigningError", "SweepError", "UsageError",
                                              "VerdictError")},
    # An audit finding is the one problem shape (the name the audit's API has always used).
    "Finding": "evidence.problems:Problem",
    **{name: "evidence.verdict" for name in ("Experiment", "Selection", "check_logged", "experiment_verdict",
                                             "extend_grid", "parse_experiment", "select_from_bundle")},
}


class _Package(types.ModuleType):
    """The package, whose attribute ``audit`` is always the function: importing the submodule
    ``evidence.audit`` sets the package's attribute of that name to the submodule (the import system
    does), and ``from evidence import audit`` must still give the function, as it did when this file
    imported it eagerly after the submodule."""

    def __setattr__(self, name: str, value) -> None:
        if name == "audit" and isinstance(value, types.ModuleType):
            return  # the submodule stays reachable as sys.modules["evidence.audit"]
        super().__setattr__(name, value)

    def __getattr__(self, name: str):
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'evidence' has no attribute {name!r}")
        module, _, attribute = home.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        super().__setattr__(name, value)
        return value


sys.modules[__name__].__class__ = _Package

__all__ = [
    "BuildResult", "CompareError", "EvidenceError", "Experiment", "ExportError", "ExportResult", "Finding",
    "IncidentsFileError", "JobEvidence", "LeakError", "LoadError", "MetricsLog", "Problem", "Results", "Selection",
    "SigningError", "SweepError", "UsageError", "VerdictError", "Violation", "audit", "build_bundle", "check_logged",
    "compare_paths", "evaluate_job", "experiment_verdict", "export", "extend_grid", "load", "parse_experiment",
    "select_from_bundle", "validate_metrics",
]
