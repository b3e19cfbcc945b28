"""A sweep's plan, bound before any job starts: which jobs run (grid jobs and certificate jobs, each with its arm,
seed and what it certifies), over which workload and run length, under which pre-registered spec, and the plan's
SHA256, which every record written before the results carries.

``sweep.json`` holds the plan (``PLAN_FIELD``), its digest (``PLAN_DIGEST_FIELD``) and the digests of the plans this
directory held before (``EARLIER_PLANS_FIELD``: a sized design's first look, a tuning grid before its extension),
each with its job names; a job keeps the digest of the plan it was prepared under in its ``spec.json``, its
``job.json`` and its trainer's ``run.json``. The launcher also draws a nonce per job when it first plans it
(``JOB_NONCE_FIELD``), written into that job's ``spec.json`` only; the job's runtime records it in ``job.json`` and
hands it to the trainer (``JOB_NONCE_ENV``), whose data ledger records it in each process's start line: evidence of
which job wrote a run's files that a copy of another job's files does not carry.
"""

from __future__ import annotations

import hashlib
import json

PLAN_FIELD = "plan"  # sweep.json: {"jobs": [{"job", "arm", "seed"[, "certify"]}, ...], "n_updates", "workload"[, ...]}
PLAN_DIGEST_FIELD = "plan_sha256"  # sweep.json, spec.json, job.json, run.json: the SHA256 of the plan (plan_digest)
EARLIER_PLANS_FIELD = "earlier_plans"  # sweep.json: [{"plan_sha256", "jobs": [name, ...]}, ...], oldest first
JOB_NONCE_FIELD = "job_nonce"  # spec.json, job.json and the ledger's start lines: the job's own nonce
JOB_NONCE_BYTES = 16  # the nonce: this many bytes of the launcher's secrets.token_hex
# What the job's runtime adds to its trainer's environment (never the dry run's command: it is drawn at plan time).
JOB_NONCE_ENV = "PROOFGRID_JOB_NONCE"
PLAN_DIGEST_ENV = "PROOFGRID_PLAN_SHA256"


def plan_digest(plan: dict) -> str:
    """SHA256 of a plan as canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(plan, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def plan_jobs(plan: dict) -> list[str]:
    """The names of a plan's jobs, in its order (grid jobs, then certificate jobs); [] for a malformed plan."""
    jobs = plan.get("jobs") if isinstance(plan, dict) else None
    if not isinstance(jobs, list):
        return []
    return [entry["job"] for entry in jobs if isinstance(entry, dict) and isinstance(entry.get("job"), str)]
