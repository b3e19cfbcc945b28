"""The input manifest's format, ``manifests/<workload>.json``: every file a workload reads, pinned by path
(relative to the repository root), size and SHA256, a Parquet split's entry with its ``rows`` too::

    {"workload": name, "files": [{"path": ..., "size": n, "sha256": hex, "rows": n}, ...]}

The trainer refuses an input whose bytes differ from its pin (``trainer.inputs``) and records the pins in its
run.json's ``inputs``; the evidence holds a run's record to the manifests of the reviewer's checkout
(``evidence.evaluation.subset_source``). Both read the format here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


class ManifestFormatError(ValueError):
    """The manifest's bytes are not the format above; the message says how (a phrase: "is not JSON (...)")."""


@dataclass(frozen=True)
class PinnedFile:
    path: str
    size: int
    sha256: str
    rows: int | None = None  # a Parquet split's rows, as pinned


def read_manifest(path: Path) -> list[PinnedFile]:
    """The pins of the manifest file at ``path`` (OSError when it cannot be read; ManifestFormatError when its
    bytes are not a manifest)."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
        return [PinnedFile(str(f["path"]), int(f["size"]), str(f["sha256"]),
                           None if f.get("rows") is None else int(f["rows"])) for f in data["files"]]
    except json.JSONDecodeError as exc:
        problem = f"is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
    except (KeyError, TypeError, ValueError, AttributeError):
        problem = 'does not have the manifest format {"files": [{"path", "size", "sha256"}, ...]}'
    raise ManifestFormatError(problem)
