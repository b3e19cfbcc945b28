"""vLLM as the rollout engine (``workload.engine=vllm``; the ``vllm`` extra: vLLM's CPU build), in the trainer's own
process (docs/engines.md).

Design: one ``vllm.LLM`` per trainer process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the engine core runs in this
process, no server, no port), started from the model directory the policy was loaded from, then given the policy's
weights. Every ``VLLMEngine`` is a view of that one LLM holding its own weights (``model``: the sampler's weights as
a trainer-side module, as ``TorchEngine`` holds them): the training sampler, a lagging policy's evaluation copy, the
initial checkpoint's control. Before a view generates, the LLM is given its weights if it holds another view's, so
the loop's engines behave as separate engines while the process starts vLLM once.

Weights go in with vLLM's ``reload_weights`` (``collective_rpc``, the worker's own loader: the CPU build repacks its
linear layers after loading, so writing a parameter in place does not reach the kernels), in Hugging Face
naming, then the prefix cache is dropped (its keys and values were computed with the old weights). ``sync_check``
proves a sync on a fixed probe batch (``facts.engines.SYNC_TOLERANCE``).

Sampling: one request per response with ``SamplingParams.seed`` = the response's key (trainer.data.mix_seed), the
workload's temperature/top-k/top-p and ``max_tokens``, stopping at the end token; vLLM returns each sampled token's
log-prob under the processed distribution (``logprobs_mode=processed_logprobs``: ``log_softmax(logits / T)``, the
trainer's). Score centering's auxiliary draws are drawn here from the top-k log-probs vLLM returns at every position
(``logprobs=aux.top_k``), with the torch engine's counter-based uniforms of the response's auxiliary stream, so the
same distribution gives the same draws in both engines; a full-vocabulary draw (``aux_source=full``) is refused at
plan time (``trainer.engine_registry.plan_check``).

Private parts of vLLM used here, each in one place with its reason: ``collective_rpc("reload_weights", ...)`` (the
worker method RL frameworks sync with; no public ``LLM`` method takes weights), ``llm.llm_engine.vllm_config`` (the
attention backend and batch-invariance setting for the determinism profile), and vLLM's process-wide replacement
of ``torch.set_num_threads`` (undone after start: the trainer sets its own threads).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import random
import time
from dataclasses import dataclass

import torch

from trainer.engine_registry import EngineSettings
from trainer.policy import sampler_weights
from trainer.rollout import (
    AuxDraws,
    Generation,
    GenerationBatch,
    SamplingParams,
    aux_seed,
    draw_aux_from_top,
    key_tensor,
)

log = logging.getLogger(__name__)

MAX_LOGPROBS = 64  # the most top-k log-probs a position may return (score centering's aux_top_k at most this)
MAX_NUM_SEQS = 256  # sequences decoded together (the toy's evaluation is 64 prompts x 4)
KV_CACHE_CAP_BYTES = 4 << 30  # vLLM preempts and recomputes beyond this rather than allocate more
# Set before vLLM is imported: the engine core in this process, OpenMP threads left where the trainer put them.
IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                  "VLLM_NO_USAGE_STATS": "1", "VLLM_LOGGING_LEVEL": "ERROR"}


@dataclass
class _Shared:
    """The process's one LLM and which view's weights it holds."""

    llm: object
    model_dir: str
    settings: EngineSettings
    holder: object = None  # the VLLMEngine whose weights the LLM holds
    start_s: float = 0.0


_SHARED: _Shared | None = None


def _kv_cache_bytes(config, dtype: str) -> int:
    """Keys and values of MAX_NUM_SEQS sequences of the model's whole context, capped at KV_CACHE_CAP_BYTES."""
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    per_token = 2 * int(config.num_hidden_layers) * int(config.num_key_value_heads) * head_dim
    per_token *= 4 if dtype == "float32" else 2
    return min(per_token * MAX_NUM_SEQS * int(config.max_position_embeddings), KV_CACHE_CAP_BYTES)


