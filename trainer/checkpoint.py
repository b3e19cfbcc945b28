"""Checkpoints: policy weights (safetensors), optimizer state, RNG states and the data cursor.

A LoRA policy's checkpoint (``workload.lora``) holds its trained weights alone: the adapter's tensors in the
weights file, beside ``adapter.json`` (its settings and the SHA256 of the base model's pinned files); resuming
loads the adapter into the same base, and refuses a checkpoint whose base model differs.

A checkpoint directory is written under a temporary name and renamed into place, then the
``latest`` pointer file is replaced atomically: a run killed at any moment leaves either the
previous or the new checkpoint complete, never a torn one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from facts import checkpoint_name
from facts.files import LATEST_CHECKPOINT, TRAINER_STATE, WEIGHTS_FILE
from trainer.lora import ADAPTER_RECORD
from trainer.policy import adapter_weights, load_adapter_weights
from trainer.run_config import RunConfigError

SAMPLER_FILE = "sampler.pt"


@dataclass(frozen=True)
class AdapterRecord:
    """What a LoRA policy's checkpoint says beside its adapter: the LoRA settings and the base model's pinned files."""

    lora: dict  # trainer.lora.Lora.record()
    base_model: dict[str, str]  # {path: sha256} of the model directory's pinned files

    def as_json(self) -> dict:
        return {"lora": self.lora, "base_model": self.base_model}


def save_checkpoint(root: Path, step: int, model, optimizer, state: dict, keep: set[str] | None = None,
                    sampler_state: dict | None = None, adapter: AdapterRecord | None = None) -> Path:
    """Save after ``step`` optimizer steps; delete older checkpoints not named in ``keep``.

    ``sampler_state``: the rollout engine's weights when they lag the policy
    (``sampler_refresh_every > 1``), so a resumed run samples from the same stale policy.
    ``adapter``: ``model`` is a LoRA policy; its adapter's weights are saved, with this record beside them.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    tmp = root / f".tmp-{checkpoint_name(step)}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if adapter is None:
        # save_model de-duplicates tied weights (embedding / lm_head) that save_file refuses.
        save_model(model, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
    else:
        save_file(adapter_weights(model), str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        (tmp / ADAPTER_RECORD).write_text(json.dumps(adapter.as_json(), indent=1, sort_keys=True))
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


def checkpoint_state(path: Path) -> dict:
    """A checkpoint's ``trainer_state.json`` (its step, data cursor and config digest)."""
    return json.loads((path / TRAINER_STATE).read_text())


def load_checkpoint(path: Path, model, optimizer, adapter: AdapterRecord | None = None) -> dict:
    """Load a checkpoint into ``model`` and ``optimizer`` and restore the RNG states; returns its state.

    ``adapter``: ``model`` is a LoRA policy with these settings on this base model: the checkpoint must hold an
    adapter recorded so (else a one-line ``RunConfigError``), whose weights are loaded into ``model``'s adapters."""
    saved = path / ADAPTER_RECORD
    if adapter is None and saved.is_file():
        raise RunConfigError(f"{path.name} holds a LoRA adapter ({ADAPTER_RECORD}) but the run fine-tunes every "
                             "weight (workload.lora is null); resume with its workload.lora, or use a new output_dir")
    if adapter is None:
        load_model(model, str(path / WEIGHTS_FILE))
    else:
        check_adapter_record(path, adapter)
        load_adapter_weights(model, load_file(str(path / WEIGHTS_FILE)))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    return checkpoint_state(path)


def check_adapter_record(path: Path, adapter: AdapterRecord) -> None:
    """The checkpoint ``path`` holds an adapter recorded with ``adapter``'s settings and base model (one line if not)."""
    file = path / ADAPTER_RECORD
    if not file.is_file():
        raise RunConfigError(f"{path.name} holds the whole model, not a LoRA adapter; resume it with workload.lora=null, "
                             "or use a new output_dir")
    saved = json.loads(file.read_text())
    if saved.get("base_model") != adapter.base_model:
        theirs, ours = (", ".join(f"{p} {d[:12]}" for p, d in sorted(m.items())) or "none"
                        for m in (saved.get("base_model") or {}, adapter.base_model))
        raise RunConfigError(f"{path.name}'s adapter was trained on another base model ({theirs}) than the pinned "
                             f"one ({ours}); resume on its base model, or use a new output_dir")
    if saved.get("lora") != adapter.lora:
        raise RunConfigError(f"{path.name}'s adapter has other LoRA settings ({saved.get('lora')}) than the run "
                             f"({adapter.lora}); resume with its settings, or use a new output_dir")


def load_sampler_weights(path: Path) -> dict | None:
    """The rollout engine's lagging weights saved with a checkpoint, or None when it was up to date."""
    file = path / SAMPLER_FILE
    return torch.load(file, weights_only=True) if file.is_file() else None
