"""A lean KV-cache decoder for Qwen3-architecture causal LMs: the rollout engine's fast path.

It runs a HuggingFace ``Qwen3ForCausalLM``'s own weights and modules through the operations of the
model's forward (token embedding; RMS norms computed in float32 as the model does; q/k/v projections;
per-head q/k norms; the model's own rotary-embedding module; grouped-query attention; SwiGLU MLP; the
output head), with a KV cache preallocated for the whole response and the padding mask built once per
batch. A generated token then costs a few tensor operations per layer instead of the generic forward's
per-call set-up (mask construction, cache bookkeeping, output records), which dominates at small sizes.
The q/k/v and gate/up weights are concatenated so each is one matrix product; ``refresh`` rebuilds
them after the model's weights change. Other architectures keep the plain HF forward behind the same
interface (``HFDecoder``; ``make_decoder`` picks one and says why).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * (x / sqrt(mean(x^2) + eps))``, the mean taken in float32 and the result cast back to
    ``x``'s dtype before the weight multiplies it: the operation order of Qwen3's own RMSNorm."""
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding ``x cos + rotate_half(x) sin``, ``rotate_half([a, b]) = [-b, a]`` over the head dim."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """``[B, kv_heads, L, D]`` -> ``[B, kv_heads * groups, L, D]``: key/value head ``h`` serves the
    ``groups`` consecutive query heads ``h * groups ...``. Done explicitly (as the model's own forward
    does under a mask) so masked attention keeps the fused GPU kernels, which lack grouped heads."""
    if groups == 1:
        return x
    batch, kv_heads, length, dim = x.shape
    return x[:, :, None].expand(batch, kv_heads, groups, length, dim).reshape(batch, kv_heads * groups, length, dim)


@dataclass(frozen=True)
class AttentionShape:
    """A Qwen3 model's attention geometry, read from its config once for every forward that runs its layers."""

    heads: int  # query heads
    kv_heads: int  # key/value heads; each serves ``groups`` consecutive query heads
    head_dim: int

    @classmethod
    def of(cls, config) -> AttentionShape:
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        return cls(heads, int(config.num_key_value_heads), head_dim)

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads

    @property
    def scale(self) -> float:
        """The attention logits' scale ``head_dim ** -0.5`` (the model's own ``self_attn.scaling``)."""
        return self.head_dim ** -0.5


def left_padded_positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of left-padded rows (``mask`` 1 on tokens, 0 on padding): ``cumsum(mask) - 1``,
    so each row's first token is at 0; 0 on the padding."""
    return (mask.cumsum(-1) - 1).clamp_min(0)


