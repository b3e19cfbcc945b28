"""Pinned workload inputs: every file a workload reads is listed in ``manifests/<workload>.json``
with its size and SHA256, and is refused when its bytes differ.

Manifest format: ``{"workload": name, "files": [{"path": <relative to repo root>, "size": n,
"sha256": hex}, ...]}``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CHUNK = 1 << 20


class InputDigestError(RuntimeError):
    """An input file is missing or its bytes differ from the committed pin."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class PinnedFile:
    path: str
    size: int
    sha256: str


def load_manifest(manifest_path: str | Path) -> list[PinnedFile]:
    path = resolve(manifest_path)
    if not path.is_file():
        raise InputDigestError(f"manifest {manifest_path} not found; pin the workload's inputs first")
    data = json.loads(path.read_text())
    return [PinnedFile(f["path"], int(f["size"]), f["sha256"]) for f in data["files"]]


def resolve(path: str | Path) -> Path:
    """Resolve a repo-relative path (as written in configs and manifests) to an absolute one."""
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


def verify_inputs(manifest_path: str | Path, required: list[str | Path] | None = None) -> dict[str, str]:
    """Check every pinned file's size and SHA256; return ``{relative path: sha256}``.

    ``required``: paths the workload will read (files or directories); each must be covered by
    the manifest, so an unpinned input cannot slip in.
    """
    pins = load_manifest(manifest_path)
    for pin in pins:
        p = resolve(pin.path)
        if not p.is_file():
            raise InputDigestError(f"pinned input {pin.path} is missing; restore it or rebuild the workload assets")
        size = p.stat().st_size
        if size != pin.size:
            raise InputDigestError(
                f"pinned input {pin.path} has {size} bytes, manifest {manifest_path} says {pin.size}; "
                "restore the file (git checkout) or re-pin it deliberately"
            )
        digest = sha256_file(p)
        if digest != pin.sha256:
            raise InputDigestError(
                f"pinned input {pin.path} has SHA256 {digest[:12]}..., manifest {manifest_path} says "
                f"{pin.sha256[:12]}...; restore the file (git checkout) or re-pin it deliberately"
            )
    pinned = {pin.path for pin in pins}
    for req in required or []:
        req = str(req).rstrip("/")
        if req not in pinned and not any(p.startswith(req + "/") for p in pinned):
            raise InputDigestError(f"input {req} is not pinned in {manifest_path}; add it to the manifest")
    return {pin.path: pin.sha256 for pin in pins}
