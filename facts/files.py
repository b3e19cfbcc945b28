"""The sweep and job directory layout, run-directory file names, checkpoint naming, streaming SHA256, hash-then-parse reads and atomic JSON writes."""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from pathlib import Path

# A sweep's jobs live in <sweep>/jobs/<job>/, each job's trainer output in its run/ directory.
JOBS_DIR = "jobs"
# <sweep>/certify/<job>.<rerun|resume>/: a reproducibility certificate's job (certify=true), laid out as a job of
# jobs/ is (its own roots, run/, records) but outside the grid: it never enters the seed statistics.
CERTIFY_DIR = "certify"
JOB_RUN_DIR = "run"
SWEEP_RECORD = "sweep.json"  # <sweep>/sweep.json: the plan, written before any job starts
RESUME_COMMAND = "resume.txt"  # <sweep>/resume.txt: the exact command that resumes it (not bundled)
COMMANDS_FILE = "commands.txt"  # <sweep>/commands.txt: every job's trainer command, one per line (bundled)
# A job directory: the planner's spec, the runtime's record, the command it ran (full, and path-free for
# the bundle), its logs, and attempts/<n>/ with what each earlier attempt left.
JOB_SPEC = "spec.json"
JOB_RECORD = "job.json"
COMMAND_RECORD = "command.json"
COMMAND_PUBLIC_RECORD = "command.public.json"
TRAINER_LOG = "trainer.log"
RUNTIME_LOG = "runtime.log"
RAY_START_LOG = "ray-start.log"  # the job's Ray, when its workload uses one (the trainer's env then names it:)
RAY_ADDRESS_ENV = "RAY_ADDRESS"  # in the trainer's environment (command.json's env) when the job started a Ray
# The logs a job directory keeps (and each further rank's record directory, ranks/rank<r>/), the only ones a
# bundle copies into runs/<job>/logs/: the trainer's, the runtime's (with the scheduler's stdout and stderr
# appended on Slurm) and Ray's when the job started one.
JOB_LOGS = (TRAINER_LOG, RUNTIME_LOG, RAY_START_LOG)
ATTEMPTS_DIR = "attempts"
# The job runtime's resource samples of its process tree (and GPUs), one JSON line each
# (launcher.runtime.resource_sampler), and the job.json field that says what was sampled (and why not a GPU).
RESOURCE_SAMPLES = "resources.jsonl"
RESOURCE_SAMPLING_FIELD = "resource_sampling"
# The job.json field that says what held the job's processes to it (launcher.runtime.confine): ``processes``
# (how its processes are found: a child subreaper) and ``writes`` (where they could write: Landlock, or why not).
JOB_GUARD_FIELD = "guard"
# The user and host names a job's runtime knows (facts.machine), in its record directory, for the sanitiser of a
# build on another machine; never copied into a bundle.
MACHINE_NAMES = "machine_names.json"
# A run directory (the trainer's output): its summary, metrics log, evaluation and checkpoints, where
# checkpoints/latest names the newest step_<n>/ and each holds the weights file.
RUN_RECORD = "run.json"
TRAINER_STATE = "trainer_state.json"  # a checkpoint's step and state, beside its weights
METRICS_LOG = "metrics.jsonl"
EVAL_RECORD = "eval.json"
CHECKPOINTS_DIR = "checkpoints"
LATEST_CHECKPOINT = "latest"
WEIGHTS_FILE = "model.safetensors"
TENSORBOARD_DIR = "tensorboard"  # run/tensorboard/: the trainer's event files
TENSORBOARD_EVENTS = "events.out.tfevents.*"
EVAL_RESPONSES_DIR = "eval"  # run/eval/<initial|final>.jsonl: every evaluated response
# Beside an evaluation's responses (run/eval/, a shared initial evaluation's directory): the frozen evaluation
# subset it scored, [[index, question, label], ...] in facts.evaluation.subset_bytes' form, so its SHA256 is
# the summary's subset_sha256. A bundle keeps one copy per subset: data/eval_subset/<subset12>.json.
EVAL_SUBSET = "subset.json"
EVAL_SUBSETS_DIR = "eval_subset"
SUBSET_DIGEST_CHARS = 12  # the subset SHA256's prefix that names its bundle copy
# A sweep's bundle: <sweep>/bundle/ is a BagIt bag whose payload data/ keeps runs/<job>/, a copy of each
# job's run files and records.
BUNDLE_DIR = "bundle"
BUNDLE_ARCHIVE = "bundle.tar.gz"  # <sweep>/bundle.tar.gz: the sealed bag, what a reviewer audits
SHA256_SIDECAR_SUFFIX = ".sha256"  # <sweep>/bundle.tar.gz.sha256: the archive's SHA256, beside it
# Beside an archive, <archive>.intoto.jsonl: its signature, one DSSE envelope (a line) holding an in-toto
# statement over the archive's SHA256 and its bag's manifests (`python -m evidence sign`).
SIGNATURE_SUFFIX = ".intoto.jsonl"
BUNDLE_PAYLOAD = "data"
BUNDLE_RUNS_DIR = "runs"
# The payload's own records and tables: the build's settings, one row per job, incidents, every step
# record, every evaluation; derived tables under tables/, figures under figures/.
EVIDENCE_SETTINGS = "evidence.json"
# evidence.json's key naming the matplotlib version that drew the figures; absent: the bundle has none.
FIGURES_DRAWN_BY = "figures_matplotlib"
# sweep.json's field, false when the launcher was told figures=false: its seal draws no figures (absent: it does).
FIGURES_FIELD = "figures"
INDEX_TABLE = "index.csv"
INCIDENTS_TABLE = "incidents.csv"
STEPS_TABLE = "steps.csv"
EVAL_TABLE = "eval.csv"
# The payload's RO-Crate (Workflow Run Crate): the crate's root is the payload directory, data/.
RO_CRATE_METADATA = "ro-crate-metadata.json"
TABLES_DIR = "tables"
FIGURES_DIR = "figures"
# More payload files: the retained artifacts' digests, the report, the user's incidents file (copied from the
# sweep), an experiment's spec as run and its verdict; a job's logs under runs/<job>/logs/.
ARTIFACTS_TABLE = "artifacts.csv"
# Each run file's copy with the SHA256 its job's file had when the job was judged (evidence.gates.judged).
JUDGED_TABLE = "judged.csv"
REPORT_FILE = "report.md"
INCIDENTS_FILE = "incidents.yaml"  # <sweep>/incidents.yaml (optional), kept in the bundle as it is
EXPERIMENT_FILE = "experiment.yaml"  # the pre-registered experiment spec, as run (an experiment's confirm stage)
# The pre-registration digest (the spec's SHA256 as registration.json registered it), in every record an experiment's
# launcher writes before the results it guards exist: each stage's sweep.json, every job's spec.json and job.json
# (grid, certificate and second-look jobs), the probe's probe.json. The audit cross-checks each against the spec.
EXPERIMENT_DIGEST_FIELD = "experiment_sha256"
VERDICT_FILE = "verdict.json"
CERTIFICATES_FILE = "certificates.json"  # data/certificates.json: the sweep's reproducibility certificates
# data/certify/checkpoints.csv: the content digest of each file of the final checkpoint of every certified job and
# certificate job (the checkpoints are not in the bundle); data/certify/<job>.<kind>/: each certificate job's copy.
CERTIFY_CHECKPOINTS = f"{CERTIFY_DIR}/checkpoints.csv"
LOGS_DIR = "logs"
# An experiment's stages (sibling sweeps of its directory) and the records the launcher writes at the probe
# stage's root; the confirm stage's bundle carries each earlier stage's data/ under data/stages/<stage>/.
PROBE_STAGE, TUNING_STAGE, CONFIRM_STAGE = "probe", "tuning", "confirm"
STAGES = (PROBE_STAGE, TUNING_STAGE, CONFIRM_STAGE)  # an experiment's stages, in the order they run
STAGES_DIR = "stages"
STAGE_FIELD = "stage"  # a stage's sweep.json (and its plan): which stage of an experiment the sweep is
PROBE_RECORD = "probe.json"  # per arm: step cost, peak memory; the declared checks and the budget
GRADIENT_RECORD = "gradient_check.json"  # both arms' gradients on one staleness-0 batch
# wait=false on Slurm: an experiment as a chain of Slurm jobs (each stage's array, then a decision job that seals it
# and submits the next). <experiment>/chain.json records each stage's arrays and the decision job after them (the
# confirm stage's bundle carries it as data/chain.json); <experiment>/chain/ holds what the decision jobs recompose
# the experiment from (command.json: this machine's paths, never bundled), each one's log, and the cancel mark.
CHAIN_RECORD = "chain.json"
CHAIN_DIR = "chain"
CHAIN_COMMAND = "command.json"  # <experiment>/chain/command.json
CHAIN_CANCELLED = "cancelled"  # <experiment>/chain/cancelled: written by launcher cancel, removed by a rerun
# The lock every writer of a sweep's evidence holds (the launcher for its whole run, `python -m evidence
# build` while it seals): <sweep>/.launcher.lock, an exclusive flock (facts.locks).
SWEEP_LOCK = ".launcher.lock"
# `python -m evidence export --to <tool>` writes into <sweep>/exports/<tool>/ unless told where (never bundled).
EXPORTS_DIR = "exports"
# A trainer that is not proofgrid's (a trainer spec with a command) writes its own files into this
# directory of the run directory (its {output_dir}); the run directory around it keeps proofgrid's contract.
TRAINER_OUTPUT_DIR = "trainer"
# run.json fields of such a run: the final model it is judged by (a Hugging Face model directory, relative
# to the run directory) instead of checkpoints/latest, and what ran (the spec, its log, its restarts).
FINAL_MODEL_FIELD = "final_model"
# run.json field: where this start of the run began: {"checkpoint": "step_000050", "step": 50} when it
# resumed from a checkpoint, null when it started at step 0 with none (a rerun says so from here).
RESUMED_FROM_FIELD = "resumed_from"
TRAINER_FIELD = "trainer"
# The initial checkpoint's evaluation, shared by a sweep's jobs: <sweep>/initial_eval/<key[:12]>/
# holds eval.json (the summary, its key and identity) and responses.jsonl; <key[:12]>.lock beside it.
INITIAL_EVAL_DIR = "initial_eval"
INITIAL_EVAL_RESPONSES = "responses.jsonl"
# The job that computes a shared initial evaluation records it in its own run directory, before the evaluation's
# eval.json is in place: run/initial_eval_computed.jsonl, one line per evaluation it computed, its reference
# ({"path", "key", "sha256": of the eval.json it wrote}). The evidence trusts a shared evaluation only when one job
# of the sweep is so recorded as having computed those bytes (one planted in the sweep directory never is).
INITIAL_EVAL_COMPUTED = "initial_eval_computed.jsonl"
# run/data_ledger.jsonl: which training rows each step consumed, per trainer process (facts.ledger_format), appended by
# rank 0 across every resume; the evidence checks that the run consumed exactly its planned rows, in order.
DATA_LEDGER = "data_ledger.jsonl"
SHARED_KEY_CHARS = 12  # the key's prefix that names its directory
CHUNK = 1 << 20  # 1 MiB: large enough that hashing runs at sha256sum speed
# job.json: the SHA256 of the run's records (metrics, evaluation, responses, run.json) taken by the job's runtime once
# nothing of the job ran any more (``run_output_digests``). The evidence holds the run to them: a record that changed
# after the job ended (a process that escaped it, a hand edit) rejects the job, naming the file.
RUN_OUTPUTS_FIELD = "run_outputs_sha256"


