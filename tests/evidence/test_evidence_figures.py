"""Figure content (issue 12), read from the SVG text: axis labels with units, n, the smoothing, one
colour per arm in every figure, and a note instead of an all-zero series."""

from __future__ import annotations

import json
import re
from pathlib import Path

from evidence.bundle import build_bundle
from evidence.figures import ARM_COLOURS, moving_average

ARMS = ("GRPO", "REINFORCE++", "REINFORCE++-baseline")


def _texts(svg: Path) -> list[str]:
    """The text of every label: matplotlib writes each drawn string as a comment beside its paths."""
    return re.findall(r"<!-- (.*?) -->", svg.read_text())


def _colours(svg: Path) -> set[str]:
    return set(re.findall(r"(?:fill|stroke): (#[0-9a-f]{6})", svg.read_text())) & set(ARM_COLOURS)


def test_every_curve_figure_overlays_the_arms_with_labels_units_n_and_smoothing(clean_build):
    _, result = clean_build
    figures = result.bundle_dir / "data" / "figures"
    reward = _texts(figures / "reward.svg")
    assert "training step (optimizer updates)" in reward and "mean reward per response (0–1)" in reward
    assert [t for t in reward if "(n=3 seeds)" in t] == [f"{a} (n=3 seeds)" for a in ARMS]
    assert "mean over seeds, 5-step moving average; band ±1 SD across seeds" in reward
    for name in ("reward", "pg_loss", "grad_norm", "response_len", "eval_passk"):
        assert _colours(figures / f"{name}.svg") == set(ARM_COLOURS[:3]), name  # arm i: colour i, everywhere
    assert "pass@k (fraction of prompts, 0–1)" in _texts(figures / "eval_passk.svg")
    kl = _texts(figures / "kl_loss.svg")
    assert any("REINFORCE++: not logged by its accepted runs" in t for t in kl)
    assert _colours(figures / "kl_loss.svg") == {ARM_COLOURS[0], ARM_COLOURS[2]}  # rpp keeps its colour: absent


def test_an_all_zero_series_is_a_note_not_an_empty_plot(sweep):
    for log in sweep.glob("jobs/grpo-*/run/metrics.jsonl"):
        records = [json.loads(line) for line in log.read_text().splitlines()]
        log.write_text("".join(json.dumps({**r, "rollout/truncated": 0.0}) + "\n" for r in records))
    figures = build_bundle(sweep).bundle_dir / "data" / "figures"
    texts = _texts(figures / "truncated.svg")
    assert any("GRPO: 0 at every step of every seed (n=3), not drawn" in t for t in texts)
    assert _colours(figures / "truncated.svg") == {ARM_COLOURS[1], ARM_COLOURS[2]}


def test_moving_average_is_the_centred_window_mean():
    values = [0.0, 1.0, 2.0, 3.0, 10.0, 5.0]
    expected = [sum(values[max(0, i - 2): i + 3]) / len(values[max(0, i - 2): i + 3]) for i in range(6)]
    assert moving_average(values) == expected
    assert moving_average(values, 1) == values
