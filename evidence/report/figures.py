"""SVG figures, each with a PNG beside it: training curves with every arm on one axis (its across-seed mean over each seed's own
thin curve, smoothed by a centred moving average) and eval pass@k bars against the initial-checkpoint
control. Each arm has one colour in every figure; a series that is zero throughout is a one-line note,
arms whose curves coincide at every step are named so, and a figure with nothing to draw is left out
(``left_out``; the report says why).

matplotlib is used through ``Figure`` and the SVG canvas directly (no pyplot, no global backend
switch, so a launcher that calls ``build_bundle`` keeps its own backend). The SVGs are
deterministic: a fixed ``svg.hashsalt`` for element ids and no date in the metadata.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from evidence.dataset import BundleData
from evidence.statistics import descriptive
from evidence.tables import arms as ordered_arms
from evidence.tables import display
from facts.metrics import (
    GRAD_NORM_KEY,
    KL_LOSS_KEY,
    PG_LOSS_KEY,
    RAW_REWARD_KEY,
    RESPONSE_LEN_KEY,
    TRUNCATED_KEY,
)

# name -> (title, metrics.jsonl key or None for the eval figure)
FIGURES = {
    "reward": ("Raw reward per step", RAW_REWARD_KEY),
    "pg_loss": ("PG loss per step", PG_LOSS_KEY),
    "kl_loss": ("Independent KL loss per step", KL_LOSS_KEY),
    "grad_norm": ("Gradient norm per step", GRAD_NORM_KEY),
    "response_len": ("Mean response length per step", RESPONSE_LEN_KEY),
    "truncated": ("Truncation per step", TRUNCATED_KEY),
    "eval_passk": ("Eval pass@k: final checkpoints against the initial-checkpoint control", None),
}
SVG_RC = {"svg.hashsalt": "proofgrid-evidence", "svg.fonttype": "path", "font.size": 8}
_METADATA = {"Date": None}
# Each figure is also a PNG beside its SVG (for slides): Agg's raster at this resolution, with no text chunk at all
# (matplotlib's default "Software" entry dropped), so its bytes depend on the drawing and matplotlib alone.
PNG_DPI = 200
_PNG_METADATA = {"Software": None}
FIGURE_FORMATS = ("svg", "png")
_PASS_KS = ("pass@1", "pass@2", "pass@4")


def _new_figure(width: float, height: float):
    # matplotlib is imported when a figure is drawn: a build without figures, the report and most of
    # the audit never load it (it is slow to import and writes its caches on first use).
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasSVG(figure)
    return figure


# One colour per arm, in report order, in every figure (matplotlib's tab10, colour-blind tolerant).
ARM_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf")
CONTROL_COLOUR = "lightgrey"
SMOOTHING_STEPS = 5  # centred moving average window of the drawn curves
# An arm with more seeds than this draws the band its seeds span (SEED_BAND percentiles at each step)
# instead of one thin line per seed, and the resource figure draws this many runs per arm: thousands of
# lines are a blur, and each costs its points again in matplotlib's "best" legend placement (quadratic
# in jobs: a 10,000-job sweep's figures took longer than the rest of its build).
MAX_SEED_LINES = 20
SEED_BAND = (10, 90)
NOT_DRAWN = ", not drawn"
Y_LABELS = {
    RAW_REWARD_KEY: "mean reward per response (0–1)",
    PG_LOSS_KEY: "policy-gradient loss (unitless)",
    KL_LOSS_KEY: "k2 KL loss, ½(Δ log p)² per token",
    GRAD_NORM_KEY: "gradient L2 norm (before clipping)",
    RESPONSE_LEN_KEY: "mean response length (tokens)",
    TRUNCATED_KEY: "fraction of responses truncated",
}


def arm_colour(index: int) -> str:
    """The colour of the ``index``-th arm of the report, the same in every figure."""
    return ARM_COLOURS[index % len(ARM_COLOURS)]


def moving_average(values: list[float], window: int = SMOOTHING_STEPS) -> list[float]:
    """Centred moving average: the mean of the up-to-``window`` values around each point (shorter at the ends)."""
    half = window // 2
    return [descriptive.mean(values[max(0, i - half): i + half + 1]) for i in range(len(values))]


@dataclass
class Curve:
    """One arm's series of a metric: its report index (its colour), name, the steps, every seed's values
    at each step, and each seed's own line (the seeds logged at every step)."""

    index: int
    name: str
    n_seeds: int
    steps: list[int]
    by_step: list[list[float]]
    seed_lines: list[list[float]]

    def mean(self) -> list[float]:
        """The across-seed mean at each step, unsmoothed."""
        return [descriptive.mean(values) for values in self.by_step]


