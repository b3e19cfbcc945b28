"""Rollout engines: generate a batch of responses; load new weights.

The training loop only talks to the ``RolloutEngine`` protocol, so a GPU engine (SGLang) can be
added without touching the loop. ``TorchEngine`` is the CPU reference engine: KV-cache sampling
with a HuggingFace causal LM held as its own copy of the weights (like a real inference server,
it sees new weights only through ``load_weights``).

Sampling is Gumbel-max: ``argmax(filter(logits / T) + G)`` with ``G = -log(-log U)`` is an exact
sample from the softmax of the temperature-scaled, top-k/top-p filtered logits. ``U`` is a
counter-based draw (``uniform_draws``): a hash of the *sequence's* key, the token index and the
vocabulary index, computed for every row at once on the model's device. A response depends only
on its own key, never on which other sequences share the batch or the data-parallel rank.

Decoding runs through ``trainer.decoding``: its lean Qwen3 path (preallocated KV cache) when the
model is a Qwen3, the model's generic forward otherwise. Finished responses leave the batch once a
quarter of it has finished, so the last long responses do not carry the short ones' rows; how often
the loop reads that count from the device is ``done_check_interval``'s choice.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass
from typing import Protocol

import torch

from trainer.decoding import make_decoder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0  # 0 = no top-k filter
    top_p: float = 1.0
    max_new_tokens: int = 64

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class AuxDraws:
    """Auxiliary tokens to draw at every response position (score centering, seed 003).

    ``samples`` draws per position, with replacement, from the sampler's distribution renormalised
    over its ``top_k`` most likely tokens (``top_k = 0``: the full vocabulary, exact draws).
    """

    samples: int = 8
    top_k: int = 20


@dataclass(frozen=True)
class Generation:
    response_ids: list[int]  # includes the end token when the response finished
    finished: bool  # ended with the end token (False = truncated at max_new_tokens)


@dataclass(frozen=True)
class GenerationBatch:
    generations: list[Generation]
    wall_s: float
    # The sampler's own log-prob of each generated token, [n, T_gen] (0 after a response's end).
    sampler_logp: torch.Tensor | None = None
    # Auxiliary draws [n, T_gen, K] when requested (pad after a response's end).
    aux_ids: torch.Tensor | None = None

    @property
    def response_tokens(self) -> int:
        return sum(len(g.response_ids) for g in self.generations)


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], keys: list[int], sampling: SamplingParams,
                 aux: AuxDraws | None = None) -> GenerationBatch:
        """One response per prompt entry; ``keys[i]`` seeds the randomness of response ``i``.

        Returns the sampler's per-token log-probs and, when ``aux`` is given, its auxiliary draws.
        """

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Replace the engine's weights (called every ``sampler_refresh_every`` optimizer steps)."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The engine's current weights (checkpointed when the sampler may lag the policy)."""

    model: torch.nn.Module  # the sampler's weights as a trainer-side module (the mismatch's reference)

    def profile(self) -> dict:
        """The engine's determinism profile for run.json (engine, version, attention backend, seed handling,
        batch invariance)."""


def warn_if_greedy(sampling: SamplingParams, where: str) -> None:
    if sampling.greedy:
        # Seed 002: a silent top-k/greedy bug cost a run; greedy RL rollouts are almost never intended.
        log.warning("%s: temperature=%s means greedy decoding; RL rollouts normally sample", where, sampling.temperature)


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k set and outside the top-p nucleus to -inf."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the mass strictly before it already reaches top_p (keeps >= 1 token).
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        attn[i, width - len(p):] = 1
    return ids.to(device), attn.to(device)


