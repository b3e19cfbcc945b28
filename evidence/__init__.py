"""evidence: validate every job of a sweep from its files, decide acceptance, compute seed 000's
statistics, and seal an auditable, path-free BagIt bundle. Reads files only; never imports
``trainer`` or ``launcher``.

Public API::

    build_bundle(sweep_dir, last_k=10, figures=True) -> BuildResult
    audit(path) -> list[Finding]
    validate_metrics(path, algo, n_updates, name=None) -> MetricsLog
    evaluate_job(job_dir, algo=None, seed=None, n_updates=None, eval_responses=None, digests=False) -> JobEvidence
"""

# The function ``audit`` shadows the submodule ``evidence.audit`` as a package attribute on
# purpose: importing it here, after the submodule, makes ``from evidence import audit`` the
# function whatever was imported first.
from evidence.audit import Finding, UsageError, audit
from evidence.bundle import BuildResult, LeakError, build_bundle
from evidence.incidents import IncidentsFileError
from evidence.index import JobEvidence, evaluate_job
from evidence.metrics_log import MetricsLog, Violation, validate_metrics
from evidence.sweep import SweepError

__all__ = [
    "BuildResult", "Finding", "IncidentsFileError", "JobEvidence", "LeakError", "MetricsLog", "SweepError",
    "UsageError", "Violation", "audit", "build_bundle", "evaluate_job", "validate_metrics",
]