def curves(data: BundleData, arms: list[str], key: str) -> tuple[list[Curve], list[str]]:
    """The arms to draw for ``key`` and a note for each arm that is not drawn (not logged by its
    accepted runs, or 0 at every step of every seed)."""
    drawn, notes = [], []
    for index, arm in enumerate(arms):
        name = display(data, arm)
        runs = {s: data.steps[(arm, s)] for s in data.sweep["seeds"] if (arm, s) in data.steps}
        runs = {s: records for s, records in runs.items() if records and all(r.get(key) is not None for r in records)}
        if not runs:
            notes.append(f"{name}: not logged by its accepted runs")
            continue
        values_at: dict[int, list[float]] = {}
        for records in runs.values():
            for r in records:
                values_at.setdefault(r["step"], []).append(r[key])
        steps = sorted(values_at)
        by_step = [values_at[st] for st in steps]
        if all(v == 0 for values in by_step for v in values):
            notes.append(f"{name}: 0 at every step of every seed (n={len(runs)}){NOT_DRAWN}")
            continue
        lines = [[r[key] for r in sorted(records, key=lambda r: r["step"])] for records in runs.values()]
        drawn.append(Curve(index, name, len(runs), steps, by_step, [v for v in lines if len(v) == len(steps)]))
    return drawn, notes


def seed_band(lines: list[list[float]]) -> tuple[list[float], list[float]]:
    """The band the seeds span at each step: the SEED_BAND percentiles (linear interpolation) of the seeds'
    values there, ``(P_lo(x_1,t ... x_n,t), P_hi(...))`` for each step ``t``."""
    import numpy as np  # with matplotlib: only a build that draws figures needs it

    at_step = np.asarray(lines, dtype=float)
    low, high = np.percentile(at_step, SEED_BAND, axis=0)
    return low.tolist(), high.tolist()


def identical_groups(drawn: list[Curve]) -> list[list[Curve]]:
    """Arms whose mean curves are equal at every step (one hides the others): each group of two or more."""
    groups: dict[tuple, list[Curve]] = {}
    for curve in drawn:
        groups.setdefault((tuple(curve.steps), tuple(curve.mean())), []).append(curve)
    return [group for group in groups.values() if len(group) > 1]


def _names(names: list[str]) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


def left_out(data: BundleData, name: str) -> str | None:
    """Why the figure ``name`` is left out of the bundle (a curve figure with no arm to draw: each arm's
    note), or None when it is drawn."""
    key = FIGURES[name][1]
    if key is None:
        return None
    drawn, notes = curves(data, ordered_arms(data), key)
    return None if drawn else "; ".join(n.removesuffix(NOT_DRAWN) for n in notes) or "no accepted run logs it"