def shared_llm(model, settings: EngineSettings) -> _Shared:
    """The process's LLM for ``model``'s directory (started on first use: about 10-30 s on 2 CPU cores)."""
    global _SHARED
    model_dir = str(getattr(model, "name_or_path", "") or model.config._name_or_path)
    if _SHARED is not None:
        if (_SHARED.model_dir, _SHARED.settings) != (model_dir, settings):
            raise RuntimeError(f"this process's vLLM engine serves {_SHARED.model_dir} ({_SHARED.settings}); "
                               f"a second one for {model_dir} ({settings}) is not supported")
        return _SHARED
    for key, value in IN_PROCESS_ENV.items():
        os.environ.setdefault(key, value)
    started = time.perf_counter()
    set_num_threads = torch.set_num_threads
    try:
        with trainer_rng_kept():
            from vllm import LLM

            llm = LLM(model=model_dir, tokenizer=model_dir, dtype=settings.dtype, seed=0, enforce_eager=True,
                      max_model_len=int(model.config.max_position_embeddings), max_num_seqs=MAX_NUM_SEQS,
                      max_logprobs=MAX_LOGPROBS, logprobs_mode="processed_logprobs",
                      kv_cache_memory_bytes=_kv_cache_bytes(model.config, settings.dtype), enable_prefix_caching=True)
    finally:
        # vLLM's CPU worker replaces torch.set_num_threads process-wide (it expects its own worker process, whose
        # threads it binds); here the process is the trainer's, which sets its threads itself.
        torch.set_num_threads = set_num_threads
    torch.set_num_threads(settings.num_threads)
    _SHARED = _Shared(llm, model_dir, settings, start_s=time.perf_counter() - started)
    log.info("rollout engine: vLLM %s started in the trainer's process in %.1f s", vllm_version(), _SHARED.start_s)
    return _SHARED


@contextlib.contextmanager
def trainer_rng_kept():
    """The trainer's global random states (Python's, NumPy's, torch's) as they were before: vLLM seeds them all when
    its worker starts (``set_random_seed``), which in the trainer's process would move the states a checkpoint saves
    (``rng.pt``) and a resumed run restores, so a stop-and-resume would no longer reproduce the run bit for bit.
    Sampling itself draws from each request's own generator (its seed), never from these."""
    import numpy as np

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


def vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


def _weights(model) -> list[tuple[str, torch.Tensor]]:
    """The view's weights as vLLM's loader takes them: ``trainer.policy.sampler_weights`` (the one seam: Hugging Face
    naming, a tied output head included, which vLLM's loader skips), detached, float32 as the trainer keeps them."""
    return [(name, tensor.detach()) for name, tensor in sampler_weights(model).items()]


