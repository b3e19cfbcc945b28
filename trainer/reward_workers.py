"""Reward scoring, in process or on Ray actors of the job-scoped Ray runtime.

With ``workload.reward_workers = N > 0`` the trainer scores responses on N Ray actors (one CPU
each) of the Ray runtime its job started (``RAY_ADDRESS``), with at most
``workload.reward_max_concurrency`` scoring tasks in flight: seed 000's smoke runs that could not
schedule their reward actors are why the launcher checks that the job's CPUs cover them.

Either way each response is scored by the workload's reward (``workload.reward``, ``facts.reward``: a built-in of
the label or a user's function of the row), and a value that is not a number in [0, 1] fails the run naming the
row (``facts.reward.RewardValueError``; a Ray actor's error reaches the trainer as that error's cause).
"""

from __future__ import annotations

import os
import sys

from facts.reward import DEFAULT_REWARD, SCORE_TIMEOUT_S, RewardValueError, reward

CHUNK = 8  # responses per remote call


def _where(index: int) -> str:
    return f"row {index} of the train split"


class LocalScorer:
    def __init__(self, reward_name: str = DEFAULT_REWARD):
        self.reward = reward(reward_name)

    def score(self, texts: list[str], examples) -> list[float]:
        """Each response's reward against its example (its label, or its row for a user's function)."""
        return [self.reward.score(t, e.label, e.row, _where(e.index)) for t, e in zip(texts, examples)]

    def close(self) -> None:
        pass


class RewardWorker:
    """A Ray actor that scores a chunk of (response, label, row, row index) items with the workload's reward."""

    def __init__(self, reward_name: str = DEFAULT_REWARD):
        self.reward = reward(reward_name)

    def score(self, items: list[tuple[str, str, dict | None, int]]) -> list[float]:
        return [self.reward.score(t, y, row, _where(i)) for t, y, row, i in items]


class RayRewardPool:
    def __init__(self, n_workers: int, max_concurrency: int, address: str, reward_name: str = DEFAULT_REWARD):
        import ray

        self._ray = ray
        # A user's reward module is found where the trainer found it: its actors get the trainer's import path.
        env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}} \
            if reward(reward_name).takes_row else None
        ray.init(address=address, log_to_driver=False, include_dashboard=False, configure_logging=False,
                 runtime_env=env)
        remote_cls = ray.remote(num_cpus=1)(RewardWorker)
        self.workers = [remote_cls.remote(reward_name) for _ in range(n_workers)]
        self.max_in_flight = max(1, max_concurrency)

    def score(self, texts: list[str], examples) -> list[float]:
        pairs = [(t, e.label, e.row, e.index) for t, e in zip(texts, examples)]
        chunks = [pairs[i:i + CHUNK] for i in range(0, len(pairs), CHUNK)]
        results: dict[int, list[float]] = {}
        pending: dict = {}
        next_chunk = 0
        while next_chunk < len(chunks) or pending:
            while next_chunk < len(chunks) and len(pending) < self.max_in_flight:
                worker = self.workers[next_chunk % len(self.workers)]
                pending[worker.score.remote(chunks[next_chunk])] = next_chunk
                next_chunk += 1
            done, _ = self._ray.wait(list(pending), num_returns=1, timeout=SCORE_TIMEOUT_S)
            if not done:
                raise RuntimeError(
                    f"no reward chunk finished within {SCORE_TIMEOUT_S:.0f} s: the reward actors could not be "
                    "scheduled (are the job's CPUs enough for its workers?)"
                )
            for ref in done:
                try:
                    results[pending.pop(ref)] = self._ray.get(ref)
                except self._ray.exceptions.RayTaskError as exc:  # the actor's own error, one line, as in process
                    cause = exc.as_instanceof_cause()
                    if isinstance(cause, RewardValueError):
                        raise RewardValueError(str(cause).splitlines()[-1].removeprefix("facts.reward.RewardValueError: ")) from exc
                    raise
        return [r for i in range(len(chunks)) for r in results[i]]

    def close(self) -> None:
        for w in self.workers:
            self._ray.kill(w)
        self._ray.shutdown()


def make_scorer(n_workers: int, max_concurrency: int, reward_name: str = DEFAULT_REWARD):
    if n_workers <= 0:
        return LocalScorer(reward_name)
    address = os.environ.get("RAY_ADDRESS")
    if not address:
        raise RuntimeError(
            f"workload.reward_workers={n_workers} needs the job-scoped Ray runtime (RAY_ADDRESS); run through "
            "launch.py, or set workload.reward_workers=0"
        )
    return RayRewardPool(n_workers, max_concurrency, address, reward_name)
