"""Algorithm traits that reports and older records need without importing the trainer."""

from __future__ import annotations

# Short name -> display name, in report order.
DISPLAY_NAMES = {
    "grpo": "GRPO", "rpp": "REINFORCE++", "rppb": "REINFORCE++-baseline", "gspo": "GSPO", "sapo": "SAPO",
    "dapo": "DAPO", "is_pg": "IS-PG", "score_centering": "Score centering",
}
ALGO_ORDER = tuple(DISPLAY_NAMES)
# Whether the shipped config of an algorithm logs a separate KL loss (True: required, False: absent).
# Used only for runs whose run.json predates its own metric_keys list.
KL_LOSS_BY_ALGO = {"grpo": True, "rpp": False, "rppb": True}


def display_name(algo: str) -> str:
    """``rpp`` -> ``REINFORCE++``; an unknown short name is shown as is."""
    return DISPLAY_NAMES.get(algo, algo)


def algo_sort_key(algo: str) -> tuple[int, str]:
    """Known algorithms in report order, then the rest alphabetically."""
    return (ALGO_ORDER.index(algo), "") if algo in ALGO_ORDER else (len(ALGO_ORDER), algo)
