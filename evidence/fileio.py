"""Small file helpers shared by build and audit: streaming SHA256, hash-then-parse reads, strict JSON,
deterministic writes."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from facts import loads_strict, read_with_sha256, sha256_file  # noqa: F401 - re-exported for evidence modules


class JSONError(ValueError):
    """A JSON file that is missing, unreadable, or not strict JSON."""


def read_json(path: str | Path):
    """Parse a JSON file strictly (``facts.loads_strict``): NaN/Infinity spellings and duplicated keys are errors."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise JSONError("missing") from None
    except OSError as exc:
        raise JSONError(f"unreadable ({exc.__class__.__name__})") from None
    return parse_json(data)


def parse_json(data: bytes):
    """Parse UTF-8 JSON bytes (a file's, as read once) strictly: NaN/Infinity spellings and duplicated keys are
    errors (``JSONError``: "not valid JSON (duplicate key 'verdict')")."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONError(f"unreadable ({exc.__class__.__name__})") from None
    try:
        return loads_strict(text)
    except ValueError as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise JSONError(f"not valid JSON ({reason})") from None
    except RecursionError:
        raise JSONError("not valid JSON (nested too deeply to read)") from None


def dumps_json(value) -> str:
    """Deterministic JSON text: sorted keys, two-space indent, trailing newline, finite numbers only."""
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_text(path: str | Path, text: str) -> None:
    """Write UTF-8 text with ``\\n`` line ends, creating parent directories."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` set in ``os.environ`` while the block runs, the earlier values (or their absence) restored after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def read_csv(path: str | Path) -> tuple[list[str], list[dict[str, str]]]:
    """Header and rows (as str cells) of a CSV file."""
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, [])
        rows = [dict(zip(header, r)) for r in reader]
    return header, rows
