"""The eval's estimator and the shared initial evaluation's key, stated once: the trainer computes
them, the evidence recomputes them."""

from __future__ import annotations

import hashlib
import json
from math import comb


def identity_key(identity: dict) -> str:
    """SHA256 of the canonical JSON of everything that determines an evaluation's bits."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt with n samples, c correct: ``1 - C(n-c, k) / C(n, k)``."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)
