"""SVG figures: training curves per arm (per-seed lines, across-seed mean ± SD band) and
eval pass@k bars against the initial-checkpoint control.

matplotlib is used through ``Figure`` and the SVG canvas directly (no pyplot, no global backend
switch, so a launcher that calls ``build_bundle`` keeps its own backend). The SVGs are
deterministic: a fixed ``svg.hashsalt`` for element ids and no date in the metadata.
"""

from __future__ import annotations

from pathlib import Path

from evidence import stats
from evidence.dataset import BundleData
from evidence.sweep import arm_name

# name -> (title, metrics.jsonl key or None for the eval figure)
FIGURES = {
    "reward": ("Raw reward per step", "rollout/raw_reward"),
    "pg_loss": ("PG loss per step", "train/pg_loss"),
    "kl_loss": ("Independent KL loss per step", "train/kl_loss"),
    "grad_norm": ("Gradient norm per step", "train/grad_norm"),
    "response_len": ("Mean response length per step", "rollout/response_len"),
    "truncated": ("Truncation per step", "rollout/truncated"),
    "eval_passk": ("Eval pass@k: final checkpoints against the initial-checkpoint control", None),
}
SVG_RC = {"svg.hashsalt": "proofgrid-evidence", "svg.fonttype": "path", "font.size": 8}
_METADATA = {"Date": None}
_PASS_KS = ("pass@1", "pass@2", "pass@4")


def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasSVG(figure)
    return figure


def _curve_figure(data: BundleData, algos: list[str], title: str, key: str):
    panels = [a for a in algos if any(
        all(r.get(key) is not None for r in data.steps[(a, s)]) for s in data.sweep["seeds"] if (a, s) in data.steps)]
    figure = _new_figure(3.2 * max(len(panels), 1), 2.6)
    figure.suptitle(title)
    if not panels:
        ax = figure.add_subplot()
        ax.text(0.5, 0.5, "no accepted run logs this metric", ha="center", va="center")
        ax.set_axis_off()
        return figure
    axes = figure.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, algo in zip(axes, panels):
        runs = {s: data.steps[(algo, s)] for s in data.sweep["seeds"] if (algo, s) in data.steps}
        for seed, records in runs.items():
            ax.plot([r["step"] for r in records], [r[key] for r in records], lw=0.8, alpha=0.6, label=f"seed {seed}")
        steps = sorted({r["step"] for records in runs.values() for r in records})
        by_step = {s: [r[key] for records in runs.values() for r in records if r["step"] == s] for s in steps}
        means = [stats.mean(by_step[s]) for s in steps]
        ax.plot(steps, means, color="black", lw=1.6, label="mean")
        if len(runs) >= 2:
            sds = [stats.sample_sd(by_step[s]) or 0.0 for s in steps]
            ax.fill_between(steps, [m - d for m, d in zip(means, sds)], [m + d for m, d in zip(means, sds)],
                            color="black", alpha=0.15, lw=0, label="mean ± SD")
        ax.set_title(f"{arm_name(algo, data.arm_algo(algo))} (n={len(runs)})")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6, loc="best")
    return figure


def _eval_figure(data: BundleData, algos: list[str]):
    figure = _new_figure(6.4, 3.0)
    figure.suptitle(FIGURES["eval_passk"][0])
    ax = figure.add_subplot()
    runs = {a: [s for s in data.sweep["seeds"] if {"initial", "final"} <= set(data.evals.get((a, s), {}))] for a in algos}
    runs = {a: seeds for a, seeds in runs.items() if seeds}
    groups = [("initial (control)", None)] + [(arm_name(a, data.arm_algo(a)), a) for a in runs]
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
            heights.append(stats.mean(values))
            errors.append(stats.sample_sd(values) or 0.0)
            dots += [(x, v) for v in values]
        bar_style = {"color": "lightgrey", "hatch": "//", "edgecolor": "grey"} if algo is None else {}
        ax.bar(xs, heights, width * 0.95, yerr=errors, capsize=2, label=label, **bar_style)
        if dots:
            ax.plot([d[0] for d in dots], [d[1] for d in dots], "k.", ms=3)
    ax.set_xticks(range(len(_PASS_KS)), _PASS_KS)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean over seeds (dots: runs)")
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return figure


def render_figures(data: BundleData, out_dir: str | Path) -> list[Path]:
    """Write every figure of ``FIGURES`` as ``<out_dir>/<name>.svg``; returns the paths."""
    import matplotlib

    from evidence.tables import arms as ordered_arms

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    algos = ordered_arms(data)  # one panel / bar group per arm
    written = []
    with matplotlib.rc_context(SVG_RC):
        for name, (title, key) in FIGURES.items():
            figure = _eval_figure(data, algos) if key is None else _curve_figure(data, algos, title, key)
            path = out_dir / f"{name}.svg"
            figure.savefig(path, format="svg", metadata=_METADATA)
            written.append(path)
    return written
