"""The policy model: loading, and per-token log-probabilities of sampled responses."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.rollout import left_pad


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
    """Prompt (left-padded) followed by response (right-padded) for a teacher-forced forward."""

    input_ids: torch.Tensor  # [B, Lp + T]
    attention_mask: torch.Tensor  # [B, Lp + T]
    position_ids: torch.Tensor  # [B, Lp + T]
    response_ids: torch.Tensor  # [B, T]
    response_mask: torch.Tensor  # [B, T] bool: valid response tokens (the end token included)
    prompt_width: int

    def rows(self, rows: slice) -> TokenBatch:
        """The same batch restricted to a slice of its responses (a PPO mini-batch)."""
        return TokenBatch(self.input_ids[rows], self.attention_mask[rows], self.position_ids[rows],
                          self.response_ids[rows], self.response_mask[rows], self.prompt_width)


def build_token_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int, device) -> TokenBatch:
    prompt_ids, prompt_attn = left_pad(prompts, pad_id, device)
    width = max(1, max(len(r) for r in responses))
    resp = torch.full((len(responses), width), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((len(responses), width), dtype=torch.bool)
    for i, r in enumerate(responses):
        resp[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        resp_mask[i, : len(r)] = True
    resp, resp_mask = resp.to(device), resp_mask.to(device)
    attn = torch.cat([prompt_attn, resp_mask.long()], dim=1)
    positions = (attn.cumsum(-1) - 1).clamp_min(0)
    return TokenBatch(torch.cat([prompt_ids, resp], 1), attn, positions, resp, resp_mask, prompt_ids.shape[1])


def response_logprobs(model, batch: TokenBatch, temperature: float = 1.0, aux_ids: torch.Tensor | None = None):
    """``log pi(a_t | prefix)`` for every response position, ``[B, T]`` (garbage where mask is 0).

    With ``aux_ids`` ``[B, T, K]`` it returns ``(logp, logp_aux)``: the log-probs of the response
    tokens and of K auxiliary tokens per position, gathered from the SAME forward pass (one gather).
    """
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                   position_ids=batch.position_ids, use_cache=False).logits
    # The logit at position p predicts token p + 1: response token t sits at prompt_width + t.
    width = batch.response_ids.shape[1]
    logits = logits[:, batch.prompt_width - 1 : batch.prompt_width - 1 + width, :].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    if aux_ids is None:
        return logp.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    gathered = logp.gather(-1, torch.cat([batch.response_ids.unsqueeze(-1), aux_ids[:, :width]], dim=-1))
    return gathered[..., 0], gathered[..., 1:]
