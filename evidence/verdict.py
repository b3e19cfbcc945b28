"""Pre-registered verdicts: an experiment spec's success criterion applied to a sweep's evidence.

The spec (``conf/experiment/<name>.yaml``; the bundle keeps it as ``data/experiment.yaml``) is
read for the keys below; any other key (title, hypothesis, budget, probe, ...) is the launcher's::

    arms:                          # name -> the overrides that make the arm
      isp: {algo: is_pg}
      sc:  {algo: score_centering}
    seeds: [1, 2, 3]               # a verdict needs >= 3 unless `exploratory: true`
    criterion:
      metric: eval/pass@1          # eval/<name> at: final, or a training metric at: last_k (+ last_k: 10)
      at: final
      baseline: isp
      treatment: sc
      threshold_points: 4          # mean over seeds of (treatment - baseline) must reach this;
                                   # `threshold:` instead states it in the metric's own units
      inconclusive_below_points: 2 # below this the treatment failed; between the two: INCONCLUSIVE
      collapse: {drop_points: 10}  # VALIDATED also when the baseline drops more than this from its own
                                   # peak while the treatment does not
      ci_excludes_zero: true       # default: reaching the threshold also needs the 95 % t-interval above 0
    tuning:                        # optional: per arm, a grid over one setting, selected before confirm
      setting: workload.lr
      values: [1e-5, 4e-5, 1.6e-4] # or {isp: [...], sc: [...]} with the same number of values per arm
      metric: rollout/raw_reward   # never the verdict metric and never an eval/ (test-split) metric
      at: last_k
      last_k: 5
      goal: max                    # or min
      on_edge: extend              # a winner on the edge of its grid: extend once, or mark provisional

``decide`` is the rule itself (pure, on per-seed values and curves); ``experiment_verdict``
reads the values from a ``BundleData`` and returns the ``verdict.json`` record; ``select_settings``
is the tuning stage's selection; ``check_verdict`` is the audit's recomputation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from evidence import stats
from evidence.dataset import EXPERIMENT_FILE, BundleData, load_bundle_data
from evidence.fileio import JSONError, dumps_json, read_json, sha256_file, write_text
from evidence.measures import POINTS_PER_UNIT, Measure, MeasureError, arm_values, parse_measure, trajectory
from evidence.problems import Problem, VerdictError

VERDICT_FILE = "verdict.json"
TUNING_STAGE = "tuning"  # data/stages/tuning/: the tuning stage's whole data/, when the experiment tuned
# An experiment's stages before confirm, whose evidence (their whole data/) the confirm stage's bundle carries.
EARLIER_STAGES = ("probe", TUNING_STAGE)
# Records the launcher writes at a stage's root (the probe's checks), carried beside its data.
STAGE_RECORDS = {"probe": ("probe.json", "gradient_check.json")}
VALIDATED, FAILED, INCONCLUSIVE = "VALIDATED", "FAILED", "INCONCLUSIVE"
MIN_SEEDS = 3  # for a verdict that is not exploratory
# A mean difference within this of the threshold reaches it: exact decimal inputs lose a few ulps.
THRESHOLD_SLACK = 1e-9
SCHEMA = 1


# ---- the spec ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Criterion:
    """The pre-registered success criterion; thresholds in ``units`` (points = 100 x a rate)."""

    measure: Measure
    baseline: str
    treatment: str
    threshold: float
    inconclusive_below: float | None
    collapse_drop: float | None
    units: str  # "points" or "units"
    ci_excludes_zero: bool = True

    @property
    def scale(self) -> float:
        return POINTS_PER_UNIT if self.units == "points" else 1.0


@dataclass(frozen=True)
class Tuning:
    """The tuning stage: per arm, a grid over ``setting``, selected on ``measure`` (``goal`` max or min)."""

    setting: str
    values: dict[str, tuple[str, ...]]  # arm name -> grid, as written
    measure: Measure
    goal: str
    on_edge: str


@dataclass(frozen=True)
class Experiment:
    """The parts of an experiment spec that the verdict reads."""

    arms: dict[str, dict[str, str]]
    seeds: tuple[int, ...]
    criterion: Criterion
    tuning: Tuning | None = None
    exploratory: bool = False


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise VerdictError(f"criterion: {what} must be a finite number, not {value!r}")
    return float(value)


def _one_of(block: Mapping, name: str, what: str, units: str) -> float | None:
    """``<name>_points`` or ``<name>``, whichever the criterion uses (both: an error); in ``units``."""
    points, plain = f"{name}_points", name
    if points in block and plain in block:
        raise VerdictError(f"criterion: give {points} or {plain}, not both")
    key = points if points in block else plain if plain in block else None
    if key is None:
        return None
    if (key == points) != (units == "points"):
        raise VerdictError(f"criterion: {key} mixes units with the threshold; use *_points for every threshold "
                           f"or for none")
    return _number(block[key], what)


_CRITERION_KEYS = {"metric", "at", "last_k", "baseline", "treatment", "threshold", "threshold_points",
                   "inconclusive_below", "inconclusive_below_points", "collapse", "ci_excludes_zero"}


def parse_criterion(block, arms: Mapping[str, Mapping]) -> Criterion:
    """Check a spec's ``criterion`` mapping against its arms; every problem is one line."""
    if not isinstance(block, Mapping):
        raise VerdictError("experiment: 'criterion' must be a mapping (metric, baseline, treatment, threshold_points)")
    unknown = sorted(set(block) - _CRITERION_KEYS)
    if unknown:
        raise VerdictError(f"criterion: unknown key {unknown[0]!r}; known: {', '.join(sorted(_CRITERION_KEYS))}")
    try:
        measure = parse_measure(block.get("metric"), block.get("at"), block.get("last_k"))
    except MeasureError as exc:
        raise VerdictError(f"criterion: {exc}") from None
    for role in ("baseline", "treatment"):
        if block.get(role) not in arms:
            raise VerdictError(f"criterion: {role} {block.get(role)!r} is not an arm of the spec "
                               f"(arms: {', '.join(arms) or 'none'})")
    if block["baseline"] == block["treatment"]:
        raise VerdictError("criterion: baseline and treatment are the same arm")
    units = "points" if "threshold_points" in block else "units"
    if units == "points" and not measure.is_rate:
        raise VerdictError(f"criterion: {measure.metric} is not a rate, so it has no points; state threshold "
                           f"in its own units")
    threshold = _one_of(block, "threshold", "threshold", units)
    if threshold is None:
        raise VerdictError("criterion: no threshold; add threshold_points (or threshold in the metric's units)")
    below = _one_of(block, "inconclusive_below", "inconclusive_below", units)
    if below is not None and below > threshold:
        raise VerdictError(f"criterion: inconclusive_below ({below:g}) is above the threshold ({threshold:g})")
    collapse = block.get("collapse")
    drop = None
    if collapse is not None:
        if not isinstance(collapse, Mapping) or set(collapse) - {"drop", "drop_points"}:
            raise VerdictError("criterion: collapse must be {drop_points: X} (or {drop: X} in the metric's units)")
        drop = _one_of(collapse, "drop", "collapse drop", units)
        if drop is None or drop <= 0:
            raise VerdictError("criterion: collapse needs a positive drop_points (or drop)")
    ci = block.get("ci_excludes_zero", True)
    if not isinstance(ci, bool):
        raise VerdictError("criterion: ci_excludes_zero must be true or false")
    return Criterion(measure, block["baseline"], block["treatment"], threshold, below, drop, units, ci)


