"""Structured per-step metrics: ``metrics.jsonl`` (one flushed JSON line per step) + TensorBoard.

Definitions of every key are in ``docs/run-directory.md``. ``train/ppo_kl`` is the policy drift
between the rollout policy and the current one inside a step (response-reduced logp_old - logp),
not a reference-policy KL: with one actor update per rollout batch it is zero by construction.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REQUIRED_KEYS = (
    "rollout/raw_reward", "rollout/returns", "rollout/adv_raw_mean", "rollout/adv_raw_std",
    "rollout/adv_norm_mean", "rollout/adv_norm_std", "rollout/valid_tokens", "rollout/zero_variance",
    "rollout/all_zero_reward", "rollout/response_len", "rollout/truncated", "train/loss", "train/pg_loss",
    "train/ppo_kl", "train/clip_frac", "train/grad_norm", "perf/response_tok_per_s", "perf/step_s",
    "perf/peak_mem_gib",
)
KL_LOSS_KEY = "train/kl_loss"  # present exactly when the algorithm has a separate KL loss


class MetricsLog:
    """Append-only step log. On resume from step ``k`` it first drops any line with step >= k
    (steps a killed run logged after its last checkpoint), so the file stays contiguous."""

    def __init__(self, run_dir: Path, start_step: int = 0):
        self.path = run_dir / "metrics.jsonl"
        if start_step > 0 and self.path.exists():
            self._truncate_to(start_step)
        elif start_step == 0 and self.path.exists():
            self.path.unlink()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run
        from torch.utils.tensorboard import SummaryWriter

        # purge_step hides events a killed run wrote for steps >= start_step, as the JSONL truncation does.
        self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=start_step or None)

    def _truncate_to(self, start_step: int) -> None:
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break  # a torn last line from a killed run
            if record.get("step", start_step) >= start_step:
                break
            kept.append(line)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, self.path)

    def write(self, step: int, values: dict[str, float]) -> None:
        record = {"step": step, **{k: values[k] for k in sorted(values)}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        for key, value in values.items():
            self._tb.add_scalar(key, value, step)
        self._tb.flush()

    def close(self) -> None:
        self._file.close()
        self._tb.close()
