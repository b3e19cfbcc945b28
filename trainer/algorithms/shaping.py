"""DAPO's two batch-shaping rules (seed 002; Yu et al. 2025, "DAPO"): the overlong soft penalty and
the zero-variance prompt-group filter of dynamic sampling.

Its other two parts are settings of existing functions: clip-higher is ``ppo_clip_token_loss`` with
``clip_high > clip_low`` (0.28 / 0.2), and the global token-mean is ``reduce_loss(..., "token_mean",
group)``, whose denominator counts every valid token of every data-parallel rank.
"""

from __future__ import annotations

import torch


def overlong_penalty(lengths: torch.Tensor, max_len: int, cache: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment added to the reward of each response of length ``|y|``.

    With ``L = max_len`` (the response cap) and ``c = cache``:
    ``0`` if ``|y| <= L - c``; ``factor * ((L - c) - |y|) / c`` if ``L - c < |y| <= L``;
    ``-factor`` if ``|y| > L``. ``cache = 0`` switches the penalty off (all zeros).
    """
    lengths = lengths.to(torch.float64)
    zero = torch.zeros_like(lengths)
    if cache <= 0:
        return zero
    start = float(max_len - cache)
    ramp = (start - lengths) / float(cache) * factor
    return torch.where(lengths <= start, zero, torch.where(lengths <= max_len, ramp, torch.full_like(lengths, -factor)))


def zero_variance_groups(reward: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[P]`` bool: True for each prompt group whose ``group_size`` rewards are all equal.

    Such a group has zero group-relative advantage for every response, so it adds no gradient;
    dynamic sampling drops it and refills the slot from further prompts.
    """
    grouped = reward.reshape(-1, group_size)
    return grouped.amax(dim=1) == grouped.amin(dim=1)
