"""The policy model: loading, its LoRA adapters (``workload.lora``), the weights its sampler gets, and per-token
log-probabilities of sampled responses."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.decoding import (
    AttentionShape,
    left_padded_positions,
    positions_after,
    prompt_attention_mask,
    repeat_kv,
    rotate,
    unsupported_reason,
)
from trainer.lora import Lora
from trainer.rollout import distinct_prompts, left_pad

ADAPTER = "default"  # peft's name for the one adapter a LoRA policy holds


def load_policy(path: str, device: str = "cpu"):
    """Load a causal LM and its tokenizer from a local directory (never from a hub).

    Parameters stay float32 (the optimizer's master weights: a 1e-6 update is below bfloat16's
    resolution for most weights); lower precision is used for compute only, via ``compute_context``.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, local_files_only=True)
    return model.to(device), tokenizer


def add_lora(model, lora: Lora) -> None:
    """Inject LoRA adapters into ``model`` in place (peft's ``inject_adapter_in_model``; ``trainer.lora`` says
    which model each part of a run uses): every base weight is frozen, each targeted Linear layer gains ``A``
    (Kaiming-uniform, drawn from the global torch generator: the run's seed fixes it) and ``B = 0``. The
    adapters' dropout modules are put in training mode (the model stays in eval mode, as in full fine-tuning, so
    only ``workload.lora.dropout`` drops anything, and only in the policy's training forward)."""
    from peft import LoraConfig, inject_adapter_in_model

    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=list(lora.target_modules), bias="none")
    inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    for layer in lora_layers(model).values():
        layer.lora_dropout.train()


def lora_layers(model) -> dict:
    """The modules of ``model`` that carry a LoRA adapter, by name (none: a fully fine-tuned policy, which never
    imports peft: no adapter exists before ``add_lora`` imported it)."""
    if "peft" not in sys.modules:
        return {}
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


def sampler_weights(policy) -> dict[str, torch.Tensor]:
    """The policy's weights for the sampler: what a rollout engine loads at each refresh (and what an evaluation's
    engine is built from), the whole model in Hugging Face naming.

    A fully fine-tuned policy: its own ``state_dict()`` (its live tensors; an engine copies them). A LoRA policy:
    the merged weights, ``W + (alpha / rank) B A`` for every adapted layer (peft's ``get_delta_weight``) under the
    base layer's own name (``q_proj.weight``, not ``q_proj.base_layer.weight``), every other weight as it is, the
    adapters' own tensors left out: a plain model of the base architecture loads them. Computed without a graph;
    the policy is not changed (no merge and unmerge of its weights, which would round them)."""
    layers = lora_layers(policy)
    if not layers:
        return policy.state_dict()
    with torch.no_grad():
        deltas = {f"{name}.weight": layer.get_delta_weight(ADAPTER) for name, layer in layers.items()}
        merged = {}
        for key, value in policy.state_dict().items():
            if ".lora_" in key:  # lora_A, lora_B (and peft's other adapter tensors): folded into the delta
                continue
            key = key.replace(".base_layer.", ".")
            merged[key] = value + deltas[key] if key in deltas else value
    return merged


def adapter_weights(policy) -> dict[str, torch.Tensor]:
    """A LoRA policy's trained weights alone (peft's adapter state dict: ``...q_proj.lora_A.weight``, ...)."""
    from peft import get_peft_model_state_dict

    return {key: value.detach().contiguous() for key, value in get_peft_model_state_dict(policy, adapter_name=ADAPTER).items()}


def load_adapter_weights(policy, tensors: dict[str, torch.Tensor]) -> None:
    """Load ``adapter_weights``' tensors into a LoRA policy with the same settings; refuses one that does not fit."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(policy, tensors, adapter_name=ADAPTER)
    missing = [key for key in result.missing_keys if ".lora_" in key]
    if result.unexpected_keys or missing:
        raise ValueError(f"the adapter's weights do not fit the policy's adapters (unexpected: "
                         f"{', '.join(result.unexpected_keys[:3]) or 'none'}; missing: {', '.join(missing[:3]) or 'none'})")


def compute_context(device: torch.device, dtype: str):
    """Autocast to ``dtype`` (e.g. bfloat16 on GPU); a no-op for float32."""
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, dtype))


@dataclass(frozen=True)
class TokenBatch:
    """Responses (right-padded) after their prompts; each distinct prompt is held once (left-padded),
    so a teacher-forced forward runs a group's shared prompt once, not once per response."""

    prompt_ids: torch.Tensor  # [P, Lp] the distinct prompts
    prompt_mask: torch.Tensor  # [P, Lp] long: 1 on prompt tokens, 0 on left padding
    owner: torch.Tensor  # [B] long: the row of prompt_ids each response continues
    response_ids: torch.Tensor  # [B, T]
    response_mask: torch.Tensor  # [B, T] bool: valid response tokens (the end token included)
    # Each response's valid tokens, on the host: the packed forward's size, known without reading the mask back.
    lengths: tuple[int, ...]

    def rows(self, rows: slice) -> TokenBatch:
        """The same batch restricted to a slice of its responses (a PPO mini-batch).

        Every prompt is kept, though the slice continues only some: dropping the others changes the
        matrix shapes of the prompt-side products (the output head's row count, the backward's
        reductions over prompt tokens), and with them the last bits of a run's numbers from one version
        to the next. The slice's log-probs equal the whole batch's rows to float32 rounding, bit for bit
        where the BLAS takes one kernel for both row counts
        (``test_a_mini_batch_s_log_probs_equal_the_whole_batch_s_rows_to_float32_rounding``)."""
        return TokenBatch(self.prompt_ids, self.prompt_mask, self.owner[rows], self.response_ids[rows],
                          self.response_mask[rows], self.lengths[rows])


