"""Artifact gates of one job: the files a finished run must have besides its metrics log.

A gate passes or fails on what is on disk. Gates: the final checkpoint is present and its
``model.safetensors`` has a well-formed safetensors header; TensorBoard events are non-empty;
``eval.json`` holds the initial-checkpoint control and the final checkpoint with the expected
number of responses (and the response files hold that many lines); a control shared by the sweep's
jobs (``<sweep>/initial_eval/<key12>/``) is complete, untampered and recomputes from its responses; the job's cleanup list is
empty; ``run.json`` says the run completed all updates; the path-free command exists.
An all-zero eval reward is a failed gate of its own kind (seed 000's rationale-label incident).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from evidence.fileio import JSONError, read_json, sha256_file
from facts import EVAL_RECORD, INITIAL_EVAL_DIR, INITIAL_EVAL_RESPONSES, SHARED_KEY_CHARS, checkpoint_name
from facts.evaluation import identity_key, pass_at_k

EVAL_KINDS = ("initial", "final")
EVAL_NUMBER_KEYS = ("pass@1", "truncation", "mean_length", "mean_reward")
# pass@j exists only when j <= k samples were drawn per prompt.
PASS_AT = (1, 2, 4)
EVAL_INT_KEYS = ("n_prompts", "k", "n_responses", "eval_seed")
EVAL_FRACTION_KEYS = ("pass@1", "pass@2", "pass@4", "truncation")
# Kinds of failed gate; incidents group by these.
ALL_ZERO_EVAL = "all-zero-eval-reward"


@dataclass(frozen=True)
class GateFailure:
    """A failed gate: which gate, which file (relative to the job directory), and why."""

    gate: str
    file: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.reason}"


@dataclass(frozen=True)
class ArtifactDigest:
    """A retained primary artifact, identified by its path in the job directory, size and SHA256."""

    path: str
    bytes: int
    sha256: str


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


def check_checkpoint(run_dir: Path, n_updates: int) -> tuple[str | None, list[GateFailure]]:
    """The final checkpoint: ``checkpoints/latest`` names ``step_<N>`` and its weights look loadable."""
    expected = checkpoint_name(n_updates)
    latest = run_dir / "checkpoints" / "latest"
    try:
        name = latest.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None, [GateFailure("checkpoint", "run/checkpoints/latest", "missing: no complete checkpoint recorded")]
    failures = []
    if name != expected:
        failures.append(GateFailure("checkpoint", "run/checkpoints/latest",
                                    f"names {name!r}, expected the final checkpoint {expected}"))
    weights = run_dir / "checkpoints" / name / "model.safetensors"
    rel = f"run/checkpoints/{name}/model.safetensors"
    if "/" in name or name in ("", ".", ".."):
        failures.append(GateFailure("checkpoint", "run/checkpoints/latest", "not a checkpoint directory name"))
    elif not weights.is_file():
        failures.append(GateFailure("checkpoint", rel, "missing"))
    else:
        problem = safetensors_problem(weights)
        if problem:
            failures.append(GateFailure("checkpoint", rel, problem))
    return name, failures


def check_tensorboard(run_dir: Path) -> list[GateFailure]:
    """At least one non-empty TensorBoard event file."""
    events = sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    if not events:
        return [GateFailure("tensorboard", "run/tensorboard", "no events.out.tfevents.* file")]
    if not any(e.is_file() and e.stat().st_size > 0 for e in events):
        return [GateFailure("tensorboard", "run/tensorboard", "event files are empty")]
    return []


def _count_json_lines(path: Path) -> int | str:
    """Number of JSON-object lines in a response file, or why it cannot be counted."""
    try:
        data = path.read_bytes()
    except OSError:
        return "missing"
    count = 0
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            # Response text may say nan, NaN, Nancy or inf: it is data inside strings, not a metric.
            if not isinstance(json.loads(raw), dict):
                return f"line {number} is not a JSON object"
        except ValueError:
            return f"line {number} is not valid JSON"
        count += 1
    return count


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def shared_initial_dir(entry) -> str | None:
    """The directory (relative to the sweep, and to a bundle's ``data/``) of the shared initial
    evaluation that an ``eval.json`` "initial" entry references, or None for a run's own."""
    shared = entry.get("shared") if isinstance(entry, dict) else None
    path = shared.get("path") if isinstance(shared, dict) else None
    return path.rpartition("/")[0] if isinstance(path, str) else None


def recompute_eval(responses: list[dict], k: int) -> dict:
    """An eval summary's statistics from its response records: pass@j per prompt (unbiased, c =
    responses with reward > 0) averaged over prompts, mean reward, mean length, truncated share;
    ``k`` is the samples per prompt (-1 when prompts differ)."""
    correct: dict = {}
    samples: dict = {}
    for r in responses:
        correct[r["index"]] = correct.get(r["index"], 0) + int(r["reward"] > 0)
        samples[r["index"]] = samples.get(r["index"], 0) + 1
    n = len(responses)
    per_prompt = set(samples.values())
    stats = {"n_responses": n, "n_prompts": len(correct), "k": per_prompt.pop() if len(per_prompt) == 1 else -1, "mean_reward": sum(r["reward"] for r in responses) / n,
             "mean_length": sum(r["length"] for r in responses) / n,
             "truncation": sum(not r["finished"] for r in responses) / n}
    for j in PASS_AT:
        if j <= k:
            stats[f"pass@{j}"] = sum(pass_at_k(k, c, j) for c in correct.values()) / len(correct)
    return stats


def check_shared_initial(root: Path, reference) -> tuple[dict | None, list[str]]:
    """A shared initial evaluation, as a job's eval.json references it (``{"path", "key", "sha256"}``;
    ``root``: the sweep directory or a bundle's ``data/``): its ``eval.json`` is there with that
    SHA256 and key, its responses are complete (the recorded SHA256, n_prompts x k lines) and its
    statistics recompute from them. Returns the shared summary and the problems found."""
    if not isinstance(reference, dict) or not all(isinstance(reference.get(f), str) for f in ("path", "key", "sha256")):
        return None, ["initial.shared needs path, key and sha256"]
    key, path = reference["key"], reference["path"]
    if path != f"{INITIAL_EVAL_DIR}/{key[:SHARED_KEY_CHARS]}/{EVAL_RECORD}":
        return None, [f"initial.shared.path {path!r} is not {INITIAL_EVAL_DIR}/<key12>/{EVAL_RECORD}"]
    record_path = root / path
    if not record_path.is_file():
        return None, ["missing (the shared initial evaluation)"]
    if sha256_file(record_path) != reference["sha256"]:
        return None, ["SHA256 differs from the one the job recorded"]
    try:
        record = read_json(record_path)
        summary = record["initial"]
        if record["key"] != key or not isinstance(summary, dict):
            return None, ["records another key"]
        if identity_key(record["identity"]) != key:  # the key names what determined the bits
            return None, ["its identity does not hash to its key"]
        responses_path = record_path.parent / INITIAL_EVAL_RESPONSES
        if sha256_file(responses_path) != record["responses_sha256"]:
            return summary, [f"{INITIAL_EVAL_RESPONSES} differs from its recorded SHA256"]
        responses = [json.loads(line) for line in responses_path.read_text(encoding="utf-8").splitlines() if line.strip()]
        recomputed = recompute_eval(responses, int(summary["k"]))
    except (JSONError, OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
        return None, [f"unreadable shared evaluation ({type(exc).__name__})"]
    problems = [f"{name} {summary.get(name)!r} does not recompute from its responses ({value!r})"
                for name, value in recomputed.items()
                if not (_is_number(summary.get(name)) and math.isclose(summary[name], value, rel_tol=1e-12, abs_tol=1e-12))]
    return summary, problems


def check_shared_sampling(root: Path, entry: dict, run_config) -> list[str]:
    """The shared initial evaluation was sampled as the run's final one: its identity's temperature,
    top_k, top_p and response cap equal the run's ``workload.eval`` (``run.json``'s config)."""
    path = (entry.get("shared") or {}).get("path") if isinstance(entry, dict) else None
    try:
        if not isinstance(path, str) or ".." in Path(path).parts or Path(path).is_absolute():
            return []  # check_shared_initial names a malformed reference
        used = read_json(root / path)["identity"]["sampling"]
        settings = run_config["workload"]["eval"]
        wanted = {"temperature": settings["temperature"], "top_k": settings["top_k"], "top_p": settings["top_p"],
                  "max_new_tokens": settings["max_response_len"]}
    except (JSONError, KeyError, TypeError):
        return []  # an unreadable record is check_shared_initial's finding; an older run.json has no config
    differing = [name for name, value in wanted.items() if used.get(name) != value]
    return [f"the shared initial evaluation was sampled with another {', '.join(differing)} than this run's "
            "final one"] if differing else []


def check_eval(run_dir: Path, final_checkpoint: str | None, expected_responses: int | None = None,
               sweep_dir: Path | None = None, shared_checks: dict | None = None
               ) -> tuple[dict | None, list[GateFailure]]:
    """``eval.json``: initial control and final checkpoint, complete, consistent, non-degenerate.

    A shared initial control is checked in ``sweep_dir`` (default: the run directory's sweep),
    once per reference when ``shared_checks`` (a dict the caller keeps) is given."""
    try:
        summary = read_json(run_dir / "eval.json")
    except JSONError as exc:
        return None, [GateFailure("eval", "run/eval.json", str(exc))]
    if not isinstance(summary, dict):
        return None, [GateFailure("eval", "run/eval.json", "not a JSON object")]
    failures: list[GateFailure] = []

    def fail(reason: str, gate: str = "eval", file: str = "run/eval.json"):
        failures.append(GateFailure(gate, file, reason))

    for kind in EVAL_KINDS:
        entry = summary.get(kind)
        if not isinstance(entry, dict):
            fail(f"no {kind!r} checkpoint entry")
            continue
        for key in EVAL_INT_KEYS:
            value = entry.get(key)
            if not isinstance(value, int) or isinstance(value, bool):
                fail(f"{kind}.{key} is not an integer")
        k_samples = entry.get("k") if isinstance(entry.get("k"), int) else 0
        for key in EVAL_NUMBER_KEYS + tuple(f"pass@{j}" for j in PASS_AT if 1 < j <= k_samples):
            if not _is_number(entry.get(key)):
                fail(f"{kind}.{key} is not a finite number")
        for key in EVAL_FRACTION_KEYS:
            if key in entry and _is_number(entry[key]) and not 0 <= entry[key] <= 1:
                fail(f"{kind}.{key} is outside [0, 1]")
        if not isinstance(entry.get("subset_sha256"), str) or not entry.get("subset_sha256"):
            fail(f"{kind}.subset_sha256 missing")
        if not isinstance(entry.get("all_zero_reward"), bool):
            fail(f"{kind}.all_zero_reward is not a boolean")
        shared_file = None
        if kind == "initial" and "shared" in entry:
            root = sweep_dir if sweep_dir is not None else run_dir.parent.parent.parent
            cache = shared_checks if shared_checks is not None else {}
            ref = entry["shared"]
            token = json.dumps(ref, sort_keys=True)
            if token not in cache:
                cache[token] = check_shared_initial(root, ref)
            shared_summary, problems = cache[token]
            shared_file = f"{shared_initial_dir(entry) or INITIAL_EVAL_DIR}/{EVAL_RECORD}"
            for problem in problems:
                fail(problem, file=shared_file)
            if shared_summary is not None and {k: v for k, v in entry.items() if k != "shared"} != shared_summary:
                fail("initial differs from the shared initial evaluation it references")
        n, n_prompts, k = entry.get("n_responses"), entry.get("n_prompts"), entry.get("k")
        if all(isinstance(v, int) for v in (n, n_prompts, k)):
            if n <= 0:
                fail(f"{kind}: no responses")
            elif n != n_prompts * k:
                fail(f"{kind}.n_responses {n} != n_prompts {n_prompts} x k {k}")
            if expected_responses is not None and n != expected_responses:
                fail(f"{kind}.n_responses {n}, expected {expected_responses}")
        if shared_file is None and all(isinstance(v, int) for v in (n, n_prompts, k)):
            counted = _count_json_lines(run_dir / "eval" / f"{kind}.jsonl")
            if isinstance(counted, str):
                fail(counted, file=f"run/eval/{kind}.jsonl")
            elif counted != n:
                fail(f"{counted} responses, eval.json says {n}", file=f"run/eval/{kind}.jsonl")
        want = "initial" if kind == "initial" else final_checkpoint
        if want is not None and entry.get("checkpoint") != want:
            fail(f"{kind}.checkpoint is {entry.get('checkpoint')!r}, expected {want!r}")
        # A weak base model may honestly score 0 on the initial control (flagged, see index.py);
        # an all-zero *final* eval means the quality metrics are unusable (seed 000's label incident).
        if kind == "final" and (entry.get("all_zero_reward") is True or entry.get("mean_reward") == 0):
            fail(f"all-zero eval reward on the {kind} checkpoint; quality metrics unusable", gate=ALL_ZERO_EVAL)

    initial, final = summary.get("initial"), summary.get("final")
    if isinstance(initial, dict) and isinstance(final, dict):
        for key in ("n_prompts", "k", "eval_seed", "subset_sha256"):
            if initial.get(key) != final.get(key):
                fail(f"initial and final differ in {key}: the control is not identically evaluated")
    return summary, failures


def check_cleanup(job_record: dict) -> list[GateFailure]:
    """The job's cleanup list (leftover processes, ports, directories) must be recorded and empty."""
    cleanup = job_record.get("cleanup")
    if not isinstance(cleanup, list):
        return [GateFailure("cleanup", "job.json", "cleanup list not recorded")]
    if cleanup:
        shown = "; ".join(str(item) for item in cleanup[:3]) + ("; …" if len(cleanup) > 3 else "")
        return [GateFailure("cleanup", "job.json", f"{len(cleanup)} leftover(s) after the job: {shown}")]
    return []


def check_run_summary(run_dir: Path, algo: str, seed: int, n_updates: int) -> tuple[dict | None, list[GateFailure]]:
    """``run.json``: the trainer's own summary agrees that the run completed all updates."""
    try:
        summary = read_json(run_dir / "run.json")
    except JSONError as exc:
        return None, [GateFailure("run", "run/run.json", str(exc))]
    if not isinstance(summary, dict):
        return None, [GateFailure("run", "run/run.json", "not a JSON object")]
    failures = []
    if summary.get("status") != "completed":
        cause = f": {summary['error']}" if isinstance(summary.get("error"), str) else ""
        failures.append(GateFailure("run", "run/run.json", f"status is {summary.get('status')!r}, not 'completed'{cause}"))
    if summary.get("steps_completed") != n_updates:
        failures.append(GateFailure("run", "run/run.json",
                                    f"steps_completed is {summary.get('steps_completed')!r}, expected {n_updates}"))
    if summary.get("algo") != algo or summary.get("seed") != seed:
        failures.append(GateFailure("run", "run/run.json",
                                    f"records {summary.get('algo')}-{summary.get('seed')}, not {algo}-{seed}"))
    return summary, failures


def check_public_command(job_dir: Path) -> tuple[dict | None, list[GateFailure]]:
    """``command.public.json``: the path-free expanded command that reproduces the job."""
    try:
        command = read_json(job_dir / "command.public.json")
    except JSONError as exc:
        return None, [GateFailure("command", "command.public.json", str(exc))]
    if not isinstance(command, dict) or not isinstance(command.get("argv"), list):
        return None, [GateFailure("command", "command.public.json", "no argv list")]
    return command, []


def primary_artifacts(job_dir: Path, checkpoint: str | None) -> list[ArtifactDigest]:
    """Digests of the retained primary artifacts that the bundle does not carry."""
    run_dir = job_dir / "run"
    paths = sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    paths += sorted((run_dir / "eval").glob("*.jsonl"))
    if checkpoint and "/" not in checkpoint and checkpoint not in ("", ".", ".."):
        ckpt = run_dir / "checkpoints" / checkpoint
        if ckpt.is_dir():
            paths += sorted(p for p in ckpt.iterdir() if p.is_file())
    return [
        ArtifactDigest(p.relative_to(job_dir).as_posix(), p.stat().st_size, sha256_file(p))
        for p in paths
        if p.is_file() and not p.is_symlink()
    ]
