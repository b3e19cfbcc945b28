"""The layout of a bundle's payload (``data/``), stated once: every file the build writes, as a pattern
relative to ``data/``; the build refuses to seal a file outside it and the audit names every file outside it.

A pattern is a ``/``-separated path whose ``<name>`` components (or parts of a component) are placeholders:
``<job>`` a job of the payload's index (the audit holds it to ``index.csv``), ``<key12>`` a shared initial
evaluation's key prefix (held to the runs that read it), ``<subset12>`` a frozen evaluation subset's SHA256
prefix (held to the runs' final evaluations), ``<eval_kind>`` an evaluation a run's copy keeps the responses of
(its final one; its initial one when not shared), ``<attempt>`` an earlier attempt's number (the launcher numbers
a job's attempts 0, 1, ...), ``<rank>`` a rank's name (held to the ranks the run had: run.json's ``rank_logs``,
job.json's ``world_size``), ``<table>`` / ``<figure>`` a table's or a figure's name (the recomputation and the
figure check hold them to the ones it makes), ``<log>`` one of the logs a job keeps (``JOB_LOGS``; Ray's only
when the job's command names one), ``<stage>`` an experiment's earlier stage and ``<certjob>`` a certificate job
(``certify=true``; the audit holds it to ``sweep.json``'s ``certify``). What each run had, ``evidence.seal.layout``
checks. A sweep's payload is ``SWEEP_PAYLOAD``; an experiment's confirm stage adds ``EXPERIMENT_PAYLOAD``: its
spec, its verdict and each earlier stage's whole sweep payload (with the probe's records) under
``stages/<stage>/``.
"""

from __future__ import annotations

import re
from functools import lru_cache

from facts.certify import KINDS
from facts.data_parallel_ranks import RANKS_DIR
from facts.files import (
    ARTIFACTS_TABLE,
    ATTEMPTS_DIR,
    BUNDLE_RUNS_DIR,
    CERTIFICATES_FILE,
    CERTIFY_CHECKPOINTS,
    CERTIFY_DIR,
    CHAIN_RECORD,
    COMMAND_PUBLIC_RECORD,
    COMMANDS_FILE,
    DATA_LEDGER,
    EVAL_RECORD,
    EVAL_RESPONSES_DIR,
    EVAL_SUBSETS_DIR,
    EVAL_TABLE,
    EVIDENCE_SETTINGS,
    EXPERIMENT_FILE,
    FIGURES_DIR,
    GRADIENT_RECORD,
    INCIDENTS_FILE,
    INCIDENTS_TABLE,
    INDEX_TABLE,
    INITIAL_EVAL_COMPUTED,
    INITIAL_EVAL_DIR,
    INITIAL_EVAL_RESPONSES,
    JOB_LOGS,
    JOB_RECORD,
    JUDGED_TABLE,
    LOGS_DIR,
    METRICS_LOG,
    PROBE_RECORD,
    PROBE_STAGE,
    REPORT_FILE,
    RESOURCE_SAMPLES,
    RO_CRATE_METADATA,
    RUN_RECORD,
    SHARED_KEY_CHARS,
    STAGES_DIR,
    STEPS_TABLE,
    SUBSET_DIGEST_CHARS,
    SWEEP_RECORD,
    TABLES_DIR,
    TUNING_STAGE,
    VERDICT_FILE,
)

# An experiment's stages before confirm, whose evidence (their whole data/) the confirm stage's bundle carries,
# and the records the launcher writes at a stage's root (the probe's checks), carried beside that data.
EARLIER_STAGES = (PROBE_STAGE, TUNING_STAGE)
# eval.csv's per-evaluation rates and means: the columns an experiment's eval/<name> measure may name.
EVAL_FLOAT_COLUMNS = ("pass@1", "pass@2", "pass@4", "truncation", "mean_length", "mean_reward")
STAGE_RECORDS = {PROBE_STAGE: (PROBE_RECORD, GRADIENT_RECORD)}

# What each placeholder stands for: one path component (or the part of one that it is).
PLACEHOLDERS = {
    "job": r"[^/]+",  # a job of the index: the audit checks the name against index.csv
    "key12": rf"[0-9a-f]{{{SHARED_KEY_CHARS}}}",
    "subset12": rf"[0-9a-f]{{{SUBSET_DIGEST_CHARS}}}",
    "eval_kind": "initial|final",
    "attempt": r"[0-9]+",
    "rank": r"rank[0-9]+",
    "table": r"[a-z0-9_]+",
    "figure": r"[a-z0-9_]+",
    "log": "|".join(re.escape(name) for name in JOB_LOGS),
    "stage": "|".join(EARLIER_STAGES),
    "certjob": r"[^/]+\.(?:" + "|".join(KINDS) + ")",  # a certificate job: the audit holds it to sweep.json's certify
}

# The files of one job's copy, runs/<job>/: the run's records and the job's (with the shared evaluations it computed),
# its evaluated responses, its logs,
# its earlier attempts' job records and evaluation summaries (which shared evaluation each attempt read) and, for
# a run of several ranks, each rank's step record and log.
RUN_FILES = (METRICS_LOG, EVAL_RECORD, f"{EVAL_RESPONSES_DIR}/<eval_kind>.jsonl", RUN_RECORD, COMMAND_PUBLIC_RECORD, JOB_RECORD, RESOURCE_SAMPLES,
             INITIAL_EVAL_COMPUTED, DATA_LEDGER,
             f"{ATTEMPTS_DIR}/<attempt>/{JOB_RECORD}", f"{ATTEMPTS_DIR}/<attempt>/{EVAL_RECORD}",
             f"{LOGS_DIR}/<log>", f"{LOGS_DIR}/<rank>/<log>",
             f"{RANKS_DIR}/<rank>.jsonl")
