"""An external trainer's own metric log (TensorBoard event files, or JSONL with a named step key) as
proofgrid's per-step records, every point read, nothing repaired.

``read_log`` reads every scalar the trainer wrote (TensorBoard's own event loader, through
``evidence.tensorboard_log``: no 1,000-point reservoir sample; a JSONL file line by line). ``to_records``
renames the mapped tags to proofgrid's metric names and shifts their steps by the spec's offset; the
records are then written as ``metrics.jsonl`` and judged by the evidence's validator exactly as
proofgrid's own (finite, every step, the declared count). So that the validator sees what the trainer
wrote, nothing is repaired on the way: a NaN stays NaN, a step the trainer did not log is absent, a
step it logged twice in one file gives two records. A step written again in a *later* file (a trainer
resumed from a checkpoint older than its last logged step) replaces the earlier write, as TensorBoard
shows it and as proofgrid's own log does when it resumes; the record lists such steps.

Refused here (one line, the job fails): a mapped tag the trainer never wrote (the line lists the tags
it did write), and a log that cannot be read whole (a TensorBoard file truncated mid-record, a JSONL
line that is not an object or has no integer step).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trainer.external.spec import MetricsSpec


class MetricsError(RuntimeError):
    """The trainer's log cannot be turned into per-step records (one line: what, where, and what it wrote)."""


@dataclass(frozen=True)
class Point:
    step: int
    value: float
    file: str


@dataclass
class TrainerLog:
    """Every scalar point of the trainer's log, per tag in file order, and its files."""

    where: str  # the log's path relative to the trainer's output directory
    points: dict[str, list[Point]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def written(self) -> str:
        tags = sorted(self.points)
        return f"{', '.join(tags)} ({len(tags)} tags)" if tags else "no scalar at all"


def read_log(spec: MetricsSpec, trainer_out: Path) -> TrainerLog:
    """Every point of the log the spec names under ``trainer_out``; raises ``MetricsError``."""
    path = trainer_out / spec.path
    return _read_tensorboard(path, spec.path) if spec.format == "tensorboard" else _read_jsonl(path, spec)


def _read_tensorboard(directory: Path, where: str) -> TrainerLog:
    from evidence.tensorboard_log import read_scalars

    scalars = read_scalars(directory)
    if scalars.problems:
        problem = scalars.problems[0]
        more = f" (and {len(scalars.problems) - 1} more)" if len(scalars.problems) > 1 else ""
        raise MetricsError(f"the trainer's TensorBoard log {where}: {problem}{more}")
    log = TrainerLog(where, files=list(scalars.files))
    for tag, points in scalars.scalars.items():
        log.points[tag] = [Point(p.step, p.value, p.file) for p in points]
    return log


def _read_jsonl(path: Path, spec: MetricsSpec) -> TrainerLog:
    """One JSON object per line, ``spec.step_key`` its step; every other numeric key a scalar (NaN and
    infinities as Python writes them are kept)."""
    log = TrainerLog(spec.path, files=[path.name])
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise MetricsError(f"the trainer's metrics log {spec.path} cannot be read ({exc.strerror or exc}); "
                           "it wrote no log where the spec's metrics.path says") from None
    if lines and lines[-1] == b"":
        lines.pop()
    for number, raw in enumerate(lines, start=1):
        try:
            obj = json.loads(raw)
        except ValueError:
            last = number == len(lines)
            raise MetricsError(f"the trainer's metrics log {spec.path}: line {number} is not JSON"
                               f"{' (a truncated last line)' if last else ''}") from None
        step = obj.get(spec.step_key) if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or isinstance(step, bool) or not isinstance(step, int):
            raise MetricsError(f"the trainer's metrics log {spec.path}: line {number} is not an object with an "
                               f"integer {spec.step_key!r} (metrics.step_key)")
        for key, value in obj.items():
            if key != spec.step_key and isinstance(value, (int, float)) and not isinstance(value, bool):
                log.points.setdefault(key, []).append(Point(step, float(value), path.name))
    return log


@dataclass
class Records:
    """proofgrid's records from a trainer's log, in step order, and what the conversion saw."""

    records: list[dict]
    rewritten_steps: list[int]  # steps a later file wrote again (the later write kept)
    steps: int  # distinct steps with at least one mapped value


def to_records(log: TrainerLog, spec: MetricsSpec) -> Records:
    """``{"step": s + offset, <proofgrid name>: value, ...}`` per step, for the mapped tags only."""
    missing = [(key, tag) for key, tag in spec.map.items() if tag not in log.points]
    if missing:
        key, tag = missing[0]
        more = f" (and {len(missing) - 1} more unwritten tags)" if len(missing) > 1 else ""
        raise MetricsError(f"the metrics map names tag {tag!r} (for {key}) that the trainer never wrote to "
                           f"{log.where}{more}; it wrote: {log.written()}")
    by_step: dict[int, list[dict]] = {}  # step -> one dict per write of that step (a repeat in one file: two)
    rewritten: set[int] = set()
    for key, tag in spec.map.items():
        last_file: dict[int, str] = {}
        count: dict[int, int] = {}
        for point in log.points[tag]:
            step = point.step + spec.step_offset
            if step in last_file and point.file != last_file[step]:
                rewritten.add(step)  # a later file rewrites it: that write replaces every earlier one
                count[step] = 0
                for write in by_step.get(step, []):
                    write.pop(key, None)
            last_file[step] = point.file
            writes = by_step.setdefault(step, [])
            index = count.get(step, 0)
            while len(writes) <= index:
                writes.append({})
            writes[index][key] = point.value
            count[step] = index + 1
    records = []
    for step in sorted(by_step):
        for write in by_step[step]:
            if write:
                records.append({"step": step, **{k: write[k] for k in sorted(write)}})
    return Records(records, sorted(rewritten), len({r["step"] for r in records}))


def jsonl_line(record: dict) -> str:
    """One ``metrics.jsonl`` line, a non-finite value spelt as Python's ``json`` does (NaN, Infinity), which
    the validator reports by key and step."""
    return json.dumps(record, allow_nan=True)

