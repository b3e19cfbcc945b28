"""Which reward re-scores a run (evidence.evaluation.rewards): a built-in by its recorded name; a user's function only when the
reviewer passes it with the source SHA256 the run recorded, never imported from what a record names."""

from __future__ import annotations

import hashlib
import sys

import pytest

from evidence.evaluation.rewards import RewardError, recorded_reward, rescoring, reviewer_rewards
from facts.reward import math_boxed, math_reward

SOURCE = "def score(response, row):\n    return float(row['answer'] in response)\n"


def _run(reward: dict | None) -> dict:
    return {} if reward is None else {"task": {"reward": reward}}


def test_a_record_without_a_task_is_the_embedded_default():
    assert recorded_reward({}) == {"name": "gsm8k_hash"} and recorded_reward(None) == {"name": "gsm8k_hash"}
    assert rescoring({}, "runs/a/run.json").scorer.function is math_reward


def test_a_built_in_rescores_by_its_name():
    found = rescoring(_run({"name": "math_boxed", "library": "math-verify 0.9.0"}), "runs/a/run.json")
    assert found.scorer.function is math_boxed and found.note is None
    unknown = rescoring(_run({"name": "exact"}), "runs/a/run.json")
    assert unknown.scorer is None and "neither a built-in" in unknown.note


def test_a_users_function_is_not_imported_from_the_record(tmp_path, monkeypatch):
    (tmp_path / "ev_reward_mod.py").write_text("raise SystemExit('imported!')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = rescoring(_run({"name": "ev_reward_mod:score", "source_sha256": "ab" * 32}), "runs/a/run.json")
    assert found.scorer is None and "ev_reward_mod" not in sys.modules
    assert found.note.startswith("runs/a/run.json: the rewards were not re-derived: its reward is the user's function "
                                 "ev_reward_mod:score, which is never imported from a bundle; re-score them with "
                                 "--reward ev_reward_mod:score")


def test_the_reviewers_function_rescores_only_with_the_recorded_source(tmp_path, monkeypatch):
    (tmp_path / "ev_reward_ok.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()
    with reviewer_rewards(["ev_reward_ok:score"]):
        found = rescoring(_run({"name": "ev_reward_ok:score", "source_sha256": digest}), "r")
        assert found.note is None and found.scorer.score("it is 4", "x", {"answer": "4"}, "row 0") == 1.0
        other = rescoring(_run({"name": "ev_reward_ok:score", "source_sha256": "cd" * 32}), "r")
        assert other.scorer is None and f"has source sha256 {digest[:12]}…, the run's was cdcdcdcdcdcd…" in other.note
    assert rescoring(_run({"name": "ev_reward_ok:score", "source_sha256": digest}), "r").scorer is None  # held no more
    with pytest.raises(RewardError, match="does not import"), reviewer_rewards(["ev_no_such_module:score"]):
        pass
    with pytest.raises(RewardError, match="name a function as module:function"), reviewer_rewards(["math_boxed"]):
        pass
