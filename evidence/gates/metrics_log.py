"""Structured finite-metric validation of ``metrics.jsonl``.

The log is validated as data, never with patterns over its text: seed 000 lost a good job to a
``loss...nan`` regex that matched "Nancy" in generated text. Each line is parsed with
``json.loads``; ``parse_constant`` turns the non-standard ``NaN``/``Infinity``/``-Infinity``
spellings into a marker so that the violation can name the key, and every value is then checked
to be a finite number (bool, null and strings are not numbers, whatever they spell).

Read in bounded memory: only the first ``n_updates + 1`` lines are parsed (a longer log is a violation
without reading the rest). Rules (docs/run-directory.md): one JSON object per line; ``step`` runs 0..N-1 with no gap or
repeat; N equals the configured number of updates; every key the run declares in its own
``run.json`` (``metric_keys``) is present, and ``train/kl_loss`` is absent when not declared; for an
older run without that list, ``train/kl_loss`` is required when the algorithm's shipped config logs a
KL loss and must be absent when it does not (``facts.KL_LOSS_BY_ALGO``, from the records; e.g. k1
inside the reward); a run whose rollout engine is not ``torch`` carries the training–inference mismatch keys
(``facts.metrics.MISMATCH_KEYS``) whether it declares them or not; a truncated last line is reported as such. Every violation names the file, line,
step and key.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from evidence.problems import Problem
from facts import KL_LOSS_BY_ALGO, KL_LOSS_KEY, METRIC_KEYS_FIELD, RUN_RECORD
from facts.engines import TORCH_ENGINE
from facts.files import TRAINER_FIELD
from facts.metrics import CONTRACT_KEYS, MISMATCH_KEYS
from facts.trainers import PROOFGRID_TRAINER


def required_keys(algo: str, declared: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The metric keys every step of ``algo`` must carry (``step`` excluded): those the run
    declares when it does, else what the algorithm's shipped config logs."""
    if declared is not None:
        return declared
    if KL_LOSS_BY_ALGO.get(algo, False):
        return CONTRACT_KEYS
    return tuple(k for k in CONTRACT_KEYS if k != KL_LOSS_KEY)


def declared_metric_keys(run_dir: Path) -> tuple[str, ...] | None:
    """The keys the run says it logs (``run.json`` beside the log), or None for older runs; a run whose rollout
    engine is not the trainer's own (``config.workload.engine``) must log the mismatch keys too, declared or not."""
    try:
        record = json.loads((run_dir / RUN_RECORD).read_text(encoding="utf-8"))
        keys = record.get(METRIC_KEYS_FIELD)
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(keys, list) and keys and all(isinstance(k, str) for k in keys):
        return tuple(dict.fromkeys((*keys, *engine_required_keys(record))))
    return None


def engine_required_keys(record: dict) -> tuple[str, ...]:
    """The keys a run's rollout engine makes required: ``MISMATCH_KEYS`` when a run of proofgrid's trainer names an
    engine other than ``torch`` in run.json (``config.workload.engine``), none otherwise (another trainer's run,
    whose run.json's ``trainer`` names it, generates with its own means)."""
    trainer = record.get(TRAINER_FIELD)
    if isinstance(trainer, dict) and trainer.get("name") != PROOFGRID_TRAINER:
        return ()
    workload = (record.get("config") or {}).get("workload") if isinstance(record.get("config"), dict) else None
    engine = workload.get("engine") if isinstance(workload, dict) else None
    return MISMATCH_KEYS if isinstance(engine, str) and engine != TORCH_ENGINE else ()


@dataclass(frozen=True)
class Violation:
    """One broken rule, located as precisely as the log allows."""

    file: str
    line: int | None
    step: int | None
    key: str | None
    reason: str

    def location(self) -> str:
        """``line 4, step 3, key train/loss`` (the parts that are known)."""
        parts = []
        if self.line is not None:
            parts.append(f"line {self.line}")
        if self.step is not None:
            parts.append(f"step {self.step}")
        if self.key is not None:
            parts.append(f"key {self.key}")
        return ", ".join(parts)

    def detail(self) -> str:
        """Location and reason, without the file name."""
        location = self.location()
        return f"{location}: {self.reason}" if location else self.reason

    def __str__(self) -> str:
        return f"{self.file}: {self.detail()}"

    def problem(self) -> Problem:
        """The violation as the evidence's one problem shape: its location is where in the file (the metrics gate's)."""
        return Problem(self.file, self.reason, where=self.location(), kind="metrics")


