"""Accept or reject every job from its evidence; the scheduler's state is reported beside it.

Seed 000's job 937654 completed all 50 updates and left a full set of artifacts, yet Slurm said
FAILED (a bad log regex set the exit code). Acceptance here therefore never reads ``state`` or
``exit_code``: a job is accepted when its metrics log validates and every artifact gate passes,
and a disagreeing scheduler state becomes an anomaly that the index and the incidents report.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from evidence.fileio import JSONError, read_json
from evidence.gates.artifacts import EVIDENCE_LINK, ArtifactDigest, job_evaluation, primary_artifacts
from evidence.gates.judged import job_file_digests
from evidence.gates.metrics_log import MetricsLog
from evidence.gates.record_judge import (  # noqa: F401  (rollout_diversity: the gate's body, read here too)
    BUILD,
    JobRecords,
    judge_records,
    record_problems,
    rollout_diversity,
)
from evidence.problems import Problem
from evidence.sweep import Sweep, algo_name, job_name
from facts import EVAL_RECORD, JOB_RUN_DIR, JOBS_DIR, RUN_RECORD
from facts.failures import failure_cause
from facts.files import JOB_RECORD, METRICS_LOG, SWEEP_RECORD, linked_part, run_relpath
from facts.metrics import ALL_ZERO_REWARD_KEY
from facts.states import COMPLETED

# Shown in the index's reason column before it is cut short.
MAX_REASONS = 3


@dataclass
class JobEvidence:
    """Everything evidence knows about one grid cell (arm, seed), and the decision it implies."""

    algo: str
    seed: int
    present: bool
    n_updates: int
    arm: str = ""  # the arm label; an older record without one is the algo's arm
    job_record: dict = field(default_factory=dict)
    metrics: MetricsLog | None = None
    run_summary: dict | None = None
    eval_summary: dict | None = None
    command: dict | None = None
    checkpoint: str | None = None
    failures: list[Problem] = field(default_factory=list)  # each one rejects the job
    anomalies: list[Problem] = field(default_factory=list)  # reported, not rejecting
    exclusion: str | None = None  # manual exclusion from incidents.yaml
    artifacts: list[ArtifactDigest] = field(default_factory=list)
    judged: dict[str, str] | None = None  # the job's files' SHA256 when it was judged (digests=True; evidence.gates.judged)

    def __post_init__(self):
        self.arm = self.arm or self.algo

    @property
    def job(self) -> str:
        return job_name(self.arm, self.seed)

    @property
    def accepted(self) -> bool:
        return self.present and not self.failures and self.exclusion is None

    @property
    def job_id(self) -> str:
        value = self.job_record.get("job_id")
        return "" if value is None else str(value)

    def reason(self) -> str:
        """One line for the index: why rejected, or what was noted about an accepted job."""
        if not self.present:
            return "job directory missing"
        reasons = [f"excluded by incidents.yaml: {self.exclusion}"] if self.exclusion else []
        if self.failures and (cause := failure_cause(self.job_record, self.job)):
            reasons.append(f"job failed: {cause}")  # the root cause first, then what it left missing
        reasons += [str(f) for f in self.failures]
        if not reasons:
            reasons = [f"accepted on evidence; {a.reason}" for a in self.anomalies]
        shown = "; ".join(reasons[:MAX_REASONS])
        if len(reasons) > MAX_REASONS:
            shown += f"; (+{len(reasons) - MAX_REASONS} more)"
        return shown

    def evidence_boundary(self) -> str:
        """What the job did produce, in one line (the incidents' evidence-boundary column)."""
        if not self.present:
            return "no job directory"
        if any(f.kind == EVIDENCE_LINK for f in self.failures):
            return "not read: its evidence holds a link (or a file that is not a regular one), never followed"
        parts = []
        if self.metrics is None:
            parts.append("no metrics log")
        else:
            parts.append(f"{self.metrics.valid_steps}/{self.n_updates} steps valid")
        failed_gates = {f.kind for f in self.failures}
        parts.append("final checkpoint present" if "checkpoint" not in failed_gates else "no usable final checkpoint")
        parts.append("TensorBoard non-empty" if "tensorboard" not in failed_gates else "no TensorBoard events")
        if self.eval_summary is not None:
            counts = [
                f"{kind} {self.eval_summary[kind].get('n_responses')}"
                for kind in ("initial", "final")
                if isinstance(self.eval_summary.get(kind), dict)
            ]
            parts.append("eval responses " + (", ".join(counts) if counts else "none"))
        else:
            parts.append("no eval summary")
        parts.append("cleanup empty" if "cleanup" not in failed_gates else "cleanup not empty")
        return "; ".join(parts)


def _field_record(path: Path):
    try:
        return read_json(path)
    except JSONError:
        return None


def _field(path: Path, name: str):
    try:
        value = read_json(path)
    except JSONError:
        return None
    return value.get(name) if isinstance(value, dict) else None


def _declared_n_updates(job_dir: Path) -> int | None:
    """The grid's run length: the enclosing sweep's ``sweep.json``, else the trainer's ``run.json``."""
    for value in (_field(job_dir.parent.parent / SWEEP_RECORD, "n_updates"), _field(job_dir / JOB_RUN_DIR / RUN_RECORD, "n_updates")):
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def evaluate_job(job_dir: str | Path, algo: str | None = None, seed: int | None = None,
                 n_updates: int | None = None, eval_responses: int | None = None,
                 digests: bool = False, arm: str | None = None, shared_checks: dict | None = None) -> JobEvidence:
    """Validate one job directory against the run-directory contract. Reads files only.

    ``algo``, ``seed`` and ``arm`` default to what ``job.json`` records (an older record without
    ``arm`` belongs to the algo's arm), ``n_updates`` to the enclosing
    sweep's ``sweep.json`` (else the trainer's ``run.json``), so ``evaluate_job(job_dir)`` works
    for a launcher deciding whether a job must run again. ``digests`` also hashes the retained
    artifacts (checkpoints can be gigabytes: only the bundle build asks for it). ``shared_checks``:
    a dict kept across a sweep's jobs, so their shared initial evaluation is validated once.
    """
    job_dir = Path(job_dir)
    algo = algo if algo is not None else _field(job_dir / JOB_RECORD, "algo")
    seed = seed if seed is not None else _field(job_dir / JOB_RECORD, "seed")
    arm = arm if arm is not None else _field(job_dir / JOB_RECORD, "arm")
    n_updates = n_updates if n_updates is not None else _declared_n_updates(job_dir)
    evidence = JobEvidence(algo=str(algo), seed=seed if isinstance(seed, int) else -1,
                           present=job_dir.is_dir(), n_updates=n_updates or 0,
                           arm=arm if isinstance(arm, str) else "")
    if not evidence.present:
        return evidence
    before = job_file_digests(job_dir) if digests else None  # what the decision rests on, as the gates find it
    evidence.judged = before
    records = _job_records(job_dir, job_dir / JOB_RUN_DIR, algo, seed, n_updates, evidence.arm, eval_responses,
                           shared_checks, before)
    failures = judge_records(records)
    evidence.failures.extend(record_problems(failures))
    if failures and failures[0].gate == "links":  # never read through (artifacts.check_unfollowed)
        if linked_part(job_dir.parent.parent, f"{job_dir.parent.name}/{job_dir.name}/{JOB_RECORD}", ()) is None:
            record = _field_record(job_dir / JOB_RECORD)  # its node and job id: the sanitiser and incidents need them
            evidence.job_record = record if isinstance(record, dict) else {}
        return evidence
    if failures and failures[0].gate == "job-told":
        return evidence
    _take(evidence, records)
    evidence.command = records.command
    if digests:
        evidence.artifacts = primary_artifacts(job_dir, evidence.checkpoint)
        evidence.judged = records.judged
    _note_anomalies(evidence)
    return evidence


def _job_records(job_dir: Path, run_dir: Path, algo, seed, n_updates, arm: str, eval_responses: int | None,
                 shared_checks: dict | None, digests: dict | None) -> JobRecords:
    """The job's records as the judge reads them (``evidence.gates.record_judge``), from its directory: findings
    name files relative to the job directory."""
    return JobRecords(
        caller=BUILD, algo=algo, seed=seed, n_updates=n_updates, job_dir=job_dir, run_dir=run_dir,
        run_prefix=run_relpath(""), root=job_dir, arm=arm, digests=digests,
        evaluation=lambda records, _record: job_evaluation(records.run_dir, records.checkpoint, eval_responses,
                                                           shared_checks=shared_checks,
                                                           run_summary=records.run_summary))


def _take(evidence: JobEvidence, records: JobRecords) -> None:
    """What the gates read, kept on the evidence (the index, the incidents, the bundle read it)."""
    evidence.job_record = records.job_record
    evidence.metrics = records.metrics
    evidence.run_summary = records.run_summary
    evidence.checkpoint = records.checkpoint
    evidence.eval_summary = records.eval_summary
    evidence.anomalies.extend(records.anomalies)


def check_run_dir(run_dir: Path, evidence: JobEvidence, eval_responses: int | None = None,
                  shared_checks: dict | None = None) -> JobEvidence:
    """The trainer's part of the evidence: the gates of ``RECORD_GATES`` of scope ``run`` (metrics log, run
    summary, checkpoint, TensorBoard, ledger, eval), for a run directory without its job directory."""
    records = _job_records(run_dir.parent, run_dir, evidence.algo, evidence.seed, evidence.n_updates, evidence.arm,
                           eval_responses, shared_checks, None)
    evidence.failures.extend(record_problems(judge_records(records, scope="run")))
    evidence.metrics, evidence.run_summary = records.metrics, records.run_summary
    evidence.checkpoint, evidence.eval_summary = records.checkpoint, records.eval_summary
    return evidence


def _note_anomalies(evidence: JobEvidence) -> None:
    """Flags that do not reject: the scheduler disagreeing with the evidence, a reward that never moved."""
    record = evidence.job_record
    state, exit_code = record.get("state"), record.get("exit_code")
    if record and (state != COMPLETED or exit_code != 0):
        evidence.anomalies.append(Problem(JOB_RECORD, f"scheduler state {state}, exit code {exit_code}",
                                          kind="scheduler-state"))
    initial = (evidence.eval_summary or {}).get("initial")
    if isinstance(initial, dict) and (initial.get("all_zero_reward") is True or initial.get("mean_reward") == 0):
        evidence.anomalies.append(Problem(run_relpath(EVAL_RECORD), "all-zero eval reward on the initial checkpoint (control)",
                                          kind="all-zero-eval-reward"))
    records = evidence.metrics.records if evidence.metrics else []
    if records and all(r.get(ALL_ZERO_REWARD_KEY) == 1 for r in records):
        evidence.anomalies.append(Problem(run_relpath(METRICS_LOG), "every training step had all-zero reward",
                                          kind="all-zero-train-reward"))


def _eval_identity(evidence: JobEvidence) -> tuple | None:
    final = (evidence.eval_summary or {}).get("final")
    if not isinstance(final, dict):
        return None
    return tuple(final.get(k) for k in ("subset_sha256", "eval_seed", "n_prompts", "k"))


def evaluate_sweep(sweep: Sweep, exclusions: dict[str, str] | None = None) -> list[JobEvidence]:
    """Evaluate every grid cell (and any stray job directory) and decide acceptance.

    Sweep-level rules on top of each job's own evidence: every accepted job must have been
    evaluated on the same frozen subset (subset digest, eval seed, prompts, samples) as the
    majority of its workload's jobs (the sweep's, unless arms choose workloads), and every job must carry
    the sweep's source commit (an anomaly otherwise).
    ``exclusions`` maps job names to manual exclusion reasons (incidents.yaml).
    """
    exclusions = exclusions or {}
    jobs_dir = sweep.dir / JOBS_DIR
    shared_checks: dict = {}  # each shared initial evaluation is validated once
    evidences = [
        evaluate_job(jobs_dir / job_name(arm, s), sweep.arm_algo(arm), s, sweep.n_updates, sweep.eval_responses,
                     digests=True, arm=arm, shared_checks=shared_checks)
        for arm, s in sweep.jobs
    ]
    grid = {e.job for e in evidences}
    if jobs_dir.is_dir():
        for stray in sorted(p for p in jobs_dir.iterdir() if p.is_dir() and p.name not in grid):
            arm, _, seed = stray.name.rpartition("-")
            record_algo = _field(stray / JOB_RECORD, "algo")
            evidence = JobEvidence(algo=record_algo if isinstance(record_algo, str) else arm or stray.name,
                                   seed=int(seed) if seed.isdigit() else -1,
                                   present=True, n_updates=sweep.n_updates, arm=arm or stray.name)
            evidence.failures.append(Problem(stray.name, "job directory not in the sweep grid", kind="grid"))
            evidence.judged = job_file_digests(stray)  # its copy is sealed too
            evidences.append(evidence)

    # One frozen subset per workload: arms of different workloads (an arm's planned workload=<name>) have their own.
    def workload_of(evidence: JobEvidence):
        return sweep.arms.get(evidence.arm, ("", {}))[1].get("workload")

    for workload in {workload_of(e) for e in evidences}:
        group = [e for e in evidences if workload_of(e) == workload]
        identities = Counter(_eval_identity(e) for e in group if not e.failures and _eval_identity(e))
        if not identities:
            continue
        (majority, _), = identities.most_common(1)
        whose = "the sweep's" if workload is None else f"workload {workload}'s"
        for evidence in group:
            identity = _eval_identity(evidence)
            if identity is not None and identity != majority and not evidence.failures:
                evidence.failures.append(Problem(
                    run_relpath(EVAL_RECORD), f"evaluated on subset {str(identity[0])[:12]}… (seed {identity[1]}), "
                    f"not {whose} {str(majority[0])[:12]}… (seed {majority[1]})", kind="eval-subset"))
    for evidence in evidences:
        commit = evidence.job_record.get("source_commit")
        if sweep.source_commit and commit is not None and commit != sweep.source_commit:
            evidence.anomalies.append(Problem(JOB_RECORD, f"source commit {str(commit)[:12]} differs from the sweep's",
                                              kind="commit-mismatch"))
        evidence.exclusion = exclusions.get(evidence.job)
    # Grid order by position (dicts: one lookup per job, not a walk of the seeds); strays after the grid.
    arm_order = {arm: i for i, arm in enumerate(sweep.arms)}
    seed_order = {seed: i for i, seed in enumerate(sweep.seeds)}
    evidences.sort(key=lambda e: (arm_order.get(e.arm, len(arm_order)), e.arm, seed_order.get(e.seed, 1 << 30), e.seed))
    return evidences


INDEX_COLUMNS = (
    "job", "arm", "algo", "algo_name", "seed", "job_id", "array_index", "scheduler_state", "exit_code",
    "elapsed_s", "source_commit", "steps_expected", "steps_accepted", "responses_generated",
    "eval_responses_initial", "eval_responses_final", "accepted", "reason",
)


def index_row(evidence: JobEvidence) -> dict:
    """The job's row of ``index.csv``: identity, scheduler report, evidence counts, decision."""
    record = evidence.job_record
    eval_summary = evidence.eval_summary or {}

    def responses(kind):
        entry = eval_summary.get(kind)
        return entry.get("n_responses") if isinstance(entry, dict) else None

    return {
        "job": evidence.job,
        "arm": evidence.arm,
        "algo": evidence.algo,
        "algo_name": algo_name(evidence.algo),
        "seed": evidence.seed,
        "job_id": evidence.job_id,
        "array_index": record.get("array_index"),
        "scheduler_state": record.get("state"),
        "exit_code": record.get("exit_code"),
        "elapsed_s": record.get("elapsed_s"),
        "source_commit": record.get("source_commit"),
        "steps_expected": evidence.n_updates,
        "steps_accepted": evidence.metrics.valid_steps if evidence.metrics else 0,
        "responses_generated": (evidence.run_summary or {}).get("responses_generated"),
        "eval_responses_initial": responses("initial"),
        "eval_responses_final": responses("final"),
        "accepted": "yes" if evidence.accepted else "no",
        "reason": evidence.reason(),
    }
