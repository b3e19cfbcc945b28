"""Artifact gates of one job: the files a finished run must have besides its metrics log.

A gate passes or fails on what is on disk. Gates: the final checkpoint is present and its
``model.safetensors`` has a well-formed safetensors header; TensorBoard events are non-empty;
``eval.json`` passes every gate of the one judge of an evaluation (``evidence.evaluation.judge``, which the
audit runs on the bundle's copies too), read here from the run directory (``job_evaluation``); the job's cleanup
list is empty; ``run.json`` says the run completed all updates; the path-free command exists.
A link (or a file that is not a regular one) in the job's evidence: read the one way (``facts.files.unfollowed_paths``,
the rule a shared initial evaluation is read by), it is never followed, and the job is rejected naming it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from evidence.evaluation.judge import Evaluation, evaluation_problems
from evidence.fileio import JSONError, read_json, sha256_file
from evidence.problems import Problem
from facts import (
    EVAL_RECORD,
    FINAL_MODEL_FIELD,
    checkpoint_name,
    run_dir_of_job,
    sweep_dir_of_run,
)
from facts.files import (
    CHECKPOINTS_DIR,
    COMMAND_PUBLIC_RECORD,
    EVAL_RESPONSES_DIR,
    EVAL_SUBSET,
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

# A kind of failed gate; incidents group by these (an evaluation's: evidence.evaluation.judge's).
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


def job_evaluation(run_dir: Path, final_checkpoint: str | None, expected_responses: int | None = None,
                   sweep_dir: Path | None = None, shared_checks: dict | None = None, run_summary=None) -> Evaluation:
    """The run's evaluation as the judge reads it (``evidence.evaluation.judge``), from the job's run directory:
    ``eval.json``, ``run_summary`` (run.json), the job's command (``command.public.json``), the run's responses and
    frozen subset under ``eval/``, its shared initial evaluation in ``sweep_dir`` (default: the run directory's
    sweep), each shared evaluation read once when ``shared_checks`` (a dict the caller keeps across a sweep's
    jobs) is given. Findings name files relative to the job directory (a shared evaluation's: to the sweep)."""
    try:
        record, error = read_json(run_dir / EVAL_RECORD), None
    except JSONError as exc:
        record, error = None, str(exc)
    try:
        command = read_json(run_dir.parent / COMMAND_PUBLIC_RECORD)
    except JSONError:
        command = None
    subset = (run_dir / EVAL_RESPONSES_DIR / EVAL_SUBSET, run_relpath(EVAL_RESPONSES_DIR, EVAL_SUBSET))
    return Evaluation(
        record=record, record_file=run_relpath(EVAL_RECORD), run_record=run_summary,
        run_record_file=run_relpath(RUN_RECORD), argv=command.get("argv") if isinstance(command, dict) else None,
        final_checkpoint=final_checkpoint,
        responses=lambda kind: (run_dir / EVAL_RESPONSES_DIR / eval_responses_name(kind),
                                run_relpath(EVAL_RESPONSES_DIR, eval_responses_name(kind))),
        subset=lambda _digest: subset, shared_root=sweep_dir if sweep_dir is not None else sweep_dir_of_run(run_dir),
        shared_checks={} if shared_checks is None else shared_checks, expected_responses=expected_responses,
        record_error=error)


def check_eval(run_dir: Path, final_checkpoint: str | None, expected_responses: int | None = None,
               sweep_dir: Path | None = None, shared_checks: dict | None = None, run_summary=None
               ) -> tuple[dict | None, list[Problem]]:
    """``eval.json``: the run's evaluation judged by every gate of ``evidence.evaluation.judge.GATES``
    (``job_evaluation`` says what it is read from). Returns eval.json's record (None when it is not an object)
    and the problems."""
    evaluation = job_evaluation(run_dir, final_checkpoint, expected_responses, sweep_dir, shared_checks, run_summary)
    record = evaluation.record if isinstance(evaluation.record, dict) else None
    return record, evaluation_problems(evaluation)


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
