"""Seal a sweep into a BagIt bag and a deterministic ``.tar.gz``.

``build_bundle(sweep_dir)`` validates every job, decides acceptance, writes the payload
(sanitised on the way in), computes tables, report and figures from the written CSV files,
bags it with the ``bagit`` library (sha256 manifests only), refuses to seal if the leak scan
finds anything, and writes ``bundle.tar.gz`` plus its ``.sha256`` sidecar.

Rebuilding from the same sweep gives a byte-identical archive: every payload file is written
deterministically, bag-info.txt carries no build-time date (``Bagging-Date`` is the sweep's
``created`` date when sweep.json has one, otherwise absent), the tag manifest is sorted, and
the tar has sorted entries, zero mtimes, root owners with empty names, normalised modes and a
gzip header without file name or time. (The compressed bytes also depend on the zlib build.)
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.metadata
import logging
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import bagit

from evidence.computed import compute_tables
from evidence.dataset import (
    ARTIFACT_COLUMNS,
    EVAL_COLUMNS,
    SETTINGS_FILE,
    load_bundle_data,
    step_columns,
    write_csv,
)
from evidence.evaluation.judge import EVAL_KINDS
from evidence.evaluation.shared import SHA256_HEX, shared_initial_dir
from evidence.fileio import JSONError, dumps_json, environment, parse_json, read_json, sha256_file, write_text
from evidence.gates.certificate_jobs import (
    CHECKPOINT_COLUMNS,
    certificate_incidents,
    certified_jobs,
    checkpoint_rows,
    compute_certificates,
)
from evidence.gates.incidents import (
    ATTEMPTS_DIR,
    INCIDENT_COLUMNS,
    INCIDENTS_FILE,
    Incident,
    derive_incidents,
    load_user_incidents,
)
from evidence.gates.index import INDEX_COLUMNS, JobEvidence, evaluate_sweep, index_row
from evidence.gates.judged import JUDGED_COLUMNS, JobFiles, refuse_changed
from evidence.gates.plan_binding import sweep_plan_problems
from evidence.gates.ranks import (
    RENDEZVOUS_ADDRESS_PLACEHOLDER,
    path_free_placement,
    placement_addresses,
    placement_hosts,
)
from evidence.problems import IncidentsFileError, LeakError, Problem, SweepError
from evidence.questions import SMALLEST_DIFFERENCE_SETTING
from evidence.report.figures import render_figures
from evidence.report.png import document_text
from evidence.report.sections import render_report
from evidence.seal.layout import unexpected_files
from evidence.seal.ro_crate import write_crate
from evidence.seal.sanitize import Sanitizer, payload_findings, payload_note, strip_abs_keys
from evidence.statistics.descriptive import CI_LEVEL, DEFAULT_LAST_K
from evidence.sweep import job_name, read_sweep
from evidence.verdict.probe import refuse_failed_probe
from evidence.verdict.record import write_verdict
from evidence.verdict.stages import add_experiment
from facts import (
    EVAL_RECORD,
    INITIAL_EVAL_DIR,
    INITIAL_EVAL_RESPONSES,
    METRICS_LOG,
    RUN_RECORD,
    run_dir_of_job,
    sweep_job_dir,
)
from facts.backends import LOCAL
from facts.bundle_layout import fits
from facts.data_parallel_ranks import RANKS_DIR
from facts.files import (
    ARTIFACTS_TABLE,
    BUNDLE_ARCHIVE,
    BUNDLE_RUNS_DIR,
    CERTIFICATES_FILE,
    CERTIFY_CHECKPOINTS,
    CERTIFY_DIR,
    COMMAND_PUBLIC_RECORD,
    COMMANDS_FILE,
    DATA_LEDGER,
    EVAL_RESPONSES_DIR,
    EVAL_SUBSET,
    EVAL_TABLE,
    FIGURES_DIR,
    FIGURES_DRAWN_BY,
    FIGURES_FIELD,
    INCIDENTS_TABLE,
    INDEX_TABLE,
    INITIAL_EVAL_COMPUTED,
    JOB_LOGS,
    JOB_RECORD,
    JUDGED_TABLE,
    LOGS_DIR,
    MACHINE_NAMES,
    REPORT_FILE,
    RESOURCE_SAMPLES,
    STEPS_TABLE,
    SWEEP_RECORD,
    TABLES_DIR,
    bundle_payload_dir,
    bundle_subset_relpath,
    certify_job_dir,
    eval_responses_name,
    linked_part,
    payload_relpath,
    recorded_job_dirs,
)
from facts.ledger_format import LEDGER_FIELD
from facts.locks import BUILD, sweep_lock
from facts.processes import local_runtime_alive
from facts.states import IN_FLIGHT_STATES

BUNDLE_DIR = "bundle"
ARCHIVE = BUNDLE_ARCHIVE
SIDECAR = "bundle.tar.gz.sha256"
TAG_FILES = ("bagit.txt", "bag-info.txt", "manifest-sha256.txt", "tagmanifest-sha256.txt")
SOFTWARE_AGENT = "proofgrid evidence (bagit.py)"
SCHEMA = 1
_STAGING = ".bundle.staging"


@dataclass
class BuildResult:
    """What a build produced, for the launcher and the CLI."""

    bundle_dir: Path
    archive: Path
    archive_sha256: str
    jobs: list[dict] = field(default_factory=list)  # index rows
    incidents: list[Incident] = field(default_factory=list)
    plan_problems: list[Problem] = field(default_factory=list)  # the sweep's plan against its jobs (evidence.gates.plan_binding)
    notes: list[Problem] = field(default_factory=list)  # the leak scan's notes: sealed as written, said here

    @property
    def accepted(self) -> int:
        return sum(1 for row in self.jobs if row["accepted"] == "yes")

    def summary(self) -> str:
        """A few lines for a terminal: decisions, incidents, where the bundle is and its digest."""
        rejected = [f"{row['job']} ({row['reason']})" for row in self.jobs if row["accepted"] != "yes"]
        lines = [f"evidence: {self.accepted}/{len(self.jobs)} jobs accepted, {len(self.incidents)} incident(s)"]
        lines += [f"  rejected {entry}" for entry in rejected]
        lines += [f"  plan: {problem}" for problem in self.plan_problems]
        lines += [f"  note: {payload_note(note)}" for note in self.notes]
        lines += [f"  report:  {bundle_payload_dir(self.bundle_dir) / REPORT_FILE}",
                  f"  archive: {self.archive}", f"  sha256:  {self.archive_sha256}"]
        return "\n".join(lines)


def recorded_machine_names(sweep_dir: Path) -> tuple[set[str], set[str]]:
    """The user and host names the sweep's job runtimes recorded (``facts.machine``): each job's and each further
    rank's ``MACHINE_NAMES`` (a file that is not a plain JSON record of name lists, or a link, adds nothing)."""
    users: set[str] = set()
    hosts: set[str] = set()
    for job_dir in recorded_job_dirs(sweep_dir):
        for path in [job_dir / MACHINE_NAMES, *sorted((job_dir / RANKS_DIR).glob(f"rank*/{MACHINE_NAMES}"))]:
            if path.is_symlink() or not path.is_file():
                continue
            with contextlib.suppress(JSONError):
                record = read_json(path)
                if isinstance(record, dict):
                    users |= {u for u in record.get("users") or () if isinstance(u, str)}
                    hosts |= {h for h in record.get("hosts") or () if isinstance(h, str)}
    return users, hosts


