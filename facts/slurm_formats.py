"""Slurm's value formats, stated once: the ``--time``, ``--mem`` and ``--gres`` forms a cluster
profile may write, and what they mean in minutes and megabytes.

The settings schema (``trainer.schema.ClusterSchema``) and the Slurm back end's profile check
(``launcher.slurm.slurm_profile``) both refuse a value with these, so the two can never disagree on what
Slurm accepts. ``fullmatch`` throughout: a trailing newline is no part of a valid value.
"""

from __future__ import annotations

import re

# --time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (whole minutes as an integer too: ``time_ok``).
TIME_FORMS = "M, M:S, H:M:S, D-H, D-H:M or D-H:M:S"
TIME_PATTERN = r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}"
# --mem: a whole number, optionally with Slurm's unit suffix (the default unit is MB).
MEM_PATTERN = r"\d+[KMGT]?"
# --gres: name[:type][:count], comma-separated (``gpu``, ``gpu:2``, ``gpu:NVIDIAA40:1,shard:2``).
_GRES_ITEM = r"[A-Za-z][A-Za-z0-9_]*(:[A-Za-z0-9_.-]+)?(:[0-9]+)?"
GRES_PATTERN = rf"{_GRES_ITEM}(,{_GRES_ITEM})*"
# What a partition's MaxTime says when it has no limit.
NO_TIME_LIMIT = ("UNLIMITED", "INFINITE")

_MB_PER_UNIT = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def time_ok(value) -> bool:
    """A ``--time`` value: whole minutes > 0 (an integer) or a string of ``TIME_FORMS``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value > 0
    return isinstance(value, str) and re.fullmatch(TIME_PATTERN, value) is not None


def mem_ok(value) -> bool:
    return isinstance(value, str) and re.fullmatch(MEM_PATTERN, value) is not None


def gres_ok(value) -> bool:
    return isinstance(value, str) and re.fullmatch(GRES_PATTERN, value) is not None


def time_to_minutes(value) -> int:
    """Slurm ``--time`` -> whole minutes (seconds round up): ``M`` -> M, ``M:S``, ``H:M:S``,
    ``D-H`` -> 1440 D + 60 H, ``D-H:M``, ``D-H:M:S``."""
    text = str(value).strip()
    days, sep, rest = text.partition("-")
    if not sep:
        days, rest = "0", text
    parts = [int(p) for p in rest.split(":")]
    if sep:  # D-H, D-H:M, D-H:M:S
        h, m, sec = (parts + [0, 0])[:3]
    elif len(parts) == 1:
        h, m, sec = 0, parts[0], 0
    elif len(parts) == 2:
        h, m, sec = 0, parts[0], parts[1]
    else:
        h, m, sec = parts[:3]
    return int(days) * 1440 + h * 60 + m + (1 if sec else 0)


def limit_minutes(text: str) -> int | None:
    """A time limit as Slurm reports it (a partition's MaxTime) -> minutes; None for no limit."""
    if str(text).upper() in NO_TIME_LIMIT:
        return None
    return time_to_minutes(text)


def mem_mb(text: str) -> int:
    """Slurm size -> MB (Slurm's default unit): ``4G`` -> 4096, ``512`` -> 512, ``2048K`` -> 2."""
    text = str(text).strip().upper()
    factor = _MB_PER_UNIT.get(text[-1:])
    return int(float(text[:-1]) * factor) if factor is not None else int(text)