_TUNING_KEYS = {"setting", "values", "metric", "at", "last_k", "goal", "on_edge"}


def parse_tuning(block, arms: Mapping[str, Mapping], criterion: Criterion) -> Tuning:
    """Check a spec's ``tuning`` mapping: the grid, equal budget per arm, a selection metric that is not the test."""
    if not isinstance(block, Mapping):
        raise VerdictError("experiment: 'tuning' must be a mapping (setting, values, metric)")
    unknown = sorted(set(block) - _TUNING_KEYS)
    if unknown:
        raise VerdictError(f"tuning: unknown key {unknown[0]!r}; known: {', '.join(sorted(_TUNING_KEYS))}")
    setting = block.get("setting")
    if not isinstance(setting, str) or not setting or setting == "seed":
        raise VerdictError("tuning: 'setting' must name one override, e.g. workload.lr")
    for name, overrides in arms.items():
        if setting in overrides:
            raise VerdictError(f"tuning: arm {name} fixes {setting}={overrides[setting]}; tuning cannot vary it")
    values = block.get("values")
    grids = values if isinstance(values, Mapping) else {name: values for name in arms}
    if set(grids) != set(arms):
        raise VerdictError(f"tuning: values must name every arm ({', '.join(arms)}), not {', '.join(map(str, grids))}")
    out = {}
    for name in arms:
        grid = grids[name]
        if not isinstance(grid, (list, tuple)) or len(grid) < 2:
            raise VerdictError(f"tuning: the grid of {setting} for {name} needs at least two values")
        texts = tuple(str(v) for v in grid)
        if len({_canonical(t) for t in texts}) != len(texts):
            raise VerdictError(f"tuning: the grid of {setting} for {name} repeats a value")
        out[name] = texts
    if len({len(g) for g in out.values()}) != 1:
        raise VerdictError("tuning: every arm gets the same number of settings (equal tuning budget per arm)")
    try:
        measure = parse_measure(block.get("metric"), block.get("at"), block.get("last_k"))
    except MeasureError as exc:
        raise VerdictError(f"tuning: {exc}") from None
    if measure.metric == criterion.measure.metric:
        raise VerdictError(f"tuning: metric {measure.metric} is the verdict metric; select on a validation metric "
                           f"or a training metric such as rollout/raw_reward")
    if measure.is_eval:
        raise VerdictError(f"tuning: {measure.metric} is measured on the test split; select on a training metric "
                           f"such as rollout/raw_reward")
    goal, on_edge = block.get("goal", "max"), block.get("on_edge", "provisional")
    if goal not in ("max", "min"):
        raise VerdictError(f"tuning: goal must be max or min, not {goal!r}")
    if on_edge not in ("extend", "provisional"):
        raise VerdictError(f"tuning: on_edge must be extend or provisional, not {on_edge!r}")
    return Tuning(setting, out, measure, goal, on_edge)


