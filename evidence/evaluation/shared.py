"""A shared initial evaluation (``<sweep>/initial_eval/<key12>/``, a bundle's ``data/initial_eval/<key12>/``) as a
run's eval.json references it: read and hashed once, complete and recomputing from its responses
(``facts.evaluation.shared_evaluation_problems``, the trainer's rule before it reuses one), computed by a job of the
sweep, read by every reader with the bytes it holds now, and this run's control. The judge of an evaluation
(``evidence.evaluation.judge``, its ``eval-shared`` gate) calls ``check_shared_reference`` for the build and the
audit alike."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from evidence.fileio import JSONError, parse_json, read_json, read_with_sha256
from facts import (
    EVAL_RECORD,
    INITIAL_EVAL_DIR,
    INITIAL_EVAL_RESPONSES,
    JOB_RUN_DIR,
    JOBS_DIR,
    initial_eval_relpath,
)
from facts.bundle_layout import fits
from facts.evaluation import model_files, shared_evaluation_problems
from facts.files import ATTEMPTS_DIR, BUNDLE_RUNS_DIR, CERTIFY_DIR, INITIAL_EVAL_COMPUTED, linked_part
from facts.task import TASK_FIELD, Task

SHA256_HEX = re.compile(r"[0-9a-f]{64}")


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