def _sanitizer(sweep_dir: Path, evidences: list[JobEvidence], certified: dict[str, dict] | None = None) -> Sanitizer:
    literals = {}
    for form in {str(sweep_dir.resolve()), os.path.abspath(sweep_dir)}:
        literals[form] = "<SWEEP_DIR>"
        for evidence in evidences:
            literals[str(sweep_job_dir(form, evidence.job))] = "<JOB_DIR>"
        for name in certified or {}:  # certify=true: each certificate job's directory too
            literals[str(certify_job_dir(form, name))] = "<JOB_DIR>"
    hosts = [str(e.job_record.get("node")) for e in evidences if e.job_record.get("node")]
    for name in certified or {}:
        with contextlib.suppress(JSONError, OSError, AttributeError):
            if node := read_json(certify_job_dir(sweep_dir, name) / JOB_RECORD).get("node"):
                hosts.append(str(node))
    hosts += [h for e in evidences for h in placement_hosts(e.job_record)]  # every node of a job of several
    literals.update({a: RENDEZVOUS_ADDRESS_PLACEHOLDER for e in evidences for a in placement_addresses(e.job_record)})
    users, recorded_hosts = recorded_machine_names(sweep_dir)  # a build off the cluster knows them only so
    return Sanitizer.from_environment(literals=literals, hosts=[*hosts, *recorded_hosts], users=users)