def parse_experiment(spec) -> Experiment:
    """An ``Experiment`` from a spec mapping (or YAML text); the launcher's own keys are left alone."""
    if isinstance(spec, str):
        try:
            spec = yaml.safe_load(spec)
        except yaml.YAMLError as exc:
            raise VerdictError(f"experiment spec: not valid YAML ({exc.__class__.__name__})") from None
    if isinstance(spec, Mapping) and "criterion" not in spec and isinstance(spec.get("experiment"), Mapping):
        spec = spec["experiment"]  # the spec as Hydra composes it, under its group's package
    if not isinstance(spec, Mapping):
        raise VerdictError("experiment spec: not a mapping")
    arms = spec.get("arms")
    if not isinstance(arms, Mapping) or len(arms) < 2:
        raise VerdictError("experiment: 'arms' must map at least two arm names to their overrides")
    clean_arms: dict[str, dict[str, str]] = {}
    for name, overrides in arms.items():
        if not isinstance(overrides, Mapping) or not overrides:
            raise VerdictError(f"experiment: arm {name} must be a non-empty mapping of overrides, e.g. {{algo: rpp}}")
        clean_arms[str(name)] = {str(k): _text(v) for k, v in sorted(overrides.items())}
    seen: dict[tuple, str] = {}
    for name, overrides in clean_arms.items():
        key = tuple(sorted((k, _canonical(v)) for k, v in overrides.items()))
        if key in seen:
            raise VerdictError(f"experiment: arms {seen[key]} and {name} are identical")
        seen[key] = name
    seeds = spec.get("seeds")
    if not isinstance(seeds, (list, tuple)) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seeds) or len(set(seeds)) != len(seeds):
        raise VerdictError("experiment: 'seeds' must be a list of distinct integers")
    exploratory = spec.get("exploratory", False)
    if not isinstance(exploratory, bool):
        raise VerdictError("experiment: exploratory must be true or false")
    if len(seeds) < MIN_SEEDS and not exploratory:
        raise VerdictError(f"experiment: {len(seeds)} seed(s); a verdict needs at least {MIN_SEEDS} "
                           f"(or declare exploratory: true)")
    criterion = parse_criterion(spec.get("criterion"), clean_arms)
    tuning = parse_tuning(spec["tuning"], clean_arms, criterion) if spec.get("tuning") is not None else None
    return Experiment(clean_arms, tuple(seeds), criterion, tuning, exploratory)


def _text(value) -> str:
    """An override value as the user wrote it (YAML may have parsed 1e-4 as a float)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _canonical(value: str):
    """Values compare as numbers when both are numbers (``3e-4`` == ``0.0003``), else as text."""
    try:
        return float(value)
    except ValueError:
        return value


def same_overrides(wanted: Mapping[str, str], have: Mapping[str, str]) -> bool:
    """Whether ``have`` sets every override of ``wanted`` to the same value."""
    return all(k in have and _canonical(str(have[k])) == _canonical(str(v)) for k, v in wanted.items())


# ---- tuning-stage selection ---------------------------------------------------------------------

@dataclass(frozen=True)
class Selection:
    """One arm's tuning result: the winning value, every value's score, and whether it sits on the grid's edge."""

    arm: str
    setting: str
    value: str
    scores: dict[str, float | None]  # grid value -> mean over the value's accepted seeds (None: no run)
    edge: str | None  # "low" / "high" when the winner is the grid's smallest / largest value


