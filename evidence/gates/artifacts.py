"""Artifact gates of one job: the files a finished run must have besides its metrics log.

A gate passes or fails on what is on disk. Gates: the final checkpoint is present and its
``model.safetensors`` has a well-formed safetensors header; TensorBoard events are non-empty;
``eval.json`` holds the initial-checkpoint control and the final checkpoint with the expected
number of responses (and the response files hold that many lines); a control shared by the sweep's
jobs (``<sweep>/initial_eval/<key12>/``) is complete, untampered and recomputes from its responses; the job's cleanup list is
empty; ``run.json`` says the run completed all updates; the path-free command exists.
An all-zero eval reward is a failed gate of its own kind (seed 000's rationale-label incident), and so is a
link (or a file that is not a regular one) in the job's evidence: read the one way (``facts.files.unfollowed_paths``,
the rule a shared initial evaluation is read by), it is never followed, and the job is rejected naming it.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from evidence.evaluation.rescore import RESPONSES_MISSING, read_subset, rescored_problems, statistics_problems
from evidence.evaluation.rewards import rescoring
from evidence.evaluation.subset_source import check_subset, declared_difference, subset_source
from evidence.fileio import JSONError, parse_json, read_json, read_with_sha256, sha256_file
from evidence.problems import Problem
from facts import (
    EVAL_RECORD,
    FINAL_MODEL_FIELD,
    INITIAL_EVAL_DIR,
    INITIAL_EVAL_RESPONSES,
    JOB_RUN_DIR,
    JOBS_DIR,
    checkpoint_name,
    initial_eval_relpath,
    run_dir_of_job,
    sweep_dir_of_run,
)
from facts.bundle_layout import fits
from facts.evaluation import PASS_AT, model_files, shared_evaluation_problems
from facts.files import (
    ATTEMPTS_DIR,
    BUNDLE_RUNS_DIR,
    CERTIFY_DIR,
    CHECKPOINTS_DIR,
    COMMAND_PUBLIC_RECORD,
    EVAL_RESPONSES_DIR,
    EVAL_SUBSET,
    INITIAL_EVAL_COMPUTED,
    JOB_RECORD,
    LATEST_CHECKPOINT,
    LINK_FIX,
    NEVER_FOLLOWED,
    RUN_OUTPUTS_FIELD,
    RUN_RECORD,
    TENSORBOARD_DIR,
    TENSORBOARD_EVENTS,
    WEIGHTS_FILE,
    eval_responses_name,
    is_run_output,
    linked_part,
    run_output_digests,
    run_relpath,
    unfollowed_paths,
)
from facts.states import RUN_COMPLETED
from facts.task import TASK_FIELD, Task

EVAL_KINDS = ("initial", "final")
EVAL_NUMBER_KEYS = ("pass@1", "truncation", "mean_length", "mean_reward")
EVAL_INT_KEYS = ("n_prompts", "k", "n_responses", "eval_seed")
EVAL_FRACTION_KEYS = ("pass@1", "pass@2", "pass@4", "truncation")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# Kinds of failed gate; incidents group by these.
ALL_ZERO_EVAL = "all-zero-eval-reward"
EVIDENCE_LINK = "evidence-link"  # a link, or not a regular file, in a job's evidence: never followed


@dataclass(frozen=True)
class ArtifactDigest:
    """A retained primary artifact, identified by its path in the job directory, size and SHA256."""

    path: str
    bytes: int
    sha256: str

LATEST_REL = run_relpath(CHECKPOINTS_DIR, LATEST_CHECKPOINT)


def safetensors_problem(path: Path) -> str | None:
    """Why a file does not look like a loadable safetensors file, or None.

    Reads only the header: an 8-byte little-endian length, a JSON object of tensor entries, and
    data offsets that exactly cover the rest of the file.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(8)
            if size == 0:
                return "empty file"
            if len(head) < 8:
                return "shorter than a safetensors header"
            (header_len,) = struct.unpack("<Q", head)
            if header_len == 0 or header_len > size - 8:
                return "safetensors header length out of range"
            header = json.loads(handle.read(header_len))
    except (OSError, ValueError):
        return "unreadable safetensors header"
    if not isinstance(header, dict):
        return "safetensors header is not a JSON object"
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if not tensors:
        return "safetensors file holds no tensors"
    try:
        end = max(int(v["data_offsets"][1]) for v in tensors.values())
    except (KeyError, TypeError, ValueError, IndexError):
        return "safetensors tensor entry without data_offsets"
    if end != size - 8 - header_len:
        return "safetensors data size does not match its header"
    return None


