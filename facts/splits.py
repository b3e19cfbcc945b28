"""A workload's data: a split read from a local file with the workload's field map, stated once. The trainer
reads its splits with it, the launcher checks them with it before anything runs, and the evidence cuts the frozen
evaluation subset again from the pinned test split with it (``evidence.evaluation.subset_source``).

Formats, by what the path is:

``*.parquet``  a Parquet file (pyarrow)
``*.jsonl``    JSON Lines: one JSON object per line (blank lines skipped)
a directory    a Hugging Face dataset saved with ``Dataset.save_to_disk`` (read with ``datasets.load_from_disk``;
               a ``DatasetDict``'s directory is refused: name one split's directory)

The field map (``workload.data``): ``prompt_field`` (a string column the prompt is made from) or
``messages_field`` (chat data: a list of ``{"role", "content"}`` messages, the prompt's conversation), and
``answer_field`` (the answer every row must have: the reward's label, text or a number). A split is refused, in one
line naming the file, the field and the fields it does have, when it is not what its path says, is empty, lacks a
field, has a row without an answer (null, blank, NaN or NaT) or with one that is not text or a number (a list, a
mapping, true/false: the label would be a Python repr), or a chat row whose conversation does not end with the
user's message (an assistant's answer there would be in the prompt).

JSON Lines: UTF-8 (a leading byte-order mark is skipped), one object per line, lines ending at ``\n`` (a ``\r``
before it is dropped); U+2028, U+2029 and U+0085 inside a string are content, as JSON allows.

Each row becomes a ``SplitRow``: its index, its ``question`` (the prompt field's text, or the messages as compact
JSON), its label (the answer, normalised by the reward) and the row's fields in their JSON form (what a user's
reward function is handed, the same in the trainer and in an audit).
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass
from pathlib import Path

PARQUET_SUFFIX, JSONL_SUFFIX = ".parquet", ".jsonl"
HF_DATASET_FILES = ("state.json", "dataset_info.json")  # what Dataset.save_to_disk writes beside its shards
HF_DATASET_DICT = "dataset_dict.json"  # what DatasetDict.save_to_disk writes instead
DEFAULT_FIELDS = {"prompt_field": "question", "answer_field": "answer", "messages_field": None}


class SplitError(ValueError):
    """A split that cannot be used as the workload says: one line naming the file, the field and the fix."""


@dataclass(frozen=True)
class Fields:
    """The field map of ``workload.data``."""

    prompt_field: str | None = "question"
    answer_field: str = "answer"
    messages_field: str | None = None

    @classmethod
    def of(cls, node) -> Fields:
        """From a workload's ``data`` mapping (None or missing keys: the defaults)."""
        node = dict(node or {})
        values = {**DEFAULT_FIELDS, **{k: v for k, v in node.items() if k in DEFAULT_FIELDS}}
        if values["messages_field"] is not None:
            values["prompt_field"] = node.get("prompt_field") if "prompt_field" in node else None
        return cls(**values)

    @property
    def source(self) -> str:
        """The field the prompt comes from, and the setting that names it."""
        return self.messages_field if self.messages_field is not None else self.prompt_field


@dataclass(frozen=True)
class SplitRow:
    index: int
    question: str  # the prompt field's text, or the messages as compact JSON
    label: str  # the answer, as the reward compares it
    row: dict  # every field of the row, in its JSON form


def split_format(path: Path) -> str:
    """``parquet``, ``jsonl`` or ``hf_dataset`` by what ``path`` is; ``SplitError`` for anything else."""
    if path.is_dir():
        if (path / HF_DATASET_DICT).is_file():
            splits = sorted(p.name for p in path.iterdir() if p.is_dir())
            raise SplitError(f"{path} is a Hugging Face DatasetDict (splits {', '.join(splits) or 'none'}); name one "
                             f"split's directory ({path}/{splits[0] if splits else '<split>'})")
        if all((path / name).is_file() for name in HF_DATASET_FILES):
            return "hf_dataset"
        raise SplitError(f"{path} is a directory but not a Hugging Face dataset saved with save_to_disk (no "
                         f"{' or '.join(HF_DATASET_FILES)}); give a .parquet, a .jsonl or such a directory")
    if path.suffix == PARQUET_SUFFIX:
        return "parquet"
    if path.suffix == JSONL_SUFFIX:
        return "jsonl"
    raise SplitError(f"{path}: a split is a {PARQUET_SUFFIX} file, a {JSONL_SUFFIX} file or a directory written by a "
                     "Hugging Face dataset's save_to_disk")