def _curve_figure(data: BundleData, arms: list[str], title: str, key: str):
    """Every arm on one axis: its across-seed mean (thick) over each seed's own curve (thin), both smoothed;
    arms whose curves are identical at every step are named so in the title."""
    figure = _new_figure(6.4, 3.2)
    ax = figure.add_subplot()
    drawn, notes = curves(data, arms, key)
    banded = False
    for curve in drawn:
        colour = arm_colour(curve.index)
        if len(curve.seed_lines) > MAX_SEED_LINES:
            low, high = seed_band([moving_average(values) for values in curve.seed_lines])
            ax.fill_between(curve.steps, low, high, color=colour, alpha=0.2, lw=0, zorder=1)
            banded = True
        else:
            for values in curve.seed_lines:
                ax.plot(curve.steps, moving_average(values), color=colour, lw=0.6, alpha=0.45, zorder=1)
        ax.plot(curve.steps, moving_average(curve.mean()), color=colour, lw=1.8, zorder=2,
                label=f"{curve.name} (n={curve.n_seeds} seeds)")
    notes += [f"{_names([c.name for c in group])}: identical at every step (one curve hides the other"
              f"{'s' if len(group) > 2 else ''})" for group in identical_groups(drawn)]
    ax.set_xlabel("training step (optimizer updates)")
    ax.set_ylabel(Y_LABELS.get(key, key))
    ax.grid(alpha=0.3)
    thin = "thin: each seed"
    if banded:
        thin += (f" (band: its {SEED_BAND[0]}th-{SEED_BAND[1]}th percentile where an arm has more than "
                 f"{MAX_SEED_LINES})")
    ax.legend(fontsize=6, loc="best", title=f"thick: mean over seeds; {thin}; {SMOOTHING_STEPS}-step moving average",
              title_fontsize=6)
    if notes:  # under the title, one a line: never over the curves or the legend
        ax.set_title("\n".join([title, *notes]), fontsize=8)
    else:
        ax.set_title(title)
    return figure


def _eval_figure(data: BundleData, algos: list[str]):
    figure = _new_figure(6.4, 3.0)
    figure.suptitle(FIGURES["eval_passk"][0])
    ax = figure.add_subplot()
    runs = {a: [s for s in data.sweep["seeds"] if {"initial", "final"} <= set(data.evals.get((a, s), {}))] for a in algos}
    runs = {a: seeds for a, seeds in runs.items() if seeds}
    colours = {a: arm_colour(i) for i, a in enumerate(algos)}
    groups = [("initial checkpoint (control)", None)] + [(f"{display(data, a)} final (n={len(runs[a])})", a)
                                                         for a in runs]
    width = 0.8 / max(len(groups), 1)
    for g, (label, algo) in enumerate(groups):
        xs, heights, errors, dots = [], [], [], []
        for i, metric in enumerate(_PASS_KS):
            if algo is None:
                values = [data.evals[(a, s)]["initial"][metric] for a, seeds in runs.items() for s in seeds]
            else:
                values = [data.evals[(algo, s)]["final"][metric] for s in runs[algo]]
            values = [v for v in values if v is not None]  # pass@j is absent when j > k
            if not values:
                continue
            x = i + (g - (len(groups) - 1) / 2) * width
            xs.append(x)
            heights.append(descriptive.mean(values))
            errors.append(descriptive.sample_sd(values) or 0.0)
            dots += [(x, v) for v in values]
        bar_style = ({"color": CONTROL_COLOUR, "hatch": "//", "edgecolor": "grey"} if algo is None
                     else {"color": colours[algo]})
        ax.bar(xs, heights, width * 0.95, yerr=errors, capsize=2, label=label, **bar_style)
        if dots:
            ax.plot([d[0] for d in dots], [d[1] for d in dots], "k.", ms=3)
    ax.set_xticks(range(len(_PASS_KS)), _PASS_KS)
    ax.set_ylim(0, 1)
    ax.set_ylabel("pass@k (fraction of prompts, 0–1)")
    ax.set_xlabel("k (samples per prompt; bars: mean over seeds ± SD, dots: runs)")
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return figure


# The resource samples' figure (runs/<job>/resources.jsonl): its file stem and title.
RESOURCE_FIGURE = "resources"
RESOURCE_TITLE = "Resources of each job's process tree over its run"
GIB = 2**30


