"""Rollout engines: generate a batch of responses; load new weights.

The training loop only talks to the ``RolloutEngine`` protocol, so a GPU engine (SGLang) can be
added without touching the loop. ``TorchEngine`` is the CPU reference engine: KV-cache sampling
with a HuggingFace causal LM held as its own copy of the weights (like a real inference server,
it sees new weights only through ``load_weights``).

Sampling is Gumbel-max: ``argmax(filter(logits / T) + G)`` with ``G = -log(-log U)`` is an exact
sample from the softmax of the temperature-scaled, top-k/top-p filtered logits. ``U`` is drawn
from a generator owned by each *sequence* and seeded by the caller, so a response depends only on
its own key, never on which other sequences share the batch or the data-parallel rank.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass
from typing import Protocol

import torch

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

    def __init__(self, model: torch.nn.Module, eos_id: int, pad_id: int):
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.device = next(self.model.parameters()).device

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state_dict)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], keys: list[int], sampling: SamplingParams,
                 aux: AuxDraws | None = None) -> GenerationBatch:
        if len(prompts) != len(keys):
            raise ValueError("one key per prompt is required")
        start = time.perf_counter()
        generators = [torch.Generator(device="cpu").manual_seed(k) for k in keys]
        # Auxiliary draws use their own streams, so asking for them never changes the responses.
        aux_generators = [torch.Generator(device="cpu").manual_seed(aux_seed(k)) for k in keys] if aux else None
        # Prefill each distinct prompt once (a group's K responses share one prompt), then give every
        # response its prompt's row of the cache.
        distinct, owner = distinct_prompts(prompts)
        ids, attn = left_pad(distinct, self.pad_id, self.device)
        positions = (attn.cumsum(-1) - 1).clamp_min(0)
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True)
        cache, logits = out.cache, out.logits[:, -1, :].float()
        n = len(prompts)
        if len(distinct) < n:
            rows = torch.tensor(owner, device=self.device)
            cache.batch_select_indices(rows)
            logits, attn, positions = logits[rows], attn[rows], positions[rows]
        done = torch.zeros(n, dtype=torch.bool, device=self.device)
        tokens: list[torch.Tensor] = []
        token_logp: list[torch.Tensor] = []
        aux_tokens: list[torch.Tensor] = []
        next_pos = positions[:, -1:] + 1
        for _ in range(sampling.max_new_tokens):
            nxt = self._sample(logits, generators, sampling)
            nxt = torch.where(done, torch.full_like(nxt, self.pad_id), nxt)
            tokens.append(nxt)
            scaled = logits / sampling.temperature if not sampling.greedy else logits
            log_probs = torch.log_softmax(scaled, dim=-1)
            token_logp.append(torch.where(done, 0.0, log_probs.gather(-1, nxt.unsqueeze(-1)).squeeze(-1)))
            if aux is not None:
                drawn = draw_aux(log_probs, aux, aux_generators)
                aux_tokens.append(torch.where(done.unsqueeze(-1), self.pad_id, drawn))
            done = done | (nxt == self.eos_id)
            if bool(done.all()):
                break
            attn = torch.cat([attn, torch.ones((n, 1), dtype=attn.dtype, device=self.device)], dim=1)
            out = self.model(input_ids=nxt.unsqueeze(1), attention_mask=attn, position_ids=next_pos,
                             cache=cache, use_cache=True)
            cache, logits = out.cache, out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        sampler_logp = torch.stack(token_logp, dim=1) if token_logp else torch.zeros((n, 0), device=self.device)
        aux_ids = torch.stack(aux_tokens, dim=1) if aux_tokens else None
        generated = torch.stack(tokens, dim=1).cpu().tolist() if tokens else [[] for _ in range(n)]
        results = []
        for row in generated:
            if self.eos_id in row:
                results.append(Generation(row[: row.index(self.eos_id) + 1], True))
            else:
                results.append(Generation(row, False))
        return GenerationBatch(results, time.perf_counter() - start, sampler_logp, aux_ids)

    def _sample(self, logits: torch.Tensor, generators, sampling: SamplingParams) -> torch.Tensor:
        if sampling.greedy:
            return logits.argmax(-1)
        scaled = filter_logits(logits / sampling.temperature, sampling.top_k, sampling.top_p)
        uniform = torch.stack([torch.rand(logits.shape[-1], generator=g) for g in generators]).to(logits.device)
        gumbel = -torch.log(-torch.log(uniform.clamp(1e-20, 1.0 - 1e-7)))
        return (scaled + gumbel).argmax(-1)


def aux_seed(key: int) -> int:
    """The seed of a response's auxiliary-draw stream: derived from, but never equal to, its key."""
    return (key * 0x9E3779B97F4A7C15 + 0x5C0E) % (1 << 63)


def draw_aux(log_probs: torch.Tensor, aux: AuxDraws, generators) -> torch.Tensor:
    """``aux.samples`` draws per row from ``softmax(log_probs)`` renormalised over its top-k
    (inverse CDF with one uniform per draw from each row's own generator), ``[n, K]`` token ids."""
    if aux.top_k and aux.top_k < log_probs.shape[-1]:
        top, ids = torch.topk(log_probs, aux.top_k, dim=-1)
    else:
        top, ids = log_probs, None
    cdf = torch.softmax(top, dim=-1).cumsum(-1)
    uniform = torch.stack([torch.rand(aux.samples, generator=g, dtype=cdf.dtype) for g in generators]).to(cdf.device)
    picked = torch.searchsorted(cdf, uniform * cdf[:, -1:]).clamp_max(cdf.shape[-1] - 1)
    return picked if ids is None else ids.gather(-1, picked)


def make_engine(name: str, model: torch.nn.Module, eos_id: int, pad_id: int) -> RolloutEngine:
    """Build the rollout engine ``name`` (``trainer.engines``) around a copy of ``model``'s weights."""
    from trainer.engines import engine_class

    return engine_class(name)(model, eos_id, pad_id)
