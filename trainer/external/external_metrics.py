"""An external trainer's own metric log (TensorBoard event files, or JSONL with a named step key) as
proofgrid's per-step records, judged while it is read, nothing repaired.

``read_log`` reads the scalars the trainer wrote one point at a time (TensorBoard's own event loader,
through ``evidence.gates.tensorboard_log.scan_scalars``: no 1,000-point reservoir sample; a JSONL file line by
line) and keeps only the mapped tags' points. ``to_records`` renames them to proofgrid's metric names and
shifts their steps by the spec's offset; the records are then written as ``metrics.jsonl`` and judged by the
evidence's validator exactly as proofgrid's own (finite, every step, the declared count). So that the
validator sees what the trainer wrote, nothing is repaired on the way: a NaN stays NaN, a step the trainer
did not log is absent, a step it logged twice in one file gives two records. A step written again in a
*later* file (a trainer resumed from a checkpoint older than its last logged step) replaces the earlier
write, as TensorBoard shows it and as proofgrid's own log does when it resumes; the record lists such steps.

Judged while reading, in memory bounded by the declared run (at most ``n_updates`` points of a mapped tag
per file, one file's writes per step): a mapped point whose step lies outside the declared updates, or a
mapped tag with more points in one file than there are updates, stops the reading at once (a log of 10^6
lines for 4 declared steps is refused at its fifth point of a tag, not converted whole first). Refused here
too (one line, the job fails): a mapped tag the trainer never wrote (the line lists tags it did write), and a
log that cannot be read whole (a TensorBoard file truncated mid-record, a JSONL line that is not an object or
has no integer step, or is longer than any metrics line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trainer.external.trainer_spec import MetricsSpec
from trainer.trainer_errors import TrainerError

TAGS_NAMED = 50  # the tags a refusal lists (a log may write many more)
LINE_MAX_BYTES = 1 << 20  # a JSONL metrics line longer than this is no metrics line


class MetricsError(TrainerError, RuntimeError):
    """The trainer's log cannot be turned into per-step records (one line: what, where, and what it wrote)."""


@dataclass
class TrainerLog:
    """The mapped tags' points of the trainer's log (proofgrid's steps, the latest file's writes of each),
    the names of every tag it wrote, and its files."""

    where: str  # the log's path relative to the trainer's output directory
    files: list[str] = field(default_factory=list)
    writes: dict[str, dict[int, tuple[str, list[float]]]] = field(default_factory=dict)  # tag -> step -> (file, values)
    tags: set[str] = field(default_factory=set)  # the tags written (the first TAGS_NAMED, and the mapped ones)
    more_tags: bool = False  # it wrote more tags than those
    rewritten: set[int] = field(default_factory=set)  # steps a later file wrote again

    def written(self) -> str:
        tags = sorted(self.tags)
        if not tags:
            return "no scalar at all"
        return f"{', '.join(tags)} and more (over {len(tags)} tags)" if self.more_tags else f"{', '.join(tags)} ({len(tags)} tags)"

    def tags_written(self) -> list[str]:
        return sorted(self.tags)


class _Reader:
    """Takes the log's points one at a time and judges each against the declared run as it comes."""

    def __init__(self, spec: MetricsSpec, n_updates: int, where: str):
        self.spec, self.n, self.log = spec, int(n_updates), TrainerLog(where)
        self.mapped = set(spec.map.values())
        self.per_file: dict[tuple[str, str], int] = {}  # (tag, file) -> points

    def add(self, tag: str, trainer_step: int, value: float, file: str) -> None:
        log = self.log
        if tag not in log.tags:
            if len(log.tags) < TAGS_NAMED or tag in self.mapped:
                log.tags.add(tag)
            else:
                log.more_tags = True
        if tag not in self.mapped:
            return
        step = trainer_step + self.spec.step_offset
        if not 0 <= step < self.n:
            raise MetricsError(f"the trainer's log {log.where}: {file} writes tag {tag!r} at step {trainer_step} "
                               f"(proofgrid step {step}), outside the {self.n} declared updates (steps 0..{self.n - 1}"
                               f" after metrics.step_offset {self.spec.step_offset}); stopped reading there")
        count = self.per_file[(tag, file)] = self.per_file.get((tag, file), 0) + 1
        if count > self.n:
            raise MetricsError(f"the trainer's log {log.where}: {file} holds more than {self.n} points of tag {tag!r} "
                               f"for {self.n} declared updates (a step written more than once); stopped reading there")
        steps = log.writes.setdefault(tag, {})
        earlier = steps.get(step)
        if earlier is not None and earlier[0] != file:
            log.rewritten.add(step)  # a later file rewrites it: that write replaces every earlier one
            earlier = None
        if earlier is None:
            steps[step] = (file, [value])
        else:
            earlier[1].append(value)