def _unlinked(root: Path | None, path: Path) -> bool:
    """``path`` (inside the job directory ``root``) is reached without a link and is no FIFO, socket or device
    (``facts.files.linked_part``): the only way the bundle copies a job's file. The job's gate has rejected the job
    naming every other one (``evidence.gates.artifacts.check_unfollowed``), so none is dropped without a word."""
    return root is None or linked_part(root, path.relative_to(root).as_posix(), ()) is None


def _read(src: Path, root: Path | JobFiles | None) -> tuple[JobFiles | None, bytes | None]:
    """``src``'s bytes (None when it is missing or not a regular file); with ``root`` (its job directory, or the job's
    ``JobFiles``) never through a link (``_unlinked``), and a judged job's bytes held to their decision digest."""
    files = JobFiles(Path(root)) if isinstance(root, (str, Path)) else root
    if files is not None:
        return files, files.read(src)
    return None, src.read_bytes() if src.is_file() else None


def _copy_bytes(src: Path, dst: Path, root: Path | JobFiles | None = None) -> None:
    """Copy a file byte for byte (a run's responses, the evaluations it computed)."""
    files, data = _read(src, root)
    if data is not None:
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
        if files is not None:
            files.copied(src, data, dst, data)


def _copy_json(src: Path, dst: Path, clean: Sanitizer, edit=None, root: Path | JobFiles | None = None) -> None:
    """Copy a JSON file path-free: ``*_abs`` keys dropped, then sanitised; unparsable files as sanitised text.
    With ``root`` (its job directory), never through a link (``_unlinked``)."""
    files, data = _read(src, root)
    if data is None:
        return
    try:
        value = strip_abs_keys(parse_json(data))
        if edit is not None:
            value = edit(value)
        text = dumps_json(clean.clean_json(value))
    except JSONError:
        text = clean.clean(data.decode("utf-8", errors="replace"))
    write_text(dst, text)
    if files is not None:
        files.copied(src, data, dst, text.encode("utf-8"))


def _copy_text(src: Path, dst: Path, clean: Sanitizer, root: Path | JobFiles | None = None) -> None:
    files, data = _read(src, root)
    if data is not None:
        text = clean.clean(data.decode("utf-8", errors="replace"))
        write_text(dst, text)
        if files is not None:
            files.copied(src, data, dst, text.encode("utf-8"))


def _hide_node(record):
    if isinstance(record, dict) and "node" in record:
        record = {**path_free_placement(record), "node": "<HOST>"}
    return record


def _write_run_files(evidence: JobEvidence, job_dir: Path, out: Path, clean: Sanitizer, files: JobFiles) -> None:
    """data/runs/<job>/: metrics log, eval and run summaries, path-free command, job record, logs; each read through
    ``files`` (the job's, with its decision digests)."""
    run_dir = run_dir_of_job(job_dir)
    _copy_text(run_dir / METRICS_LOG, out / METRICS_LOG, clean, files)
    _copy_json(run_dir / EVAL_RECORD, out / EVAL_RECORD, clean, root=files)
    _copy_json(run_dir / RUN_RECORD, out / RUN_RECORD, clean, root=files)
    _copy_json(job_dir / COMMAND_PUBLIC_RECORD, out / COMMAND_PUBLIC_RECORD, clean, root=files)
    _copy_json(job_dir / JOB_RECORD, out / JOB_RECORD, clean, edit=_hide_node, root=files)
    _copy_text(job_dir / RESOURCE_SAMPLES, out / RESOURCE_SAMPLES, clean, files)  # the runtime's resource samples
    _copy_computed(job_dir, out, files)
    _copy_responses(evidence, job_dir, out, files)
    for attempt in sorted((job_dir / ATTEMPTS_DIR).glob("*")):  # the job's earlier attempts
        if not fits("attempt", attempt.name):  # the launcher numbers them: nothing else is one
            continue
        _copy_json(attempt / JOB_RECORD, out / ATTEMPTS_DIR / attempt.name / JOB_RECORD, clean, edit=_hide_node,
                   root=files)
        attempt_eval = run_dir_of_job(attempt) / EVAL_RECORD  # the shared evaluation it read (readers_agree)
        if attempt_eval.is_file():
            _copy_json(attempt_eval, out / ATTEMPTS_DIR / attempt.name / EVAL_RECORD, clean, root=files)
    _copy_logs(files, job_dir, out / LOGS_DIR, clean)  # the job's logs beside job.json (facts.files.JOB_LOGS)
    # A run of several ranks: each rank's step record, and the logs of the other ranks' runtimes.
    for rank_log in sorted((run_dir / RANKS_DIR).glob("rank*.jsonl")):
        if fits("rank", rank_log.stem):
            _copy_text(rank_log, out / RANKS_DIR / rank_log.name, clean, files)
    for rank_dir in sorted((job_dir / RANKS_DIR).glob("rank*")):
        if rank_dir.is_dir() and fits("rank", rank_dir.name):
            _copy_logs(files, rank_dir, out / LOGS_DIR / rank_dir.name, clean)


