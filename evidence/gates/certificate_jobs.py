"""Reproducibility certificates: each certificate job of a certified sweep (``certify=true``) compared with the
grid job it repeats, from the bundle's own files, so the audit recomputes every one.

A certificate job (``facts.certify``) is the original's command run again from scratch (``rerun``) or stopped
before a step and resumed by a new trainer process (``resume``). It reproduces its original when

    run          it completed (a rerun from step 0; a resume resumed at its planned step, run.json's resumed_from),
                 and its data ledger holds (``evidence.gates.ledger``: its metrics log is the one its own trainer logged),
    identity     it is a job of its own, not a copy of the original's files: its job.json is the certificate job's
                 (its certify record, its own job nonce), and each side's ledger was written by that side's own
                 processes (a start line's job nonce is its job.json's; no process's entropy draw appears on both
                 sides; a resume's ledger shows the process that resumed at the planned step),
    metrics      every step's metrics equal the original's bit for bit (within the tolerance below), ``perf/*`` aside,
    checkpoint   the final checkpoint's content digest equals the original's (``certify/checkpoints.csv``),
    responses    the final evaluation's responses equal the original's, record for record.

The first difference of each check is named (step and key; file; line and field). The tolerance depends on the
device the runs trained on, and the certificate states it and why (``tolerance``).
"""

from __future__ import annotations

import csv
import hashlib
import json
import struct
from pathlib import Path

from evidence.fileio import JSONError, read_json
from evidence.gates.ledger import check_ledger, read_ledger
from facts import checkpoint_name, loads_strict, sha256_file
from facts.certify import CERTIFY_FIELD, NOT_REPRODUCED, PERF_PREFIX, RESUME, STOP_SETTING
from facts.engines import TORCH_ENGINE, VLLM_ENGINE
from facts.files import (
    BUNDLE_RUNS_DIR,
    CERTIFY_CHECKPOINTS,
    CERTIFY_DIR,
    CHECKPOINTS_DIR,
    DATA_LEDGER,
    EVAL_RESPONSES_DIR,
    JOB_RECORD,
    METRICS_LOG,
    RESUMED_FROM_FIELD,
    RUN_RECORD,
    eval_responses_name,
    run_dir_of_job,
)
from facts.states import RUN_COMPLETED
from facts.sweep_plan import JOB_NONCE_FIELD

SCHEMA = 2
CHECKS = ("run", "identity", "metrics", "checkpoint", "responses")
CHECKPOINT_COLUMNS = ("job", "checkpoint", "file", "sha256")
FINAL = "final"
ABSENT = "<absent>"  # how a difference names a key one side does not have


# ---- the tolerance ---------------------------------------------------------------------------------------------

def tolerance(devices: set[str], engines: set[str] | None = None) -> dict:
    """The comparison's tolerance for runs trained on ``devices`` (run.json's ``config.workload.device``) with the
    rollout ``engines`` (``config.workload.engine``; an older run names none: torch), and why.

    CPU: exact, relative tolerance 0 (the trainer's kernels are deterministic at a fixed thread count).
    CUDA: also exact, relative tolerance 0: the trainer runs with ``torch.use_deterministic_algorithms(True)``
    and ``CUBLAS_WORKSPACE_CONFIG=:4096:8``, and a certificate job runs the same command on the same GPU model
    and software, so a difference is a finding, not noise; a run on another GPU model or driver is outside
    what this certifies.
    vLLM's CPU build (``engine=vllm``): also exact. Each response is its own request with its own seed, and the
    same requests give the same tokens and log-probs run to run and process to process (measured on vLLM 0.32.0:
    tests/test_engines_launch.py certifies a vLLM arm bit for bit), so a difference is a finding here too."""
    kinds = sorted({"cuda" if d.startswith("cuda") else d for d in devices})
    engines = sorted(engines or {TORCH_ENGINE})
    if kinds == ["cpu"] or not kinds:
        why = ("CPU: the trainer's kernels are deterministic at a fixed thread count, so a reproduction must be bit "
               "for bit: exact, tolerance 0")
    else:
        why = ("GPU: the trainer runs with torch.use_deterministic_algorithms(True) and CUBLAS_WORKSPACE_CONFIG=:4096:8, "
               "and each certificate job runs the same command on the same GPU model and software, so a reproduction "
               "must still be bit for bit: exact, tolerance 0 (another GPU model or driver is not what this certifies)")
    if VLLM_ENGINE in engines:
        why += ("; the vLLM engine (its CPU build) samples each response as its own request with its own seed, and the "
                "same requests give the same tokens and log-probs run to run and process to process, so it is held "
                "to the same: exact, tolerance 0")
    return {"devices": kinds, "engines": engines, "exact": True, "metrics_rel_tol": 0.0, "why": why,
            "not_compared": f"{PERF_PREFIX}* metrics (wall-clock seconds, throughput, memory: never bit-identical)"}


