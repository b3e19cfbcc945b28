"""Structured per-step metrics: ``metrics.jsonl`` (one flushed JSON line per step) + TensorBoard.

Definitions of every key are in ``docs/run-directory.md``. ``train/ppo_kl`` is the policy drift
between the rollout policy and the current one inside a step (response-reduced logp_old - logp),
not a reference-policy KL: with one actor update per rollout batch it is zero by construction.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from facts import DYNAMIC_SAMPLING_KEYS, KL_LOSS_KEY, METRICS_LOG, OFF_POLICY_KEYS, REQUIRED_KEYS
from facts.data_parallel_ranks import rank_log, step_digest
from facts.engines import TORCH_ENGINE
from facts.files import TENSORBOARD_DIR
from facts.metrics import (
    EVAL_SECONDS_TAG,
    EVAL_TAG_KEYS,
    IDENTICAL_GROUPS_KEY,
    MISMATCH_KEYS,
    TENSORBOARD_ONLY_TAGS,
    eval_line,
    eval_tag,
)
from facts.states import RUN_COMPLETED, RUN_FAILED

__all__ = ["KL_LOSS_KEY", "REQUIRED_KEYS", "SESSION_STATUS", "MetricsLog", "RankLog", "metric_keys",
           "split_board_only"]

# A run's status (run.json's) as the HParams dashboard's session status (tensorboard.plugins.hparams.api_pb2.Status).
SESSION_STATUS = {RUN_COMPLETED: "STATUS_SUCCESS", RUN_FAILED: "STATUS_FAILURE"}


def metric_keys(algo, engine: str = TORCH_ENGINE) -> list[str]:
    """Every key a run of ``algo`` (an ``AlgoConfig``) with rollout engine ``engine`` logs at every step, sorted;
    written to ``run.json`` so that the evidence learns them from the run itself."""
    keys = [*REQUIRED_KEYS, *OFF_POLICY_KEYS, IDENTICAL_GROUPS_KEY]
    if engine != TORCH_ENGINE:
        keys.extend(MISMATCH_KEYS)
    if algo.use_kl_loss:
        keys.append(KL_LOSS_KEY)
    if algo.dynamic_sampling:
        keys.extend(DYNAMIC_SAMPLING_KEYS)
    return sorted(keys)


def split_board_only(values: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """A step's values as ``(metrics.jsonl's, TensorBoard-only)``: the tags of ``TENSORBOARD_ONLY_TAGS``
    go to TensorBoard alone, so metrics.jsonl (and each rank's digest of it) keeps exactly its keys."""
    board = {key: values[key] for key in TENSORBOARD_ONLY_TAGS if key in values}
    return {key: value for key, value in values.items() if key not in board}, board


def hparam_values(settings: dict, prefix: str = "") -> dict[str, bool | int | float | str]:
    """A nested settings mapping as the HParams dashboard's flat ``{"workload.lr": 1e-4, ...}``: numbers,
    booleans and strings as they are, a list as its text, a null left out (the dashboard has no null)."""
    flat: dict[str, bool | int | float | str] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(hparam_values(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        elif value is not None:
            flat[name] = json.dumps(value)
    return flat


def _keep_steps_before(path: Path, start_step: int) -> None:
    """Drop every line of a step log from ``start_step`` on (and a torn last line): what a killed run
    logged after its last checkpoint."""
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break  # a torn last line from a killed run
        if record.get("step", start_step) >= start_step:
            break
        kept.append(line)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    os.replace(tmp, path)


class RankLog:
    """One rank's record of its steps, ``run/ranks/rank<r>.jsonl``: per step ``{"step", "rank", "host",
    "digest"}``, the digest (``facts.data_parallel_ranks.step_digest``) of the step's reduced values as this rank holds
    them. Every rank holds the same values after the all_reduces, so the digests agree across ranks and
    with rank 0's ``metrics.jsonl`` line, which the evidence checks. Truncated on resume like the log."""

    def __init__(self, run_dir: Path, rank: int, start_step: int = 0):
        self.path, self.rank, self.host = rank_log(run_dir, rank), rank, socket.gethostname()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if start_step > 0 and self.path.exists():
            _keep_steps_before(self.path, start_step)
        elif start_step == 0:
            self.path.unlink(missing_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run

    def write(self, step: int, values: dict[str, float]) -> None:
        record = {"step": step, "rank": self.rank, "host": self.host, "digest": step_digest(values)}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


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
        _keep_steps_before(self.path, start_step)

    def write(self, step: int, values: dict[str, float], board: dict[str, float] | None = None) -> None:
        """One step: ``values`` to metrics.jsonl and TensorBoard, ``board`` (TensorBoard-only tags) to
        TensorBoard alone."""
        record = {"step": step, **{k: values[k] for k in sorted(values)}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        for key, value in {**values, **(board or {})}.items():
            self._tb.add_scalar(key, value, step)
        self._tb.flush()

    def write_eval(self, step: int, summary: dict, seconds: float | None = None) -> None:
        """An evaluation on the ``eval/`` tags at ``step`` (its wall seconds on ``perf/eval_s``)."""
        for tag, value in eval_scalars(summary).items():
            self._tb.add_scalar(tag, value, step)
        if seconds is not None:
            self._tb.add_scalar(EVAL_SECONDS_TAG, seconds, step)
        self._tb.flush()

    def write_hparams(self, hparams: dict[str, bool | int | float | str]) -> None:
        """The run's settings as the HParams dashboard's session (``write_hparams_session``)."""
        write_hparams_session(self.path.parent / TENSORBOARD_DIR, hparams)

    def write_session_end(self, status: str) -> None:
        """The end of the run's HParams session (``write_session_end``). A run stopped for a requeue writes
        none: its session goes on in the start that resumes it."""
        write_session_end(self.path.parent / TENSORBOARD_DIR, status)

    def close(self) -> None:
        self._file.close()
        self._tb.close()


def write_hparams_session(log_dir: Path, hparams: dict[str, bool | int | float | str]) -> None:
    """Settings as the HParams dashboard's session start (TensorBoard's ``hparams_pb``), in an event file of its
    own in the run directory ``log_dir``."""
    from tensorboard.plugins.hparams.summary_v2 import hparams_pb  # api.py imports tensorflow (keras)
    from torch.utils.tensorboard.writer import FileWriter

    writer = FileWriter(str(log_dir))
    writer.add_summary(hparams_pb(hparams))
    writer.close()


def write_session_end(log_dir: Path, status: str) -> None:
    """The end of the HParams dashboard's session in the run directory ``log_dir`` (without it every session
    shows ``STATUS_UNKNOWN``): the run's status (``SESSION_STATUS``: completed is ``STATUS_SUCCESS``, failed
    ``STATUS_FAILURE``) and the time, in an event file of its own beside the session's start."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
    from torch.utils.tensorboard.writer import FileWriter

    info = plugin_data_pb2.SessionEndInfo(status=api_pb2.Status.Value(SESSION_STATUS[status]), end_time_secs=time.time())
    content = plugin_data_pb2.HParamsPluginData(session_end_info=info)
    summary = Summary(value=[Summary.Value(tag=metadata.SESSION_END_INFO_TAG, tensor=metadata.NULL_TENSOR,
                                           metadata=metadata.create_summary_metadata(content))])
    writer = FileWriter(str(log_dir))
    writer.add_summary(summary)
    writer.close()


def eval_scalars(summary: dict) -> dict[str, float]:
    """One evaluation's values (an ``eval.json`` entry) as TensorBoard tags: ``eval/pass@1``, ...,
    ``eval/mean_reward``; the same tags for every checkpoint, so TensorBoard draws one line."""
    return {eval_tag(key): float(summary[key]) for key in EVAL_TAG_KEYS
            if isinstance(summary.get(key), (int, float)) and not isinstance(summary.get(key), bool)}


def log_eval(run_dir: Path, n_updates: int, initial: dict, final: dict, initial_logged: bool = False) -> str:
    """Write the evaluations to the run's TensorBoard on the ``eval/`` tags (the initial control at
    step 0 unless ``initial_logged``: it was written before training, and a step written after later
    ones would make TensorBoard drop those; the final checkpoint at step ``n_updates``) and return the
    one line the trainer logs."""
    from torch.utils.tensorboard import SummaryWriter

    points = ([] if initial_logged else [(0, initial)]) + [(n_updates, final)]
    with SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR)) as writer:
        for step, summary in points:
            for tag, value in eval_scalars(summary).items():
                writer.add_scalar(tag, value, step)
    return eval_line(initial, final)