def distinct_prompts(prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """Each distinct prompt once (first-seen order), and for every entry the index of its prompt."""
    index: dict[tuple[int, ...], int] = {}
    owner = [index.setdefault(tuple(p), len(index)) for p in prompts]
    return [list(p) for p in index], owner


class TorchEngine:
    """KV-cache sampling with a HuggingFace causal LM (CPU reference engine)."""

    def __init__(self, model: torch.nn.Module, eos_id: int, pad_id: int, settings=None):
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.device = next(self.model.parameters()).device
        self.done_check_every = done_check_interval(self.device)
        self.decoder, why_not_lean = make_decoder(self.model)
        if why_not_lean:
            log.info("rollout engine: the model's generic forward decodes (no lean path: %s)", why_not_lean)
        else:
            log.info("rollout engine: lean Qwen3 decoding with a preallocated KV cache")
        self.why_not_lean = why_not_lean

    def profile(self) -> dict:
        """The determinism profile (``facts.engines.ENGINE_FIELD``): what decides whether a rerun is bit-identical."""
        return {
            "engine": "torch", "version": torch.__version__,
            "attention_backend": f"the model's generic forward ({self.why_not_lean})" if self.why_not_lean
            else "lean Qwen3 decoder (trainer.decoding): scaled_dot_product_attention prefill, two matmuls per token",
            "seed_handling": "counter-based Gumbel-max noise per response key (splitmix64 of key, token, vocab index)",
            "batch_invariant": False,  # finished rows leave the batch: BLAS may pick other kernels for the rest
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "num_threads": torch.get_num_threads(),
        }

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state_dict)
        self.decoder.refresh()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], keys: list[int], sampling: SamplingParams,
                 aux: AuxDraws | None = None) -> GenerationBatch:
        if len(prompts) != len(keys):
            raise ValueError("one key per prompt is required")
        start = time.perf_counter()
        n, width = len(prompts), sampling.max_new_tokens
        seeds = key_tensor(keys, self.device)
        # Auxiliary draws use their own streams, so asking for them never changes the responses.
        aux_seeds = key_tensor([aux_seed(k) for k in keys], self.device) if aux else None
        # Prefill each distinct prompt once (a group's K responses share one prompt), then give every
        # response its prompt's row of the cache.
        distinct, owner = distinct_prompts(prompts)
        ids, attn = left_pad(distinct, self.pad_id, self.device)
        logits, state, positions = self.decoder.prefill(ids, attn, width)
        if len(distinct) < n:
            prompt_rows = torch.tensor(owner, device=self.device)
            logits, state, positions = logits[prompt_rows], state.select(prompt_rows), positions[prompt_rows]
        tokens = torch.full((n, width), self.pad_id, dtype=torch.long, device=self.device)
        token_logp = torch.zeros((n, width), dtype=torch.float32, device=self.device)
        aux_tokens = torch.full((n, width, aux.samples), self.pad_id, dtype=torch.long, device=self.device) \
            if aux else None
        rows = torch.arange(n, device=self.device)  # the response (output row) of each batch row
        done = torch.zeros(n, dtype=torch.bool, device=self.device)
        noise, noise_from = None, 0  # Gumbel noise of the batch rows for tokens noise_from, noise_from + 1, ...
        steps = 0
        while steps < width:
            logits = logits.float()
            if not sampling.greedy and (noise is None or steps - noise_from == noise.shape[1]):
                span = max(1, min(width - steps, NOISE_BLOCK_ELEMENTS // (len(rows) * logits.shape[-1])))
                noise, noise_from = gumbel_noise(seeds[rows], steps, logits.shape[-1], span), steps
            sampled = self._sample(logits, noise[:, steps - noise_from] if noise is not None else None, sampling)
            nxt = torch.where(done, self.pad_id, sampled)
            scaled = logits / sampling.temperature if not sampling.greedy else logits
            log_probs = torch.log_softmax(scaled, dim=-1)
            tokens[rows, steps] = nxt
            token_logp[rows, steps] = torch.where(done, 0.0, log_probs.gather(-1, nxt[:, None])[:, 0])
            if aux is not None:
                drawn = draw_aux(log_probs, aux, aux_seeds[rows], steps)
                aux_tokens[rows, steps] = torch.where(done[:, None], self.pad_id, drawn)
            steps += 1
            done = done | (nxt == self.eos_id)
            if steps == width:
                break
            if steps % self.done_check_every == 0:
                finished = int(done.sum())  # the host read: when to stop, when to shrink the batch
                if finished == len(done):
                    break
                if 4 * finished >= len(done):  # drop the finished rows from the batch
                    keep = (~done).nonzero()[:, 0]
                    rows, state, positions, nxt = rows[keep], state.select(keep), positions[keep], nxt[keep]
                    done = done[keep]
                    noise = noise[keep] if noise is not None else None
            logits = self.decoder.step(nxt, positions, state)
            positions = positions + 1
        generated = tokens[:, :steps].cpu().tolist()
        results = []
        for row in generated:
            if self.eos_id in row:
                results.append(Generation(row[: row.index(self.eos_id) + 1], True))
            else:
                results.append(Generation(row, False))
        # The longest response's length: the tokens decoded when every finish is noticed at once
        # (a finish read late adds only padding).
        steps = max((len(g.response_ids) for g in results), default=steps)
        return GenerationBatch(results, time.perf_counter() - start, token_logp[:, :steps],
                               aux_tokens[:, :steps] if aux else None)

    def _sample(self, logits: torch.Tensor, noise: torch.Tensor | None, sampling: SamplingParams) -> torch.Tensor:
        """Gumbel-max: ``argmax(filter(logits / T) + noise)``; the argmax itself when greedy."""
        if sampling.greedy:
            return logits.argmax(-1)
        return (filter_logits(logits / sampling.temperature, sampling.top_k, sampling.top_p) + noise).argmax(-1)


def key_tensor(keys: list[int], device) -> torch.Tensor:
    """Response keys as an int64 tensor; a key must fit in 63 bits (``trainer.data.mix_seed`` does)."""
    bad = [k for k in keys if not 0 <= k < 1 << 63]
    if bad:
        raise ValueError(f"response key {bad[0]} is outside [0, 2**63); derive keys with trainer.data.mix_seed")
    return torch.tensor(keys, dtype=torch.long, device=device)


def _int64(value: int) -> int:
    """A 64-bit constant as the signed int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


GOLDEN = _int64(0x9E3779B97F4A7C15)
MIX_1 = _int64(0xBF58476D1CE4E5B9)
MIX_2 = _int64(0x94D049BB133111EB)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical (zero-filling) right shift of int64 bit patterns; ``>>`` on int64 is arithmetic."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function on int64 tensors (arithmetic wraps modulo 2^64):
    ``z = x + g; z = (z ^ z >> 30) * m1; z = (z ^ z >> 27) * m2; z ^ z >> 31`` (logical shifts)."""
    z = x + GOLDEN
    z = (z ^ _shift_right(z, 30)) * MIX_1
    z = (z ^ _shift_right(z, 27)) * MIX_2
    return z ^ _shift_right(z, 31)


def uniform_draws(seeds: torch.Tensor, step: int, width: int, steps: int = 1) -> torch.Tensor:
    """``U[i, s, j] = (top 23 bits of splitmix64(splitmix64(seed_i + (step + s) * g) + j * g) + 1/2) / 2^23``,
    in (0, 1), float32, ``[len(seeds), steps, width]``: draw ``j`` at token ``step + s`` of the stream
    ``seed_i`` (23 bits, so ``bits + 1/2`` is exact in float32 and U never rounds to 0 or 1).

    Counter-based, so every row's draws come from one vectorised computation on the device, and a
    row's numbers depend on its own seed and position only."""
    tokens = torch.arange(step, step + steps, dtype=torch.long, device=seeds.device) * GOLDEN
    token_key = splitmix64(seeds[:, None] + tokens)
    counters = torch.arange(width, dtype=torch.long, device=seeds.device) * GOLDEN
    bits = _shift_right(splitmix64(token_key[:, :, None] + counters), 41)
    return (bits.to(torch.float32) + 0.5) * 2.0 ** -23


def gumbel_noise(seeds: torch.Tensor, step: int, width: int, steps: int) -> torch.Tensor:
    """``G = -log(-log U)`` over ``uniform_draws``: the Gumbel noise of Gumbel-max sampling."""
    return -torch.log(-torch.log(uniform_draws(seeds, step, width, steps)))


# On an accelerator, decoding reads how many responses have finished (a device-to-host copy that waits
# for every queued kernel, so the host cannot run ahead) once per this many tokens.
DONE_CHECK_EVERY = 8


def done_check_interval(device: torch.device) -> int:
    """Tokens decoded between reads of how many responses have finished: ``DONE_CHECK_EVERY`` on an
    accelerator; every token on a CPU, where the read waits for nothing. There finished rows leave the
    batch at once, and runs keep their numbers bit for bit (when rows leave changes the batch's row
    count, and with it which BLAS kernels compute the remaining rows' last bits)."""
    return 1 if device.type == "cpu" else DONE_CHECK_EVERY

# Gumbel noise is drawn for several tokens at once, up to this many elements (128 KiB of float32):
# ~10 tokens of 32 rows of a 99-token vocabulary per call (the cheapest per token on one CPU core,
# measured), one token at a time for a large vocabulary.
NOISE_BLOCK_ELEMENTS = 1 << 15


def aux_seed(key: int) -> int:
    """The seed of a response's auxiliary-draw stream: derived from, but never equal to, its key."""
    return (key * 0x9E3779B97F4A7C15 + 0x5C0E) % (1 << 63)


def draw_aux(log_probs: torch.Tensor, aux: AuxDraws, seeds: torch.Tensor, step: int) -> torch.Tensor:
    """``aux.samples`` draws per row from ``softmax(log_probs)`` renormalised over its top-k
    (inverse CDF with one uniform per draw from each row's own stream ``seeds``), ``[n, K]`` token ids."""
    if aux.top_k and aux.top_k < log_probs.shape[-1]:
        top, ids = torch.topk(log_probs, aux.top_k, dim=-1)
    else:
        top, ids = log_probs, None
    return draw_aux_from_top(top, ids, aux, seeds, step)


def draw_aux_from_top(top: torch.Tensor, ids: torch.Tensor | None, aux: AuxDraws, seeds: torch.Tensor,
                      step: int) -> torch.Tensor:
    """``draw_aux`` from given log-probs ``top`` ``[n, k]`` (most likely first) of the tokens ``ids`` (None: the
    vocabulary in order): the inverse-CDF draws of ``softmax(top)``, ``[n, aux.samples]`` token ids. Another engine
    that returns only the top-k log-probs draws with this (``trainer.vllm_engine``)."""
    cdf = torch.softmax(top, dim=-1).cumsum(-1)
    uniform = uniform_draws(seeds, step, aux.samples)[:, 0].to(cdf.dtype)
    picked = torch.searchsorted(cdf, uniform * cdf[:, -1:]).clamp_max(cdf.shape[-1] - 1)
    return picked if ids is None else ids.gather(-1, picked)


def make_engine(name: str, model: torch.nn.Module, eos_id: int, pad_id: int, settings=None) -> RolloutEngine:
    """Build the rollout engine ``name`` (``trainer.engine_registry``) around a copy of ``model``'s weights; ``settings``
    (``trainer.engine_registry.engine_settings`` of the workload) gives an engine that needs them its dtype and threads."""
    from trainer.engine_registry import engine_class

    return engine_class(name)(model, eos_id, pad_id, settings)