def grid_order(values: Sequence[str]) -> list[str]:
    """A grid from low to high: numerically when every value is a number, else as declared."""
    if all(isinstance(_canonical(v), float) for v in values):
        return sorted(values, key=lambda v: float(v))
    return list(values)


def select_setting(arm: str, setting: str, scores: Mapping[str, float | None], goal: str = "max") -> Selection:
    """The best-scoring grid value (ties: the lower one), and the edge it sits on, if any.

    ``scores`` maps each grid value, as declared, to the arm's mean selection metric at that value.
    """
    order = grid_order(list(scores))
    scored = [v for v in order if scores[v] is not None]
    if not scored:
        raise VerdictError(f"tuning: no accepted run of arm {arm} scores any value of {setting}")
    sign = 1.0 if goal == "max" else -1.0
    best = max(scored, key=lambda v: (sign * scores[v], -order.index(v)))
    edge = "low" if best == order[0] else "high" if best == order[-1] else None
    return Selection(arm, setting, best, dict(scores), edge)


def extend_grid(values: Sequence[str], side: str) -> str:
    """The one value an edge winner's grid is extended by: the grid's outer ratio (or step) continued.

    Numeric grids only: high -> last x (last / second-to-last) when both are positive, else last + (last - prev).
    """
    order = grid_order(values)
    if len(order) < 2 or not all(isinstance(_canonical(v), float) for v in order):
        raise VerdictError("tuning: only a numeric grid of at least two values can be extended")
    outer, inner = (float(order[-1]), float(order[-2])) if side == "high" else (float(order[0]), float(order[1]))
    value = outer * (outer / inner) if outer > 0 and inner > 0 else outer + (outer - inner)
    return f"{value:.6g}"


def tuning_scores(tuning: Tuning, arms: Mapping[str, Mapping[str, str]], data: BundleData) -> dict[str, dict[str, float | None]]:
    """``{spec arm: {grid value: mean selection metric}}`` from the tuning stage's evidence.

    A tuning-stage arm belongs to a spec arm when it carries all the spec arm's overrides; its
    grid value is its ``tuning.setting`` override, named as the sweep recorded it (YAML may have
    turned the spec's ``1.6e-4`` into 0.00016). Values run beyond the declared grid (an
    extension) join it.
    """
    # canonical value -> (text, score); a value that ran is named as the sweep recorded it
    grids = {name: {_canonical(v): (v, None) for v in tuning.values[name]} for name in arms}
    for label, (_, overrides) in data.arms.items():
        owners = [name for name, wanted in arms.items() if same_overrides(wanted, overrides)]
        if len(owners) != 1 or tuning.setting not in overrides:
            continue
        values = list(arm_values(data, tuning.measure, label).values())
        text = overrides[tuning.setting]
        grids[owners[0]][_canonical(text)] = (text, stats.mean(values) if values else None)
    return {name: dict(grid.values()) for name, grid in grids.items()}


def select_settings(tuning: Tuning, arms: Mapping[str, Mapping[str, str]], data: BundleData) -> dict[str, Selection]:
    """Per spec arm, the tuning stage's winner on the declared selection metric."""
    scores = tuning_scores(tuning, arms, data)
    return {name: select_setting(name, tuning.setting, scores[name], tuning.goal) for name in arms}


def select_from_bundle(experiment: Experiment, bundle_dir: str | Path) -> dict[str, Selection]:
    """The launcher's call after the tuning stage: per spec arm, the winner in that stage's built bundle."""
    if experiment.tuning is None:
        raise VerdictError("experiment: no tuning declared")
    return select_settings(experiment.tuning, experiment.arms, load_bundle_data(Path(bundle_dir) / "data"))


def check_logged(experiment: Experiment, data: BundleData) -> None:
    """Refuse (one line) a criterion or tuning metric that no accepted run of ``data`` (e.g. the probe) logs."""
    measures = [("criterion", experiment.criterion.measure)]
    if experiment.tuning is not None:
        measures.append(("tuning", experiment.tuning.measure))
    for role, measure in measures:
        if not any(arm_values(data, measure, arm) for arm in data.arms):
            logged = sorted(data.step_keys)
            raise VerdictError(f"{role} metric {measure.metric} is logged by no accepted run"
                               + ("" if measure.is_eval else f"; logged: {', '.join(logged) or 'nothing'}"))


# ---- the rule -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CollapseCheck:
    """An arm's mean curve over the paired seeds: its peak, its final value and the drop between (in units)."""

    peak: float
    final: float
    drop: float
    collapsed: bool