def _copy_computed(job_dir: Path, out: Path, root: Path | JobFiles | None = None) -> None:
    """The run's records of digests, byte for byte: the shared initial evaluations it records having computed
    (``INITIAL_EVAL_COMPUTED``: relative paths and digests, what the audit holds each shared evaluation to) and its
    data ledger (``DATA_LEDGER``: the rows each step consumed, chained, which the audit re-checks) where the run's
    carried run.json declares one: a run killed before its record declared it (run.json written at its start, or
    none) has its ledger in the sweep, not in the bundle, whose layout admits no ledger a run does not declare."""
    _copy_bytes(run_dir_of_job(job_dir) / INITIAL_EVAL_COMPUTED, out / INITIAL_EVAL_COMPUTED, root or job_dir)
    try:
        declared = LEDGER_FIELD in read_json(out / RUN_RECORD)
    except (JSONError, TypeError):
        declared = False
    if declared:
        _copy_bytes(run_dir_of_job(job_dir) / DATA_LEDGER, out / DATA_LEDGER, root or job_dir)


def _copy_logs(root: Path | JobFiles, record_dir: Path, out: Path, clean: Sanitizer) -> None:
    """The logs a job (or a further rank's runtime) keeps in ``record_dir``, the only ones the bundle's layout
    has (``JOB_LOGS``: the trainer's, the runtime's with the scheduler's output, Ray's), sanitised into ``out``;
    never through a link inside the job directory ``root``."""
    for name in JOB_LOGS:
        _copy_text(record_dir / name, out / name, clean, root)


def _write_payload(sweep, evidences: list[JobEvidence], incidents: list[Incident], stage: Path,
                   clean: Sanitizer, last_k: int, figures: bool, smallest_difference: float | None = None) -> None:
    write_text(stage / SWEEP_RECORD, dumps_json(clean.clean_json(strip_abs_keys(sweep.record))))
    settings = {"schema": SCHEMA, "last_k": last_k, "ci_level": CI_LEVEL, "n_updates": sweep.n_updates}
    if figures:  # the audit redraws the figures when its matplotlib is this one (SVG bytes depend on it)
        settings[FIGURES_DRAWN_BY] = figures_library_version()
    if smallest_difference is not None:  # the allocation's δ in points (evidence.questions); absent: as before
        settings[SMALLEST_DIFFERENCE_SETTING] = smallest_difference
    write_text(stage / SETTINGS_FILE, dumps_json(settings))
    write_csv(stage / INDEX_TABLE, INDEX_COLUMNS, clean.clean_rows([index_row(e) for e in evidences]))
    write_csv(stage / INCIDENTS_TABLE, INCIDENT_COLUMNS, clean.clean_rows([i.row() for i in incidents]))
    write_csv(stage / ARTIFACTS_TABLE, ARTIFACT_COLUMNS,
              clean.clean_rows([{"job": e.job, "path": a.path, "bytes": a.bytes, "sha256": a.sha256}
                                for e in evidences for a in e.artifacts]))
    accepted = [e for e in evidences if e.accepted]
    keys = {k for e in accepted for r in e.metrics.records for k in r}
    columns = step_columns(keys)
    write_csv(stage / STEPS_TABLE, columns,
              ({"arm": e.arm, "algo": e.algo, "seed": e.seed, **r} for e in accepted for r in sorted(e.metrics.records, key=lambda r: r["step"])))
    write_csv(stage / EVAL_TABLE, EVAL_COLUMNS,
              clean.clean_rows([{"arm": e.arm, "algo": e.algo, "seed": e.seed, "kind": kind, **e.eval_summary[kind],
                                 "initial_eval": shared_initial_dir(e.eval_summary[kind])}
                                for e in accepted for kind in EVAL_KINDS]))
    _copy_shared_initial_evals(sweep.dir, evidences, stage)
    _copy_eval_subsets(sweep.dir, evidences, stage)
    for name in (INCIDENTS_FILE, COMMANDS_FILE):
        _copy_text(sweep.dir / name, stage / name, clean)
    changed, judged = [], []  # what was judged is what is sealed (evidence.gates.judged)
    for evidence in evidences:
        job_dir = sweep_job_dir(sweep.dir, evidence.job)
        if evidence.present and job_dir.is_dir() and _unlinked(sweep.dir, job_dir):  # never a linked job directory
            out = stage / BUNDLE_RUNS_DIR / evidence.job
            files = JobFiles(job_dir, evidence.job, evidence.judged, changed, judged, out)
            _write_run_files(evidence, job_dir, out, clean, files)
    refuse_changed(changed)
    write_csv(stage / JUDGED_TABLE, JUDGED_COLUMNS, clean.clean_rows(judged))
    if certified_jobs(sweep.record):
        _write_certify_files(sweep, stage, clean)


