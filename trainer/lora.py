"""A LoRA policy (``workload.lora``; seed 003 trains a rank-32 LoRA policy): its settings and their plan-time check.

``workload.lora: null`` (the default) fine-tunes every weight. ``workload.lora: {rank, alpha, dropout,
target_modules}`` injects low-rank adapters into the named Linear layers with ``peft`` and trains them alone: a
targeted layer computes ``W x + (alpha / rank) B A dropout(x)``, ``A`` ``[rank, in]`` drawn at random, ``B``
``[out, rank]`` zero, so the policy starts as the base model. Which model each part of a run uses, and why:

- **the policy's training forward** (log-probs, the loss, its gradient): the base model with the adapters in it;
  AdamW holds only ``A`` and ``B``, the base weights stay frozen. ``dropout`` acts here and nowhere else.
- **the reference** (the KL terms, the initial-checkpoint control): the base model, the frozen copy taken before
  the adapters go in, as full fine-tuning's reference is its step-0 copy. It is exactly the policy at step 0
  (``B = 0``), and no adapter is switched off and on around its forward.
- **the sampler** (the rollout engine) **and every evaluation** (during training and of the final checkpoint):
  the merged weights ``W + (alpha / rank) B A`` in Hugging Face naming, from ``trainer.policy.sampler_weights``,
  the one function an engine's weight sync calls. An engine holds a plain model: the lean decoder reads weight
  matrices directly (it would silently skip an adapter) and an inference server loads Hugging Face names; the
  evaluation then scores the weights the policy means, without dropout.
- **the checkpoint**: the adapter's weights alone (``model.safetensors`` holds them) beside ``adapter.json``: these
  settings and the SHA256 of the base model's pinned files; a resume refuses a checkpoint whose base differs.

This module is torch-free (the launcher checks a plan with it); the model side is ``trainer.policy``
(``add_lora``, ``sampler_weights``, ``adapter_weights``). Refusals are one line: a rank below 1, alpha <= 0 or
a dropout outside [0, 1) by the settings schema (``trainer.schema.LoraSchema``), a target module the model
lacks (or one that is not a Linear layer) by ``check_targets`` against the model's own weight files.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from trainer.schema import LoraSchema
from trainer.trainer_errors import TrainerError

ADAPTER_RECORD = "adapter.json"  # in a LoRA run's checkpoint, beside the adapter's weights
WEIGHTS_INDEX = "model.safetensors.index.json"  # a sharded Hugging Face model's map of weight names to files


class LoraError(TrainerError, ValueError):
    """A LoRA setting the model cannot take (one line: the setting, what the model has, the fix)."""


@dataclass(frozen=True)
class Lora:
    """The LoRA settings of a run, every default filled."""

    rank: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...]

    @property
    def scaling(self) -> float:
        """The factor of the low-rank update: ``alpha / rank``."""
        return self.alpha / self.rank

    def record(self) -> dict:
        return {**dataclasses.asdict(self), "target_modules": list(self.target_modules)}


def lora_settings(workload) -> Lora | None:
    """The run's LoRA settings (``workload.lora``, a mapping or an OmegaConf node), None for full fine-tuning."""
    node = workload.get("lora") if hasattr(workload, "get") else None
    if node is None:
        return None
    values = {key: node[key] for key in node}
    given = LoraSchema(**{k: (list(v) if k == "target_modules" else v) for k, v in values.items()})
    return Lora(int(given.rank), float(given.alpha), float(given.dropout), tuple(str(t) for t in given.target_modules))


def weight_shapes(model_dir: Path) -> dict[str, list[int]]:
    """Every weight of a Hugging Face model directory and its shape, from its safetensors files' headers (the
    safetensors library's reader; no tensor is loaded)."""
    from safetensors import safe_open

    index = model_dir / WEIGHTS_INDEX
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() \
        else [p.name for p in sorted(model_dir.glob("*.safetensors"))]
    shapes = {}
    for name in files:
        with safe_open(str(model_dir / name), framework="numpy") as f:
            shapes.update({key: list(f.get_slice(key).get_shape()) for key in f.keys()})  # noqa: SIM118 - safe_open is no mapping
    return shapes


def matches(module: str, target: str) -> bool:
    """peft's rule for a name in ``target_modules``: the module's dotted path is it or ends with ``.<it>``."""
    return module == target or module.endswith("." + target)


def check_targets(lora: Lora, model_dir: Path, shown: str | None = None) -> None:
    """Every target module names at least one Linear layer of the model in ``model_dir`` (a 2-D
    ``<module>.weight`` that is not the token embeddings or the output head, whose rows are the vocabulary:
    the two may share one tensor, which a merge of one of them would silently break); raises ``LoraError``
    naming the target and the layers the model has (``shown``: the model as the settings name it)."""
    shapes = weight_shapes(model_dir)
    config = model_dir / "config.json"
    vocab = json.loads(config.read_text()).get("vocab_size") if config.is_file() else None
    modules = {key.removesuffix(".weight"): shape for key, shape in shapes.items() if key.endswith(".weight")}
    linear = {path: shape for path, shape in modules.items() if len(shape) == 2 and shape[0] != vocab}
    names = ", ".join(sorted({path.rsplit(".", 1)[-1] for path in linear}))
    for target in lora.target_modules:
        found = [path for path in modules if matches(path, target)]
        if not found:
            raise LoraError(f"setting workload.lora.target_modules names {target!r}, a module the model "
                            f"{shown or model_dir} lacks (no weight of that name); its Linear layers are: {names}")
        if any(path not in linear for path in found):
            raise LoraError(f"setting workload.lora.target_modules names {target!r}, which is not a Linear layer of "
                            f"the model (a norm, the embeddings or the output head); choose among: {names}")


__all__ = ["ADAPTER_RECORD", "Lora", "LoraError", "check_targets", "lora_settings", "matches"]