def collapse_check(curve: Sequence[float], limit: float) -> CollapseCheck:
    """Drop from the arm's own peak = max(curve) − curve[-1]; collapsed when the drop exceeds ``limit``."""
    peak, final = max(curve), curve[-1]
    return CollapseCheck(peak, final, peak - final, peak - final > limit)


def mean_curve(curves: Sequence[Sequence[float]]) -> list[float]:
    """Point-wise mean over seeds of equally long curves (aligned at their ends if lengths differ)."""
    length = min(len(c) for c in curves)
    return [stats.mean([c[len(c) - length + i] for c in curves]) for i in range(length)]


@dataclass
class Outcome:
    """What the rule decided, and every number it used (differences in the criterion's units)."""

    verdict: str
    rule: str
    reason: str
    by_seed: dict[int, tuple[float, float, float]]  # seed -> (baseline, treatment, treatment − baseline)
    summary: stats.Summary
    interval: tuple[float, float] | None
    collapse: dict[str, CollapseCheck] = field(default_factory=dict)


def decide(criterion: Criterion, baseline: Mapping[int, float], treatment: Mapping[int, float],
           baseline_curve: Sequence[float] = (), treatment_curve: Sequence[float] = (),
           level: float = stats.CI_LEVEL, min_seeds: int = 2) -> Outcome:
    """The pre-registered rule, on raw metric values by seed and each arm's mean curve.

    d_s = scale · (treatment_s − baseline_s) over the seeds both arms have (scale 100 for points);
    mean ± SD (ddof=1) and the t-interval with df = n − 1. In order:
    fewer than ``min_seeds`` (at least 2) paired seeds -> INCONCLUSIVE (too-few-seeds);
    the baseline's drop from its own peak > collapse drop while the treatment's is not -> VALIDATED (collapse);
    mean d >= threshold -> VALIDATED (threshold), unless ci_excludes_zero and the interval reaches 0 ->
    INCONCLUSIVE (threshold-within-noise);
    mean d >= inconclusive_below -> INCONCLUSIVE (inconclusive-band); otherwise FAILED (below-threshold).
    """
    scale, unit = criterion.scale, " points" if criterion.units == "points" else ""
    seeds = [s for s in baseline if s in treatment]
    by_seed = {s: (scale * baseline[s], scale * treatment[s], scale * (treatment[s] - baseline[s])) for s in seeds}
    diffs = [by_seed[s][2] for s in seeds]
    summary, interval = stats.across_seeds(diffs), stats.t_interval(diffs, level)
    collapse: dict[str, CollapseCheck] = {}
    if criterion.collapse_drop is not None and baseline_curve and treatment_curve:
        collapse = {"baseline": collapse_check([scale * v for v in baseline_curve], criterion.collapse_drop),
                    "treatment": collapse_check([scale * v for v in treatment_curve], criterion.collapse_drop)}

    def outcome(verdict: str, rule: str, reason: str) -> Outcome:
        return Outcome(verdict, rule, reason, by_seed, summary, interval, collapse)

    if len(seeds) < max(min_seeds, 2):
        return outcome(INCONCLUSIVE, "too-few-seeds",
                       f"{len(seeds)} seed(s) with both arms accepted; the verdict needs at least {max(min_seeds, 2)}")
    mean, low = summary.mean, interval[0]
    shown = f"mean difference {mean:+.4g}{unit} (95% t-interval [{interval[0]:+.4g}, {interval[1]:+.4g}], n={len(seeds)})"
    if collapse and collapse["baseline"].collapsed and not collapse["treatment"].collapsed:
        return outcome(VALIDATED, "collapse",
                       f"the baseline dropped {collapse['baseline'].drop:.4g}{unit} from its peak (limit "
                       f"{criterion.collapse_drop:g}), the treatment {collapse['treatment'].drop:.4g}{unit}; {shown}")
    if mean >= criterion.threshold - THRESHOLD_SLACK:
        if criterion.ci_excludes_zero and low <= 0:
            return outcome(INCONCLUSIVE, "threshold-within-noise",
                           f"{shown} reaches the threshold {criterion.threshold:g}{unit} but the interval includes 0")
        return outcome(VALIDATED, "threshold", f"{shown} >= threshold {criterion.threshold:g}{unit}")
    if criterion.inconclusive_below is not None and mean >= criterion.inconclusive_below - THRESHOLD_SLACK:
        return outcome(INCONCLUSIVE, "inconclusive-band",
                       f"{shown} is between {criterion.inconclusive_below:g} and {criterion.threshold:g}{unit}")
    floor = criterion.inconclusive_below if criterion.inconclusive_below is not None else criterion.threshold
    against = collapse and collapse["treatment"].collapsed and not collapse["baseline"].collapsed
    return outcome(FAILED, "below-threshold", f"{shown} < {floor:g}{unit}, "
                   + ("and the treatment collapsed where the baseline did not" if against else "with no collapse difference"))