# ---- the comparisons ---------------------------------------------------------------------------------------------

def _same(a, b, rel_tol: float) -> bool:
    """Bit for bit (``rel_tol`` 0), else ``|a - b| <= rel_tol * max(|a|, |b|)`` for two numbers."""
    if a == b and type(a) is type(b):
        return True
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    return bool(rel_tol) and numbers and abs(a - b) <= rel_tol * max(abs(a), abs(b))


def first_metrics_difference(original: list[dict], copy: list[dict], rel_tol: float = 0.0) -> dict | None:
    """The first ``(step, key)`` where two metrics logs differ, ``perf/*`` keys aside, or None.

    Records are taken in log order and paired line by line; within a record keys are compared in sorted order.
    A step or key on one side only is a difference (its other value is None). Returns
    ``{"step", "key", "original", "copy"}`` (``key`` is ``"step"`` when the lines are of different steps)."""
    for i in range(max(len(original), len(copy))):
        a = original[i] if i < len(original) else None
        b = copy[i] if i < len(copy) else None
        step = (a or b).get("step")
        if a is None or b is None:
            return {"step": step, "key": "step", "original": None if a is None else step, "copy": None if b is None else step}
        if a.get("step") != b.get("step"):
            return {"step": a.get("step"), "key": "step", "original": a.get("step"), "copy": b.get("step")}
        for key in sorted((set(a) | set(b)) - {"step"}):
            if key.startswith(PERF_PREFIX):
                continue
            if key not in a or key not in b or not _same(a[key], b[key], rel_tol):
                return {"step": step, "key": key, "original": a.get(key), "copy": b.get(key)}
    return None


def first_response_difference(original: list[dict], copy: list[dict]) -> dict | None:
    """The first evaluated response where two evaluations differ, or None: ``{"line", "field", "original", "copy"}``
    with ``line`` 1-based in the responses file and fields compared in sorted order (``field`` is ``"line"`` when
    one file has the line and the other not)."""
    for i in range(max(len(original), len(copy))):
        a = original[i] if i < len(original) else None
        b = copy[i] if i < len(copy) else None
        if a is None or b is None:
            return {"line": i + 1, "field": "line", "original": a is not None, "copy": b is not None}
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b or a[key] != b[key] or type(a[key]) is not type(b[key]):
                return {"line": i + 1, "field": key, "original": a.get(key), "copy": b.get(key)}
    return None


def first_checkpoint_difference(original: dict[str, str], copy: dict[str, str]) -> dict | None:
    """The first file (sorted by name) whose content digest differs between two checkpoints (``{file: sha256}``),
    or None: ``{"file", "original", "copy"}`` (a file on one side only has None on the other)."""
    for name in sorted(set(original) | set(copy)):
        if original.get(name) != copy.get(name):
            return {"file": name, "original": original.get(name), "copy": copy.get(name)}
    return None


def checkpoint_digest(files: dict[str, str]) -> str | None:
    """One checkpoint's digest: SHA256 of its ``"<file> <content sha256>\\n"`` lines in file-name order; None
    without files."""
    if not files:
        return None
    return hashlib.sha256("".join(f"{name} {files[name]}\n" for name in sorted(files)).encode()).hexdigest()


# ---- what the build records of the checkpoints (they are not in the bundle) ---------------------------------------

def content_sha256(path: Path) -> str:
    """A checkpoint file's content digest. A ``.safetensors`` file: SHA256 of its header as canonical JSON (sorted
    keys) followed by its tensor bytes, so two files holding the same tensors digest the same; any other file: its
    SHA256. Why: safetensors writes its metadata (the tied weights) from a Rust HashMap in a random order; proofgrid's
    trainer sorts it (``trainer.checkpoint.sort_header_metadata``), another trainer's writer may not."""
    if path.suffix != ".safetensors":
        return sha256_file(path)
    data = path.read_bytes()
    if len(data) < 8:
        return hashlib.sha256(data).hexdigest()
    (size,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + size])
    except ValueError:
        return hashlib.sha256(data).hexdigest()
    canonical = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical + data[8 + size:]).hexdigest()


