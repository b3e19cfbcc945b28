"""Reproducibility certificates (``certify=true``), stated once: the certificate jobs' kinds and names, the step
a resume job stops at, the trainer settings they use, and which metrics a certificate does not hold to bit-identity.

Per arm of a certified sweep, one seed's job runs again from scratch (``rerun``) and one is stopped at a step
and resumed from its checkpoint in a fresh trainer process (``resume``), each a job of its own in
``<sweep>/certify/<job>.<kind>/``; the evidence compares each with the original (``evidence.gates.certificate_jobs``).
"""

from __future__ import annotations

RERUN = "rerun"  # the original job's command again, from scratch, in a directory of its own
RESUME = "resume"  # the same, stopped before ``stop_step`` with a checkpoint, then resumed by a new trainer process
KINDS = (RERUN, RESUME)
CERTIFY_FIELD = "certify"  # sweep.json's record of the certificate jobs; a certificate job's spec.json and job.json
STOP_SETTING = "stop_at_step"  # the trainer setting that stops a run before that step (facts: trainer/schema.py)
PERF_PREFIX = "perf/"  # wall-clock measurements (seconds, tokens per second, memory): never bit-identical
PLANNED_RESTART_FIELD = "planned_restart"  # a resume job's job.json: where its first trainer stopped, as planned
NOT_REPRODUCED = "not-reproduced"  # the incident kind of a certificate job that does not reproduce its original


def certificate_job_name(job: str, kind: str) -> str:
    """The certificate job of ``kind`` for the grid's ``job``: ``grpo-42.rerun``, ``grpo-42.resume``."""
    return f"{job}.{kind}"


def stop_step(seed: int, n_updates: int) -> int:
    """The step a resume job stops before, chosen from the seed: ``1 + seed mod (n_updates - 1)``, so
    ``1 <= step <= n_updates - 1`` (at least one step before the stop and one after; ``n_updates >= 2``)."""
    if n_updates < 2:
        raise ValueError(f"a run of {n_updates} step cannot stop and resume; it needs at least 2")
    return 1 + seed % (n_updates - 1)