def checkpoint_name(step: int) -> str:
    """Name of the checkpoint written after ``step`` optimizer updates: ``step_000050``."""
    return f"step_{step:06d}"


def eval_responses_name(kind: str) -> str:
    """The responses file of an evaluation of ``kind`` (initial, final, step_<n>) in run/eval/: ``final.jsonl``."""
    return f"{kind}.jsonl"


def bundle_subset_relpath(subset_sha256: str) -> str:
    """Where a bundle keeps the evaluation subset with this SHA256, relative to ``data/``."""
    return f"{EVAL_SUBSETS_DIR}/{subset_sha256[:SUBSET_DIGEST_CHARS]}.json"


def initial_eval_relpath(key: str) -> str:
    """Where the initial evaluation with identity ``key`` lives, relative to the sweep directory."""
    return f"{INITIAL_EVAL_DIR}/{key[:SHARED_KEY_CHARS]}"


# The one rule of reading a sweep's evidence: it lives inside its sweep, so a link there is never followed (a job's
# file linked to bytes elsewhere, even to another job's, is not that job's evidence), and only regular files are read.
NEVER_FOLLOWED = "the evidence lives inside its sweep, and a link is never followed"
LINK_FIX = "put the file it names in its place (or remove it), then build again"
# The directories of a job directory that are not its evidence, never walked: a runtime's isolation roots (Ray's
# temp dir holds sockets and links by design; caches; TMPDIR), at any depth (a rank's, an attempt's), and an
# external trainer's own output under run/ (its final model is judged where run.json names it).
JOB_ROOTS_DIR = "roots"
NOT_EVIDENCE_DIRS = ((None, JOB_ROOTS_DIR), (JOB_RUN_DIR, TRAINER_OUTPUT_DIR))  # (parent's name or any, name)


