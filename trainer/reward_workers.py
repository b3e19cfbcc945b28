"""Reward scoring, in process or on Ray actors of the job-scoped Ray runtime.

With ``workload.reward_workers = N > 0`` the trainer scores responses on N Ray actors (one CPU
each) of the Ray runtime its job started (``RAY_ADDRESS``), with at most
``workload.reward_max_concurrency`` scoring tasks in flight: seed 000's smoke runs that could not
schedule their reward actors are why the launcher checks that the job's CPUs cover them.
"""

from __future__ import annotations

import os

from trainer.reward import math_reward

CHUNK = 8  # responses per remote call
SCORE_TIMEOUT_S = 600.0  # an actor Ray cannot schedule must fail the job, not hang it to its time limit


class LocalScorer:
    def score(self, texts: list[str], labels: list[str]) -> list[float]:
        return [math_reward(t, y) for t, y in zip(texts, labels)]

    def close(self) -> None:
        pass


class RewardWorker:
    """A Ray actor that scores a chunk of (response, label) pairs."""

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        return [math_reward(t, y) for t, y in pairs]


class RayRewardPool:
    def __init__(self, n_workers: int, max_concurrency: int, address: str):
        import ray

        self._ray = ray
        ray.init(address=address, log_to_driver=False, include_dashboard=False, configure_logging=False)
        remote_cls = ray.remote(num_cpus=1)(RewardWorker)
        self.workers = [remote_cls.remote() for _ in range(n_workers)]
        self.max_in_flight = max(1, max_concurrency)

    def score(self, texts: list[str], labels: list[str]) -> list[float]:
        pairs = list(zip(texts, labels))
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
                results[pending.pop(ref)] = self._ray.get(ref)
        return [r for i in range(len(chunks)) for r in results[i]]

    def close(self) -> None:
        for w in self.workers:
            self._ray.kill(w)
        self._ray.shutdown()


def make_scorer(n_workers: int, max_concurrency: int):
    if n_workers <= 0:
        return LocalScorer()
    address = os.environ.get("RAY_ADDRESS")
    if not address:
        raise RuntimeError(
            f"workload.reward_workers={n_workers} needs the job-scoped Ray runtime (RAY_ADDRESS); run through "
            "launch.py, or set workload.reward_workers=0"
        )
    return RayRewardPool(n_workers, max_concurrency, address)