def positions_after(positions: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` position ids that follow each row's last one, ``[B, count]``: ``positions[:, -1] + 1 + t``."""
    return positions[:, -1:] + 1 + torch.arange(count, device=positions.device)


def prompt_attention_mask(valid: torch.Tensor) -> torch.Tensor:
    """``[P, 1, L, L]`` bool: which keys each query of a left-padded prompt may attend to. Causal, padding
    keys masked; a padding query still sees itself, so its (unused) row stays finite instead of a
    softmax over nothing."""
    width = valid.shape[-1]
    causal = torch.ones((width, width), dtype=torch.bool, device=valid.device).tril()
    eye = torch.eye(width, dtype=torch.bool, device=valid.device)
    return (causal & valid[:, None, None, :]) | eye


def unsupported_reason(model) -> str | None:
    """Why the lean decoder cannot run ``model`` (None when it can)."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) != "qwen3":
        return f"model type {getattr(config, 'model_type', type(model).__name__)!r} is not qwen3"
    if getattr(config, "use_sliding_window", False) or any(t != "full_attention" for t in config.layer_types):
        return "sliding-window attention layers"
    if config.hidden_act != "silu":
        return f"activation {config.hidden_act!r} (the lean MLP is SwiGLU)"
    if config.rope_parameters.get("rope_type", "default") != "default":
        return f"rope type {config.rope_parameters['rope_type']!r} (the lean path supports 'default')"
    return None


@dataclass
class LayerWeights:
    """One decoder layer's weights, q/k/v and gate/up each concatenated into one matrix."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    qk_norm: torch.Tensor  # [heads + kv_heads, head_dim]: q_norm's weight per query head, then k_norm's
    o: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


@dataclass
class KVCache:
    """Keys and values of every layer, ``[B, kv_heads, capacity, head_dim]``, filled up to ``length``;
    ``allowed`` ``[B, 1, 1, capacity]`` is True where a row may attend (its prompt and what it
    generated) and False on its left padding."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    allowed: torch.Tensor
    length: int

    def select(self, rows: torch.Tensor) -> KVCache:
        """The cache of the responses ``rows`` only (finished ones dropped from the batch)."""
        return KVCache([k[rows] for k in self.keys], [v[rows] for v in self.values], self.allowed[rows], self.length)


class LeanQwen3:
    """Prefill and one-token decode steps of a Qwen3 causal LM with a preallocated KV cache."""

    def __init__(self, model):
        self.model = model
        self.eps = float(model.config.rms_norm_eps)
        self.shape = AttentionShape.of(model.config)
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Rebuild the concatenated weights from the model's current parameters."""
        self.layers = []
        for layer in self.model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            biases = [p.bias for p in (attn.q_proj, attn.k_proj, attn.v_proj)]
            self.layers.append(LayerWeights(
                input_norm=layer.input_layernorm.weight,
                qkv=torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                qkv_bias=torch.cat(biases) if biases[0] is not None else None,
                qk_norm=torch.cat([attn.q_norm.weight.expand(self.shape.heads, -1),
                                   attn.k_norm.weight.expand(self.shape.kv_heads, -1)]),
                o=attn.o_proj.weight, o_bias=attn.o_proj.bias,
                post_norm=layer.post_attention_layernorm.weight,
                gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), down=mlp.down_proj.weight,
            ))
        self.embed = self.model.get_input_embeddings().weight
        head = self.model.get_output_embeddings()
        self.head, self.head_bias = head.weight, head.bias
        self.final_norm = self.model.model.norm.weight

    def prefill(self, ids: torch.Tensor, attn: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, KVCache, torch.Tensor]:
        """Run left-padded prompts ``ids`` ``[B, L]`` (``attn`` 1 on tokens, 0 on padding) with room for
        ``new_tokens`` more. Returns the last position's logits ``[B, V]``, the cache and each row's
        next position id ``[B]``."""
        batch, width = ids.shape
        positions = left_padded_positions(attn)
        valid = attn.bool()
        keys_allowed = torch.ones((batch, 1, 1, width + new_tokens), dtype=torch.bool, device=ids.device)
        keys_allowed[:, 0, 0, :width] = valid
        cache = KVCache([], [], keys_allowed, 0)
        logits = self._forward(ids, positions, prompt_attention_mask(valid), cache, capacity=width + new_tokens)
        return logits[:, -1], cache, positions_after(positions, 1)[:, 0]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Append one token per row (``tokens`` and ``positions`` ``[B]``); the next logits ``[B, V]``."""
        mask = cache.allowed[..., : cache.length + 1]
        return self._forward(tokens[:, None], positions[:, None], mask, cache)[:, 0]

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: KVCache,
                 capacity: int = 0) -> torch.Tensor:
        """Logits ``[B, T, V]`` of ``T`` new tokens per row, their keys/values written into ``cache``
        at ``cache.length``; ``mask`` (boolean) says which cached keys each new token may attend to."""
        batch, width = ids.shape
        shape = self.shape
        x = F.embedding(ids, self.embed)
        cos, sin = self.model.model.rotary_emb(x, positions)
        cos, sin = cos[:, None], sin[:, None]
        start, end = cache.length, cache.length + width
        blocked = ~mask if width == 1 else None  # one inversion per token, not one per layer
        for index, w in enumerate(self.layers):
            h = rms_norm(x, w.input_norm, self.eps)
            qkv = F.linear(h, w.qkv, w.qkv_bias).view(batch, width, shape.heads + 2 * shape.kv_heads, shape.head_dim)
            qk, v = qkv.split([shape.heads + shape.kv_heads, shape.kv_heads], dim=2)
            # q and k heads normed and rotated together: the same per-head operations, half the calls.
            q, k = rotate(rms_norm(qk, w.qk_norm, self.eps).transpose(1, 2), cos, sin).split(
                [shape.heads, shape.kv_heads], dim=1)
            v = v.transpose(1, 2)
            if capacity:  # prefill: allocate this layer's cache in the dtypes the keys/values came out in
                cache.keys.append(k.new_zeros((batch, shape.kv_heads, capacity, shape.head_dim)))
                cache.values.append(v.new_zeros((batch, shape.kv_heads, capacity, shape.head_dim)))
            cache.keys[index][:, :, start:end] = k
            cache.values[index][:, :, start:end] = v
            keys, values = cache.keys[index][:, :, :end], cache.values[index][:, :, :end]
            if width == 1:
                out = self._attend_one(q, keys, values, blocked)
            else:
                out = F.scaled_dot_product_attention(q, repeat_kv(keys, shape.groups), repeat_kv(values, shape.groups),
                                                     attn_mask=mask, scale=shape.scale)
            x = x + F.linear(out.transpose(1, 2).reshape(batch, width, -1), w.o, w.o_bias)
            gate, up = F.linear(rms_norm(x, w.post_norm, self.eps), w.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w.down)
        cache.length = end
        return F.linear(rms_norm(x, self.final_norm, self.eps), self.head, self.head_bias)

    def _attend_one(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
        """``softmax(q K^T * scale, -inf where blocked) V`` for one new token, ``q`` ``[B, heads, 1, D]``, each group of
        ``heads / kv_heads`` query heads against its key/value head: two batched products, no kernel set-up
        (the fused attention kernel's fixed cost dominates at one query)."""
        batch, shape = q.shape[0], self.shape
        grouped = q.reshape(batch, shape.kv_heads, shape.groups, shape.head_dim)
        scores = torch.matmul(grouped, keys.transpose(-1, -2)) * shape.scale
        weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
        return torch.matmul(weights, values).reshape(batch, shape.heads, 1, shape.head_dim)


@dataclass
class HFState:
    """The plain HF path's decoding state: the model's own cache object and the attention mask so far."""

    cache: object
    attn: torch.Tensor

    def select(self, rows: torch.Tensor) -> HFState:
        self.cache.batch_select_indices(rows)
        return HFState(self.cache, self.attn[rows])


class HFDecoder:
    """The same interface as ``LeanQwen3`` over the model's generic forward (any causal LM)."""

    def __init__(self, model):
        self.model = model

    def refresh(self) -> None:
        """Nothing to rebuild: the forward reads the model's parameters."""

    def prefill(self, ids: torch.Tensor, attn: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, HFState, torch.Tensor]:
        positions = left_padded_positions(attn)
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True)
        return out.logits[:, -1], HFState(out.cache, attn), positions_after(positions, 1)[:, 0]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, state: HFState) -> torch.Tensor:
        state.attn = torch.cat([state.attn, torch.ones_like(state.attn[:, :1])], dim=1)
        out = self.model(input_ids=tokens[:, None], attention_mask=state.attn, position_ids=positions[:, None],
                         cache=state.cache, use_cache=True)
        state.cache = out.cache
        return out.logits[:, -1]


def make_decoder(model) -> tuple[LeanQwen3 | HFDecoder, str | None]:
    """The lean decoder when ``model``'s architecture allows it, else the HF forward and the reason."""
    reason = unsupported_reason(model)
    return (HFDecoder(model), reason) if reason else (LeanQwen3(model), None)