class VLLMEngine:
    """A rollout engine whose sampling runs in vLLM (``trainer.rollout.RolloutEngine``)."""

    def __init__(self, model: torch.nn.Module, eos_id: int, pad_id: int, settings: EngineSettings | None = None):
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.eos_id, self.pad_id = eos_id, pad_id
        self.shared = shared_llm(self.model, settings or EngineSettings())
        self._sync()

    # ---- weights -------------------------------------------------------------------------------------------------

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Take the trainer's weights (``sampler_refresh_every``): into this view's module, then into vLLM."""
        self.model.load_state_dict(state_dict)
        self._sync()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()

    def _sync(self) -> None:
        """Give the LLM this view's weights (vLLM's reload_weights, the one private call that takes weights), then
        drop the prefix cache computed with the weights it held before."""
        llm = self.shared.llm
        with trainer_rng_kept():
            llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(_weights(self.model)),
                                                         "is_checkpoint_format": True})
            llm.reset_prefix_cache()
        self.shared.holder = self

    def _hold(self) -> None:
        if self.shared.holder is not self:
            self._sync()

    # ---- sampling ------------------------------------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], keys: list[int], sampling: SamplingParams,
                 aux: AuxDraws | None = None) -> GenerationBatch:
        from vllm import SamplingParams as VllmSampling

        if len(prompts) != len(keys):
            raise ValueError("one key per prompt is required")
        key_tensor(keys, "cpu")  # refuses a key outside [0, 2**63) as the torch engine does
        self._hold()
        start = time.perf_counter()
        top = aux.top_k if aux is not None else 0
        params = [VllmSampling(n=1, temperature=max(sampling.temperature, 0.0), top_k=sampling.top_k or 0,
                               top_p=sampling.top_p, max_tokens=sampling.max_new_tokens, seed=int(key),
                               stop_token_ids=[self.eos_id], logprobs=top, detokenize=False)
                  for key in keys]
        with trainer_rng_kept():
            outputs = self.shared.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        generations, rows, aux_rows = [], [], []
        for out, key in zip(outputs, keys):
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            finished = bool(ids) and ids[-1] == self.eos_id
            generations.append(Generation(ids, finished))
            rows.append([position[token].logprob for position, token in zip(completion.logprobs, ids)])
            if aux is not None:
                aux_rows.append(self._aux(completion.logprobs, aux, key))
        width = max((len(g.response_ids) for g in generations), default=0)
        logp = torch.zeros((len(generations), width), dtype=torch.float32)
        for i, row in enumerate(rows):
            logp[i, :len(row)] = torch.tensor(row, dtype=torch.float32)
        aux_ids = None
        if aux is not None:
            aux_ids = torch.full((len(generations), width, aux.samples), self.pad_id, dtype=torch.long)
            for i, drawn in enumerate(aux_rows):
                aux_ids[i, :drawn.shape[0]] = drawn
        return GenerationBatch(generations, time.perf_counter() - start, logp, aux_ids)

    def _aux(self, positions: list[dict], aux: AuxDraws, key: int) -> torch.Tensor:
        """``aux.samples`` draws per position from the engine's top-k log-probs, renormalised (``draw_aux``'s
        inverse CDF and its uniforms: the response's auxiliary stream)."""
        seeds = key_tensor([aux_seed(key)], "cpu")
        out = []
        for step, position in enumerate(positions):
            ranked = sorted(((lp.rank, token, lp.logprob) for token, lp in position.items() if lp.rank <= aux.top_k))
            ids = torch.tensor([[token for _, token, _ in ranked]], dtype=torch.long)
            values = torch.tensor([[value for _, _, value in ranked]], dtype=torch.float32)
            out.append(draw_aux_from_top(values, ids, aux, seeds, step)[0])
        return torch.stack(out) if out else torch.zeros((0, aux.samples), dtype=torch.long)

    # ---- the trainer's view of the engine --------------------------------------------------------------------------

    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """The engine's log-prob of each given response token after its prompt (teacher forcing, temperature 1):
        vLLM's prompt log-probs of ``prompt + response``."""
        from vllm import SamplingParams as VllmSampling

        self._hold()
        params = VllmSampling(n=1, temperature=1.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        with trainer_rng_kept():
            outputs = self.shared.llm.generate([{"prompt_token_ids": list(p) + list(r)}
                                                for p, r in zip(prompts, responses)], params, use_tqdm=False)
        scores = []
        for out, prompt, response in zip(outputs, prompts, responses):
            positions = out.prompt_logprobs[len(prompt):len(prompt) + len(response)]
            scores.append([position[token].logprob for position, token in zip(positions, response)])
        return scores

    def profile(self) -> dict:
        """The determinism profile (``facts.engines.ENGINE_FIELD``): what decides whether a rerun is bit-identical."""
        config = self.shared.llm.llm_engine.vllm_config  # private: no public accessor of the chosen backend
        backend = getattr(getattr(config, "attention_config", None), "backend", None)
        import vllm.envs as envs

        return {
            "engine": "vllm", "version": vllm_version(), "in_process": True,
            "attention_backend": str(backend) if backend is not None else "CPU_ATTN (vLLM's choice on the CPU build)",
            "seed_handling": "one request per response, SamplingParams.seed = the response key (its own generator)",
            "batch_invariant": bool(envs.VLLM_BATCH_INVARIANT), "dtype": self.shared.settings.dtype,
            "num_threads": self.shared.settings.num_threads, "prefix_caching": True,
            "logprobs_mode": "processed_logprobs", "start_s": round(self.shared.start_s, 3),
        }
