"""Figure content (issue 12), read from the SVG text: axis labels with units, n, the smoothing, one
colour per arm in every figure, and a note instead of an all-zero series."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep
from evidence.__main__ import main
from evidence.dataset import load_bundle_data
from evidence.report.figures import ARM_COLOURS, moving_average, render_figures
from evidence.seal.bundle import build_bundle

ARMS = ("GRPO", "REINFORCE++", "REINFORCE++-baseline")


def _drawn(sweep: Path, *names: str) -> Path:
    """The directory of the figures ``names`` drawn from the sweep's bundle, built without its figures (drawing
    all of them is most of a build's time): each is drawn as the build draws it."""
    data = build_bundle(sweep, figures=False).bundle_dir / "data"
    out = sweep / "drawn-figures"
    render_figures(load_bundle_data(data), out, only=names)
    return out


def _texts(svg: Path) -> list[str]:
    """The text of every label: matplotlib writes each drawn string as a comment beside its paths."""
    return re.findall(r"<!-- (.*?) -->", svg.read_text())


def _colours(svg: Path) -> set[str]:
    return set(re.findall(r"(?:fill|stroke): (#[0-9a-f]{6})", svg.read_text())) & set(ARM_COLOURS)


def test_every_curve_figure_overlays_the_arms_with_labels_units_n_and_smoothing(clean_build_with_figures):
    _, result = clean_build_with_figures
    figures = result.bundle_dir / "data" / "figures"
    reward = _texts(figures / "reward.svg")
    assert "training step (optimizer updates)" in reward and "mean reward per response (0–1)" in reward
    assert [t for t in reward if "(n=3 seeds)" in t] == [f"{a} (n=3 seeds)" for a in ARMS]
    assert "thick: mean over seeds; thin: each seed; 5-step moving average" in reward
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
    figures = _drawn(sweep, "truncated")
    texts = _texts(figures / "truncated.svg")
    assert any("GRPO: 0 at every step of every seed (n=3), not drawn" in t for t in texts)
    assert _colours(figures / "truncated.svg") == {ARM_COLOURS[1], ARM_COLOURS[2]}


def test_moving_average_is_the_centred_window_mean():
    values = [0.0, 1.0, 2.0, 3.0, 10.0, 5.0]
    expected = [sum(values[max(0, i - 2): i + 3]) / len(values[max(0, i - 2): i + 3]) for i in range(6)]
    assert moving_average(values) == expected
    assert moving_average(values, 1) == values


def _strokes(svg: Path, colour: str) -> list[str]:
    """The stroke width of every line drawn in ``colour``, in document (drawing) order."""
    return re.findall(rf'style="fill: none; stroke: {colour};[^"]*?stroke-width: ([0-9.]+)', svg.read_text())


def test_each_seed_is_a_thin_line_drawn_under_its_arms_thick_mean(clean_build_with_figures):
    _, result = clean_build_with_figures
    for name in ("reward", "pg_loss", "grad_norm", "response_len"):
        svg = result.bundle_dir / "data" / "figures" / f"{name}.svg"
        for colour in ARM_COLOURS[:3]:
            # three seeds, then their mean, then the mean's sample in the legend
            assert _strokes(svg, colour) == ["0.6", "0.6", "0.6", "1.8", "1.8"], (name, colour)
        assert not re.search(r"fill: #1f77b4; fill-opacity: 0\.18", svg.read_text())  # no ±1 SD band any more


def _set(sweep: Path, key: str, value) -> None:
    """Every step record of the sweep: ``key`` set to ``value(arm, seed, step)``."""
    for log in sweep.glob("jobs/*/run/metrics.jsonl"):
        arm, seed = log.parent.parent.name.rsplit("-", 1)
        records = [json.loads(line) for line in log.read_text().splitlines()]
        log.write_text("".join(json.dumps({**r, key: value(arm, int(seed), r["step"])}) + "\n" for r in records))


@pytest.fixture(scope="module")
def arm_build(tmp_path_factory):
    """Built through ``python -m evidence build``: arms that differ by the learning rate, response lengths
    identical at every step for two arms of three, and truncation 0 at every step of every run."""
    arms = {"grpo-lr1": {"algo": "grpo", "workload.lr": "1e-4"}, "grpo-lr3": {"algo": "grpo", "workload.lr": "3e-4"},
            "rpp-lr1": {"algo": "rpp", "workload.lr": "1e-4"}}
    sweep = make_sweep(tmp_path_factory.mktemp("arms"), seeds=(1, 2), arms=arms, figures=True)
    _set(sweep, "rollout/response_len", lambda arm, seed, step: 80.0 + step + seed + (arm == "rpp-lr1") * 7.5)
    _set(sweep, "rollout/truncated", lambda arm, seed, step: 0.0)
    assert main(["build", str(sweep)]) == 0
    data = sweep / "bundle" / "data"
    return data, (data / "report.md").read_text()


