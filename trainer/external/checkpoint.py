"""The final model an external trainer leaves, checked before proofgrid's evaluator loads it.

The evaluation is proofgrid's own (``trainer.evaluate``), with the workload's tokenizer, so the final
model must be the workload's model trained: a Hugging Face model directory (``config.json`` and
weights) of the same architecture and size as ``workload.model_path``, with a tokenizer of the same
vocabulary (a trainer that saves none, or another one, is refused: the evaluation would tokenize its
prompts differently). Each refusal is one line saying which of these it is.
"""

from __future__ import annotations

import json
from pathlib import Path

# config.json keys that must agree with the workload's model (the weights' shapes and what they mean).
ARCHITECTURE_KEYS = ("model_type", "architectures", "vocab_size", "hidden_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
                     "tie_word_embeddings")
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class CheckpointError(RuntimeError):
    """The trainer's final model cannot be evaluated (one line: why, and where it should be)."""


def _config(path: Path, what: str) -> dict:
    try:
        value = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{what}: config.json cannot be read ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{what}: config.json is not a JSON object")
    return value


def check_final_model(final: Path, where: str, workload_model: Path) -> None:
    """``final`` (shown as ``where``) is a model directory the evaluator can load as the workload's model."""
    if not final.exists():
        raise CheckpointError(f"the trainer exited 0 but left no final model at {where} (the spec's checkpoint); "
                              "it must save a Hugging Face model directory there")
    if not final.is_dir():
        raise CheckpointError(f"the final model {where} is a file, not a Hugging Face model directory")
    if not (final / "config.json").is_file():
        raise CheckpointError(f"the final model {where} is not a Hugging Face model directory: it has no config.json")
    if not any(p.is_file() for pattern in WEIGHT_GLOBS for p in final.glob(pattern)):
        raise CheckpointError(f"the final model {where} has no weights (no *.safetensors or pytorch_model*.bin)")
    ours, theirs = _config(workload_model, "the workload's model"), _config(final, f"the final model {where}")
    for key in ARCHITECTURE_KEYS:
        if key in ours and theirs.get(key) != ours[key]:
            raise CheckpointError(f"the final model {where} is a different architecture: its {key} is "
                                  f"{theirs.get(key)!r}, the workload's model has {ours[key]!r}")
    if not any((final / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(f"the final model {where} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                              "save the tokenizer beside the weights (tokenizer.save_pretrained)")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(final), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise CheckpointError(f"the final model {where}'s tokenizer cannot be loaded ({first})") from None
    reference = AutoTokenizer.from_pretrained(str(workload_model), local_files_only=True)
    if tokenizer.get_vocab() != reference.get_vocab():
        raise CheckpointError(f"the final model {where}'s tokenizer has another vocabulary than the workload's model; "
                              "the evaluation tokenizes with the workload's")


def load_final_model(final: Path, where: str, device: str):
    """The final model as proofgrid's policy (``trainer.policy.load_policy``), or one line why it cannot be."""
    from trainer.policy import load_policy

    try:
        model, _ = load_policy(str(final), device)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise CheckpointError(f"the evaluator cannot load the final model {where}: {first}") from None
    return model
