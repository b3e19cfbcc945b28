"""Checkpoints: policy weights (safetensors), optimizer state, RNG states and the data cursor.

A checkpoint directory is written under a temporary name and renamed into place, then the
``latest`` pointer file is replaced atomically: a run killed at any moment leaves either the
previous or the new checkpoint complete, never a torn one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

from facts import checkpoint_name
from facts.files import LATEST_CHECKPOINT, TRAINER_STATE, WEIGHTS_FILE

SAMPLER_FILE = "sampler.pt"


def save_checkpoint(root: Path, step: int, model, optimizer, state: dict, keep: set[str] | None = None,
                    sampler_state: dict | None = None) -> Path:
    """Save after ``step`` optimizer steps; delete older checkpoints not named in ``keep``.

    ``sampler_state``: the rollout engine's weights when they lag the policy
    (``sampler_refresh_every > 1``), so a resumed run samples from the same stale policy.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    tmp = root / f".tmp-{checkpoint_name(step)}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    # save_model de-duplicates tied weights (embedding / lm_head) that save_file refuses.
    save_model(model, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
    sort_header_metadata(tmp / WEIGHTS_FILE)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
    if sampler_state is not None:
        torch.save(sampler_state, tmp / SAMPLER_FILE)
    (tmp / TRAINER_STATE).write_text(json.dumps({**state, "step": step}, indent=1, sort_keys=True))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    pointer = root / (LATEST_CHECKPOINT + ".tmp")
    pointer.write_text(final.name + "\n")
    os.replace(pointer, root / LATEST_CHECKPOINT)
    for old in root.glob("step_*"):
        if old.name != final.name and old.name not in (keep or set()):
            shutil.rmtree(old, ignore_errors=True)
    return final


def sort_header_metadata(path: Path) -> None:
    """Rewrite a safetensors file's ``__metadata__`` with its keys sorted, in place: the same weights then give the
    same bytes in every process (a reproducibility certificate compares checkpoint digests).

    Why: safetensors writes the metadata from a Rust ``HashMap``, whose order is randomised per map, and
    ``save_model`` records each tied weight there (``{"lm_head.weight": "model.embed_tokens.weight", "format":
    "pt"}``). The file is ``u64 little-endian header length, JSON header, data``; sorting permutes the same
    characters, so the header keeps its length and the data its offsets (checked before writing).
    """
    with open(path, "r+b") as f:
        size = int.from_bytes(f.read(8), "little")
        raw = f.read(size)
        text = raw.rstrip(b" ").decode("utf-8")  # the format pads the header with spaces to 8 bytes
        header = json.loads(text)
        if not isinstance(header.get("__metadata__"), dict):
            return
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        canonical = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if len(canonical) != len(text.encode("utf-8")):  # another writer's spelling: leave the file as it is
            return
        f.seek(8)
        f.write(canonical)


def latest_checkpoint(root: Path) -> Path | None:
    pointer = root / LATEST_CHECKPOINT
    if not pointer.is_file():
        return None
    path = root / pointer.read_text().strip()
    return path if (path / TRAINER_STATE).is_file() else None


def load_checkpoint(path: Path, model, optimizer) -> dict:
    load_model(model, str(path / WEIGHTS_FILE))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    return json.loads((path / TRAINER_STATE).read_text())


def load_sampler_weights(path: Path) -> dict | None:
    """The rollout engine's lagging weights saved with a checkpoint, or None when it was up to date."""
    file = path / SAMPLER_FILE
    return torch.load(file, weights_only=True) if file.is_file() else None