# ---- verdict.json --------------------------------------------------------------------------------

def resolve_arm(name: str, wanted: Mapping[str, str], data: BundleData, selected: Mapping[str, str] | None = None) -> str:
    """The sweep's arm label that runs spec arm ``name``: the label itself, else the one arm carrying
    all of its overrides (and its selected tuning value)."""
    if name in data.arms and not selected:
        return name
    wanted = {**wanted, **(selected or {})}
    matches = [label for label, (_, overrides) in data.arms.items() if same_overrides(wanted, overrides)]
    if len(matches) != 1:
        shown = ", ".join(f"{k}={v}" for k, v in wanted.items())
        raise VerdictError(f"spec arm {name} ({shown}) matches {len(matches)} arms of the sweep "
                           f"({', '.join(data.arms)}); it must match exactly one")
    return matches[0]


def experiment_verdict(experiment: Experiment, data: BundleData, tuning_data: BundleData | None = None) -> dict:
    """The ``verdict.json`` record of an experiment, from its confirm-stage evidence (and its tuning stage's)."""
    criterion = experiment.criterion
    selections: dict[str, Selection] = {}
    if experiment.tuning is not None and tuning_data is not None:
        selections = select_settings(experiment.tuning, experiment.arms, tuning_data)
    selected = {name: {s.setting: s.value} for name, s in selections.items()}
    labels = {role: resolve_arm(name, experiment.arms[name], data, selected.get(name))
              for role, name in (("baseline", criterion.baseline), ("treatment", criterion.treatment))}
    values = {role: arm_values(data, criterion.measure, label) for role, label in labels.items()}
    if not values["baseline"] and not values["treatment"]:
        raise VerdictError(f"criterion metric {criterion.measure.metric} is logged by no accepted run of "
                           f"{labels['baseline']} or {labels['treatment']}")
    paired = [s for s in values["baseline"] if s in values["treatment"]]
    curves = {role: mean_curve([trajectory(data, criterion.measure, labels[role], s) for s in paired])
              if paired else [] for role in labels}
    outcome = decide(criterion, values["baseline"], values["treatment"], curves["baseline"], curves["treatment"],
                     data.ci_level, min_seeds=2 if experiment.exploratory else MIN_SEEDS)
    edges = [{"arm": s.arm, "setting": s.setting, "value": s.value, "side": s.edge}
             for s in selections.values() if s.edge]
    scale = criterion.scale

    def summary(role: str) -> dict:
        found = stats.across_seeds([scale * v for s, v in values[role].items() if s in paired])
        return {"n": found.n, "mean": found.mean, "sd": found.sd}

    return {
        "schema": SCHEMA,
        "verdict": outcome.verdict,
        "rule": outcome.rule,
        "reason": outcome.reason,
        "provisional": bool(edges),
        "metric": {"name": criterion.measure.metric, "at": criterion.measure.at,
                   "last_k": criterion.measure.window(data) if not criterion.measure.is_eval else None,
                   "units": criterion.units},
        "arms": {role: {"name": name, "arm": labels[role], "overrides": {**experiment.arms[name], **selected.get(name, {})}}
                 for role, name in (("baseline", criterion.baseline), ("treatment", criterion.treatment))},
        "seeds": paired,
        "seeds_missing": [s for s in experiment.seeds if s not in paired],  # pre-registered, not paired here
        "per_seed": [{"seed": s, "baseline": b, "treatment": t, "difference": d}
                     for s, (b, t, d) in outcome.by_seed.items()],
        "baseline": summary("baseline"),
        "treatment": summary("treatment"),
        "difference_mean": outcome.summary.mean,
        "difference_sd": outcome.summary.sd,
        "difference_ci95": list(outcome.interval) if outcome.interval else None,
        "ci_level": data.ci_level,
        "threshold": criterion.threshold,
        "inconclusive_below": criterion.inconclusive_below,
        "ci_excludes_zero": criterion.ci_excludes_zero,
        "collapse": None if criterion.collapse_drop is None else {
            "drop": criterion.collapse_drop,
            **{role: vars(check) for role, check in outcome.collapse.items()}},
        "edge_of_grid": edges,
        "selected": selected,
        "tuning": None if experiment.tuning is None else {
            "setting": experiment.tuning.setting, "metric": experiment.tuning.measure.metric,
            "goal": experiment.tuning.goal, "on_edge": experiment.tuning.on_edge,
            "scores": {name: s.scores for name, s in selections.items()},
            "evidence": "tuning stage" if tuning_data is not None else "not in this bundle"},
        "exploratory": experiment.exploratory,
    }