def build_token_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int, device) -> TokenBatch:
    distinct, owner = distinct_prompts(prompts)
    prompt_ids, prompt_mask = left_pad(distinct, pad_id, device)
    width = max(1, max(len(r) for r in responses))
    resp = torch.full((len(responses), width), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((len(responses), width), dtype=torch.bool)
    for i, r in enumerate(responses):
        resp[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        resp_mask[i, : len(r)] = True
    return TokenBatch(prompt_ids, prompt_mask, torch.tensor(owner, device=device), resp.to(device), resp_mask.to(device),
                      tuple(len(r) for r in responses))


def response_logits(model, batch: TokenBatch) -> torch.Tensor:
    """The logits that predict every response token, ``[B, T, V]`` (0 where no token follows).

    Qwen3 models take the packed path (``packed_response_logits``); any other model its own forward.
    """
    if unsupported_reason(model) is None:
        return packed_response_logits(model, batch)
    return forward_response_logits(model, batch)


def forward_response_logits(model, batch: TokenBatch) -> torch.Tensor:
    """``response_logits`` through the model's own forward: one call over the distinct prompts (its KV
    cache then gathered per response), one over the responses on top of it.

    The logit at the last prompt position predicts response token 0; the one at response token t
    predicts token t + 1, so the response forward reads tokens ``0 .. T-2``.
    """
    prompt_pos = left_padded_positions(batch.prompt_mask)
    out = model(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, position_ids=prompt_pos, use_cache=True)
    first = out.logits[:, -1:, :][batch.owner]
    width = batch.response_ids.shape[1]
    if width == 1:
        return first
    cache = out.cache
    cache.batch_select_indices(batch.owner)
    attn = torch.cat([batch.prompt_mask[batch.owner], batch.response_mask[:, :-1].long()], dim=1)
    positions = positions_after(prompt_pos, width - 1)[batch.owner]
    rest = model(input_ids=batch.response_ids[:, :-1], attention_mask=attn, position_ids=positions, cache=cache,
                 use_cache=True).logits
    return torch.cat([first, rest], dim=1)


def packed_response_logits(model, batch: TokenBatch) -> torch.Tensor:
    """``response_logits`` of a Qwen3 model through its own modules, with the position-wise work
    (projections, norms, MLP, output head) run on the response tokens that predict a valid token
    only, not on the padding of the shorter responses; attention alone sees the padded layout.

    Each distinct prompt runs once; its keys/values are gathered per response. Padding slots hold
    zero queries/keys/values that no valid token attends to, and logits of 0. The attention geometry,
    positions and prompt mask are ``trainer.decoding``'s, as in the rollout engine's decoder.
    """
    core, shape = model.model, AttentionShape.of(model.config)
    prompts, prompt_len = batch.prompt_ids.shape
    rows, width = batch.response_ids.shape
    device = batch.prompt_ids.device
    steps = max(width - 1, 1)
    packed = packed_input_index(batch)
    prompt_pos = left_padded_positions(batch.prompt_mask)
    response_pos = positions_after(prompt_pos, steps)[batch.owner].reshape(-1)[packed]
    prompt_valid = batch.prompt_mask.bool()
    prompt_allowed = prompt_attention_mask(prompt_valid)
    response_allowed = torch.cat([prompt_valid[batch.owner][:, None, None, :].expand(rows, 1, steps, prompt_len),
                                  torch.ones((steps, steps), dtype=torch.bool, device=device).tril().expand(
                                      rows, 1, steps, steps)], dim=-1)
    embed = model.get_input_embeddings()
    xp = embed(batch.prompt_ids)
    xr = embed(batch.response_ids[:, :steps].reshape(-1).index_select(0, packed))
    cos_p, sin_p = core.rotary_emb(xp, prompt_pos)
    cos_r, sin_r = core.rotary_emb(xr[None], response_pos[None])
    cos_p, sin_p, cos_r, sin_r = cos_p[:, None], sin_p[:, None], cos_r[0, :, None], sin_r[0, :, None]
    heads, kv_heads, head_dim, groups = shape.heads, shape.kv_heads, shape.head_dim, shape.groups

    def padded(packed_heads: torch.Tensor) -> torch.Tensor:
        """``[N, h, D]`` packed rows into ``[B, h, T-1, D]`` with zeros in the padding."""
        full = packed_heads.new_zeros((rows * steps, *packed_heads.shape[1:])).index_copy(0, packed, packed_heads)
        return full.view(rows, steps, *packed_heads.shape[1:]).transpose(1, 2)

    for layer in core.layers:
        attn = layer.self_attn
        hp, hr = layer.input_layernorm(xp), layer.input_layernorm(xr)
        qp = rotate(attn.q_norm(attn.q_proj(hp).view(prompts, prompt_len, heads, head_dim)).transpose(1, 2), cos_p, sin_p)
        kp = rotate(attn.k_norm(attn.k_proj(hp).view(prompts, prompt_len, kv_heads, head_dim)).transpose(1, 2),
                    cos_p, sin_p)
        vp = attn.v_proj(hp).view(prompts, prompt_len, kv_heads, head_dim).transpose(1, 2)
        out_p = torch.nn.functional.scaled_dot_product_attention(qp, repeat_kv(kp, groups), repeat_kv(vp, groups),
                                                                 attn_mask=prompt_allowed, scale=shape.scale)
        qr = rotate(attn.q_norm(attn.q_proj(hr).view(-1, heads, head_dim)), cos_r, sin_r)
        kr = rotate(attn.k_norm(attn.k_proj(hr).view(-1, kv_heads, head_dim)), cos_r, sin_r)
        vr = attn.v_proj(hr).view(-1, kv_heads, head_dim)
        keys = repeat_kv(torch.cat([kp[batch.owner], padded(kr)], dim=2), groups)
        values = repeat_kv(torch.cat([vp[batch.owner], padded(vr)], dim=2), groups)
        out_r = torch.nn.functional.scaled_dot_product_attention(padded(qr), keys, values, attn_mask=response_allowed,
                                                                 scale=shape.scale)
        xp = xp + attn.o_proj(out_p.transpose(1, 2).reshape(prompts, prompt_len, -1))
        xr = xr + attn.o_proj(out_r.transpose(1, 2).reshape(rows * steps, -1).index_select(0, packed))
        xp = xp + layer.mlp(layer.post_attention_layernorm(xp))
        xr = xr + layer.mlp(layer.post_attention_layernorm(xr))
    head = model.get_output_embeddings()
    first = head(core.norm(xp[:, -1]))[batch.owner]
    if width == 1:
        return first[:, None]
    rest = head(core.norm(xr))
    rest = rest.new_zeros((rows * steps, rest.shape[-1])).index_copy(0, packed, rest).view(rows, steps, -1)
    return torch.cat([first[:, None], rest], dim=1)


def packed_input_index(batch: TokenBatch) -> torch.Tensor:
    """The flat indices ``r * (T - 1) + t`` of the response inputs that predict a valid token, in order:
    input ``t`` of response ``r`` predicts token ``t + 1``, so it is needed where ``response_mask[r, t + 1]``.

    Built on the batch's device from the mask; ``nonzero_static`` takes the count from the host-side
    lengths (``sum(max(L_r - 1, 0))``), so the data-dependent size needs no device-to-host read. Should
    the lengths count more tokens than the mask holds, the missing slots are ``needed.numel()``, an
    index past the end that fails where it is used instead of wrapping to the last slot as -1 would.
    """
    needed = batch.response_mask[:, 1:].reshape(-1)
    count = sum(max(length - 1, 0) for length in batch.lengths)
    return torch.nonzero_static(needed, size=count, fill_value=needed.numel())[:, 0]


def token_entropy(logp: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's distribution, ``H_t = -sum_v p_v log p_v`` with ``p = exp(logp)``,
    ``[B, T]`` from log-probs ``[B, T, V]``.

    Monitoring only: computed under ``no_grad`` from a detached view of log-probs already computed
    (their values and graph are untouched; nothing is drawn), one response at a time so that only one
    ``[T, V]`` temporary exists beside them.
    """
    with torch.no_grad():
        values = logp.detach()
        return torch.stack([-(row.exp() * row).sum(-1) for row in values])


def response_logprobs(model, batch: TokenBatch, temperature: float = 1.0, aux_ids: torch.Tensor | None = None,
                      entropy: bool = False):
    """``log pi(a_t | prefix)`` for every response position, ``[B, T]`` (garbage where mask is 0).

    With ``aux_ids`` ``[B, T, K]`` it returns ``(logp, logp_aux)``: the log-probs of the response
    tokens and of K auxiliary tokens per position, gathered from the SAME forward pass (one gather).
    With ``entropy`` it returns ``(that, H)``: ``H`` ``[B, T]`` the entropy of every position's sampling
    distribution (``token_entropy`` of the same log-softmax, monitoring only).
    """
    logits = response_logits(model, batch).float()
    width = batch.response_ids.shape[1]
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    if aux_ids is None:
        out = logp.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    else:
        gathered = logp.gather(-1, torch.cat([batch.response_ids.unsqueeze(-1), aux_ids[:, :width]], dim=-1))
        out = gathered[..., 0], gathered[..., 1:]
    return (out, token_entropy(logp)) if entropy else out