def checkpoint_rows(job: str, job_dir: Path, n_updates: int) -> list[dict]:
    """``certify/checkpoints.csv``'s rows of one job: each file of its final checkpoint and its content digest."""
    ckpt = run_dir_of_job(job_dir) / CHECKPOINTS_DIR / checkpoint_name(n_updates)
    files = sorted(p for p in ckpt.iterdir() if p.is_file() and not p.is_symlink()) if ckpt.is_dir() else []
    return [{"job": job, "checkpoint": ckpt.name, "file": p.name, "sha256": content_sha256(p)} for p in files]


# ---- reading the bundle --------------------------------------------------------------------------------------------

def _jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file; an unreadable line is a record of its own (it differs from any real one)."""
    if not path.is_file():
        return []
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = loads_strict(line)
        except ValueError:
            record = None
        records.append(record if isinstance(record, dict) else {"unreadable_line": n})
    return records


def _json(path: Path) -> dict:
    try:
        record = read_json(path)
    except (JSONError, OSError):
        return {}
    return record if isinstance(record, dict) else {}


def certified_jobs(sweep: dict) -> dict[str, dict]:
    """sweep.json's certificate jobs: ``{name: {"of", "kind", "arm", "seed"[, "stop_at_step"]}}`` (empty: none)."""
    record = sweep.get(CERTIFY_FIELD)
    jobs = record.get("jobs") if isinstance(record, dict) else None
    return jobs if isinstance(jobs, dict) else {}