def resource_panels(data: BundleData) -> list[tuple[str, object]]:
    """The panels of the resource figure: ``(y label, value of one sample)``; the GPU ones only when a
    run sampled a GPU."""
    panels = [("CPU (% of a core)", lambda s: float(s["cpu_percent"])),
              ("RSS (GiB)", lambda s: s["rss_bytes"] / GIB)]
    if any(s.get("gpus") for samples in data.resources.values() for s in samples):
        panels += [("GPU util (%, busiest)",
                    lambda s: max((float(g["util_percent"]) for g in s.get("gpus") or []), default=0.0)),
                   ("GPU memory (GiB)", lambda s: sum(g["mem_used_bytes"] for g in s.get("gpus") or []) / GIB)]
    return panels


def _runs_drawn(n: int) -> str:
    return f"n={n} runs" if n <= MAX_SEED_LINES else f"the first {MAX_SEED_LINES} of n={n} runs by seed"


def _resource_figure(data: BundleData, arms: list[str]):
    """One panel per resource; each accepted run one thin line against seconds since its first sample,
    in its arm's colour (one legend entry per arm)."""
    panels = resource_panels(data)
    figure = _new_figure(6.4, 1.9 * len(panels))
    figure.suptitle(f"{RESOURCE_TITLE}\n(CPU and memory summed over the job's processes; one line per run)",
                    fontsize=8)
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    drawn = 0
    for ax, (label, value) in zip(axes, panels):
        for index, arm in enumerate(arms):
            runs = [s for s in data.sweep["seeds"] if data.resources.get((arm, s))]
            for n, seed in enumerate(runs[:MAX_SEED_LINES]):
                samples = data.resources[(arm, seed)]
                start = float(samples[0]["t"])
                ax.plot([float(s["t"]) - start for s in samples], [value(s) for s in samples], color=arm_colour(index),
                        lw=0.9, label=f"{display(data, arm)} ({_runs_drawn(len(runs))})" if n == 0 else None)
                drawn += 1
        ax.set_ylabel(label, fontsize=7)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("seconds since the job's first sample")
    if drawn:
        axes[0].legend(fontsize=6, loc="best")
    else:
        axes[0].text(0.5, 0.5, "no accepted run has resource samples", transform=axes[0].transAxes, ha="center",
                     va="center", fontsize=8)
    return figure


def _save(figure, out_dir: Path, name: str) -> list[Path]:
    """``<name>.svg`` and ``<name>.png`` of one figure (``FIGURE_FORMATS``)."""
    svg, png = out_dir / f"{name}.svg", out_dir / f"{name}.png"
    figure.savefig(svg, format="svg", metadata=_METADATA)
    # The raster keeps the layout the SVG was drawn with: constrained layout solved once per figure, not again at
    # the PNG's resolution (a third of a seal's figure time).
    figure.set_layout_engine("none")
    figure.savefig(png, format="png", dpi=PNG_DPI, metadata=_PNG_METADATA)
    return [svg, png]


def render_figures(data: BundleData, out_dir: str | Path, only: Collection[str] | None = None) -> list[Path]:
    """Write every figure of ``FIGURES`` that has something to draw, and the resource figure, as
    ``<out_dir>/<name>.svg`` and ``<out_dir>/<name>.png`` beside it (the report says why each figure ``left_out``
    names is missing); returns the paths. ``only``: the names of the figures to draw (default: all); each is drawn
    as in the whole set."""
    unknown = sorted(set(only or ()) - {*FIGURES, RESOURCE_FIGURE})
    if unknown:
        raise ValueError(f"no figure named {', '.join(unknown)}: the figures are {', '.join([*FIGURES, RESOURCE_FIGURE])}")
    import matplotlib  # on first use, as in _new_figure

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    algos = ordered_arms(data)  # one colour per arm, by report order
    written = []
    with matplotlib.rc_context(SVG_RC):
        for name, (title, key) in FIGURES.items():
            if (only is not None and name not in only) or left_out(data, name) is not None:
                continue
            figure = _eval_figure(data, algos) if key is None else _curve_figure(data, algos, title, key)
            written += _save(figure, out_dir, name)
        if only is None or RESOURCE_FIGURE in only:
            written += _save(_resource_figure(data, algos), out_dir, RESOURCE_FIGURE)
    return written
