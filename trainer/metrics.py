"""Structured per-step metrics: ``metrics.jsonl`` (one flushed JSON line per step) + TensorBoard.

Definitions of every key are in ``docs/run-directory.md``. ``train/ppo_kl`` is the policy drift
between the rollout policy and the current one inside a step (response-reduced logp_old - logp),
not a reference-policy KL: with one actor update per rollout batch it is zero by construction.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from facts import DYNAMIC_SAMPLING_KEYS, KL_LOSS_KEY, METRICS_LOG, OFF_POLICY_KEYS, REQUIRED_KEYS
from facts.files import TENSORBOARD_DIR

__all__ = ["KL_LOSS_KEY", "REQUIRED_KEYS", "MetricsLog", "metric_keys"]


def metric_keys(algo) -> list[str]:
    """Every key a run of ``algo`` (an ``AlgoConfig``) logs at every step, sorted; written to
    ``run.json`` so that the evidence learns them from the run itself."""
    keys = [*REQUIRED_KEYS, *OFF_POLICY_KEYS]
    if algo.use_kl_loss:
        keys.append(KL_LOSS_KEY)
    if algo.dynamic_sampling:
        keys.extend(DYNAMIC_SAMPLING_KEYS)
    return sorted(keys)


class MetricsLog:
    """Append-only step log. On resume from step ``k`` it first drops any line with step >= k
    (steps a killed run logged after its last checkpoint), so the file stays contiguous."""

    def __init__(self, run_dir: Path, start_step: int = 0):
        self.path = run_dir / METRICS_LOG
        if start_step > 0 and self.path.exists():
            self._truncate_to(start_step)
        elif start_step == 0 and self.path.exists():
            self.path.unlink()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run
        from torch.utils.tensorboard import SummaryWriter

        # purge_step hides events a killed run wrote for steps >= start_step, as the JSONL truncation does.
        self._tb = SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR), purge_step=start_step or None)

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


def eval_scalars(initial: dict, final: dict) -> dict[str, dict[str, float]]:
    """The pass@k values of ``eval.json``'s two entries as TensorBoard tags: ``eval/pass@k`` for the
    final checkpoint, ``eval_initial/pass@k`` for the initial-checkpoint control."""
    return {prefix: {f"{prefix}/{key}": float(value) for key, value in sorted(entry.items())
                     if key.startswith("pass@") and isinstance(value, (int, float))}
            for prefix, entry in (("eval", final), ("eval_initial", initial))}


def log_eval(run_dir: Path, n_updates: int, initial: dict, final: dict) -> str:
    """Write the eval's pass@k to the run's TensorBoard (final at step ``n_updates``, the initial
    control at step 0) and return the one line the trainer logs."""
    from torch.utils.tensorboard import SummaryWriter

    scalars = eval_scalars(initial, final)
    with SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR)) as writer:
        for prefix, step in (("eval_initial", 0), ("eval", n_updates)):
            for tag, value in scalars[prefix].items():
                writer.add_scalar(tag, value, step)
    shown = {prefix: " ".join(f"{tag.split('/', 1)[1]}={value:.4f}" for tag, value in values.items())
             for prefix, values in scalars.items()}
    return f"eval final ({final.get('checkpoint', 'final')}): {shown['eval']}; initial control: {shown['eval_initial']}"