def test_curves_identical_at_every_step_are_named_in_the_figure(arm_build, clean_build_with_figures):
    data, _ = arm_build
    texts = _texts(data / "figures" / "response_len.svg")
    assert "grpo-lr1 and grpo-lr3: identical at every step (one curve hides the other)" in texts
    assert not any("rpp-lr1" in t and "identical" in t for t in texts)
    _, result = clean_build_with_figures  # curves that differ somewhere: no such note
    assert not any("identical" in t for t in _texts(result.bundle_dir / "data" / "figures" / "response_len.svg"))


def test_three_identical_curves_name_all_three(sweep):
    _set(sweep, "rollout/response_len", lambda arm, seed, step: 90.0 + step)
    figures = _drawn(sweep, "response_len")
    assert ("GRPO, REINFORCE++ and REINFORCE++-baseline: identical at every step (one curve hides the others)"
            in _texts(figures / "response_len.svg"))


def test_a_figure_with_nothing_to_draw_is_left_out_and_the_report_says_why(arm_build):
    data, report = arm_build
    assert not (data / "figures" / "truncated.svg").exists() and (data / "figures" / "response_len.svg").exists()
    assert "figures/truncated.svg" not in report
    why = "; ".join(f"{arm}: 0 at every step of every seed (n=2)" for arm in ("grpo-lr1", "grpo-lr3", "rpp-lr1"))
    assert f"No figure *Truncation per step*: nothing to draw ({why}).\n" in report


@pytest.mark.slow
def test_a_bundle_with_a_figure_left_out_audits_clean(arm_build):
    data, _ = arm_build
    assert main(["audit", str(data.parent)]) == 0  # the redrawing leaves the same figure out, the report recomputes


def test_the_environment_digests_are_in_the_appendix_and_pairs_are_of_arms(arm_build, clean_build):
    _, report = arm_build
    environment = report.split("## Environment and frozen workload")[1].split("\n## ")[0]
    appendix = report.split("## Appendix: environment digests")[1]
    for row in ("| Source commit |", "| Input: model/model.safetensors |", "| Eval subset SHA256 |"):
        assert row not in environment and row in appendix
    assert "| Seeds | 1, 2 |" in environment and "| Seeds |" not in appendix
    assert re.search(r"\b[0-9a-f]{40,64}\b", environment) is None  # no digest left in the section
    assert "For each pair of arms, d = a − b" in report and "Settings that differ between arms" in report
    _, result = clean_build  # arms that are just their algorithms
    algos = (result.bundle_dir / "data" / "report.md").read_text()
    assert "For each pair of algorithms, d = a − b" in algos and "each pair of arms" not in algos


def test_an_arm_with_more_seeds_than_can_be_read_draws_its_seeds_band_not_a_line_each(tmp_path):
    """Past MAX_SEED_LINES seeds an arm draws the 10th-90th percentile band of its seeds (not thousands of
    thin lines, each also costing its points in the legend's placement), and the resource figure the first
    MAX_SEED_LINES runs by seed; the figures say so."""
    from evidence.report.figures import MAX_SEED_LINES

    n = MAX_SEED_LINES + 5
    sweep = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=tuple(range(n)), n_steps=6)
    figures = _drawn(sweep, "reward", "resources")
    svg = figures / "reward.svg"
    for colour in ARM_COLOURS[:2]:
        assert _strokes(svg, colour) == ["1.8", "1.8"]  # the mean and its legend sample: no seed's own line
        assert re.search(rf"fill: {colour}; fill-opacity: 0\.2", svg.read_text())  # the band
    assert any(f"band: its 10th-90th percentile where an arm has more than {MAX_SEED_LINES}" in t for t in _texts(svg))
    assert [t for t in _texts(svg) if "seeds)" in t] == [f"{a} (n={n} seeds)" for a in ARMS[:2]]
    resources = _texts(figures / "resources.svg")
    assert [t for t in resources if "runs by seed" in t] == [
        f"{a} (the first {MAX_SEED_LINES} of n={n} runs by seed)" for a in ARMS[:2]]


def test_the_seed_band_is_the_10th_to_90th_percentile_at_each_step():
    from evidence.report.figures import seed_band

    lines = [[float(i), 2.0 * i] for i in range(11)]  # at each step the values 0..10 (and 0..20)
    # linear-interpolated percentiles of 0..10: the 10th is 1, the 90th 9
    assert seed_band(lines) == ([1.0, 2.0], [9.0, 18.0])


def test_drawing_a_figure_that_does_not_exist_names_the_figures_there_are(tmp_path):
    with pytest.raises(ValueError, match="no figure named bogus: the figures are reward, pg_loss, .*, resources$"):
        render_figures(None, tmp_path, only=["bogus"])
    assert not any(tmp_path.iterdir())  # refused before anything is written