@dataclass
class MetricsLog:
    """The parsed log: clean records in file order, every violation, and the valid step prefix."""

    file: str
    records: list[dict] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    valid_steps: int = 0  # length of the longest clean prefix of steps 0..k-1
    n_updates: int | None = None

    @property
    def ok(self) -> bool:
        return not self.violations


class _NonFinite:
    """Marker for a bare NaN / Infinity / -Infinity token in the JSON text."""

    __slots__ = ("spelling",)

    def __init__(self, spelling: str):
        self.spelling = spelling


class _Object(dict):
    """A JSON object that remembers keys it saw more than once."""

    duplicates: tuple[str, ...] = ()


def _object_hook(pairs):
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        obj.duplicates = tuple(k for k, _ in pairs if k in seen or seen.add(k))
    return obj


def _value_problem(value) -> str | None:
    """Why ``value`` is not a finite JSON number, or None if it is one."""
    if isinstance(value, _NonFinite):
        return f"non-finite number {value.spelling}"
    if isinstance(value, bool):  # bool is an int subclass in Python, but not a metric
        return f"boolean {json.dumps(value)} is not a number"
    if isinstance(value, int):
        # Tables, statistics and figures compute in floats: an integer no float holds is no metric.
        return None if abs(value) <= sys.float_info.max else f"integer {str(value)[:12]}… too large for a float"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"non-finite number {value!r} (overflow)"
    if value is None:
        return "null is not a number"
    if isinstance(value, str):
        shown = value if len(value) <= 24 else value[:24] + "…"
        return f"string {json.dumps(shown)} is not a number"
    return f"{type(value).__name__} is not a number"


def parse_line(text: str):
    """Parse one log line; bare NaN/Infinity come back as markers, never as floats."""
    return json.loads(text, parse_constant=_NonFinite, object_pairs_hook=_object_hook)


def validate_metrics(path: str | Path, algo: str, n_updates: int | None, name: str | None = None) -> MetricsLog:
    """Validate ``metrics.jsonl`` of one run of ``algo`` that should hold ``n_updates`` steps.

    ``name`` is how the file is called in violations (default: its file name), so that
    messages stay path-free.
    """
    path = Path(path)
    log = MetricsLog(file=name or path.name, n_updates=n_updates)
    try:
        data, beyond = _head(path, n_updates)
    except OSError as exc:
        log.violations.append(Violation(log.file, None, None, None, f"unreadable: {exc.strerror}"))
        return log
    validate_lines(data, algo, n_updates, log, declared_metric_keys(path.parent))
    if beyond is not None:
        log.violations.append(Violation(log.file, *beyond))
    return log


LINE_MAX_BYTES = 1 << 20  # no metrics line is longer


def _head(path: Path, n_updates: int | None) -> tuple[bytes, tuple | None]:
    """The log's first ``n_updates + 1`` lines (every line a run of ``n_updates`` steps writes, and the one
    after, itself a violation), and where reading stopped early as ``(line, step, key, reason)`` (None: all
    read). A log of 10^6 lines for 4 updates is judged on its first 5, in bounded memory; without
    ``n_updates`` it is read whole."""
    with open(path, "rb") as f:
        if n_updates is None:
            return f.read(), None
        lines = []
        while len(lines) <= n_updates:
            line = f.readline(LINE_MAX_BYTES + 1)
            if not line:
                return b"".join(lines), None
            if len(line) > LINE_MAX_BYTES:
                return b"".join(lines), (len(lines) + 1, None, None,
                                         f"longer than {LINE_MAX_BYTES} bytes, no metrics line: not read further")
            lines.append(line)
        if not f.read(1):
            return b"".join(lines), None
        return b"".join(lines), (len(lines) + 1, None, None, f"the log goes on past line {len(lines)}, and a run of "
                                 f"{n_updates} updates logs {n_updates} lines: not read further")