def check_checkpoint(run_dir: Path, n_updates: int) -> tuple[str | None, list[Problem]]:
    """The final checkpoint: ``checkpoints/latest`` names ``step_<N>`` and its weights look loadable."""
    expected = checkpoint_name(n_updates)
    latest = run_dir / CHECKPOINTS_DIR / LATEST_CHECKPOINT
    try:
        name = latest.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None, [Problem(LATEST_REL, "missing: no complete checkpoint recorded", kind="checkpoint")]
    failures = []
    if name != expected:
        failures.append(Problem(LATEST_REL,
                                f"names {name!r}, expected the final checkpoint {expected}", kind="checkpoint"))
    weights = run_dir / CHECKPOINTS_DIR / name / WEIGHTS_FILE
    rel = run_relpath(CHECKPOINTS_DIR, name, WEIGHTS_FILE)
    if "/" in name or name in ("", ".", ".."):
        failures.append(Problem(LATEST_REL, "not a checkpoint directory name", kind="checkpoint"))
    elif not weights.is_file():
        failures.append(Problem(rel, "missing", kind="checkpoint"))
    else:
        problem = safetensors_problem(weights)
        if problem:
            failures.append(Problem(rel, problem, kind="checkpoint"))
    return name, failures


def final_model_of(summary: dict | None) -> str | None:
    """The final model a run names in ``run.json`` (``final_model``: a trainer that is not proofgrid's,
    judged by its Hugging Face model directory, relative to the run directory), else None."""
    value = (summary or {}).get(FINAL_MODEL_FIELD) if isinstance(summary, dict) else None
    return value if isinstance(value, str) else None


def check_final_model(run_dir: Path, final_model: str) -> tuple[str | None, list[Problem]]:
    """The final model of a trainer that is not proofgrid's: a directory inside the run directory
    whose safetensors weights have well-formed headers (what the evaluator loaded)."""
    rel = run_relpath(final_model)
    parts = Path(final_model).parts
    if Path(final_model).is_absolute() or ".." in parts or not parts:
        return None, [Problem(run_relpath(RUN_RECORD), f"final_model {final_model!r} is not inside the run directory",
                              kind="checkpoint")]
    links = unfollowed_paths(run_dir, final_model)  # outside the job's walk: run/trainer/ is the trainer's own
    if links:
        return final_model, [unfollowed_problem(run_relpath(path), what) for path, what in links]
    weights = sorted((run_dir / final_model).glob("*.safetensors"))
    if not weights:
        return final_model, [Problem(rel, "missing: no *.safetensors weights in the final model", kind="checkpoint")]
    failures = []
    for path in weights:
        problem = safetensors_problem(path)
        if problem:
            failures.append(Problem(f"{rel}/{path.name}", problem, kind="checkpoint"))
    return final_model, failures


def unfollowed_problem(file: str, what: str) -> Problem:
    """The finding for ``file`` of a job's evidence that ``facts.files.not_followed`` refuses (``what`` it is)."""
    return Problem(file, f"{what}: {NEVER_FOLLOWED}; {LINK_FIX}", kind=EVIDENCE_LINK)


def check_unfollowed(job_dir: Path) -> list[Problem]:
    """Every link (or file that is not a regular one) of the job directory's evidence, walked by
    ``facts.files.unfollowed_paths``, each a failed gate naming the file: relative to the job directory, or
    ``jobs/<job>`` (relative to the sweep) when the job directory itself or ``jobs/`` is the link."""
    job_dir = Path(job_dir)
    rel = f"{job_dir.parent.name}/{job_dir.name}"
    return [unfollowed_problem(path.removeprefix(f"{rel}/"), what)
            for path, what in unfollowed_paths(job_dir.parent.parent, rel)]


def check_tensorboard(run_dir: Path) -> list[Problem]:
    """At least one non-empty TensorBoard event file."""
    events = sorted((run_dir / TENSORBOARD_DIR).glob(TENSORBOARD_EVENTS))
    if not events:
        return [Problem(run_relpath(TENSORBOARD_DIR), f"no {TENSORBOARD_EVENTS} file", kind="tensorboard")]
    if not any(e.is_file() and e.stat().st_size > 0 for e in events):
        return [Problem(run_relpath(TENSORBOARD_DIR), "event files are empty", kind="tensorboard")]
    return []


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def shared_initial_dir(entry) -> str | None:
    """The directory (relative to the sweep, and to a bundle's ``data/``) of the shared initial
    evaluation that an ``eval.json`` "initial" entry references, or None for a run's own."""
    shared = entry.get("shared") if isinstance(entry, dict) else None
    path = shared.get("path") if isinstance(shared, dict) else None
    return path.rpartition("/")[0] if isinstance(path, str) else None