def _write_certify_files(sweep, stage: Path, clean: Sanitizer) -> None:
    """certify=true: data/certify/<job>.<kind>/, each certificate job's copy (metrics, final responses byte for
    byte, records, logs), and data/certify/checkpoints.csv, the content digest of each file of the final checkpoint
    of every certified job and certificate job (``evidence.gates.certificate_jobs``; the checkpoints are not in the bundle)."""
    jobs = certified_jobs(sweep.record)
    rows = []
    for job in dict.fromkeys(j["of"] for j in jobs.values()):
        rows += checkpoint_rows(job, sweep_job_dir(sweep.dir, job), sweep.n_updates)
    final = eval_responses_name("final")
    for name in jobs:
        job_dir, out = certify_job_dir(sweep.dir, name), stage / CERTIFY_DIR / name
        if not job_dir.is_dir() or not _unlinked(sweep.dir, job_dir):
            continue  # never ran (or not inside the sweep): its certificate fails its run check
        run_dir = run_dir_of_job(job_dir)
        rows += checkpoint_rows(name, job_dir, sweep.n_updates)
        _copy_text(run_dir / METRICS_LOG, out / METRICS_LOG, clean, job_dir)  # never through a link: a missing
        _copy_json(run_dir / EVAL_RECORD, out / EVAL_RECORD, clean, root=job_dir)  # file fails its certificate
        _copy_json(run_dir / RUN_RECORD, out / RUN_RECORD, clean, root=job_dir)
        _copy_json(job_dir / COMMAND_PUBLIC_RECORD, out / COMMAND_PUBLIC_RECORD, clean, root=job_dir)
        _copy_json(job_dir / JOB_RECORD, out / JOB_RECORD, clean, edit=_hide_node, root=job_dir)
        _copy_computed(job_dir, out)
        source = run_dir / EVAL_RESPONSES_DIR / final
        if source.is_file() and _unlinked(job_dir, source):  # byte for byte, as a run's copy keeps them
            (out / EVAL_RESPONSES_DIR).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, out / EVAL_RESPONSES_DIR / final)
        _copy_logs(job_dir, job_dir, out / LOGS_DIR, clean)
    write_csv(stage / CERTIFY_CHECKPOINTS, CHECKPOINT_COLUMNS, rows)


def _certify(sweep, evidences: list[JobEvidence], user, stage: Path, clean: Sanitizer) -> list[Incident] | None:
    """certify=true: the certificates computed from the staged copies (as the audit recomputes them) into
    data/certificates.json, and incidents.csv again with a ``not-reproduced`` incident per failed one; returns
    the incidents (None for a sweep that certifies nothing)."""
    accepted = {e.job for e in evidences if e.accepted}
    certificates = compute_certificates(stage, read_json(stage / SWEEP_RECORD), accepted)
    if certificates is None:
        return None
    incidents = derive_incidents(evidences, user, sweep.dir, certificate_incidents(certificates))
    write_csv(stage / INCIDENTS_TABLE, INCIDENT_COLUMNS, clean.clean_rows([i.row() for i in incidents]))
    write_text(stage / CERTIFICATES_FILE, dumps_json(certificates))
    return incidents


def _copy_responses(evidence: JobEvidence, job_dir: Path, out: Path, files: JobFiles) -> None:
    """runs/<job>/eval/<kind>.jsonl: the run's evaluated responses, byte for byte (the audit re-scores them; the
    leak scan still reads them before sealing); an initial one only when the run evaluated it itself."""
    for kind in EVAL_KINDS:
        entry = (evidence.eval_summary or {}).get(kind)
        source = run_dir_of_job(job_dir) / EVAL_RESPONSES_DIR / eval_responses_name(kind)
        if isinstance(entry, dict) and shared_initial_dir(entry) is None:
            _copy_bytes(source, out / EVAL_RESPONSES_DIR / source.name, files)