def validate_lines(data: bytes, algo: str, n_updates: int | None, log: MetricsLog,
                   declared: tuple[str, ...] | None = None) -> None:
    """Validate the raw bytes of a metrics log into ``log`` (records, violations, valid prefix)."""
    required = required_keys(algo, declared)
    kl_forbidden = KL_LOSS_KEY not in declared if declared is not None else KL_LOSS_BY_ALGO.get(algo) is False
    lines = data.split(b"\n")
    ends_with_newline = lines[-1] == b""
    if ends_with_newline:
        lines.pop()
    expected_step = 0
    seen_steps: set[int] = set()
    clean_prefix = True
    add = log.violations.append

    for number, raw in enumerate(lines, start=1):
        is_last = number == len(lines)
        before = len(log.violations)
        try:
            obj = parse_line(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            if is_last and not ends_with_newline:
                add(Violation(log.file, number, None, None, "truncated last line (incomplete JSON, no newline)"))
            elif not raw.strip():
                add(Violation(log.file, number, None, None, "empty line"))
            else:
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
                add(Violation(log.file, number, None, None, f"not valid JSON ({reason})"))
            clean_prefix = False
            continue
        if not isinstance(obj, dict):
            add(Violation(log.file, number, None, None, f"not a JSON object ({type(obj).__name__})"))
            clean_prefix = False
            continue

        step = obj.get("step")
        step_ok = isinstance(step, int) and not isinstance(step, bool)
        shown_step = step if step_ok else None
        for key in obj.duplicates:
            add(Violation(log.file, number, shown_step, key, "key appears more than once"))
        if "step" not in obj:
            add(Violation(log.file, number, None, "step", "missing"))
        elif not step_ok:
            add(Violation(log.file, number, None, "step", _value_problem(step) or "not an integer"))
        for key in required:
            if key not in obj:
                add(Violation(log.file, number, shown_step, key, "missing"))
        if kl_forbidden and KL_LOSS_KEY in obj:
            add(Violation(log.file, number, shown_step, KL_LOSS_KEY, f"must be absent for {algo} (its KL is not a separate loss)"))
        for key, value in obj.items():
            if key == "step":
                continue
            problem = _value_problem(value)
            if problem is not None:
                add(Violation(log.file, number, shown_step, key, problem))

        if step_ok:
            if step in seen_steps:
                add(Violation(log.file, number, step, "step", "repeated step"))
            elif step < expected_step:
                add(Violation(log.file, number, step, "step", f"out of order (after step {expected_step - 1})"))
            elif step > expected_step:
                missing = str(expected_step) if step == expected_step + 1 else f"{expected_step}..{step - 1}"
                add(Violation(log.file, number, step, "step", f"missing step {missing} before this line"))
            if n_updates is not None and step >= n_updates and step not in seen_steps:
                add(Violation(log.file, number, step, "step", f"beyond the configured {n_updates} updates"))
            seen_steps.add(step)
            expected_step = max(expected_step, step + 1)

        if len(log.violations) == before:
            log.records.append(dict(obj))
            if clean_prefix and step == log.valid_steps:
                log.valid_steps += 1
        else:
            clean_prefix = False

    if n_updates is not None:
        missing = sorted(set(range(n_updates)) - seen_steps)
        if missing:
            add(Violation(log.file, None, None, "step",
                          f"{n_updates - len(missing)} of {n_updates} steps present; missing step {_ranges(missing)}"))


def _ranges(numbers: list[int], limit: int = 5) -> str:
    """``[2, 5, 6, 7]`` -> ``2, 5..7`` (the first ``limit`` runs)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    shown = [str(a) if a == b else f"{a}..{b}" for a, b in runs[:limit]]
    return ", ".join(shown) + (", …" if len(runs) > limit else "")