# The files of a certificate job's copy, certify/<certjob>/ (certify=true): what its certificate compares and says.
CERTIFY_RUN_FILES = (METRICS_LOG, EVAL_RECORD, f"{EVAL_RESPONSES_DIR}/final.jsonl", RUN_RECORD, COMMAND_PUBLIC_RECORD,
                     JOB_RECORD, INITIAL_EVAL_COMPUTED, DATA_LEDGER, f"{LOGS_DIR}/<log>")
# A sweep's payload: the build's records and tables, the derived tables and figures, the report, the crate,
# the shared initial evaluations, the frozen evaluation subsets, and each job's copy.
SWEEP_PAYLOAD = (
    SWEEP_RECORD, EVIDENCE_SETTINGS, INDEX_TABLE, INCIDENTS_TABLE, ARTIFACTS_TABLE, JUDGED_TABLE, STEPS_TABLE, EVAL_TABLE,
    COMMANDS_FILE, INCIDENTS_FILE, REPORT_FILE, RO_CRATE_METADATA,
    f"{TABLES_DIR}/<table>.csv", f"{FIGURES_DIR}/<figure>.svg", f"{FIGURES_DIR}/<figure>.png",
    f"{INITIAL_EVAL_DIR}/<key12>/{EVAL_RECORD}", f"{INITIAL_EVAL_DIR}/<key12>/{INITIAL_EVAL_RESPONSES}",
    f"{EVAL_SUBSETS_DIR}/<subset12>.json",
    *(f"{BUNDLE_RUNS_DIR}/<job>/{name}" for name in RUN_FILES),
    CERTIFICATES_FILE, CERTIFY_CHECKPOINTS, *(f"{CERTIFY_DIR}/<certjob>/{name}" for name in CERTIFY_RUN_FILES),
)
# What an experiment's confirm stage adds: the spec as run, the verdict, every earlier stage, and (wait=false) the
# record of its chain of Slurm jobs.
EXPERIMENT_PAYLOAD = (
    EXPERIMENT_FILE, VERDICT_FILE, CHAIN_RECORD,
    *(f"{STAGES_DIR}/<stage>/{pattern}" for pattern in (*SWEEP_PAYLOAD, EXPERIMENT_FILE)),
    *(f"{STAGES_DIR}/{stage}/{name}" for stage, names in STAGE_RECORDS.items() for name in names),
)
PAYLOAD_LAYOUT = SWEEP_PAYLOAD + EXPERIMENT_PAYLOAD
# The payload files sealed byte for byte as a model wrote them or a dataset holds them (the evaluated responses,
# the shared initial evaluations' responses, the frozen evaluation subsets), in a sweep's payload and an earlier
# stage's: the model's and the data's text, not the machine's (``evidence.seal.sanitize.payload_findings``).
_VERBATIM = (f"{BUNDLE_RUNS_DIR}/<job>/{EVAL_RESPONSES_DIR}/<eval_kind>.jsonl",
             f"{CERTIFY_DIR}/<certjob>/{EVAL_RESPONSES_DIR}/final.jsonl",
             f"{INITIAL_EVAL_DIR}/<key12>/{INITIAL_EVAL_RESPONSES}", f"{EVAL_SUBSETS_DIR}/<subset12>.json")
VERBATIM_TEXT = _VERBATIM + tuple(f"{STAGES_DIR}/<stage>/{pattern}" for pattern in _VERBATIM)


def _regex(pattern: str) -> re.Pattern:
    parts = re.split(r"<(\w+)>", pattern)  # literal, name, literal, name, ..., literal
    text = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>{PLACEHOLDERS[part]})"
                   for i, part in enumerate(parts))
    return re.compile(text)


@lru_cache(maxsize=1)
def _compiled() -> tuple[re.Pattern, ...]:
    return tuple(_regex(pattern) for pattern in PAYLOAD_LAYOUT)


def payload_member(rel: str) -> dict[str, str] | None:
    """The placeholders' values when ``rel`` (a path relative to ``data/``, ``/``-separated) is a file the
    build writes (``{}`` for a fixed member), else None."""
    for regex in _compiled():
        match = regex.fullmatch(rel)
        if match:
            return match.groupdict()
    return None


def fits(placeholder: str, name: str) -> bool:
    """Whether ``name`` is a value the layout's ``<placeholder>`` takes: the build copies only such names
    from a sweep (an earlier attempt's number, a shared evaluation's key prefix, a rank's name)."""
    return re.fullmatch(PLACEHOLDERS[placeholder], name) is not None


@lru_cache(maxsize=1)
def _verbatim() -> tuple[re.Pattern, ...]:
    return tuple(_regex(pattern) for pattern in VERBATIM_TEXT)


def verbatim_member(rel: str) -> bool:
    """Whether ``rel`` (relative to ``data/``) is sealed byte for byte as a model or a dataset wrote it
    (``VERBATIM_TEXT``)."""
    return any(regex.fullmatch(rel) for regex in _verbatim())
