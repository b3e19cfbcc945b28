"""Global masked advantage normalisation (seed 001, "全局 masked normalization").

The population is every valid response token of every data-parallel rank of the closed,
synchronous global batch:

    S = {(r, i, t) | m[r, i, t] = 1},  N = |S|
    mu      = (1/N) * sum_S A
    sigma^2 = (1/N) * sum_S (A - mu)^2          (population variance, ddof = 0, two-pass)
    A_hat   = m * (A - mu) * rsqrt(max(sigma^2, var_floor))

`var_floor` is a floor on the *variance* (OpenRLHF's convention), not `sqrt(var) + eps`.

Implementation rules, each load-bearing:
- Masked positions are *selected away* with `torch.where` before any arithmetic, never multiplied
  by zero, so a NaN or Inf stored in padding cannot reach a valid token (0 * NaN = NaN). Only once
  the values are finite may a pass multiply by the 0/1 mask.
- Centring and scaling run in float64 and the result is cast once; moments are accumulated in
  float64 and reduced across ranks with `all_reduce(SUM)` of
  `[sum, count]` then of `[sum of centred squares]`; a rank with no valid token contributes zeros
  and still joins both collectives, so no rank can deadlock the others.
- There is no host synchronisation: no `.item()`, `.cpu()`, `.tolist()`, `bool(tensor)` and no
  Python branch on a tensor value. An empty global population is reported by a device-side
  assertion (`fail_on_device`), which fires on every rank because every rank holds the same
  reduced count; the denominator is clamped to 1 so the arithmetic stays finite either way.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from trainer.algorithms.masking import as_bool_mask, valid_count

EMPTY_MASK_MESSAGE = "masked_global_normalize: the response mask is empty on every rank (N = 0)"


def fail_on_device(condition: torch.Tensor, message: str) -> None:
    """Raise ``RuntimeError`` when the 0-dim bool ``condition`` is False, without reading it on the host.

    On a CPU the error is raised here; on a GPU the kernel fails and the error surfaces at the next
    synchronisation (the step's metrics read), so the hot path never waits for the device.

    The one call of a private torch API in the project, on purpose: torch has no public
    device-side assert (``torch._assert_async`` awaits a public name, pytorch/pytorch#53284), and
    every public way to fail on a tensor's value (``if bool(t)``, ``.item()``, ``assert``) reads it
    on the host first. ``tests/trainer/test_no_host_sync.py`` pins both halves: it raises with the
    message, and the normaliser reads nothing on the host.
    """
    torch._assert_async(condition, message)


def _all_reduce_sum(t: torch.Tensor, group) -> torch.Tensor:
    """Sum `t` over the ranks of `group` in place; `group=None` means a single-rank population."""
    if group is not None:
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    return t


def masked_global_normalize(
    values: torch.Tensor,
    mask: torch.Tensor,
    group=None,
    var_floor: float = 1e-8,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalise `values` by the population moments of its valid tokens over all ranks of `group`.

    ``A_hat = m * (A - mu) * rsqrt(max(sigma^2, var_floor))`` with ``mu``, ``sigma^2`` the
    population (ddof=0) mean and variance over every valid token of every rank.

    Args:
        values: ``[B, T]`` raw advantages (any float dtype); anything may be stored where mask is 0.
        mask: ``[B, T]`` bool or 0/1 response loss mask.
        group: a ``torch.distributed`` process group whose ranks share the population, or ``None``
            for a single-rank population (no collective is issued).
        var_floor: lower bound on the variance before the reciprocal square root.

    Returns:
        ``(normalized, mean, var, count)``: ``normalized`` has the shape and dtype of ``values`` and
        is exactly zero outside the mask; ``mean`` and ``var`` are float64 scalars of the global
        population, ``count`` its size N (float64 scalar). Zero variance or a single valid token
        gives finite zeros. A globally empty mask raises ``RuntimeError`` (``fail_on_device``).
    """
    valid = as_bool_mask(mask)
    x = values.detach()  # advantages are constants: nothing here is differentiated
    # Pass 1: select (NaN/Inf in padding become 0 before any arithmetic), widen once to float64,
    # then the global sum and count -> mean. (Integer count: exact.)
    wide = torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device)).to(torch.float64)
    sum_and_count = torch.stack([wide.sum(), valid_count(valid).to(torch.float64)])
    _all_reduce_sum(sum_and_count, group)
    total, count = sum_and_count[0], sum_and_count[1]
    fail_on_device(count > 0, EMPTY_MASK_MESSAGE)
    safe_count = count.clamp_min(1.0)
    mean = total / safe_count

    # Pass 2: centred squares around the *global* mean (never E[x^2] - E[x]^2), in float64: a float32
    # mean subtracted in float32 loses up to 7.5e-4 of the centred value when sigma << |mu| (the
    # audit's case). In place on the float64 copy, ``wide - m * mean``: x - mu on valid tokens and
    # exactly 0 elsewhere (0 - 0 * mu), in one all-float64 pass (the 0/1 mask is finite here).
    wide.addcmul_(valid.view(torch.uint8).to(torch.float64), mean.reshape(1), value=-1.0)
    flat = wide.reshape(-1)
    sum_sq = torch.linalg.vecdot(flat, flat).reshape(1)
    _all_reduce_sum(sum_sq, group)
    var = sum_sq[0] / safe_count

    # `wide` is exactly 0 outside the mask and the scale is finite (var >= floor), so the product
    # is exactly 0 there too; the float64 product is rounded once, into the output's dtype (an
    # in-place product then a copy: about half the time of a multiply that casts into `out`).
    wide.mul_(torch.rsqrt(var.clamp_min(var_floor)))
    return wide.to(x.dtype), mean, var, count