@dataclass(frozen=True)
class SharedEvaluation:
    """A shared initial evaluation's ``eval.json`` as read once: the SHA256 of the bytes read (None
    when there is no file), the record parsed from those same bytes (None when unreadable), its
    summary when the record is sound enough to compare with, and the problems of the shared files
    themselves, the same whichever job references them."""

    sha256: str | None
    record: object
    summary: dict | None
    problems: tuple[str, ...]


def read_shared_evaluation(record_path: Path) -> SharedEvaluation:
    """Read, hash and validate a shared initial evaluation's ``eval.json`` and responses, each file
    read once (the bytes hashed are the bytes parsed), by ``facts.evaluation.shared_evaluation_problems``:
    the same rules the trainer applies before it reuses one."""
    try:
        data, digest = read_with_sha256(record_path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return SharedEvaluation(None, None, None, ("missing (the shared initial evaluation)",))
    except OSError as exc:
        return SharedEvaluation(None, None, None, (f"unreadable shared evaluation ({type(exc).__name__})",))
    try:
        record = parse_json(data)
        responses = (record_path.parent / INITIAL_EVAL_RESPONSES).read_bytes()
    except (JSONError, OSError) as exc:
        return SharedEvaluation(digest, None, None, (f"unreadable shared evaluation ({type(exc).__name__})",))
    summary, problems = shared_evaluation_problems(record, responses)
    return SharedEvaluation(digest, record, summary, problems)


def _reader_records(root: Path):
    """(reader, eval.json) of every run of ``root`` and of every earlier attempt of one: a sweep's
    ``jobs/<job>/run/`` and ``jobs/<job>/attempts/<n>/run/``, a bundle's ``runs/<job>/`` and
    ``runs/<job>/attempts/<n>/``; a reader is named ``<job>`` or ``<job> attempt <n>``. A record reached
    through a link is never read (its job's gate names the link)."""
    root = Path(root)

    def unlinked(paths):
        return (p for p in sorted(paths) if linked_part(root, p.relative_to(root).as_posix(), ()) is None)

    for run_eval in unlinked(root.glob(f"{JOBS_DIR}/*/{JOB_RUN_DIR}/{EVAL_RECORD}")):
        yield run_eval.parent.parent.name, run_eval
    for run_eval in unlinked(root.glob(f"{BUNDLE_RUNS_DIR}/*/{EVAL_RECORD}")):
        yield run_eval.parent.name, run_eval
    for pattern in (f"{JOBS_DIR}/*/{ATTEMPTS_DIR}/*/{JOB_RUN_DIR}/{EVAL_RECORD}",
                    f"{BUNDLE_RUNS_DIR}/*/{ATTEMPTS_DIR}/*/{EVAL_RECORD}"):
        for run_eval in unlinked(root.glob(pattern)):
            attempt = run_eval.parent.parent if run_eval.parent.name == JOB_RUN_DIR else run_eval.parent
            if fits("attempt", attempt.name):  # the launcher numbers them: nothing else is an attempt
                yield f"{attempt.parent.parent.name} attempt {attempt.name}", run_eval


def shared_readers(root: Path, path: str) -> dict[str, str]:
    """Reader -> the SHA256 its ``eval.json`` records having read the shared evaluation ``path``, for every
    run of ``root`` (a sweep's ``jobs/<job>/run/`` or a bundle's ``runs/<job>/``) that references it and
    every earlier attempt of one (``attempts/<n>/``: a re-run job's attempt read it too), named
    ``<job>`` or ``<job> attempt <n>``."""
    readers = {}
    for reader, run_eval in _reader_records(root):
        try:
            shared = read_json(run_eval).get("initial", {}).get("shared", {})
        except (JSONError, AttributeError):
            continue
        if isinstance(shared, dict) and shared.get("path") == path and isinstance(shared.get("sha256"), str):
            readers[reader] = shared["sha256"]
    return readers


def readers_agree(root: Path, path: str, shared: SharedEvaluation) -> SharedEvaluation:
    """The shared evaluation with one more problem when a run, or an earlier attempt of one, read other bytes
    than the file holds now (it was replaced after a job read it): every run is judged against the same bytes,
    so none of its readers is accepted on it, and the readers whose digest differs are named."""
    if shared.sha256 is None:
        return shared
    differ = {reader: sha for reader, sha in shared_readers(root, path).items() if sha != shared.sha256}
    if not differ:
        return shared
    named = ", ".join(f"{reader} read {sha[:12]}" for reader, sha in sorted(differ.items())[:3])
    more = f" (+{len(differ) - 3} more)" if len(differ) > 3 else ""
    return replace(shared, problems=(*shared.problems, f"replaced after a run read it: {named}{more}, the file "
                                                      f"is {shared.sha256[:12]}; no run is judged on other bytes "
                                                      f"than its readers read"))


def _computed_records(root: Path):
    """Every ``INITIAL_EVAL_COMPUTED`` of ``root``'s runs: a sweep's ``jobs/<job>/run/`` and ``certify/<job>/run/``,
    a bundle's ``runs/<job>/`` and ``certify/<job>/``."""
    for pattern in (f"{JOBS_DIR}/*/{JOB_RUN_DIR}", f"{CERTIFY_DIR}/*/{JOB_RUN_DIR}", f"{BUNDLE_RUNS_DIR}/*",
                    f"{CERTIFY_DIR}/*"):
        yield from sorted(root.glob(f"{pattern}/{INITIAL_EVAL_COMPUTED}"))


def computed_by(root: Path, path: str, sha256: str) -> list[str]:
    """The jobs of ``root`` (a sweep directory or a bundle's ``data/``) whose run records having computed the
    shared evaluation ``path`` with these ``eval.json`` bytes (a line of its ``INITIAL_EVAL_COMPUTED``)."""
    jobs = []
    for log in _computed_records(root):
        try:
            lines = log.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("path") == path and entry.get("sha256") == sha256:
                job = log.parent.parent if log.parent.name == JOB_RUN_DIR else log.parent
                jobs.append(job.name)
                break
    return jobs


def computed_by_the_sweep(root: Path, path: str, shared: SharedEvaluation) -> SharedEvaluation:
    """The shared evaluation with one more problem when no job of the sweep records having computed these bytes
    (``computed_by``): one that was in the sweep directory before its jobs, or was written there by anything but
    one of them, is never the sweep's control, and none of its readers is accepted on it."""
    if shared.sha256 is None or computed_by(root, path, shared.sha256):
        return shared
    directory = path.rpartition("/")[0]
    return replace(shared, problems=(*shared.problems, (
        f"no job of this sweep is recorded as having computed it (no run's {INITIAL_EVAL_COMPUTED} names "
        f"{shared.sha256[:12]}): a shared evaluation the sweep did not compute is never its control; remove "
        f"{directory}/ and run its jobs again")))


def check_shared_initial(root: Path, reference, checked: dict[Path, SharedEvaluation]
                         ) -> tuple[SharedEvaluation | None, list[str], list[str]]:
    """A shared initial evaluation, as a job's eval.json references it (``{"path", "key", "sha256"}``;
    ``root``: the sweep directory or a bundle's ``data/``): its ``eval.json`` is there with that
    SHA256 and key, and passes ``read_shared_evaluation`` (read once per path: ``checked`` is the
    caller's cache). Returns the shared evaluation (None when the reference is malformed), its own
    problems and the reference's (the job's); its summary is None when there is nothing sound to
    compare a job's entry with."""
    if not isinstance(reference, dict) or not all(isinstance(reference.get(f), str) for f in ("path", "key", "sha256")):
        return None, [], ["initial.shared needs path, key and sha256"]
    key, path = reference["key"], reference["path"]
    if not SHA256_HEX.fullmatch(key):  # identity_key's form; a key like ../../x would name a path outside
        return None, [], ["initial.shared.key is not a SHA256 hex digest"]
    if path != f"{initial_eval_relpath(key)}/{EVAL_RECORD}":
        return None, [], [f"initial.shared.path {path!r} is not {INITIAL_EVAL_DIR}/<key12>/{EVAL_RECORD}"]
    record_path = root / path
    if record_path not in checked:
        link = linked_part(root, initial_eval_relpath(key))
        checked[record_path] = (SharedEvaluation(None, None, None, (
            f"{link} is a symbolic link: a shared evaluation lives inside its sweep, and a link is never followed",))
            if link is not None else computed_by_the_sweep(
                root, path, readers_agree(root, path, read_shared_evaluation(record_path))))
    shared: SharedEvaluation = checked[record_path]
    if shared.sha256 is None:
        return shared, list(shared.problems), []
    if shared.sha256 != reference["sha256"]:
        return replace(shared, summary=None), list(shared.problems), [
            f"initial.shared.sha256 is not the SHA256 of {path}"]
    if isinstance(shared.record, dict) and shared.record.get("key") != key:
        return replace(shared, summary=None), list(shared.problems), [f"initial.shared.key is not the key {path} records"]
    return shared, list(shared.problems), []


def shared_control_problems(record, run_summary) -> list[str]:
    """The shared initial evaluation is this run's control: its identity names the model files the
    run pinned (run.json's ``inputs`` under ``workload.model_path``), the run's eval sampling, k and
    seed, its engine, dtype and device type, and the library versions and source commit it recorded."""
    config = run_summary.get("config") if isinstance(run_summary, dict) else None
    try:
        identity, workload = record["identity"], config["workload"]
        settings, sampling = workload["eval"], identity["sampling"]
        pairs = {  # name: (the identity's, the run's)
            "model files": (identity["model_files"], model_files(run_summary["inputs"], workload["model_path"])),
            "temperature": (sampling.get("temperature"), settings["temperature"]),
            "top_k": (sampling.get("top_k"), settings["top_k"]), "top_p": (sampling.get("top_p"), settings["top_p"]),
            "response cap": (sampling.get("max_new_tokens"), settings["max_response_len"]),
            "k": (identity["k"], settings["k"]), "eval seed": (identity["eval_seed"], settings["seed"]),
            "engine": (identity["engine"], workload["engine"]), "dtype": (identity["dtype"], workload["dtype"]),
            "device": (identity["device"], str(workload["device"]).split(":")[0]),
            "library versions": (identity["versions"], run_summary["versions"]),
            "source commit": (identity["source_commit"], run_summary["source_commit"]),
            # the prompt and reward: an identity states them unless they are the embedded default's
            "task": (identity.get(TASK_FIELD), None if Task.of(workload).is_default() else run_summary.get(TASK_FIELD))}
    except (KeyError, TypeError, AttributeError):
        if not isinstance(record, dict) or not isinstance(record.get("identity"), dict):
            return []  # an unreadable record is read_shared_evaluation's finding
        return ["run.json does not record how this run was set up (config.workload, inputs, versions, "
                "source_commit), so its shared initial control cannot be checked against it"]
    differing = [name for name, (used, wanted) in pairs.items() if used != wanted]
    return [f"the shared initial evaluation was not made with this run's {', '.join(differing)}"] if differing else []


class SharedReferenceProblems(NamedTuple):
    """What ``check_shared_reference`` found, by the file each problem belongs to."""

    shared_file: str | None  # the shared evaluation's eval.json, relative to the sweep (or a bundle's data/)
    of_shared: list[str]  # the shared evaluation's own problems: the same for every run referencing it
    of_run: list[str]  # this run's eval.json: its control sampled otherwise, or numbers not the shared ones


def check_shared_reference(root: Path, entry: dict, run_summary, checked: dict[Path, SharedEvaluation]
                           ) -> SharedReferenceProblems:
    """A run's shared initial control (its eval.json "initial" entry, with ``shared``): the shared
    evaluation in ``root`` passes ``check_shared_initial`` (read once per path: ``checked``), it is
    the run's control by ``shared_control_problems`` (``run_summary``: run.json, None if unreadable),
    and the entry's numbers are exactly its summary. Job validation and the bundle audit both call this."""
    shared, of_shared, of_run = check_shared_initial(root, entry.get("shared"), checked)
    if shared is None:  # a malformed reference names no shared file: the problem is the run's eval.json
        return SharedReferenceProblems(None, [], of_run)
    of_run += shared_control_problems(shared.record, run_summary)
    if shared.summary is not None and {k: v for k, v in entry.items() if k != "shared"} != shared.summary:
        of_run.append("initial differs from the shared initial evaluation it references")
    return SharedReferenceProblems(f"{shared_initial_dir(entry)}/{EVAL_RECORD}", of_shared, of_run)


def _field_problems(kind: str, entry: dict) -> list[str]:
    """An eval.json entry's fields: integer counts, finite numbers, fractions in [0, 1], a subset digest
    and the all-zero flag."""
    reasons = []
    for key in EVAL_INT_KEYS:
        value = entry.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            reasons.append(f"{kind}.{key} is not an integer")
    k_samples = entry.get("k") if isinstance(entry.get("k"), int) else 0
    for key in EVAL_NUMBER_KEYS + tuple(f"pass@{j}" for j in PASS_AT if 1 < j <= k_samples):
        if not _is_number(entry.get(key)):
            reasons.append(f"{kind}.{key} is not a finite number")
    for key in EVAL_FRACTION_KEYS:
        if key in entry and _is_number(entry[key]) and not 0 <= entry[key] <= 1:
            reasons.append(f"{kind}.{key} is outside [0, 1]")
    if not isinstance(entry.get("subset_sha256"), str) or not entry.get("subset_sha256"):
        reasons.append(f"{kind}.subset_sha256 missing")
    if not isinstance(entry.get("all_zero_reward"), bool):
        reasons.append(f"{kind}.all_zero_reward is not a boolean")
    return reasons


def check_eval(run_dir: Path, final_checkpoint: str | None, expected_responses: int | None = None,
               sweep_dir: Path | None = None, shared_checks: dict | None = None, run_summary=None
               ) -> tuple[dict | None, list[Problem]]:
    """``eval.json``: initial control and final checkpoint, complete, consistent, non-degenerate.

    A shared initial control is checked by ``check_shared_reference`` in ``sweep_dir`` (default:
    the run directory's sweep) against ``run_summary`` (run.json), each shared evaluation
    read once when ``shared_checks`` (a dict the caller keeps across a sweep's jobs) is given."""
    try:
        summary = read_json(run_dir / EVAL_RECORD)
    except JSONError as exc:
        return None, [Problem(run_relpath(EVAL_RECORD), str(exc), kind="eval")]
    if not isinstance(summary, dict):
        return None, [Problem(run_relpath(EVAL_RECORD), "not a JSON object", kind="eval")]
    failures: list[Problem] = []

    def fail(reason: str, kind: str = "eval", file: str = run_relpath(EVAL_RECORD)):
        failures.append(Problem(file, reason, kind=kind))

    for kind in EVAL_KINDS:
        entry = summary.get(kind)
        if not isinstance(entry, dict):
            fail(f"no {kind!r} checkpoint entry")
            continue
        for reason in _field_problems(kind, entry):
            fail(reason)
        shared = kind == "initial" and "shared" in entry  # its responses are the shared evaluation's
        if shared:
            root = sweep_dir if sweep_dir is not None else sweep_dir_of_run(run_dir)
            if root is None:
                fail(f"initial.shared: the run directory is not in a sweep (<sweep>/{JOBS_DIR}/<job>/{JOB_RUN_DIR}), "
                     "where its shared initial evaluation lives; validate the job inside its sweep")
            else:
                found = check_shared_reference(root, entry, run_summary, {} if shared_checks is None else shared_checks)
                for problem in found.of_shared:
                    fail(problem, file=found.shared_file)
                for problem in found.of_run:
                    fail(problem)
        n, n_prompts, k = entry.get("n_responses"), entry.get("n_prompts"), entry.get("k")
        if all(isinstance(v, int) for v in (n, n_prompts, k)):
            if n <= 0:
                fail(f"{kind}: no responses")
            elif n != n_prompts * k:
                fail(f"{kind}.n_responses {n} != n_prompts {n_prompts} x k {k}")
            if expected_responses is not None and n != expected_responses:
                fail(f"{kind}.n_responses {n}, expected {expected_responses}")
        failures += [replace(p, kind="eval") for p in statistics_problems(entry, run_relpath(EVAL_RECORD), kind)]
        want = "initial" if kind == "initial" else final_checkpoint
        if want is not None and entry.get("checkpoint") != want:
            fail(f"{kind}.checkpoint is {entry.get('checkpoint')!r}, expected {want!r}")
        # A weak base model may honestly score 0 on the initial control (flagged, see index.py);
        # an all-zero *final* eval means the quality metrics are unusable (seed 000's label incident).
        if kind == "final" and (entry.get("all_zero_reward") is True or entry.get("mean_reward") == 0):
            fail(f"all-zero eval reward on the {kind} checkpoint; quality metrics unusable", kind=ALL_ZERO_EVAL)

    initial, final = summary.get("initial"), summary.get("final")
    if isinstance(initial, dict) and isinstance(final, dict):
        for key in ("n_prompts", "k", "eval_seed", "subset_sha256"):
            if initial.get(key) != final.get(key):
                fail(f"initial and final differ in {key}: the control is not identically evaluated")
        root = sweep_dir if sweep_dir is not None else sweep_dir_of_run(run_dir)
        failures += [replace(p, kind="eval") for p in
                     rescore_run(run_dir, summary, root, {} if shared_checks is None else shared_checks,
                                 run_summary)]
    return summary, failures


def subset_rederived(run_dir: Path, run_summary, subset_file: str) -> list[Problem]:
    """The run's subset file against the subset cut again from the test split its ``run_summary`` (run.json)
    pins (``evidence.evaluation.subset_source``), where the split with its pinned bytes is at hand: a finding naming the
    first row that differs; [] when they agree or the split is not at hand (the trainer checked its pin before
    it ran)."""
    source = subset_source(run_summary) if isinstance(run_summary, dict) else None
    if source is None:
        return []  # check_run_summary names an unreadable run.json
    try:
        command = read_json(run_dir.parent / COMMAND_PUBLIC_RECORD)
    except JSONError:
        command = None
    declared = declared_difference(source, run_summary, command.get("argv") if isinstance(command, dict) else None)[0]
    if declared is not None:
        return [Problem(run_relpath(RUN_RECORD), declared)]
    try:
        stated = (run_dir / EVAL_RESPONSES_DIR / EVAL_SUBSET).read_bytes()
    except OSError:
        return []  # read_subset has named it
    difference = check_subset(stated, source)[0]
    return [Problem(subset_file, f"{difference}: {source.describe()}")] if difference else []


def rescore_run(run_dir: Path, summary: dict, sweep_dir: Path | None, shared_checks: dict,
                run_summary=None) -> list[Problem]:
    """Every response of the run's evaluations re-scored against its frozen subset (``run/eval/subset.json``,
    pinned by the final summary's ``subset_sha256``) and each summary recomputed from the re-scored rewards
    (``evidence.evaluation.rescore``): the final one's and the initial one's, a shared initial evaluation's responses
    in ``sweep_dir`` (its problems named under its own file), re-scored once per ``shared_checks`` (the
    cache ``check_shared_reference`` keeps across a sweep's jobs: each job's entry equals the shared one)."""
    subset_file = run_relpath(EVAL_RESPONSES_DIR, EVAL_SUBSET)
    labels, why = read_subset(run_dir / EVAL_RESPONSES_DIR / EVAL_SUBSET, summary["final"].get("subset_sha256"))
    if labels is None:
        return [Problem(subset_file, why)]
    rederived = subset_rederived(run_dir, run_summary, subset_file)
    if rederived:
        return rederived
    problems = []
    own = rescoring(run_summary, run_relpath(RUN_RECORD)).scorer  # None: a user's reward the reviewer did not pass
    for kind in EVAL_KINDS:
        entry = summary[kind]
        shared_dir = shared_initial_dir(entry) if kind == "initial" else None
        scorer = own
        if shared_dir is None:
            name = run_relpath(EVAL_RESPONSES_DIR, eval_responses_name(kind))
            path, summary_file = run_dir / EVAL_RESPONSES_DIR / eval_responses_name(kind), run_relpath(EVAL_RECORD)
        elif sweep_dir is None or not fits("key12", Path(shared_dir).name):
            continue  # check_eval has said where its shared evaluation must be
        else:
            name = f"{shared_dir}/{INITIAL_EVAL_RESPONSES}"
            path, summary_file = sweep_dir / name, f"{shared_dir}/{EVAL_RECORD}"
        cached = path if shared_dir is not None else None  # keyed by its file, as check_shared_reference's
        if cached in shared_checks:
            problems += shared_checks[cached]
            continue
        stated = {k: v for k, v in entry.items() if k != "shared"}
        if cached is not None:  # the shared file's own summary: the run's copy of it is check_shared_reference's
            shared = shared_checks.get(sweep_dir / shared_dir / EVAL_RECORD)
            if shared is not None and shared.summary is not None:
                stated = shared.summary
            record = shared.record if shared is not None else None
            scorer = rescoring(record.get("identity") if isinstance(record, dict) else None, name).scorer
        if scorer is None:
            continue  # not re-derived without the reviewer's function (evidence.evaluation.rewards): the audit says so
        try:
            found = rescored_problems(stated, path.read_bytes(), labels, name, summary_file, kind, scorer)
        except OSError:
            found = [Problem(name, RESPONSES_MISSING)]
        if cached is not None:
            shared_checks[cached] = found
        problems += found
    return problems


def check_cleanup(job_record: dict) -> list[Problem]:
    """The job's cleanup list (leftover processes, ports, directories) must be recorded and empty."""
    cleanup = job_record.get("cleanup")
    if not isinstance(cleanup, list):
        return [Problem(JOB_RECORD, "cleanup list not recorded", kind="cleanup")]
    if cleanup:
        shown = "; ".join(str(item) for item in cleanup[:3]) + ("; …" if len(cleanup) > 3 else "")
        return [Problem(JOB_RECORD, f"{len(cleanup)} leftover(s) after the job: {shown}", kind="cleanup")]
    return []


OUTPUTS_KIND = "outputs"  # a run record that is not what the job's runtime left once nothing of the job ran


def check_run_outputs(job_record: dict, run_dir: Path, job_digests: dict[str, str] | None = None) -> list[Problem]:
    """The run's records are what the job's runtime hashed once nothing of the job ran any more (job.json's
    ``run_outputs_sha256``, ``facts.files.run_output_digests``): one that changed, appeared or went since was written
    by something outside the job's life (a process that escaped it, a hand edit), and the job is rejected naming it.
    A record that states no digests (a runtime before them, a job that never ran) is held to nothing here.
    ``job_digests``: the build's digests of the job directory's files (``evidence.gates.judged.job_file_digests``, keyed
    relative to the job directory), read instead of hashing the run's records a second time."""
    recorded = job_record.get(RUN_OUTPUTS_FIELD)
    if recorded is None:
        return []
    if not isinstance(recorded, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in recorded.items()):
        return [Problem(JOB_RECORD, f"{RUN_OUTPUTS_FIELD} is not a map of file to SHA256", kind=OUTPUTS_KIND)]
    if job_digests is None:
        found = run_output_digests(run_dir)
    else:
        prefix = f"{run_dir.name}/"
        found = {rel[len(prefix):]: digest for rel, digest in job_digests.items()
                 if rel.startswith(prefix) and is_run_output(rel[len(prefix):])}
    problems = []
    for name in sorted(set(recorded) | set(found)):
        if recorded.get(name) == found.get(name):
            continue
        how, then = (("appeared", "no such file") if name not in recorded else ("is gone", recorded[name][:12] + "…")
                     if name not in found else ("changed", f"{recorded[name][:12]}…, it now hashes {found[name][:12]}…"))
        problems.append(Problem(run_relpath(name), f"{how} after the job ended (job.json's {RUN_OUTPUTS_FIELD}: {then}):"
                                " something outside the job wrote its evidence", kind=OUTPUTS_KIND))
    return problems


def check_run_summary(run_dir: Path, algo: str, seed: int, n_updates: int) -> tuple[dict | None, list[Problem]]:
    """``run.json``: the trainer's own summary agrees that the run completed all updates."""
    try:
        summary = read_json(run_dir / RUN_RECORD)
    except JSONError as exc:
        return None, [Problem(run_relpath(RUN_RECORD), str(exc), kind="run")]
    if not isinstance(summary, dict):
        return None, [Problem(run_relpath(RUN_RECORD), "not a JSON object", kind="run")]
    failures = []
    if summary.get("status") != RUN_COMPLETED:
        cause = f": {summary['error']}" if isinstance(summary.get("error"), str) else ""
        failures.append(Problem(run_relpath(RUN_RECORD), f"status is {summary.get('status')!r}, not {RUN_COMPLETED!r}{cause}", kind="run"))
    if summary.get("steps_completed") != n_updates:
        failures.append(Problem(run_relpath(RUN_RECORD),
                                f"steps_completed is {summary.get('steps_completed')!r}, expected {n_updates}", kind="run"))
    if summary.get("algo") != algo or summary.get("seed") != seed:
        failures.append(Problem(run_relpath(RUN_RECORD),
                                f"records {summary.get('algo')}-{summary.get('seed')}, not {algo}-{seed}", kind="run"))
    return summary, failures


def check_public_command(job_dir: Path) -> tuple[dict | None, list[Problem]]:
    """``command.public.json``: the path-free expanded command that reproduces the job."""
    try:
        command = read_json(job_dir / COMMAND_PUBLIC_RECORD)
    except JSONError as exc:
        return None, [Problem(COMMAND_PUBLIC_RECORD, str(exc), kind="command")]
    if not isinstance(command, dict) or not isinstance(command.get("argv"), list):
        return None, [Problem(COMMAND_PUBLIC_RECORD, "no argv list", kind="command")]
    return command, []


def primary_artifacts(job_dir: Path, checkpoint: str | None) -> list[ArtifactDigest]:
    """Digests of the retained primary artifacts that the bundle does not carry."""
    run_dir = run_dir_of_job(job_dir)
    paths = sorted((run_dir / TENSORBOARD_DIR).glob(TENSORBOARD_EVENTS))
    paths += sorted((run_dir / EVAL_RESPONSES_DIR).glob("*.jsonl"))
    if checkpoint and "/" not in checkpoint and checkpoint not in ("", ".", ".."):
        ckpt = run_dir / CHECKPOINTS_DIR / checkpoint
    elif checkpoint and ".." not in Path(checkpoint).parts and not Path(checkpoint).is_absolute():
        ckpt = run_dir / checkpoint  # an external trainer's final model (run.json's final_model)
    else:
        ckpt = None
    if ckpt is not None and ckpt.is_dir():
        paths += sorted(p for p in ckpt.iterdir() if p.is_file())
    return [
        ArtifactDigest(p.relative_to(job_dir).as_posix(), p.stat().st_size, sha256_file(p))
        for p in paths
        if p.is_file() and linked_part(job_dir, p.relative_to(job_dir).as_posix(), ()) is None
    ]