def bundle_verdict(data: BundleData) -> dict | None:
    """The verdict a bundle's own files give (its tuning stage's under ``data/stages/tuning/``);
    None when it carries no experiment spec."""
    if data.experiment is None:
        return None
    return experiment_verdict(parse_experiment(data.experiment), data, data.stages.get(TUNING_STAGE))


def add_experiment(sweep_dir: Path, data_dir: Path) -> None:
    """Build hook, before the data is loaded: carry ``<sweep_dir>/experiment.yaml`` (the spec as run) and
    every earlier stage's sealed evidence (``<experiment dir>/<stage>/bundle/data/``: stages are sibling
    sweeps; the probe's checks with it) into the bundle's ``data/stages/<stage>/`` (audited as well)."""
    spec = Path(sweep_dir) / EXPERIMENT_FILE
    if not spec.is_file():
        return
    text = spec.read_text(encoding="utf-8")
    experiment = parse_experiment(text)
    write_text(Path(data_dir) / EXPERIMENT_FILE, text)
    for stage in EARLIER_STAGES:
        if stage == TUNING_STAGE and experiment.tuning is None:
            continue
        root = Path(sweep_dir).parent / stage
        built = root / "bundle" / "data"
        if not (built / "index.csv").is_file():
            continue
        target_root = Path(data_dir) / "stages" / stage
        for path in sorted(p for p in built.rglob("*") if p.is_file() and not p.is_symlink()):
            target = target_root / path.relative_to(built)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
        for name in STAGE_RECORDS.get(stage, ()):
            if (root / name).is_file():
                write_text(target_root / name, (root / name).read_text(encoding="utf-8"))


def write_verdict(data_dir: Path, data: BundleData) -> None:
    """Build hook, after the data is loaded: write ``data/verdict.json`` when the bundle carries a spec."""
    record = bundle_verdict(data)
    if record is not None:
        write_text(Path(data_dir) / VERDICT_FILE, dumps_json(record))


# ---- the audit's recomputation --------------------------------------------------------------------

