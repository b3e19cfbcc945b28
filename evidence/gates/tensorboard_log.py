"""Every scalar of a run's TensorBoard event files, read with TensorBoard's own event file loader.

A trainer that is not proofgrid's (TRL, verl, OpenRLHF) leaves its per-step metrics in TensorBoard
event files; the validator judges them as it judges ``metrics.jsonl``, so it must see every point.

All points, not a sample: TensorBoard's ``EventAccumulator`` keeps a reservoir sample per tag
(``size_guidance``: 10,000 scalars by default, 1,000 in the TensorBoard server, the limit users meet in
tensorflow/tensorboard#706; ``0`` would mean "keep all"). This module does not use the accumulator:
it iterates ``event_file_loader.EventFileLoader``, the loader underneath it, which yields every event
of a file in order with TensorBoard's read-time compatibility layers applied (``data_compat`` turns a
``simple_value`` into a scalar tensor, ``dataclass_compat`` marks its data class), and no sampling,
purging or reordering happens anywhere on the way.

Truncation: the loader stops silently at a record it cannot read (it is built to tail files still
being written: a partial last record may be completed later). Here a file is complete, so the bytes
of the records it yielded are counted through ``RawEventFileLoader`` (each record takes its data
length plus 16 framing bytes: the TFRecord format's 8-byte length, its 4-byte CRC, the data's 4-byte
CRC) and a file with bytes left after its last whole record is reported as a problem, naming the
offset and the number of records read, never passed silently. The points read before it are kept.

Files: every ``events.out.tfevents.*`` directly in the directory, in name order (TensorBoard's own
order: the name starts with the writer's start time), as one run; a subdirectory is another run to
TensorBoard and is not read. Several files are normal: a resumed trainer opens a new one, and
transformers' callback writes one per ``train()`` call. Each point keeps its file, so a step written
twice (a run that resumed from an earlier checkpoint than its last logged step) stays visible.

Values are as written: ``torch.utils.tensorboard``'s ``add_scalar`` stores a float32 ``simple_value``,
so a float64 metric reads back rounded to float32. NaN and infinities are kept (the validator names them).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from facts.files import TENSORBOARD_EVENTS

EVENT_FILE_GLOB = TENSORBOARD_EVENTS
RECORD_FRAMING_BYTES = 16  # TFRecord: uint64 length, uint32 masked CRC32C of it, data, uint32 CRC32C of the data


@dataclass(frozen=True)
class ScalarPoint:
    """One logged scalar: its step, value, the writer's wall time and the event file it came from."""

    step: int
    value: float
    wall_time: float
    file: str


@dataclass(frozen=True)
class EventFileProblem:
    """An event file (or directory) that could not be read whole."""

    file: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.reason}"


class TagError(KeyError):
    """A tag the log does not hold, or holds with a repeated step; the message lists what it holds."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


@dataclass
class ScalarLog:
    """The scalars of one TensorBoard run directory: ``scalars[tag]`` in file, then write, order."""

    directory: Path
    files: list[str] = field(default_factory=list)
    scalars: dict[str, list[ScalarPoint]] = field(default_factory=dict)
    problems: list[EventFileProblem] = field(default_factory=list)

    @property
    def tags(self) -> list[str]:
        return sorted(self.scalars)

    def written(self) -> str:
        """The tags the trainer wrote, for an error about one it did not: ``a, b (2 tags)``."""
        return f"{', '.join(self.tags)} ({len(self.tags)} tags)" if self.tags else "no scalar at all"

    def points(self, tag: str) -> list[ScalarPoint]:
        if tag not in self.scalars:
            raise TagError(f"tag {tag!r} was never written to {self.directory.name}/; the trainer wrote: "
                           f"{self.written()}")
        return self.scalars[tag]

    def missing(self, tags) -> list[str]:
        """Those of ``tags`` that were never written."""
        return [t for t in tags if t not in self.scalars]

    def repeated_steps(self, tag: str) -> list[int]:
        """Steps of ``tag`` written more than once (in any of the files), sorted."""
        seen, repeated = set(), set()
        for point in self.points(tag):
            (repeated if point.step in seen else seen).add(point.step)
        return sorted(repeated)

    def values(self, tag: str) -> dict[int, float]:
        """``{step: value}`` of ``tag``, in step order; a step written twice is a ``TagError``
        (which of the two counts is the validator's decision, not the reader's)."""
        repeated = self.repeated_steps(tag)
        if repeated:
            raise TagError(f"tag {tag!r} has step {repeated[0]} written more than once"
                           f"{f' (and {len(repeated) - 1} more steps)' if len(repeated) > 1 else ''} "
                           f"in {self.directory.name}/")
        return {p.step: p.value for p in sorted(self.points(tag), key=lambda p: p.step)}


def _scalar_of(value, data_class: int):
    """The float of a summary value of the scalar data class, or None for another kind of value."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.util import tensor_util

    if data_class != summary_pb2.DATA_CLASS_SCALAR or not value.HasField("tensor"):
        return None
    array = tensor_util.make_ndarray(value.tensor)
    return float(array.item()) if array.size == 1 else None


