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

from trainer.trainer_errors import TrainerError

# The configuration keys a final model may change (every other key of the two configurations, as transformers
# reads them with every default filled, must be equal: an activation, a RoPE base or a norm epsilon changes what
# the weights compute while their shapes stay): what wrote the file, how the weights are stored (the evaluator
# loads them in workload.dtype) and runtime switches that change no output (a trainer saves use_cache off; the
# evaluator sets its own), the pad id (the evaluator pads with the workload tokenizer's). Keys that start with
# "_" are the reader's bookkeeping (where it was loaded from), not the model.
CONFIG_KEYS_THAT_MAY_DIFFER = ("transformers_version", "dtype", "torch_dtype", "use_cache", "pad_token_id",
                               "output_attentions", "output_hidden_states", "return_dict")
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class CheckpointError(TrainerError, RuntimeError):
    """The trainer's final model cannot be evaluated (one line: why, and where it should be)."""


def _config(path: Path, what: str) -> dict:
    try:
        value = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{what}: config.json cannot be read ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{what}: config.json is not a JSON object")
    return value


def model_dir_problem(path: Path) -> str | None:
    """Why ``path`` is not a Hugging Face model directory proofgrid can load (a config, weights and a
    tokenizer), in words that follow its name; None when it is one."""
    if not path.exists():
        return "does not exist"
    if not path.is_dir():
        return "is a file, not a Hugging Face model directory"
    if not (path / "config.json").is_file():
        empty = not any(path.iterdir())
        return f"is not a Hugging Face model directory: it {'is empty' if empty else 'has no config.json'}"
    if not any(p.is_file() for pattern in WEIGHT_GLOBS for p in path.glob(pattern)):
        return "has no weights (no *.safetensors or pytorch_model*.bin)"
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        return (f"has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save the tokenizer beside the weights "
                "(tokenizer.save_pretrained)")
    return None


def _full_config(path: Path, what: str) -> tuple[dict, str | None]:
    """The model's configuration as transformers reads it (every default filled), less its bookkeeping; when
    transformers refuses it, the file as written and the refusal's one line."""
    from transformers import AutoConfig

    raw = _config(path, what)  # one line for a config.json that is no JSON object
    try:
        config, refused = AutoConfig.from_pretrained(str(path), local_files_only=True).to_dict(), None
    except Exception as exc:  # noqa: BLE001 - transformers' validators raise their own kinds: one line each
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        config, refused = raw, f"{what}: config.json cannot be read as a model configuration ({first})"
    return {k: v for k, v in config.items() if not k.startswith("_") and k not in CONFIG_KEYS_THAT_MAY_DIFFER}, refused


def first_difference(ours, theirs, key: str = "") -> tuple[str, object, object] | None:
    """The first (dotted key, ours, theirs) where two configurations differ, keys in sorted order."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for k in sorted(set(ours) | set(theirs), key=str):
            found = first_difference(ours.get(k, MISSING), theirs.get(k, MISSING), f"{key}.{k}" if key else str(k))
            if found:
                return found
        return None
    return None if ours == theirs else (key, ours, theirs)


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING = _Missing()


def check_final_model(final: Path, where: str, workload_model: Path) -> None:
    """``final`` (shown as ``where``) is a model directory the evaluator can load as the workload's model:
    the same configuration but for ``CONFIG_KEYS_THAT_MAY_DIFFER``, and a tokenizer of the same vocabulary."""
    if not final.exists():
        raise CheckpointError(f"the trainer exited 0 but left no final model at {where} (the spec's checkpoint); "
                              "it must save a Hugging Face model directory there")
    problem = model_dir_problem(final)
    if problem:
        raise CheckpointError(f"the final model {where} {problem}")
    ours, ours_refused = _full_config(workload_model, "the workload's model")
    theirs, refused = _full_config(final, f"the final model {where}")
    if refused or ours_refused:  # compare the files as written, and say the refusal if they agree
        ours, theirs = (_config(p, w) for p, w in ((workload_model, "the workload's model"), (final, where)))
        ours, theirs = ({k: v for k, v in c.items() if k not in CONFIG_KEYS_THAT_MAY_DIFFER} for c in (ours, theirs))
    found = first_difference(ours, theirs)
    if not found and (refused or ours_refused):
        raise CheckpointError(refused or ours_refused)
    if found:
        key, mine, other = found
        raise CheckpointError(f"the final model {where} is a different architecture: its {key} is {other!r}, the "
                              f"workload's model has {mine!r} (only its writer's version, dtype, use_cache, pad id and output "
                              "switches may differ)")
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