def _differences(recorded, recomputed, path: str = "") -> list[str]:
    """Where two JSON values differ (floats within 1e-9 relative, as the table audit allows)."""
    if isinstance(recorded, dict) and isinstance(recomputed, dict):
        out = []
        for key in sorted(set(recorded) | set(recomputed)):
            where = f"{path}.{key}" if path else key
            if key not in recorded or key not in recomputed:
                out.append(f"{where} {'missing' if key not in recorded else 'not in the recomputation'}")
            else:
                out += _differences(recorded[key], recomputed[key], where)
        return out
    if isinstance(recorded, list) and isinstance(recomputed, list) and len(recorded) == len(recomputed):
        return [d for i, (a, b) in enumerate(zip(recorded, recomputed)) for d in _differences(a, b, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(recorded, numbers) and isinstance(recomputed, numbers) and not isinstance(recorded, bool) \
            and not isinstance(recomputed, bool):
        if math.isclose(recorded, recomputed, rel_tol=1e-9, abs_tol=1e-12):
            return []
    elif recorded == recomputed:
        return []
    return [f"{path}: recorded {recorded!r}, recomputed {recomputed!r}"]


def check_verdict(data_dir: Path, data: BundleData) -> list[Problem]:
    """A problem for every way ``verdict.json`` differs from what the bundle's CSVs and spec give.

    Also: a verdict without its spec or a spec without its verdict, and a spec whose SHA256 differs
    from the one ``sweep.json`` pre-registered (``experiment_sha256``), when it records one.
    """
    data_dir = Path(data_dir)
    rel_verdict, rel_spec = f"data/{VERDICT_FILE}", f"data/{EXPERIMENT_FILE}"
    has_verdict = (data_dir / VERDICT_FILE).is_file()
    if data.experiment is None:
        return [Problem(rel_verdict, f"present without {rel_spec}: nothing to recompute it from")] if has_verdict else []
    findings = []
    registered = data.sweep.get("experiment_sha256")
    if registered is not None and registered != sha256_file(data_dir / EXPERIMENT_FILE):
        findings.append(Problem(rel_spec, "SHA256 differs from the pre-registered experiment_sha256 in sweep.json"))
    if not has_verdict:
        return findings + [Problem(rel_verdict, "missing (the bundle carries an experiment spec)")]
    try:
        recorded = read_json(data_dir / VERDICT_FILE)
    except JSONError as exc:
        return findings + [Problem(rel_verdict, str(exc))]
    try:
        recomputed = bundle_verdict(data)
    except (VerdictError, OSError, KeyError, ValueError) as exc:
        return findings + [Problem(rel_verdict, f"cannot recompute ({exc})")]
    differences = _differences(recorded, recomputed)
    findings += [Problem(rel_verdict, f"does not recompute: {d}") for d in differences[:10]]
    if len(differences) > 10:
        findings.append(Problem(rel_verdict, f"(+{len(differences) - 10} more differences)"))
    return findings


# ---- report.md ------------------------------------------------------------------------------------

def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}"


def _plain(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def verdict_section(record: dict) -> str:
    """The report's opening section: the verdict, the rule that decided it and every number it used."""
    arms, metric = record["arms"], record["metric"]
    unit = " points" if metric["units"] == "points" else ""
    base, treat = arms["baseline"], arms["treatment"]
    where = "at the final checkpoint" if metric["at"] == "final" else f"as the last-{metric['last_k']} mean"
    provisional = " (provisional: a tuning winner sits on the edge of its grid)" if record["provisional"] else ""
    out = [f"## Verdict: {record['verdict']}{provisional}\n",
           f"Pre-registered criterion (`data/experiment.yaml`): treatment `{treat['name']}` (arm {treat['arm']}) − "
           f"baseline `{base['name']}` (arm {base['arm']}) on `{metric['name']}` {where}, paired by training seed, "
           f"must reach {record['threshold']:g}{unit}"
           + (f"; below {record['inconclusive_below']:g}{unit} it failed, in between it is inconclusive"
              if record["inconclusive_below"] is not None else "")
           + ("; the 95% t-interval must exclude 0" if record["ci_excludes_zero"] else "")
           + (f"; also validated when the baseline drops more than {record['collapse']['drop']:g}{unit} from its "
              f"own peak while the treatment does not" if record["collapse"] else "") + ".\n",
           f"Decided by rule `{record['rule']}`: {record['reason']}.\n"]
    if record.get("exploratory"):
        out.append("The spec declares this experiment exploratory.\n")
    if record["seeds_missing"]:
        out.append("Pre-registered seeds without an accepted run in both arms: "
                   + ", ".join(map(str, record["seeds_missing"])) + ".\n")
    if record["tuning"] and record["tuning"]["evidence"] != "tuning stage":
        out.append("The spec declares tuning, but this bundle carries no tuning-stage evidence (data/stages/tuning/): "
                   "the selection is not checked here.\n")
    out.append(f"| Seed | Baseline {base['name']} | Treatment {treat['name']} | Treatment − baseline |")
    out.append("|---|---|---|---|")
    out += [f"| {r['seed']} | {_plain(r['baseline'])} | {_plain(r['treatment'])} | {_signed(r['difference'])} |"
            for r in record["per_seed"]]
    sd = record["difference_sd"]
    ci = record["difference_ci95"]
    out.append(f"| mean ± SD | {_plain(record['baseline']['mean'])} | {_plain(record['treatment']['mean'])} | "
               f"{_signed(record['difference_mean'])}" + (f" ± {sd:.2f}" if sd is not None else " (n<2)")
               + (f", 95% t-interval [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "") + " |\n")
    collapse = record["collapse"]
    if collapse and "baseline" in collapse:
        out.append("Collapse check (mean curve over the paired seeds): " + "; ".join(
            f"{role} peak {_plain(collapse[role]['peak'])}, final {_plain(collapse[role]['final'])}, drop "
            f"{_plain(collapse[role]['drop'])}{unit}" + (" (collapsed)" if collapse[role]["collapsed"] else "")
            for role in ("baseline", "treatment")) + ".\n")
    if record["selected"]:
        out.append("Tuning selected: " + "; ".join(
            f"{name}: " + ", ".join(f"{k}={v}" for k, v in chosen.items()) for name, chosen in record["selected"].items())
                   + f" (on {record['tuning']['metric']}, never the verdict metric).\n")
    for edge in record["edge_of_grid"]:
        out.append(f"- Edge of grid: {edge['arm']}'s best {edge['setting']}={edge['value']} is the {edge['side']} "
                   f"end of its grid.")
    if record["edge_of_grid"]:
        out.append("")
    return "\n".join(out)