def not_followed(path: str | Path) -> str | None:
    """What ``path`` is when the evidence must not read it: a symbolic link (never followed), or not a regular file
    or directory (a FIFO, socket or device); None for a regular file, a directory or nothing at all."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "not a regular file"


def linked_part(root: str | Path, relpath: str, names: tuple[str, ...] = (EVAL_RECORD, INITIAL_EVAL_RESPONSES)
                ) -> str | None:
    """The first component of ``root/relpath`` (or of ``names`` inside it) that ``not_followed`` refuses, relative
    to ``root``, else None. A shared evaluation lives inside its sweep: a link there is never followed."""
    path = Path(root)
    for part in Path(relpath).parts:
        path = path / part
        if not_followed(path):
            return path.relative_to(root).as_posix()
    for name in names:
        beside = Path(os.path.normpath(path / name))  # "../<key12>.lock": the lock file beside the directory
        if not_followed(beside):
            return Path(os.path.relpath(beside, root)).as_posix()
    return None


def unfollowed_paths(root: str | Path, relpath: str) -> list[tuple[str, str]]:
    """Every path of the directory ``root/relpath`` (a job directory: ``jobs/<job>``) that the evidence never reads,
    relative to ``root``, with what it is (``not_followed``): a component of ``relpath`` itself, or anything below
    it, walked without following a link and without entering ``NOT_EVIDENCE_DIRS``. [] when all is regular."""
    root = Path(root)
    top = linked_part(root, relpath, ())
    if top is not None:
        return [(top, not_followed(root / top) or "a symbolic link")]
    found, todo = [], [root / relpath]
    while todo:
        directory = todo.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            what = not_followed(entry.path)
            if what is not None:
                found.append((Path(entry.path).relative_to(root).as_posix(), what))
            elif entry.is_dir(follow_symlinks=False) and not any(
                    name == entry.name and parent in (None, directory.name) for parent, name in NOT_EVIDENCE_DIRS):
                todo.append(Path(entry.path))
    return sorted(found)


def sweep_jobs_dir(sweep_dir: str | Path) -> Path:
    """Where a sweep's job directories live: ``<sweep>/jobs``."""
    return Path(sweep_dir) / JOBS_DIR


