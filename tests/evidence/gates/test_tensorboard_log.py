"""Reading TensorBoard event files whole: every point past TensorBoard's 1,000-point sample, several files
in one run, a truncated or corrupt file reported, and errors that name the tags a trainer did write."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from evidence.gates.tensorboard_log import TagError, read_scalars
from facts.repo import REPO_ROOT

REPO = REPO_ROOT
STEPS = 1500  # past TensorBoard's 1,000-point sample per tag (tensorflow/tensorboard#706)


def loss_at(step: int) -> float:
    """A float64 value that float32 cannot hold exactly, different at every step."""
    return 1.0 / (step + 3) + step * 1e-7


def write_run(directory: Path, steps, new_style: bool = False, nan_at: int | None = None,
              name: str | None = None) -> Path:
    """Event file of ``train/loss`` and ``rollout/raw_reward`` per step (plus text and a histogram that
    are not scalars), written by torch's SummaryWriter; renamed to ``name`` when given (TensorBoard
    orders a run's files by name, which starts with the writer's start time)."""
    before = set(directory.glob("events.out.tfevents.*")) if directory.is_dir() else set()
    with SummaryWriter(log_dir=str(directory)) as writer:
        writer.add_text("args", "{}", 0)
        for step in steps:
            value = float("nan") if step == nan_at else loss_at(step)
            writer.add_scalar("train/loss", value, step, new_style=new_style)
            writer.add_scalar("rollout/raw_reward", step % 7 / 8, step, new_style=new_style)
        writer.add_histogram("weights", np.arange(10.0), 0)
    (path,) = set(directory.glob("events.out.tfevents.*")) - before
    return path.rename(directory / name) if name else path


@pytest.mark.parametrize("new_style", [False, True], ids=["simple_value", "tensor_scalar"])
def test_every_one_of_1500_steps_reads_back_exactly(tmp_path, new_style):
    write_run(tmp_path, range(STEPS), new_style=new_style, nan_at=700)
    log = read_scalars(tmp_path)
    assert log.problems == []
    assert log.tags == ["rollout/raw_reward", "train/loss"]  # text and histograms are not scalars
    loss = log.values("train/loss")
    assert list(loss) == list(range(STEPS))
    for step, value in loss.items():
        expected = np.float32(loss_at(step))  # what the writer stores: a float32
        assert math.isnan(value) if step == 700 else value == float(expected), step
    reward = log.values("rollout/raw_reward")
    assert [reward[s] for s in range(STEPS)] == [s % 7 / 8 for s in range(STEPS)]


@pytest.mark.slow  # about 3 s: 10,050 events written and read
def test_more_points_than_the_event_accumulators_default_sample_of_10000(tmp_path):
    with SummaryWriter(log_dir=str(tmp_path)) as writer:
        for step in range(10_050):
            writer.add_scalar("train/loss", loss_at(step), step)
    loss = read_scalars(tmp_path).values("train/loss")
    assert list(loss) == list(range(10_050))
    assert all(loss[s] == float(np.float32(loss_at(s))) for s in range(10_050))


def test_a_record_cut_mid_way_is_a_problem_and_the_whole_records_before_it_are_kept(tmp_path):
    path = write_run(tmp_path, range(40))
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # the last record (the histogram's) loses its tail
    log = read_scalars(tmp_path)
    (problem,) = log.problems
    assert problem.file == path.name
    assert "truncated or corrupt record" in problem.reason and f"of {len(data) - 7}" in problem.reason
    assert list(log.values("train/loss")) == list(range(40))


def test_a_corrupt_record_mid_file_is_a_problem_not_the_end_of_the_log(tmp_path):
    path = write_run(tmp_path, range(40))
    data = bytearray(path.read_bytes())
    data[len(data) // 4] ^= 0xFF  # inside a scalar's record (the histogram's fills the end): its CRC fails
    path.write_bytes(bytes(data))
    log = read_scalars(tmp_path)
    (problem,) = log.problems
    assert "truncated or corrupt record" in problem.reason
    assert 0 < len(log.points("train/loss")) < 40


def test_an_empty_event_file_is_a_problem(tmp_path):
    (tmp_path / "events.out.tfevents.1000000000.host.1.0").write_bytes(b"")
    log = read_scalars(tmp_path)
    assert [p.reason for p in log.problems] == ["holds no complete record (0 bytes)"]


def test_several_files_are_one_run_in_name_order_and_a_step_written_twice_stays_visible(tmp_path):
    # A resumed trainer opens a second file; here it resumed from step 5 after logging up to step 9.
    first = write_run(tmp_path, range(10), name="events.out.tfevents.1000000000.host.11.0")
    second = write_run(tmp_path, range(5, 15), name="events.out.tfevents.1000000100.host.12.0")
    log = read_scalars(tmp_path)
    assert log.problems == []
    assert log.files == [first.name, second.name]
    points = log.points("train/loss")
    assert [(p.step, p.file) for p in points] == (
        [(s, first.name) for s in range(10)] + [(s, second.name) for s in range(5, 15)])
    assert log.repeated_steps("train/loss") == [5, 6, 7, 8, 9]
    with pytest.raises(TagError, match=r"step 5 written more than once \(and 4 more steps\)"):
        log.values("train/loss")


def test_a_subdirectory_is_another_run_and_is_not_read(tmp_path):
    write_run(tmp_path, range(3))
    write_run(tmp_path / "hparams", range(100))
    assert list(read_scalars(tmp_path).values("train/loss")) == [0, 1, 2]


def test_a_tag_never_written_names_the_tags_that_were(tmp_path):
    write_run(tmp_path, range(3))
    log = read_scalars(tmp_path)
    assert log.missing(["train/loss", "train/kl_loss"]) == ["train/kl_loss"]
    with pytest.raises(TagError) as caught:
        log.points("train/kl_loss")
    assert str(caught.value) == (f"tag 'train/kl_loss' was never written to {tmp_path.name}/; the trainer wrote: "
                                 "rollout/raw_reward, train/loss (2 tags)")


def test_no_event_file_is_a_problem(tmp_path):
    assert [str(p) for p in read_scalars(tmp_path).problems] == [
        f"{tmp_path.name}: holds no events.out.tfevents.* file"]
    assert [p.reason for p in read_scalars(tmp_path / "absent").problems] == ["is not a directory"]


def test_the_command_lists_each_tag_and_fails_on_a_truncated_file(tmp_path):
    path = write_run(tmp_path, range(30))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ok = subprocess.run([sys.executable, "-m", "evidence.gates.tensorboard_log", str(tmp_path)],
                        capture_output=True, text=True, env=env, cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    assert "train/loss\t30 points\tsteps 0..29" in ok.stdout.splitlines()
    path.write_bytes(path.read_bytes()[:-3])
    cut = subprocess.run([sys.executable, "-m", "evidence.gates.tensorboard_log", str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=REPO)
    assert cut.returncode == 1
    assert f"problem: {path.name}: truncated or corrupt record" in cut.stderr


def test_a_tail_returns_each_point_once_as_it_is_written_across_files(tmp_path):
    """``ScalarTail`` (the live follower's reader): points written between two looks, a file that appears later
    read from its start, nothing twice; float32 as TensorBoard stores it."""
    from evidence.gates.tensorboard_log import ScalarTail

    directory = tmp_path / "run"
    directory.mkdir()
    tail = ScalarTail(directory)
    assert tail.new_points() == []
    writer = SummaryWriter(log_dir=str(directory))
    for step in range(3):
        writer.add_scalar("train/loss", loss_at(step), step)
    writer.flush()
    first = [(tag, p.step, p.value) for tag, p in tail.new_points()]
    assert first == [("train/loss", s, pytest.approx(loss_at(s), rel=1e-6)) for s in range(3)]
    writer.add_scalar("train/loss", loss_at(3), 3)
    writer.flush()
    assert [(tag, p.step) for tag, p in tail.new_points()] == [("train/loss", 3)]
    writer.close()
    write_run(directory, range(4, 6), name="events.out.tfevents.9999999999.later")  # a resumed trainer's new file
    later = [(tag, p.step) for tag, p in tail.new_points()]
    assert later == [(t, s) for s in range(4, 6) for t in ("train/loss", "rollout/raw_reward")]
    assert tail.new_points() == []