def _copy_eval_subsets(sweep_dir: Path, evidences: list[JobEvidence], stage: Path) -> None:
    """data/eval_subset/<subset12>.json: each frozen evaluation subset the runs were scored against, once, byte
    for byte from the first run whose ``eval/subset.json`` hashes to its final summary's ``subset_sha256``."""
    copied: set[str] = set()
    for evidence in evidences:
        digest = ((evidence.eval_summary or {}).get("final") or {}).get("subset_sha256") if evidence.present else None
        if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest) or digest in copied:
            continue
        job_dir = sweep_job_dir(sweep_dir, evidence.job)
        source = run_dir_of_job(job_dir) / EVAL_RESPONSES_DIR / EVAL_SUBSET
        if source.is_file() and _unlinked(sweep_dir, source) and sha256_file(source) == digest:
            target = stage / bundle_subset_relpath(digest)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            copied.add(digest)


def _copy_shared_initial_evals(sweep_dir: Path, evidences: list[JobEvidence], stage: Path) -> None:
    """data/initial_eval/<key12>/: each shared initial evaluation a job references, once, byte for
    byte (the jobs' eval.json record its SHA256; the leak scan still reads it before sealing)."""
    referenced = {shared_initial_dir((e.eval_summary or {}).get("initial")) for e in evidences if e.present}
    for relpath in sorted(r for r in referenced if r):
        source, parts = sweep_dir / relpath, Path(relpath).parts
        # Only initial_eval/<name>: an absolute or escaping path is a failed eval gate, never copied.
        if len(parts) != 2 or parts[0] != INITIAL_EVAL_DIR or not fits("key12", parts[1]) or not source.is_dir() \
                or linked_part(sweep_dir, relpath) is not None:  # a link is never followed out of the sweep
            continue  # the job's eval gate has already said what is wrong with it
        for name in (EVAL_RECORD, INITIAL_EVAL_RESPONSES):
            if (source / name).is_file():
                (stage / relpath).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source / name, stage / relpath / name)


def refuse_unexpected_files(data_dir: Path, data) -> None:
    """The payload holds only files of the bundle's layout (``facts.bundle_layout``), the one the audit
    holds every bundle to: a file the layout does not state is refused here, before anything is sealed."""
    unexpected = unexpected_files(data_dir, data)
    if unexpected:
        rel, why = unexpected[0]
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise SweepError(f"the build wrote {payload_relpath(rel)}{more}: {why}; nothing sealed (state the file in "
                         "facts/bundle_layout.py, or do not write it)")


def _write_tag_file(path: Path, info: dict) -> None:
    write_text(path, "".join(f"{key}: {info[key]}\n" for key in sorted(info)))


def _write_tagmanifest(bag_dir: Path) -> None:
    # bagit lists tag files in os.listdir order; sorted lines keep rebuilds byte-identical.
    names = sorted(n for n in TAG_FILES if n != "tagmanifest-sha256.txt" and (bag_dir / n).is_file())
    write_text(bag_dir / "tagmanifest-sha256.txt", "".join(f"{sha256_file(bag_dir / n)} {n}\n" for n in names))


def make_bag(stage: Path, bag_info: dict[str, str]) -> None:
    """Turn ``stage`` (the payload) into a BagIt bag in place, deterministically."""
    logging.getLogger("bagit").setLevel(logging.WARNING)
    bagit.make_bag(str(stage), dict(bag_info), processes=1, checksums=["sha256"])
    info = {k: v for k, v in bagit.Bag(str(stage)).info.items()}
    if "Bagging-Date" not in bag_info:
        info.pop("Bagging-Date", None)
    _write_tag_file(stage / "bag-info.txt", info)
    _write_tagmanifest(stage)


def leak_scan(root: Path, clean: Sanitizer) -> tuple[list[Problem], list[Problem]]:
    """``(leaks, notes)``: every leak in every file under ``root`` (and in the file names), named by its relative
    path; what a model's response or a dataset's text holds that only looks like one is a note
    (``evidence.seal.sanitize.payload_findings``)."""
    leaks, notes = [], []
    paths = sorted(root.rglob("*"))
    rels = [path.relative_to(root).as_posix() for path in paths]
    for path, rel, name_leaks in zip(paths, rels, clean.scan_names(rels)):
        leaks += name_leaks
        if path.is_file():
            found, noted = payload_findings(rel, clean.scan_document(rel, document_text(rel, path.read_bytes())))
            leaks += found
            notes += noted
    return leaks, notes