def _complete_bytes(path: Path) -> tuple[int, int]:
    """Bytes taken by the whole records TensorBoard's raw loader reads from ``path``, and their number."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader

    consumed = records = 0
    for record in RawEventFileLoader(str(path)).Load():
        consumed += len(record) + RECORD_FRAMING_BYTES
        records += 1
    return consumed, records


def scan_scalars(directory: str | Path, log: ScalarLog) -> Iterator[tuple[str, ScalarPoint]]:
    """Every scalar point of the event files directly in ``directory`` as ``(tag, point)``, in file and
    write order, one at a time (a reader that judges while it reads stops where it likes, holding only what it
    keeps); ``log.files`` and ``log.problems`` are filled as the scan goes (a file's truncation is known at
    its end). ``log.scalars`` is left to the caller."""
    from google.protobuf.message import DecodeError
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto import summary_pb2

    directory = Path(directory)
    paths = sorted(p for p in directory.glob(EVENT_FILE_GLOB) if p.is_file()) if directory.is_dir() else []
    if not paths:
        where = "is not a directory" if not directory.is_dir() else f"holds no {EVENT_FILE_GLOB} file"
        log.problems.append(EventFileProblem(directory.name, where))
        return
    data_class: dict[str, int] = {}  # per tag, from its first value with metadata (TF2 writers send it once)
    for path in paths:
        log.files.append(path.name)
        try:
            for event in EventFileLoader(str(path)).Load():
                if not event.HasField("summary"):
                    continue
                for value in event.summary.value:
                    if value.HasField("metadata") and value.tag not in data_class:
                        data_class[value.tag] = value.metadata.data_class
                    number = _scalar_of(value, data_class.get(value.tag, summary_pb2.DATA_CLASS_UNKNOWN))
                    if number is not None:
                        yield value.tag, ScalarPoint(int(event.step), number, float(event.wall_time), path.name)
            consumed, records = _complete_bytes(path)
            size = path.stat().st_size
        except OSError as exc:
            log.problems.append(EventFileProblem(path.name, f"cannot be read ({exc.strerror or exc})"))
            continue
        except DecodeError as exc:  # a record whose CRCs hold but whose bytes are no Event
            log.problems.append(EventFileProblem(path.name, f"holds a record that is not an event ({exc})"))
            continue
        if records == 0:
            log.problems.append(EventFileProblem(path.name, f"holds no complete record ({size} bytes)"))
        elif consumed < size:
            log.problems.append(EventFileProblem(
                path.name, f"truncated or corrupt record at byte {consumed} of {size}: {records} whole records "
                f"read, the last {size - consumed} bytes are not a complete record (the writer was killed "
                "mid-write, or the file was cut)"))


class ScalarTail:
    """The scalars of a directory's event files as they are written: each ``new_points()`` call returns the points
    written since the last one, in file and write order (TensorBoard's ``EventFileLoader`` is built to tail a file:
    each ``Load()`` goes on where the last stopped, a partial last record waiting for its end). A file that
    appears later is read from its start. For a run still being written; ``read_scalars`` judges a finished one."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.loaders: dict[Path, object] = {}
        self.data_class: dict[str, int] = {}

    def new_points(self) -> list[tuple[str, ScalarPoint]]:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.compat.proto import summary_pb2

        points = []
        paths = sorted(p for p in self.directory.glob(EVENT_FILE_GLOB) if p.is_file()) if self.directory.is_dir() else []
        for path in paths:
            loader = self.loaders.setdefault(path, EventFileLoader(str(path)))
            for event in loader.Load():
                for value in event.summary.value if event.HasField("summary") else ():
                    if value.HasField("metadata") and value.tag not in self.data_class:
                        self.data_class[value.tag] = value.metadata.data_class
                    number = _scalar_of(value, self.data_class.get(value.tag, summary_pb2.DATA_CLASS_UNKNOWN))
                    if number is not None:
                        points.append((value.tag, ScalarPoint(int(event.step), number, float(event.wall_time),
                                                              path.name)))
        return points


def read_scalars(directory: str | Path) -> ScalarLog:
    """Every scalar point of every tag in the event files directly in ``directory`` (see the module
    docstring); unreadable, truncated or missing files are ``problems``, never skipped silently."""
    log = ScalarLog(Path(directory))
    for tag, point in scan_scalars(directory, log):
        log.scalars.setdefault(tag, []).append(point)
    return log


def read_hparams(directory: str | Path) -> dict[str, bool | float | str]:
    """The hyperparameters of the run in ``directory`` as the HParams dashboard reads them: the
    ``session_start_info`` of the hparams plugin's summaries in its event files (the last one wins),
    each value as its protobuf kind holds it (a number as a float). Empty when none was written."""
    from google.protobuf.json_format import MessageToDict
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import metadata

    found: dict[str, bool | float | str] = {}
    directory = Path(directory)
    paths = sorted(p for p in directory.glob(EVENT_FILE_GLOB) if p.is_file()) if directory.is_dir() else []
    for path in paths:
        for event in EventFileLoader(str(path)).Load():
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                plugin = value.metadata.plugin_data
                if plugin.plugin_name != metadata.PLUGIN_NAME or value.tag != metadata.SESSION_START_INFO_TAG:
                    continue
                info = metadata.parse_session_start_info_plugin_data(plugin.content)
                found.update({name: MessageToDict(v) for name, v in info.hparams.items()})
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m evidence.gates.tensorboard_log <dir>``: each tag's point count and step range, then the problems."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m evidence.gates.tensorboard_log <directory of event files>", file=sys.stderr)
        return 2
    log = read_scalars(args[0])
    for tag in log.tags:
        steps = [p.step for p in log.scalars[tag]]
        repeated = log.repeated_steps(tag)
        print(f"{tag}\t{len(steps)} points\tsteps {min(steps)}..{max(steps)}"
              f"{f'	{len(repeated)} repeated' if repeated else ''}")
    for problem in log.problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if log.problems else 0


if __name__ == "__main__":
    sys.exit(main())