def read_log(spec: MetricsSpec, trainer_out: Path, n_updates: int) -> TrainerLog:
    """The mapped points of the log the spec names under ``trainer_out``, judged against ``n_updates`` as
    they are read; raises ``MetricsError`` at the first point no run of ``n_updates`` steps writes."""
    path = trainer_out / spec.path
    reader = _Reader(spec, n_updates, spec.path)
    if spec.format == "tensorboard":
        _read_tensorboard(path, reader)
    else:
        _read_jsonl(path, spec, reader)
    return reader.log


def _read_tensorboard(directory: Path, reader: _Reader) -> None:
    from evidence.gates.tensorboard_log import ScalarLog, scan_scalars

    scanned = ScalarLog(directory)
    for tag, point in scan_scalars(directory, scanned):
        reader.add(tag, point.step, point.value, point.file)
    reader.log.files = list(scanned.files)
    if scanned.problems:
        problem = scanned.problems[0]
        more = f" (and {len(scanned.problems) - 1} more)" if len(scanned.problems) > 1 else ""
        raise MetricsError(f"the trainer's TensorBoard log {reader.log.where}: {problem}{more}")


def _read_jsonl(path: Path, spec: MetricsSpec, reader: _Reader) -> None:
    """One JSON object per line, ``spec.step_key`` its step; every other numeric key a scalar (NaN and
    infinities as Python writes them are kept)."""
    reader.log.files = [path.name]
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise MetricsError(f"the trainer's metrics log {spec.path} cannot be read ({exc.strerror or exc}); "
                           "it wrote no log where the spec's metrics.path says") from None
    with f:
        number = 0
        while raw := f.readline(LINE_MAX_BYTES + 1):
            number += 1
            last = not raw.endswith(b"\n")
            if last and len(raw) > LINE_MAX_BYTES:
                raise MetricsError(f"the trainer's metrics log {spec.path}: line {number} is longer than "
                                   f"{LINE_MAX_BYTES} bytes, no metrics line; stopped reading there")
            try:
                obj = json.loads(raw)
            except ValueError:
                raise MetricsError(f"the trainer's metrics log {spec.path}: line {number} is not JSON"
                                   f"{' (a truncated last line)' if last else ''}") from None
            step = obj.get(spec.step_key) if isinstance(obj, dict) else None
            if not isinstance(obj, dict) or isinstance(step, bool) or not isinstance(step, int):
                raise MetricsError(f"the trainer's metrics log {spec.path}: line {number} is not an object with an "
                                   f"integer {spec.step_key!r} (metrics.step_key)")
            for key, value in obj.items():
                if key != spec.step_key and isinstance(value, (int, float)) and not isinstance(value, bool):
                    reader.add(key, step, float(value), path.name)


@dataclass
class Records:
    """proofgrid's records from a trainer's log, in step order, and what the conversion saw."""

    records: list[dict]
    rewritten_steps: list[int]  # steps a later file wrote again (the later write kept)
    steps: int  # distinct steps with at least one mapped value


def to_records(log: TrainerLog, spec: MetricsSpec) -> Records:
    """``{"step": s + offset, <proofgrid name>: value, ...}`` per step and write, for the mapped tags only."""
    missing = [(key, tag) for key, tag in spec.map.items() if tag not in log.writes]
    if missing:
        key, tag = missing[0]
        more = f" (and {len(missing) - 1} more unwritten tags)" if len(missing) > 1 else ""
        raise MetricsError(f"the metrics map names tag {tag!r} (for {key}) that the trainer never wrote to "
                           f"{log.where}{more}; it wrote: {log.written()}")
    records = []
    for step in sorted({s for tag in spec.map.values() for s in log.writes[tag]}):
        values = {key: log.writes[tag][step][1] for key, tag in spec.map.items() if step in log.writes[tag]}
        for i in range(max(len(v) for v in values.values())):
            write = {key: v[i] for key, v in values.items() if i < len(v)}
            records.append({"step": step, **{k: write[k] for k in sorted(write)}})
    return Records(records, sorted(log.rewritten), len({r["step"] for r in records}))


def jsonl_line(record: dict) -> str:
    """One ``metrics.jsonl`` line, a non-finite value spelt as Python's ``json`` does (NaN, Infinity), which
    the validator reports by key and step."""
    return json.dumps(record, allow_nan=True)