def seal(stage: Path, bag_info: dict[str, str], clean: Sanitizer) -> list[Problem]:
    """Bag ``stage``; refuse (LeakError) if anything path- or secret-like remains; validate the bag. Returns the
    notes of the leak scan (a model's response that only looks like a leak, sealed as written)."""
    make_bag(stage, bag_info)
    leaks, notes = leak_scan(stage, clean)
    if leaks:
        raise LeakError(leaks)
    bagit.Bag(str(stage)).validate()
    return notes


def bag_files(bag_dir: Path) -> set[str]:
    """The files a sealed bag consists of: every file its manifests list, and the tag manifest."""
    return set(bagit.Bag(str(bag_dir)).entries) | {"tagmanifest-sha256.txt"}


def write_archive(bag_dir: Path, archive: Path, root_name: str = BUNDLE_DIR, expected: set[str] | None = None) -> str:
    """Deterministic ``.tar.gz`` of ``bag_dir`` under ``root_name/``; returns its SHA256. With ``expected`` (the
    sealed bag's files, ``bag_files``) an archive that does not hold exactly those is refused (``SweepError``)
    and never replaces the archive: a seal that did not complete is no archive."""
    entries = [bag_dir] + sorted(bag_dir.rglob("*"), key=lambda p: p.relative_to(bag_dir).as_posix())
    if expected is not None:
        held = {p.relative_to(bag_dir).as_posix() for p in entries[1:] if p.is_file()}
        if held != expected:
            changed = sorted(held ^ expected)
            raise SweepError(f"{bag_dir.name}/ changed after it was sealed ({len(changed)} file(s) differ, e.g. "
                             f"{changed[0]}); nothing archived: build again")
    tmp = archive.with_name(archive.name + ".tmp")
    with open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in entries:
            rel = path.relative_to(bag_dir).as_posix()
            info = tarfile.TarInfo(root_name if rel == "." else f"{root_name}/{rel}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                raise ValueError(f"{rel}: not a regular file or directory")
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, path.stat().st_size
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
    os.replace(tmp, archive)
    digest = sha256_file(archive)
    write_text(archive.with_name(archive.name + ".sha256"), f"{digest}  {archive.name}\n")
    return digest


def _bag_info(sweep, evidences: list[JobEvidence]) -> dict[str, str]:
    info = {
        "Source-Commit": sweep.source_commit or "unknown",
        "Bag-Software-Agent": SOFTWARE_AGENT,
        "External-Description": f"proofgrid evidence bundle: {sweep.record.get('workload', 'sweep')}, "
                                f"{len(sweep.algos)} algorithms x {len(sweep.seeds)} seeds, {sweep.n_updates} updates",
        "Proofgrid-Jobs-Accepted": f"{sum(e.accepted for e in evidences)}/{len(evidences)}",
    }
    if sweep.created:
        info["Bagging-Date"] = sweep.created
    return info


def refuse_jobs_in_flight(sweep_dir: Path) -> None:
    """A bundle seals finished evidence: a job whose record says it is still queued or running
    would be sealed as rejected while it may yet complete. A local job whose runtime process is
    provably gone (pid, start time and boot id no longer match) will never complete: it is
    evaluated as it stands rather than waited for."""
    for record_path in (d / JOB_RECORD for d in recorded_job_dirs(sweep_dir)):  # certificate jobs too
        try:
            record = read_json(record_path)
        except JSONError:
            continue  # an unreadable record is the artifact gates' business
        if not isinstance(record, dict):
            continue  # nor a record, the artifact gates' business too
        state = record.get("state")
        if state in IN_FLIGHT_STATES:
            if record.get("scheduler") == LOCAL and not local_runtime_alive(record):
                continue  # its runtime died without a final record: evaluated (and rejected) as it stands
            raise SweepError(
                f"job {record_path.parent.name} is still {state} according to its job.json; wait for the sweep "
                f"to end (`python -m launcher status {sweep_dir}` refreshes scheduler states), then build again"
            )




def figures_library_version() -> str:
    """The installed matplotlib's version (read from its metadata: no import)."""
    return importlib.metadata.version("matplotlib")


# Where matplotlib keeps its config and font cache, and fontconfig (which matplotlib runs) its cache.
TOOL_DIR_VARIABLES = {"MPLCONFIGDIR": "matplotlib", "XDG_CACHE_HOME": "cache", "XDG_CONFIG_HOME": "config"}


@contextlib.contextmanager
def private_tool_dirs():
    """Point the plotting tools' config and cache directories at a temporary directory while figures
    render, so that an evidence build writes nothing under ~/.cache or ~/.config (like the jobs)."""
    with tempfile.TemporaryDirectory(prefix="evidence-tools-") as tmp, \
            environment({name: os.path.join(tmp, sub) for name, sub in TOOL_DIR_VARIABLES.items()}):
        yield Path(tmp)


def build_bundle(sweep_dir: str | Path, last_k: int = DEFAULT_LAST_K, figures: bool | None = None,
                 smallest_difference: float | None = None) -> BuildResult:
    """Validate a sweep and seal ``<sweep_dir>/bundle/``, ``bundle.tar.gz`` and its ``.sha256``, holding the
    sweep's lock (``facts.locks``) throughout. ``figures``: draw the figures (None: as the launcher was told,
    ``figures=`` recorded in ``sweep.json``; drawn unless it said false).

    Raises ``SweepError`` / ``IncidentsFileError`` for an unreadable sweep, ``LeakError`` when the
    staged bag still contains a path, name or secret (nothing is sealed then), ``LockHeld`` when another
    writer of the sweep's evidence (a launcher, another build) holds its lock (nothing is written then).
    """
    sweep_dir = Path(sweep_dir)
    sweep = read_sweep(sweep_dir)
    if last_k < 1:
        raise ValueError("last_k must be at least 1")
    if figures is None:
        figures = sweep.record.get(FIGURES_FIELD) is not False
    with sweep_lock(sweep_dir, BUILD):  # one writer of the sweep's evidence at a time (the launcher's seal too)
        return _build_locked(sweep, last_k, figures, smallest_difference)


def _build_locked(sweep, last_k: int, figures: bool, smallest_difference: float | None = None) -> BuildResult:
    """``build_bundle`` while this process holds the sweep's lock."""
    sweep_dir = sweep.dir
    refuse_jobs_in_flight(sweep_dir)
    user = load_user_incidents(sweep_dir, {job_name(a, s) for a, s in sweep.jobs})
    evidences = evaluate_sweep(sweep, user.excluded_jobs)
    incidents = derive_incidents(evidences, user, sweep_dir)
    for i, entry in enumerate(user.resolutions):  # the audit names a resolution that resolves nothing
        if not any(x.source == "automatic" and x.job == entry["job"] and x.kind == entry.get("kind", x.kind)
                   and entry["resolution"] in x.resolution.split("; ") for x in incidents):
            kind = f" of kind {entry['kind']!r}" if "kind" in entry else ""
            raise IncidentsFileError(f"{INCIDENTS_FILE}: resolutions[{i}]: job {entry['job']!r} has no automatic "
                                     f"incident{kind} to resolve (remove the entry, or name the job and kind "
                                     "incidents.csv lists)")
    clean = _sanitizer(sweep_dir, evidences, certified_jobs(sweep.record))

    stage = sweep_dir / _STAGING
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        _write_payload(sweep, evidences, incidents, stage, clean, last_k, figures, smallest_difference)
        incidents = _certify(sweep, evidences, user, stage, clean) or incidents
        add_experiment(sweep_dir, stage)  # an experiment's spec and tuning stage -> data/verdict.json
        data = load_bundle_data(stage)
        refuse_failed_probe(stage, data)  # a verdict past a probe check that fails is never sealed
        write_verdict(stage, data)
        tables = compute_tables(data)
        for name, table in tables.items():
            write_text(stage / TABLES_DIR / f"{name}.csv", table.csv())
        write_text(stage / REPORT_FILE, render_report(data, tables))
        if figures:
            with private_tool_dirs():
                render_figures(data, stage / FIGURES_DIR)
        write_crate(stage, data)  # last: it names every other payload file with its digest
        refuse_unexpected_files(stage, data)
        notes = seal(stage, _bag_info(sweep, evidences), clean)
        sealed = bag_files(stage)

        bundle_dir = sweep_dir / BUNDLE_DIR
        if bundle_dir.exists():
            if not (bundle_dir / "bagit.txt").is_file() and any(bundle_dir.iterdir()):
                raise FileExistsError(f"{BUNDLE_DIR}/ exists and is not a bag; not replacing it")
            shutil.rmtree(bundle_dir)
        os.replace(stage, bundle_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    digest = write_archive(bundle_dir, sweep_dir / ARCHIVE, expected=sealed)
    return BuildResult(bundle_dir=bundle_dir, archive=sweep_dir / ARCHIVE, archive_sha256=digest,
                       jobs=[index_row(e) for e in evidences], incidents=incidents,
                       plan_problems=sweep_plan_problems(sweep_dir, sweep.record), notes=notes)