def read_records(path: str | Path) -> list[dict]:
    """Every row of the split at ``path`` as a mapping of its fields (``SplitError`` when it is not what its
    path says it is)."""
    path = Path(path)
    if not path.exists():
        raise SplitError(f"{path} does not exist")
    kind = split_format(path)
    if kind == "parquet":
        import pyarrow as pa  # here: only a reader of a Parquet split loads Arrow
        import pyarrow.parquet as pq

        try:  # ParquetFile, not read_table: that goes through pyarrow.dataset, which imports pandas (seconds)
            return pq.ParquetFile(path).read().to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise SplitError(f"{path} is not a Parquet file ({str(exc).splitlines()[0]})") from None
    if kind == "jsonl":
        return _read_jsonl(path)
    try:
        from datasets import load_from_disk  # here: only a Hugging Face dataset split loads the library
    except ImportError:
        raise SplitError(f"{path} is a Hugging Face dataset: reading it needs the datasets package "
                         "(pip install datasets; the trl extra brings it)") from None
    if _state(path).get("_data_files") == []:  # save_to_disk of no rows writes no shard, which it cannot load
        raise SplitError(f"{path} has no rows: an empty split cannot be trained or evaluated on")
    try:
        dataset = load_from_disk(str(path))
    except Exception as exc:  # the library's own errors vary by version: any of them means it is not readable
        raise SplitError(f"{path} is not a readable saved Hugging Face dataset ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not hasattr(dataset, "to_list"):
        raise SplitError(f"{path} is a Hugging Face DatasetDict; name one split's directory")
    return dataset.to_list()


def _state(path: Path) -> dict:
    try:
        state = json.loads((path / HF_DATASET_FILES[0]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    try:  # a byte-order mark is not content; a line ends at "\n" only (JSON strings may hold U+2028 or U+0085 raw)
        lines = path.read_bytes().decode("utf-8-sig").split("\n")
    except UnicodeDecodeError:
        raise SplitError(f"{path} is not JSON Lines (not UTF-8 text)") from None
    for number, line in enumerate(lines, start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SplitError(f"{path} is not JSON Lines: line {number} is not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise SplitError(f"{path} is not JSON Lines of objects: line {number} is a {type(row).__name__}")
        rows.append(row)
    return rows


_PLAIN = (str, int, float, bool, type(None))


def json_row(row: dict) -> dict:
    """A row's fields in their JSON form (dates and other values as their text), keys sorted: what a reward is
    handed. A row of plain values is its own JSON form (the common case, without a round trip)."""
    if all(type(v) in _PLAIN for v in row.values()):
        return dict(sorted(row.items()))
    return json.loads(json.dumps(row, ensure_ascii=False, default=str, sort_keys=True))


def _fields_of(records: list[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for r in records[:100]:
        seen.update(dict.fromkeys(r))
    return list(seen)


def _missing(path: Path, name: str, setting: str, fields: list[str]) -> SplitError:
    return SplitError(f"{path} has no field {name!r} (workload.data.{setting}); its fields are "
                      f"{', '.join(fields) or 'none'}: set workload.data.{setting} to one of them")


def _no_answer(answer) -> bool:
    """A missing answer: null, blank text, or a value unequal to itself (a float or Decimal NaN, pandas' NaT)."""
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return True
    try:
        return bool(answer != answer)
    except (TypeError, ValueError, ArithmeticError):  # pandas' NA compares as NA; a signalling NaN raises
        return True


def _is_messages(value) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


def split_rows(path: str | Path, fields: Fields, normalize=lambda answer: answer.strip(),
               records: list[dict] | None = None) -> list[SplitRow]:
    """The split at ``path`` read with ``fields`` (module docstring), each answer made a label by ``normalize``
    (the reward's); ``SplitError`` naming the file, the field and its fields for anything that does not fit."""
    path = Path(path)
    records = read_records(path) if records is None else records
    if not records:
        raise SplitError(f"{path} has no rows: an empty split cannot be trained or evaluated on")
    names = _fields_of(records)
    source_setting = "messages_field" if fields.messages_field is not None else "prompt_field"
    for name, setting in ((fields.source, source_setting), (fields.answer_field, "answer_field")):
        if name is None:
            raise SplitError(f"workload.data.{setting} is null; name one of {path}'s fields ({', '.join(names)})")
        if not any(name in r for r in records):
            raise _missing(path, name, setting, names)
    rows = []
    for i, record in enumerate(records):
        answer, source = record.get(fields.answer_field), record.get(fields.source)
        if _no_answer(answer):
            raise SplitError(f"{path}: row {i} has no answer (its {fields.answer_field!r} is {answer!r}); every row "
                             f"needs one (workload.data.answer_field): drop the row or fill it")
        if isinstance(answer, bool) or not isinstance(answer, (str, numbers.Number)):
            raise SplitError(f"{path}: row {i}'s {fields.answer_field!r} is {type(answer).__name__} {answer!r:.40}, not "
                             f"text or a number (workload.data.answer_field): write the answer as the text the reward "
                             f"compares with")
        if fields.messages_field is not None:
            if not _is_messages(source):
                raise SplitError(f"{path}: row {i}'s {fields.messages_field!r} is not a list of {{role, content}} "
                                 f"messages (workload.data.messages_field)")
            if (last := source[-1]["role"]) != "user":
                article = "an" if last[:1] in tuple("aeiou") else "a"
                raise SplitError(f"{path}: row {i}'s conversation ends with {article} {last} message, which would be "
                                 "in the prompt: drop it from the data (a prompt's conversation ends with the user's "
                                 "message; the answer is workload.data.answer_field)")
            question = json.dumps(source, ensure_ascii=False, separators=(",", ":"))
        elif not isinstance(source, str):
            raise SplitError(f"{path}: row {i}'s {fields.prompt_field!r} is {type(source).__name__} {source!r:.40}, "
                             f"not text (workload.data.prompt_field)")
        else:
            question = source
        rows.append(SplitRow(i, question, normalize(str(answer)), json_row(record)))
    return rows


def count_rows(path: str | Path) -> int:
    """The rows of a Parquet or JSON Lines split (what a manifest pins beside its digest)."""
    return len(read_records(path))
