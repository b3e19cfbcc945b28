"""The policy model: loading, and per-token log-probabilities of sampled responses."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.rollout import distinct_prompts, left_pad


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

    def rows(self, rows: slice) -> TokenBatch:
        """The same batch restricted to a slice of its responses (a PPO mini-batch)."""
        return TokenBatch(self.prompt_ids, self.prompt_mask, self.owner[rows], self.response_ids[rows],
                          self.response_mask[rows])


def build_token_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int, device) -> TokenBatch:
    distinct, owner = distinct_prompts(prompts)
    prompt_ids, prompt_mask = left_pad(distinct, pad_id, device)
    width = max(1, max(len(r) for r in responses))
    resp = torch.full((len(responses), width), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((len(responses), width), dtype=torch.bool)
    for i, r in enumerate(responses):
        resp[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        resp_mask[i, : len(r)] = True
    return TokenBatch(prompt_ids, prompt_mask, torch.tensor(owner, device=device), resp.to(device), resp_mask.to(device))


def response_logits(model, batch: TokenBatch) -> torch.Tensor:
    """The logits that predict every response token, ``[B, T, V]``: one forward over the distinct
    prompts (its KV cache then gathered per response), one over the responses on top of it.

    The logit at the last prompt position predicts response token 0; the one at response token t
    predicts token t + 1, so the response forward reads tokens ``0 .. T-2``.
    """
    prompt_pos = (batch.prompt_mask.cumsum(-1) - 1).clamp_min(0)
    out = model(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, position_ids=prompt_pos, use_cache=True)
    first = out.logits[:, -1:, :][batch.owner]
    width = batch.response_ids.shape[1]
    if width == 1:
        return first
    cache = out.cache
    cache.batch_select_indices(batch.owner)
    attn = torch.cat([batch.prompt_mask[batch.owner], batch.response_mask[:, :-1].long()], dim=1)
    steps = torch.arange(1, width, device=prompt_pos.device)
    positions = prompt_pos[batch.owner, -1:] + steps
    rest = model(input_ids=batch.response_ids[:, :-1], attention_mask=attn, position_ids=positions, cache=cache,
                 use_cache=True).logits
    return torch.cat([first, rest], dim=1)


def response_logprobs(model, batch: TokenBatch, temperature: float = 1.0, aux_ids: torch.Tensor | None = None):
    """``log pi(a_t | prefix)`` for every response position, ``[B, T]`` (garbage where mask is 0).

    With ``aux_ids`` ``[B, T, K]`` it returns ``(logp, logp_aux)``: the log-probs of the response
    tokens and of K auxiliary tokens per position, gathered from the SAME forward pass (one gather).
    """
    logits = response_logits(model, batch).float()
    width = batch.response_ids.shape[1]
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    if aux_ids is None:
        return logp.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    gathered = logp.gather(-1, torch.cat([batch.response_ids.unsqueeze(-1), aux_ids[:, :width]], dim=-1))
    return gathered[..., 0], gathered[..., 1:]