def sweep_job_dir(sweep_dir: str | Path, job: str) -> Path:
    """The directory of the sweep's job named ``job``: ``<sweep>/jobs/<job>``."""
    return sweep_jobs_dir(sweep_dir) / job


def recorded_job_dirs(sweep_dir: str | Path) -> list[Path]:
    """Every job directory of a sweep that holds a ``job.json``: the grid's (``jobs/``), then its certificate
    jobs' (``certify/``, certify=true), each sorted by name."""
    found = []
    for root in (sweep_jobs_dir(sweep_dir), Path(sweep_dir) / CERTIFY_DIR):
        found += sorted(p for p in root.glob("*") if (p / JOB_RECORD).is_file()) if root.is_dir() else []
    return found


def certify_job_dir(sweep_dir: str | Path, job: str) -> Path:
    """The directory of the sweep's certificate job named ``job``: ``<sweep>/certify/<job>``."""
    return Path(sweep_dir) / CERTIFY_DIR / job


def run_dir_of_job(job_dir: str | Path) -> Path:
    """A job's trainer output directory, ``<job>/run`` (an attempt's archive ``<job>/attempts/<n>`` alike)."""
    return Path(job_dir) / JOB_RUN_DIR


def sweep_dir_of_run(run_dir: str | Path) -> Path | None:
    """The sweep directory of a job's run directory, ``<sweep>/jobs/<job>/run`` (or a certificate job's,
    ``<sweep>/certify/<job>/run``) -> ``<sweep>`` (the inverse of ``run_dir_of_job(sweep_job_dir(...))``), or None
    when ``run_dir`` is not laid out so (a run of its own, or a copy taken out of its sweep)."""
    run_dir = Path(run_dir).absolute()
    if run_dir.name != JOB_RUN_DIR or run_dir.parent.parent.name not in (JOBS_DIR, CERTIFY_DIR):
        return None
    return run_dir.parent.parent.parent


def run_relpath(*parts: str) -> str:
    """A run file's path relative to its job directory, as a finding names it: ``run/eval.json``."""
    return "/".join((JOB_RUN_DIR, *parts))


def job_files_glob(name: str) -> str:
    """The glob, relative to a sweep's jobs directory, of one file in every job: ``*/job.json``."""
    return f"*/{name}"


