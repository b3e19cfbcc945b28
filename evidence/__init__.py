"""evidence: validate every job of a sweep from its files, decide acceptance, compute seed 000's
statistics, and seal an auditable, path-free BagIt bundle. Reads files only; never imports
``trainer`` or ``launcher``.

Public API::

    build_bundle(sweep_dir, last_k=10, figures=True) -> BuildResult
    audit(path) -> list[Problem]                    (Finding is the same class; [] means clean)
    validate_metrics(path, algo, n_updates, name=None) -> MetricsLog
    evaluate_job(job_dir, algo=None, seed=None, n_updates=None, eval_responses=None, digests=False, arm=None) -> JobEvidence
    parse_experiment(spec) -> Experiment            (one-line VerdictError on a bad criterion or tuning block)
    select_from_bundle(experiment, tuning_bundle_dir) -> {arm: Selection}   (tuning stage; .edge flags the grid edge)
    extend_grid(values, side) -> str                (the one value an edge winner's grid is extended by)
    check_logged(experiment, data)                  (a criterion/tuning metric no accepted run logs: VerdictError)
    compare_paths(path_a, path_b, metrics=None, last_k=10, force=False, csv_path=None) -> markdown (CompareError)
"""

# The function ``audit`` shadows the submodule ``evidence.audit`` as a package attribute on
# purpose: importing it here, after the submodule, makes ``from evidence import audit`` the
# function whatever was imported first.
from evidence.audit import audit
from evidence.bundle import BuildResult, build_bundle
from evidence.compare import compare_paths
from evidence.index import JobEvidence, evaluate_job
from evidence.metrics_log import MetricsLog, Violation, validate_metrics
from evidence.problems import (
    CompareError,
    EvidenceError,
    IncidentsFileError,
    LeakError,
    Problem,
    SweepError,
    UsageError,
    VerdictError,
)
from evidence.verdict import (
    Experiment,
    Selection,
    check_logged,
    experiment_verdict,
    extend_grid,
    parse_experiment,
    select_from_bundle,
)

# An audit finding is the one problem shape (the name the audit's API has always used).
Finding = Problem

__all__ = [
    "BuildResult", "CompareError", "EvidenceError", "Experiment", "Finding", "IncidentsFileError",
    "JobEvidence", "LeakError", "MetricsLog", "Problem", "Selection", "SweepError", "UsageError",
    "VerdictError", "Violation", "audit", "build_bundle", "check_logged", "compare_paths", "evaluate_job",
    "experiment_verdict", "extend_grid", "parse_experiment", "select_from_bundle", "validate_metrics",
]
