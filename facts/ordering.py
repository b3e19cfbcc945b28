"""The order people expect job names in: numbers inside a name by value (grpo-42 before grpo-1234)."""

from __future__ import annotations

import re


def natural_key(name: str) -> tuple:
    """Sort key that orders the numbers inside a name by value: grpo-42 before grpo-1234."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name))