def signature_path(archive: str | Path) -> Path:
    """Where an archive's signature lies: beside it, ``bundle.tar.gz.intoto.jsonl``."""
    archive = Path(archive)
    return archive.with_name(archive.name + SIGNATURE_SUFFIX)


def payload_relpath(*parts: str) -> str:
    """A payload file's bag-relative path, as a finding names it: ``data/index.csv``."""
    return "/".join((BUNDLE_PAYLOAD, *parts))


def bundle_payload_dir(bundle_dir: str | Path) -> Path:
    """A bundle's payload directory: ``<bundle>/data``."""
    return Path(bundle_dir) / BUNDLE_PAYLOAD


def sweep_bundle_payload(sweep_dir: str | Path) -> Path:
    """The payload of the bundle built in a sweep directory: ``<sweep>/bundle/data``."""
    return bundle_payload_dir(Path(sweep_dir) / BUNDLE_DIR)


def bundle_run_dir(data_dir: str | Path, job: str) -> Path:
    """A job's copy in a bundle's payload: ``<data>/runs/<job>``."""
    return Path(data_dir) / BUNDLE_RUNS_DIR / job


def bundle_run_relpath(job: str, name: str) -> str:
    """The bag-relative path of a job's file, as a finding names it: ``data/runs/<job>/<name>``."""
    return f"{BUNDLE_PAYLOAD}/{BUNDLE_RUNS_DIR}/{job}/{name}"


def _reject_constant(spelling: str):
    raise ValueError(f"non-finite number {spelling}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of a float's range: {text[:40]}")
    return value


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        twice = list(dict.fromkeys(key for key, _ in pairs if key in seen or seen.add(key)))
        raise ValueError(f"duplicate key{'s' if len(twice) > 1 else ''} {', '.join(map(repr, twice))}")
    return record


def loads_strict(text: str | bytes):
    """Parse JSON strictly: NaN/Infinity spellings, numbers past a float's range (``1e999``, which Python
    reads as infinity), and an object that names a key twice are errors (``ValueError``), not floats or the
    last of the values (Python's reader keeps the last; a reader of the text, or another parser, sees the
    first: the record would say two things)."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                      object_pairs_hook=_unique_keys)


def read_with_sha256(path: str | Path) -> tuple[bytes, str]:
    """A file's bytes and the SHA256 hex digest of exactly those bytes. One read: whoever parses the
    bytes parses the file that was hashed, even if the file is replaced in between."""
    data = Path(path).read_bytes()
    return data, hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    """SHA256 hex digest of a file, streamed in 1 MiB chunks into one reused buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            n = handle.readinto(buffer)
            if not n:
                break
            digest.update(view[:n])
    return digest.hexdigest()


def json_record_bytes(data) -> bytes:
    """The bytes ``atomic_write_json`` writes for ``data``: sorted, indented JSON and a newline."""
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def atomic_write_json(path: str | Path, data) -> str:
    """Write ``data`` as sorted, indented JSON to a temporary file, then rename it into place:
    a reader sees the old or the new file, never a torn one. Returns the SHA256 of the bytes written."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    encoded = json_record_bytes(data)
    tmp.write_bytes(encoded)
    os.replace(tmp, path)
    return hashlib.sha256(encoded).hexdigest()


def is_run_output(relpath: str) -> bool:
    """Whether ``relpath`` (relative to the run directory) is one of the run's records ``run_output_digests`` binds:
    its metrics log, evaluation summary, run record, or an evaluation's responses (``eval/<kind>.jsonl``)."""
    parts = relpath.split("/")
    return relpath in (METRICS_LOG, EVAL_RECORD, RUN_RECORD) or (
        len(parts) == 2 and parts[0] == EVAL_RESPONSES_DIR and parts[1].endswith(".jsonl"))


def run_output_digests(run_dir: str | Path) -> dict[str, str]:
    """SHA256 of the run's metrics, evaluation, responses and run record (``is_run_output``), by their path in
    ``run_dir``: what the job produced, as the runtime records it after the job's processes are gone and as the
    evidence finds it again."""
    run_dir = Path(run_dir)
    files = [run_dir / name for name in (METRICS_LOG, EVAL_RECORD, RUN_RECORD)]
    files += sorted((run_dir / EVAL_RESPONSES_DIR).glob("*.jsonl"))
    return {f.relative_to(run_dir).as_posix(): sha256_file(f) for f in files if f.is_file() and not f.is_symlink()}
