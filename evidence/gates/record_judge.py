"""The one judge of a job's records: a table of named gates (``RECORD_GATES``) over one job's files (job.json, the
run directory's metrics log, run.json, checkpoint, TensorBoard files, data ledger, ranks, evaluation,
command.public.json) that the build (``evidence.gates.index.evaluate_job``), the audit of an accepted job
(``evidence.audit.runs``) and the audit of a rejected one (``evidence.audit.rejections``) all run through
``judge_records``. A new attack on a job's records is one more gate here, with a docstring stating its rule; the
callers only gather a ``JobRecords`` (where its files are, how a finding names them) and read the failures.

Gates run in the table's order. A gate runs only when the gates it ``requires`` passed, and for the callers it
names (``where``: the build, the audit of an ``accepted`` job, the audit of a ``rejected`` one; a gate the audit of
an accepted job does not re-run is judged by another of its checks, or rests on what the bundle does not carry);
a ``final`` gate that fails ends the judging (a link never followed, a job that cannot be told). ``scope``
``run``: a gate of the run directory alone (what ``check_run_dir`` judges where there is no job directory).

For the audit of a rejected job each failure is either shown by the bundle (``carried``: the files the failure
rests on are carried) or not (the build's verdict stands, said in a note under the gate's ``label``): the
checkpoint and TensorBoard files are never carried (the bundle lists them in artifacts.csv), the launcher's records
(job.json, command.public.json) are carried but nothing carried re-checks them.

The gates' bodies are the checks of ``evidence.gates.artifacts``, ``ledger``, ``ranks`` and ``metrics_log``, and
the evaluation's judge (``evidence.evaluation.judge``), whose gates a failure of ``eval`` lists as its ``parts``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from evidence.evaluation.judge import EVAL_KIND, Evaluation, judge_evaluation
from evidence.fileio import JSONError, read_json
from evidence.gates.artifacts import (
    check_checkpoint,
    check_cleanup,
    check_final_model,
    check_public_command,
    check_run_outputs,
    check_run_summary,
    check_tensorboard,
    check_unfollowed,
    final_model_of,
)
from evidence.gates.judged import changed_while_judged, job_file_digests
from evidence.gates.ledger import check_ledger
from evidence.gates.metrics_log import MetricsLog, validate_metrics
from evidence.gates.ranks import check_ranks
from evidence.problems import Problem
from facts import EVAL_RECORD, checkpoint_name
from facts.engines import IDENTICAL_GROUPS_BOUND
from facts.files import (
    CHECKPOINTS_DIR,
    COMMAND_PUBLIC_RECORD,
    DATA_LEDGER,
    INDEX_TABLE,
    JOB_RECORD,
    METRICS_LOG,
    RUN_OUTPUTS_FIELD,
    RUN_RECORD,
    TENSORBOARD_DIR,
    TENSORBOARD_EVENTS,
    WEIGHTS_FILE,
    run_relpath,
)
from facts.metrics import IDENTICAL_GROUPS_KEY

BUILD, ACCEPTED, REJECTED = "build", "accepted", "rejected"  # who judges a job's records
EVERYWHERE = frozenset((BUILD, ACCEPTED, REJECTED))


@dataclass
class JobRecords:
    """One job's records as the judge reads them, gathered by the build (from its job directory) or the audit
    (from a bundle's copy, ``data/runs/<job>/``, where job.json and the run's files lie side by side): where the
    files are, how a finding names each, what the job is judged against. What the gates read is kept on it for
    the callers (the metrics log, run.json, the final checkpoint, eval.json, the command, the anomalies)."""

    caller: str  # BUILD, ACCEPTED or REJECTED
    algo: object  # the job's algo, seed and run length (the build: as told; None when they cannot be)
    seed: object
    n_updates: object
    job_dir: Path  # where job.json and command.public.json are
    run_dir: Path  # where the run's files are (metrics.jsonl, run.json, ledger, ranks/, eval.json, eval/)
    run_prefix: str  # how a finding names the run directory: ``run/``, ``data/runs/<job>/``
    root: Path  # what a finding's file is relative to (the job directory; a bag)
    arm: str = ""  # the arm (empty: the algo's)
    evaluation: Callable[[JobRecords, object], Evaluation] | None = None  # eval.json's record -> the Evaluation
    eval_go_past: Collection[str] = ()  # the evaluation's gates judged past (``judge_evaluation``'s go_past)
    digests: dict[str, str] | None = None  # the build's decision digests, taken before the gates read the files
    artifacts: set[tuple[str, str]] | None = None  # a bundle: artifacts.csv's (job, path) listing; None: on disk
    build_reason: str = ""  # a bundle: the build's stated reason (index.csv)
    job: str = ""  # the job's name
    # what the gates read
    checkpoint: str | None = None
    eval_summary: dict | None = None
    command: dict | None = None
    judged: dict[str, str] | None = None  # the decision digests as the files were left (the build)
    anomalies: list[Problem] = field(default_factory=list)
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def in_bundle(self) -> bool:
        return self.artifacts is not None

    def _read(self, path: Path):
        if path not in self._cache:
            try:
                self._cache[path] = read_json(path)
            except JSONError as exc:
                self._cache[path] = JSONError(str(exc))
        return self._cache[path]

    @property
    def job_record(self) -> dict:
        """job.json, or {} when it is not an object (its gate says so)."""
        value = self._read(self.job_dir / JOB_RECORD)
        return value if isinstance(value, dict) else {}

    @property
    def run_summary(self) -> dict | None:
        """run.json, or None when it is not an object (its gate says so)."""
        value = self._read(self.run_dir / RUN_RECORD)
        return value if isinstance(value, dict) else None

    @property
    def metrics(self) -> MetricsLog:
        """The metrics log, validated once."""
        if "metrics" not in self._cache:
            self._cache["metrics"] = validate_metrics(self.run_dir / METRICS_LOG, self.algo, self.n_updates,
                                                      name=f"{self.run_prefix}{METRICS_LOG}")
        return self._cache["metrics"]

    @property
    def metric_records(self) -> list[dict]:
        return self.metrics.records

    def unread(self, name: str, path: Path) -> str:
        """How the audit of a rejection names a record that does not read: missing, or unreadable."""
        return f"{name} unreadable" if path.is_file() else f"{name} missing"


@dataclass(frozen=True)
class RecordGate:
    """A named rule a job's records are held to: ``check(records)`` returns the problems it finds (its docstring
    states the rule) or, for a gate that is itself a judge, that judge's failures. Module docstring: ``requires``,
    ``where``, ``final``, ``scope``; ``carried(records, name, problems)``: whether the bundle shows a failure
    (the audit of a rejection); ``label(records)``: how that audit names a failure the bundle cannot show."""

    name: str
    check: Callable[[JobRecords], list]
    requires: tuple[str, ...] = ()
    where: frozenset[str] = EVERYWHERE
    final: bool = False
    scope: str = "job"
    carried: Callable[[JobRecords, str, tuple[Problem, ...]], bool] | None = None
    label: Callable[[JobRecords], str] | None = None

    @property
    def rule(self) -> str:
        return inspect.getdoc(self.check) or ""

    def shown(self, records: JobRecords, name: str, problems: tuple[Problem, ...]) -> bool:
        return (self.carried or _named_files)(records, name, problems)

    def named(self, records: JobRecords) -> str:
        return self.label(records) if self.label is not None else self.name


@dataclass(frozen=True)
class RecordFailure:
    """A gate that failed, its problems, and (a judge's gate: the evaluation) the failures of its own gates."""

    gate: str
    problems: tuple[Problem, ...]
    parts: tuple = ()  # (evaluation gate name, its problems), in its judge's order


# ---- how the audit of a rejection takes a failure ---------------------------------------------------------

def _named_files(records: JobRecords, name: str, problems) -> bool:
    """Shown: every file its problems name is carried."""
    return all((records.root / p.file).is_file() for p in problems)


def _files(*names: str):
    def carried(records: JobRecords, name: str, problems) -> bool:
        """Shown: the run's files it judges are carried."""
        return all((records.run_dir / n).is_file() for n in names)
    return carried


def _never(records: JobRecords, name: str, problems) -> bool:
    """Never shown: the bundle does not carry it, or nothing it carries re-checks it."""
    return False


# ---- the gates ------------------------------------------------------------------------------------------

def no_link(records: JobRecords) -> list[Problem]:
    """No link (or file that is not a regular one) in the job's evidence: never followed, the job is rejected naming
    each (``evidence.gates.artifacts.check_unfollowed``) and nothing more of it is read."""
    return check_unfollowed(records.job_dir)


def job_is_told(records: JobRecords) -> list[Problem]:
    """The job's algo, seed and run length are known (as told, or from job.json / sweep.json / run.json)."""
    if not isinstance(records.algo, str) or not isinstance(records.seed, int) or not records.n_updates:
        return [Problem(JOB_RECORD, "cannot tell algo, seed and n_updates of the job", kind="job")]
    return []


def job_record_reads(records: JobRecords) -> list[Problem]:
    """job.json reads as a JSON object."""
    value = records._read(records.job_dir / JOB_RECORD)
    if isinstance(value, JSONError):
        return [Problem(JOB_RECORD, str(value), kind="job")]
    return [] if isinstance(value, dict) else [Problem(JOB_RECORD, "not a JSON object", kind="job")]


def _job_label(records: JobRecords) -> str:
    value = records._read(records.job_dir / JOB_RECORD)
    return records.unread(JOB_RECORD, records.job_dir / JOB_RECORD) if isinstance(value, JSONError) else "job"


def job_is_this_one(records: JobRecords) -> list[Problem]:
    """job.json records the job's algo and seed, and its arm (an older record without one: the algo's)."""
    record, algo, seed = records.job_record, records.algo, records.seed
    if record.get("algo") != algo or record.get("seed") != seed:
        return [Problem(JOB_RECORD, f"records {record.get('algo')}-{record.get('seed')}, not {algo}-{seed}", kind="job")]
    if record.get("arm", algo) != (records.arm or algo):
        return [Problem(JOB_RECORD, f"records arm {record.get('arm')}, not {records.arm or algo}", kind="job")]
    return []


def _identity_label(records: JobRecords) -> str:
    record = records.job_record
    if (record.get("algo"), record.get("seed")) != (records.algo, records.seed):
        recorded = f"{record.get('algo')}-{record.get('seed')}"
    else:
        recorded = f"arm {record.get('arm')}"
    return (f"job ({JOB_RECORD} records {recorded} while {INDEX_TABLE} and runs/{records.job}/ say "
            f"{records.algo}-{records.seed})")


def cleanup_is_empty(records: JobRecords) -> list[Problem]:
    """job.json's cleanup list (what outlived the job: processes, ports, directories) is recorded and empty."""
    return check_cleanup(records.job_record)


def outputs_are_the_jobs(records: JobRecords) -> list[Problem]:
    """The run's records are what the job's runtime hashed once nothing of the job ran (job.json's
    ``run_outputs_sha256``, ``evidence.gates.artifacts.check_run_outputs``). A bundle carries them sanitised: the
    build's finding (index.csv's reason naming it) stands as it states it."""
    if records.in_bundle:
        return ([Problem(JOB_RECORD, f"the build found {RUN_OUTPUTS_FIELD} broken", kind="outputs")]
                if RUN_OUTPUTS_FIELD in records.build_reason else [])
    return check_run_outputs(records.job_record, records.run_dir, records.digests)


def metrics_log_validates(records: JobRecords) -> list[Problem]:
    """The metrics log validates: every step of the run once, in order, each with its algorithm's keys and finite
    values (``evidence.gates.metrics_log.validate_metrics``)."""
    return [v.problem() for v in records.metrics.violations]


def run_completed(records: JobRecords) -> list[Problem]:
    """run.json says the run of this algo and seed completed all its updates
    (``evidence.gates.artifacts.check_run_summary``)."""
    return check_run_summary(records.run_dir, records.algo, records.seed, records.n_updates)[1]


def final_model_is_loadable(records: JobRecords) -> list[Problem]:
    """The final checkpoint (``checkpoints/latest`` naming the last update's, or run.json's ``final_model``) has
    weights with well-formed safetensors headers. A bundle does not carry it: artifacts.csv lists it."""
    if records.in_bundle:
        weights = run_relpath(CHECKPOINTS_DIR, checkpoint_name(records.n_updates), WEIGHTS_FILE)
        return [] if (records.job, weights) in records.artifacts else [
            Problem(weights, "not listed in artifacts.csv", kind="checkpoint")]
    final_model = final_model_of(records.run_summary)
    records.checkpoint, failures = (check_final_model(records.run_dir, final_model) if final_model is not None
                                    else check_checkpoint(records.run_dir, records.n_updates))
    return failures


def tensorboard_is_written(records: JobRecords) -> list[Problem]:
    """At least one non-empty TensorBoard event file. A bundle does not carry them: artifacts.csv lists them."""
    if records.in_bundle:
        events = run_relpath(TENSORBOARD_DIR, TENSORBOARD_EVENTS.rstrip("*"))
        return [] if any(j == records.job and p.startswith(events) for j, p in records.artifacts) else [
            Problem(run_relpath(TENSORBOARD_DIR), "not listed in artifacts.csv", kind="tensorboard")]
    return check_tensorboard(records.run_dir)


def ledger_is_the_plans(records: JobRecords) -> list[Problem]:
    """The run consumed exactly its planned rows, in order, and its metrics log is its trainer's
    (``evidence.gates.ledger.check_ledger``; a run.json that declares no ledger: none)."""
    return check_ledger(records.run_dir, records.run_summary, records.metric_records, prefix=records.run_prefix)


def eval_record_reads(records: JobRecords) -> list[Problem]:
    """eval.json parses (its form is the evaluation's judge's)."""
    value = records._read(records.run_dir / EVAL_RECORD)
    return [Problem(f"{records.run_prefix}{EVAL_RECORD}", str(value), kind=EVAL_KIND)] \
        if isinstance(value, JSONError) else []


def evaluation_passes(records: JobRecords) -> list:
    """The run's evaluation passes every gate of the evaluation's one judge (``evidence.evaluation.judge.GATES``),
    gathered by the caller (``JobRecords.evaluation``)."""
    record = records._read(records.run_dir / EVAL_RECORD)
    evaluation = records.evaluation(records, record)
    records.eval_summary = evaluation.record if isinstance(evaluation.record, dict) else None
    return judge_evaluation(evaluation, go_past=records.eval_go_past)


def _evaluation_shown(records: JobRecords, name: str, problems) -> bool:
    return name not in records.eval_go_past and _named_files(records, name, problems)


def rollouts_are_diverse(records: JobRecords) -> list[Problem]:
    """Not every rollout group of every step had K identical responses (``rollout_diversity``; a step above
    ``facts.engines.IDENTICAL_GROUPS_BOUND``: an anomaly)."""
    degenerate, identical = rollout_diversity(records.metric_records, records.run_summary)
    records.anomalies.extend(identical)
    return degenerate


def ranks_agree(records: JobRecords) -> list[Problem]:
    """Every rank of a run of several ended completed, reported every step and agrees with the metrics log
    (``evidence.gates.ranks.check_ranks``; a run of one rank: none)."""
    return check_ranks(records.run_dir, records.run_summary, records.metric_records, records.job_record,
                       prefix=records.run_prefix)


def command_is_public(records: JobRecords) -> list[Problem]:
    """command.public.json, the path-free expanded command that reproduces the job, has an argv list."""
    records.command, failures = check_public_command(records.job_dir)
    return failures


def _command_label(records: JobRecords) -> str:
    value = records._read(records.job_dir / COMMAND_PUBLIC_RECORD)
    return records.unread(COMMAND_PUBLIC_RECORD, records.job_dir / COMMAND_PUBLIC_RECORD) \
        if isinstance(value, JSONError) else "command"


def unchanged_while_judged(records: JobRecords) -> list[Problem]:
    """No file of the job appeared, changed or went while its gates read it (the build's decision digests, taken
    before and after; ``evidence.gates.judged``)."""
    if records.digests is None:
        return []
    records.judged = job_file_digests(records.job_dir)
    return changed_while_judged(records.digests, records.judged)


def rollout_diversity(records: list[dict], run_summary: dict | None) -> tuple[list[Problem], list[Problem]]:
    """The one judge of identical rollout groups (``facts.metrics.IDENTICAL_GROUPS_KEY``: a step's share of groups
    whose K responses are all the same tokens, each group's advantages then exactly 0): ``(failures, anomalies)``.

    A run with K > 1 whose every group of every step was identical learned nothing from its rollouts: rejected.
    A run with a step above ``facts.engines.IDENTICAL_GROUPS_BOUND``: an ``identical-groups`` incident naming the
    steps, the engine and the likely cause. A run that does not log the key (another trainer, an older run): none."""
    shares = [(r.get("step"), r[IDENTICAL_GROUPS_KEY]) for r in records
              if isinstance(r.get(IDENTICAL_GROUPS_KEY), (int, float)) and not isinstance(r.get(IDENTICAL_GROUPS_KEY), bool)]
    if not shares:
        return [], []
    config = (run_summary or {}).get("config") if isinstance((run_summary or {}).get("config"), dict) else {}
    workload = config.get("workload") if isinstance(config.get("workload"), dict) else {}
    engine, k = workload.get("engine", "?"), workload.get("n_samples_per_prompt")
    temperature = (workload.get("sampling") or {}).get("temperature") if isinstance(workload.get("sampling"), dict) \
        else None
    cause = (f"engine {engine} at temperature {temperature}: a group's K responses were one sample repeated (an engine "
             "whose seed handling ignores the per-response seeds, or a distribution too peaked to sample from)")
    where = run_relpath(METRICS_LOG)
    if isinstance(k, int) and k > 1 and len(shares) == len(records) and all(v >= 1.0 for _, v in shares):
        return [Problem(where, f"every rollout group of every step had {k} identical responses ({cause}): every "
                               "advantage was 0 and the run learned nothing from its rollouts", kind="identical-groups")], []
    over = [(step, v) for step, v in shares if v > IDENTICAL_GROUPS_BOUND]
    if not over:
        return [], []
    step, value = over[0]
    return [], [Problem(where, f"{len(over)} of {len(shares)} steps had more than {IDENTICAL_GROUPS_BOUND:.0%} of their "
                               f"rollout groups identical (first: step {step}, {value:.0%}); {cause}",
                        kind="identical-groups")]


_AUDITS = frozenset((BUILD, REJECTED))  # re-run on a rejected job's copy, not on an accepted one's (module docstring)
_BUILD = frozenset((BUILD,))
_NOT_REJECTED = frozenset((BUILD, ACCEPTED))

RECORD_GATES: list[RecordGate] = [
    RecordGate("links", no_link, where=_BUILD, final=True),
    RecordGate("job-told", job_is_told, where=_BUILD, final=True),
    RecordGate("job", job_record_reads, carried=_never, label=_job_label),
    RecordGate("job-identity", job_is_this_one, ("job",), carried=_never, label=_identity_label),
    RecordGate("cleanup", cleanup_is_empty, ("job",), carried=_never),
    RecordGate("outputs", outputs_are_the_jobs, ("job",), where=_AUDITS, carried=_never),
    RecordGate("metrics", metrics_log_validates, scope="run", carried=_files(METRICS_LOG)),
    RecordGate("run", run_completed, scope="run", carried=_files(RUN_RECORD)),
    RecordGate("checkpoint", final_model_is_loadable, where=_AUDITS, scope="run", carried=_never),
    RecordGate("tensorboard", tensorboard_is_written, where=_AUDITS, scope="run", carried=_never),
    RecordGate("ledger", ledger_is_the_plans, scope="run", carried=_files(DATA_LEDGER)),
    RecordGate("eval-json", eval_record_reads, where=_AUDITS, scope="run", carried=_never,
               label=lambda r: r.unread(EVAL_RECORD, r.run_dir / EVAL_RECORD)),
    RecordGate("eval", evaluation_passes, ("eval-json",), where=_AUDITS, scope="run", carried=_evaluation_shown),
    RecordGate("rollout-diversity", rollouts_are_diverse, where=_BUILD),
    RecordGate("ranks", ranks_agree, where=_NOT_REJECTED),
    RecordGate("command", command_is_public, where=_AUDITS, carried=_never, label=_command_label),
    RecordGate("changed-while-judged", unchanged_while_judged, where=_BUILD),
]
"""The gates of a job's records, in the order they run (a list, so a test can add one for its own duration).
The audit of an accepted job re-runs job.json's gates (it reads, names this job, records no leftover), ``metrics``,
``run``, ``ledger`` and ``ranks`` (its evaluation: the evaluations check; the rest of what the build judged rests on
files it does not carry, or is the build's own)."""


def gate_names() -> list[str]:
    """The names of ``RECORD_GATES``, in order."""
    return [gate.name for gate in RECORD_GATES]


def gate_named(name: str) -> RecordGate:
    """The gate of ``RECORD_GATES`` named ``name``."""
    return next(g for g in RECORD_GATES if g.name == name)


def judge_records(records: JobRecords, scope: str | None = None) -> list[RecordFailure]:
    """Every gate of ``RECORD_GATES`` that ``records`` fail, in order, each with its problems (module docstring);
    only the gates for ``records.caller``, and of ``scope`` when given (``run``: a run directory without its job)."""
    failures: list[RecordFailure] = []
    failed: set[str] = set()
    for gate in RECORD_GATES:
        if records.caller not in gate.where or (scope is not None and gate.scope != scope) \
                or failed & set(gate.requires):
            continue
        found = gate.check(records)
        if not found:
            continue
        if all(isinstance(item, Problem) for item in found):
            failures.append(RecordFailure(gate.name, tuple(found)))
        else:  # a judge's failures (the evaluation's): its problems, and its gates as parts
            failures.append(RecordFailure(gate.name, tuple(p for f in found for p in f.problems),
                                          tuple((f.gate, f.problems) for f in found)))
        failed.add(gate.name)
        if gate.final:
            break
    return failures


def record_problems(failures: list[RecordFailure]) -> list[Problem]:
    """The problems of ``failures``, in order: what rejects a job in the build."""
    return [problem for failure in failures for problem in failure.problems]


def bundle_view(records: JobRecords, failures: list[RecordFailure]) -> tuple[list[str], list[str]]:
    """(the failures the bundle shows, those it cannot), each named as the audit of a rejection names it: a judge's
    failure by its own gates (once each), another by its gate's ``label``."""
    shown: list[str] = []
    unshown: list[str] = []
    for failure in failures:
        gate_ = gate_named(failure.gate)
        for name, problems in failure.parts or ((failure.gate, failure.problems),):
            is_shown = gate_.shown(records, name, problems)
            said = shown if is_shown else unshown
            label = name if failure.parts else (failure.gate if is_shown else gate_.named(records))
            if label not in said:
                said.append(label)
    return shown, unshown
