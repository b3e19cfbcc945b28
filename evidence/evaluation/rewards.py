"""Which reward re-scores a run's responses, and when it cannot: the build's eval gate and the audit both ask here.

A run records its reward in run.json's ``task.reward`` (a shared initial evaluation in its identity's ``task``;
a record without one is the embedded default's, ``gsm8k_hash``). A built-in reward (``facts.reward``) re-scores
as ever. A user's ``module:function`` is never imported from what a bundle or a run directory names: its
responses are re-scored only with a function the reviewer passes themselves (``--reward module:function``, which
``reviewer_rewards`` holds while a build or an audit runs) whose module's source has the SHA256 the run recorded;
otherwise the rewards are not re-derived, and one note says so and how to do it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from facts.reward import (
    BUILTIN_REWARDS,
    DEFAULT_REWARD,
    Reward,
    RewardError,
    is_user_reward,
    reward,
    user_reward,
)
from facts.task import TASK_FIELD

_REVIEWER: dict[str, Reward] = {}  # the functions the reviewer passed (--reward), by name, while a check runs


@contextlib.contextmanager
def reviewer_rewards(names) -> Iterator[None]:
    """Hold the reviewer's ``module:function`` rewards (imported here: the reviewer chose to run them) while a
    build or an audit runs; ``RewardError`` (one line) for one that does not import."""
    imported = {}
    for name in names or ():
        if not is_user_reward(name):
            raise RewardError(f"--reward {name}: name a function as module:function (built-in rewards re-score "
                              "without it)")
        imported[name] = user_reward(name)
    saved = dict(_REVIEWER)
    _REVIEWER.update(imported)
    try:
        yield
    finally:
        _REVIEWER.clear()
        _REVIEWER.update(saved)


@dataclass(frozen=True)
class Rescoring:
    """The reward a run's responses are re-scored with (None: not re-derived) and, then, why in one note."""

    scorer: Reward | None
    note: str | None = None


def recorded_reward(record) -> dict:
    """The reward record of a run.json (or an evaluation identity): its ``task.reward``; the default without one."""
    task = record.get(TASK_FIELD) if isinstance(record, dict) else None
    found = task.get("reward") if isinstance(task, dict) else None
    return found if isinstance(found, dict) and isinstance(found.get("name"), str) else {"name": DEFAULT_REWARD}


def rescoring(record, where: str) -> Rescoring:
    """How the responses of ``where`` (a run, or a shared evaluation) are re-scored, by its record's reward."""
    recorded = recorded_reward(record)
    name = recorded["name"]
    if name in BUILTIN_REWARDS:
        return Rescoring(reward(name))
    if not is_user_reward(name):
        return Rescoring(None, f"{where}: its reward {name!r} is neither a built-in ({', '.join(BUILTIN_REWARDS)}) "
                               "nor module:function; its rewards were not re-derived")
    digest = recorded.get("source_sha256")
    given = _REVIEWER.get(name)
    how = (f"re-score them with --reward {name}, run where the module {name.split(':')[0]} with that source "
           f"(sha256 {str(digest)[:12]}…) is importable")
    if given is None:
        return Rescoring(None, f"{where}: the rewards were not re-derived: its reward is the user's function {name}, "
                               f"which is never imported from a bundle; {how}")
    if given.source_sha256 != digest:
        return Rescoring(None, f"{where}: the rewards were not re-derived: --reward {name} has source sha256 "
                               f"{str(given.source_sha256)[:12]}…, the run's was {str(digest)[:12]}…; {how}")
    return Rescoring(given)


__all__ = ["Rescoring", "RewardError", "recorded_reward", "rescoring", "reviewer_rewards"]