def _checkpoints(data_dir: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """``certify/checkpoints.csv`` as ``{job: (checkpoint name, {file: sha256})}``."""
    path = data_dir / CERTIFY_CHECKPOINTS
    found: dict[str, tuple[str, dict[str, str]]] = {}
    if path.is_file():
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                name, files = found.setdefault(row["job"], (row["checkpoint"], {}))
                files[row["file"]] = row["sha256"]
    return found


def _workload(run: dict) -> dict:
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    return config.get("workload") if isinstance(config.get("workload"), dict) else {}


def _device(run: dict) -> str:
    return str(_workload(run).get("device") or "cpu")


def _engine(run: dict) -> str:
    return str(_workload(run).get("engine") or TORCH_ENGINE)


def _run_check(job: dict, original_accepted: bool, run: dict, job_record: dict) -> tuple[bool, str]:
    """The certificate job ran as planned: completed, from step 0 (rerun) or resumed at its stop (resume)."""
    if not original_accepted:
        return False, f"the original {job['of']} is not accepted: there is nothing to certify against"
    if run.get("status") != RUN_COMPLETED:
        state = job_record.get("state") or "no job record"
        return False, f"the certificate job did not complete (run.json status {run.get('status')!r}, job state {state})"
    resumed = run.get(RESUMED_FROM_FIELD)
    if job["kind"] == RESUME:
        stop = job.get(STOP_SETTING)
        if not isinstance(resumed, dict) or resumed.get("step") != stop:
            return False, f"planned to stop before step {stop} and resume there; run.json's resumed_from is {resumed!r}"
        return True, f"stopped before step {stop}, resumed from checkpoint {resumed.get('checkpoint')} by a new process"
    if resumed is not None:
        return False, f"a rerun must start from scratch; run.json's resumed_from is {resumed!r}"
    return True, "completed from step 0"


def _ledger_starts(records_dir: Path) -> list[dict]:
    """The start lines of a job's data ledger (one per trainer process), as the bundle's copy holds it."""
    return [start for _, start in read_ledger(records_dir / DATA_LEDGER, DATA_LEDGER).starts]


def _identity_check(job: dict, original_dir: Path, copy_dir: Path) -> tuple[bool, str]:
    """The certificate job is a job of its own: evidence a copy of the original's files does not carry (its own
    job.json, job nonce and processes), compared with the original's. A copy is refused naming what it shares."""
    original, copy = _json(original_dir / JOB_RECORD), _json(copy_dir / JOB_RECORD)
    certify = copy.get(CERTIFY_FIELD) if isinstance(copy.get(CERTIFY_FIELD), dict) else {}
    if (certify.get("of"), certify.get("kind")) != (job["of"], job["kind"]):
        return False, (f"its job.json is not the certificate job's (it records {CERTIFY_FIELD} {copy.get(CERTIFY_FIELD)!r},"
                       f" not {job['kind']} of {job['of']}): a copy of another job's records")
    nonce, theirs = copy.get(JOB_NONCE_FIELD), original.get(JOB_NONCE_FIELD)
    for side, value in (("its", nonce), ("the original's", theirs)):
        if not isinstance(value, str):
            return False, f"no {JOB_NONCE_FIELD} in {side} job.json: nothing tells the two jobs' records apart"
    if nonce == theirs:
        return False, f"its job.json carries the original's {JOB_NONCE_FIELD} {nonce[:8]}: a copy of the original's records"
    if copy.get("started_at") is not None and copy.get("started_at") == original.get("started_at"):
        return False, f"its job.json records the original's start time {copy['started_at']!r}: a copy"
    starts, their_starts = _ledger_starts(copy_dir), _ledger_starts(original_dir)
    if not starts or not their_starts:
        side = "its" if not starts else "the original's"
        return False, f"no process is recorded in {side} {DATA_LEDGER}: nothing tells its run from a copy"
    for side, own, records in (("its", nonce, starts), ("the original's", theirs, their_starts)):
        stranger = next((s.get(JOB_NONCE_FIELD) for s in records if s.get(JOB_NONCE_FIELD) != own), own)
        if stranger != own:
            return False, (f"{side} {DATA_LEDGER} was written by another job (job nonce {str(stranger)[:8]}, "
                           f"{side} job.json's {own[:8]}): a copy")
    shared = sorted(str(d) for d in {s.get("process") for s in starts} & {s.get("process") for s in their_starts})
    if shared:
        return False, (f"its {DATA_LEDGER} records a process of the original's (entropy draw {shared[0][:8]}): a copy "
                       "of the original's ledger")
    if job["kind"] == RESUME and not any(s.get("resumed_from") == job.get(STOP_SETTING) for s in starts[1:]):
        return False, (f"its {DATA_LEDGER} records no process resumed at step {job.get(STOP_SETTING)} "
                       f"(its processes started at {[s.get('resumed_from') for s in starts]})")
    return True, f"its own job (nonce {nonce[:8]}) and {len(starts)} trainer process(es) of its own"


def _said(difference: dict | None, check: str) -> str:
    """A check's first difference in words."""
    if difference is None:
        return ""
    if check == "metrics":
        return (f"metrics first differ at step {difference['step']}, key {difference['key']} "
                f"(original {difference['original']!r}, copy {difference['copy']!r})")
    if check == "checkpoint":
        return f"the final checkpoint's {difference['file']} differs (content sha256 {str(difference['original'])[:12]} vs {str(difference['copy'])[:12]})"
    return (f"the final evaluation's responses first differ at line {difference['line']}, field {difference['field']} "
            f"(original {difference['original']!r}, copy {difference['copy']!r})")


def certificate(name: str, job: dict, data_dir: Path, accepted: set[str], checkpoints: dict, rel_tol: float) -> dict:
    """One certificate job against its original, from the bundle's files (``runs/<of>/``, ``certify/<name>/``,
    ``certify/checkpoints.csv``): each check's outcome and first difference, and whether it reproduced."""
    of = job["of"]
    original_dir, copy_dir = data_dir / BUNDLE_RUNS_DIR / of, data_dir / CERTIFY_DIR / name
    run = _json(copy_dir / RUN_RECORD)
    ok, detail = _run_check(job, of in accepted, run, _json(copy_dir / JOB_RECORD))
    copy_metrics = _jsonl(copy_dir / METRICS_LOG)
    ledger = check_ledger(copy_dir, run, copy_metrics, prefix=f"{CERTIFY_DIR}/{name}/")
    if ok and ledger:
        ok, detail = False, f"its data ledger does not hold: {ledger[0]}"
    own, identity = _identity_check(job, original_dir, copy_dir)
    original_metrics = _jsonl(original_dir / METRICS_LOG)
    metrics = first_metrics_difference(original_metrics, copy_metrics, rel_tol)
    final = f"{EVAL_RESPONSES_DIR}/{eval_responses_name(FINAL)}"
    original_responses, copy_responses = _jsonl(original_dir / final), _jsonl(copy_dir / final)
    responses = first_response_difference(original_responses, copy_responses)
    ckpt_name, original_files = checkpoints.get(of, (None, {}))
    _, copy_files = checkpoints.get(name, (None, {}))
    ckpt = first_checkpoint_difference(original_files, copy_files)
    if ckpt is None and not original_files:
        ckpt = {"file": "(none)", "original": None, "copy": None}  # nothing recorded: nothing certified
    checks = {
        "run": {"ok": ok, "detail": detail},
        "identity": {"ok": own, "detail": identity},
        "metrics": {"ok": metrics is None, "steps": len(original_metrics), "first_difference": metrics},
        "checkpoint": {"ok": ckpt is None, "checkpoint": ckpt_name, "original_sha256": checkpoint_digest(original_files),
                       "copy_sha256": checkpoint_digest(copy_files), "first_difference": ckpt},
        "responses": {"ok": responses is None and bool(original_responses), "n": len(original_responses),
                      "first_difference": responses},
    }
    reproduced = all(checks[c]["ok"] for c in CHECKS)
    first = "" if reproduced else (detail if not ok else identity if not own else next(
        (_said(checks[c]["first_difference"], c) for c in CHECKS[2:] if not checks[c]["ok"]), "no responses to compare"))
    return {"certificate_job": name, "job": of, "arm": job.get("arm"), "seed": job.get("seed"), "kind": job["kind"],
            STOP_SETTING: job.get(STOP_SETTING), "reproduced": reproduced, "first_difference": first, "checks": checks}


def compute_certificates(data_dir: str | Path, sweep: dict, accepted: set[str]) -> dict | None:
    """``certificates.json`` recomputed from a payload directory (None when the sweep certifies nothing):
    the tolerance, then one certificate per certificate job in sweep.json's order. ``accepted``: the jobs the
    index accepts (a certificate against a rejected original fails its run check)."""
    jobs = certified_jobs(sweep)
    if not jobs:
        return None
    data_dir = Path(data_dir)
    devices = {_device(_json(data_dir / BUNDLE_RUNS_DIR / j["of"] / RUN_RECORD)) for j in jobs.values()}
    devices |= {_device(_json(data_dir / CERTIFY_DIR / name / RUN_RECORD)) for name in jobs}
    engines = {_engine(_json(data_dir / BUNDLE_RUNS_DIR / j["of"] / RUN_RECORD)) for j in jobs.values()}
    rule = tolerance(devices, engines)
    checkpoints = _checkpoints(data_dir)
    certificates = [certificate(name, job, data_dir, accepted, checkpoints, rule["metrics_rel_tol"])
                    for name, job in jobs.items()]
    return {"schema": SCHEMA, "tolerance": rule, "checks": list(CHECKS),
            "reproduced": f"{sum(c['reproduced'] for c in certificates)}/{len(certificates)}",
            "certificates": certificates}


# ---- what the rest of the evidence says of them -----------------------------------------------------------------

def incident_title(cert: dict) -> str:
    """The ``not-reproduced`` incident's title: which job does not reproduce which, and its first difference."""
    return f"{cert['certificate_job']} does not reproduce {cert['job']}: {cert['first_difference']}"


def certificate_incidents(certificates: dict | None) -> list[dict]:
    """One ``not-reproduced`` incident row (``evidence.gates.incidents``'s columns but the id) per failed certificate."""
    rows = []
    for cert in (certificates or {}).get("certificates", []):
        if not cert["reproduced"]:
            rows.append({"job": cert["job"], "job_id": "", "kind": NOT_REPRODUCED, "source": "automatic",
                         "title": incident_title(cert),
                         "evidence_boundary": f"{CERTIFY_DIR}/{cert['certificate_job']}/ against {BUNDLE_RUNS_DIR}/{cert['job']}/",
                         "action": f"reproducibility certificate ({cert['kind']}) failed"})
    return rows


def differences(recorded, recomputed, where: str = "") -> list[tuple[str, object, object]]:
    """Every leaf where a recorded JSON value differs from its recomputation: ``(path, recorded, recomputed)``,
    the path written ``certificates[1].checks.metrics.first_difference.step``."""
    if isinstance(recorded, dict) and isinstance(recomputed, dict):
        found = []
        for key in sorted(set(recorded) | set(recomputed), key=str):
            path = f"{where}.{key}" if where else str(key)
            if key in recorded and key in recomputed:
                found += differences(recorded[key], recomputed[key], path)
            else:  # a key on one side only
                found.append((path, recorded.get(key, ABSENT), recomputed.get(key, ABSENT)))
        return found
    if isinstance(recorded, list) and isinstance(recomputed, list) and len(recorded) == len(recomputed):
        return [d for i, (a, b) in enumerate(zip(recorded, recomputed)) for d in differences(a, b, f"{where}[{i}]")]
    same = recorded == recomputed and type(recorded) is type(recomputed)
    return [] if same else [(where, recorded, recomputed)]
