"""The experiment spec (``conf/experiment/<name>.yaml``): the one parser of every key, for the verdict and the launcher.

The bundle keeps the spec as run as ``data/experiment.yaml``; the verdict reads its arms, seeds,
criterion and tuning (``parse_experiment``), the launcher's experiment runner the whole of it
(``parse_study``: also its title, hypothesis, shared settings, tuning seeds, budget and probe)::

    title: ...                     # the launcher's: in words, as pre-registered
    hypothesis: ...
    arms:                          # name -> the overrides that make the arm
      isp: {algo: is_pg}
      sc:  {algo: score_centering}
    settings: {workload.n_updates: 32}   # every arm of every stage
    seeds: [1, 2, 3]               # a verdict needs >= 3 unless `exploratory: true`; or seeds in waves:
                                   # {n: auto, waves: [3, 3, 4], spending: obrien-fleming (or pocock), futility: 0}
                                   # (a wave runs only while no look has decided; evidence.statistics.waves), or
                                   # {n: auto, min: 3, max: 10, spending: ...}: two waves, the second sized by the
                                   # first look (waves [min, max - min], its size chosen in min+2..max)
    tuning_seeds: [101]            # the tuning stage's seeds (default: seeds)
    criterion:
      metric: eval/pass@1          # eval/<name> at: final, or a training metric at: last_k (+ last_k: 10)
      at: final
      baseline: isp
      treatment: sc                # or several: [sc, ent], each against the baseline, Holm-corrected
      threshold_points: 4          # mean over seeds of (treatment - baseline) must reach this;
                                   # `threshold:` instead states it in the metric's own units
      inconclusive_below_points: 2 # below this the treatment failed; between the two: INCONCLUSIVE
      collapse: {drop_points: 10}  # VALIDATED also when the baseline drops more than this from its own
                                   # peak while the treatment does not
      ci_excludes_zero: true       # default: reaching the threshold also needs the 95 % t-interval above 0
    equivalence_margin_points: 2   # optional: equivalence within ±2 points is claimed only by TOST against it
                                   # (`equivalence_margin:` states it in the metric's own units)
    tuning:                        # optional: per arm, a grid over one setting, selected before confirm
      setting: workload.lr
      values: [1e-5, 4e-5, 1.6e-4] # or {isp: [...], sc: [...]} with the same number of values per arm
      metric: rollout/raw_reward   # never the verdict metric and never an eval/ (test-split) metric
      at: last_k
      last_k: 5
      goal: max                    # or min
      on_edge: extend              # a winner on the edge of its grid: extend once, or mark provisional
    budget: {wall_minutes_per_run: 10, cpu_hours: 1.0}   # checked against the probe's step cost
    certify: {stages: [confirm]}   # reproducibility certificates (certify=true) of these stages, inside the budget
    probe: {steps: 2, gradient_check: {...}, staleness_check: {...}}

Every setting's value becomes override text the one way (``override_text``: ``true``/``false``,
lists as ``[a,b]``, mappings as ``{k:v}``), wherever in the spec it is written. Every problem is one ``VerdictError`` line.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

from facts.files import CONFIRM_STAGE, TUNING_STAGE
from study.design import MAX_WAVES, MDE_POWER, SPENDING_RULES, fractions
from study.measure import POINTS_PER_UNIT, Measure, MeasureError, parse_measure

MIN_SEEDS = 3  # for a verdict that is not exploratory
# The spec's keys: the verdict's, and the ones only the launcher's stages read.
MARGIN_KEYS = ("equivalence_margin_points", "equivalence_margin")
VERDICT_KEYS = {"arms", "seeds", "exploratory", "criterion", "tuning", *MARGIN_KEYS}
LAUNCHER_KEYS = {"name", "title", "hypothesis", "settings", "tuning_seeds", "budget", "probe", "certify"}
CERTIFY_STAGES = (TUNING_STAGE, CONFIRM_STAGE)  # the stages a spec's certify block may name
PROBE_KEYS = {"steps", "gradient_check", "staleness_check"}
BUDGET_KEYS = {"wall_minutes_per_run", "cpu_hours", "gpu_hours"}
DEFAULT_PROBE_STEPS = 2
_CRITERION_KEYS = {"metric", "at", "last_k", "baseline", "treatment", "threshold", "threshold_points",
                   "inconclusive_below", "inconclusive_below_points", "collapse", "ci_excludes_zero"}
_TUNING_KEYS = {"setting", "values", "metric", "at", "last_k", "goal", "on_edge"}
_SIZING_KEYS = {"n", "min", "max", "waves", "spending", "futility"}
# The probe's declared checks and the spec arms each one names.
_PROBE_CHECK_ROLES = (("gradient_check", ("baseline", "treatment")), ("staleness_check", ("arm",)))


# ---- override values -----------------------------------------------------------------------------


class VerdictError(ValueError):
    """An experiment spec, or its evidence, that cannot give a verdict (one-line message naming the fix).

    Stated with the spec, below the launcher and the evidence, which both raise it; ``evidence.problems``
    lists it in the evidence's error family."""


def override_text(value) -> str:
    """A setting's value as override text: as the user wrote it (YAML may have parsed 1e-4 as a float),
    booleans as ``true``/``false``, lists and mappings as Hydra writes them on a command line (``[0.9,0.99]``,
    ``{rank:8,alpha:16}``: a group of settings set whole, such as ``workload.lora``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(override_text(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{override_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def overrides_block(block, what: str) -> dict[str, str]:
    """A mapping of settings to values (``settings:``, a probe check's ``settings:``) as override text."""
    if block is None:
        return {}
    if not isinstance(block, Mapping):
        raise VerdictError(f"{what} must be a mapping of settings to values, e.g. {{workload.lr: 1e-4}}")
    return {str(k): override_text(v) for k, v in block.items()}


def canonical(value: str):
    """Values compare as numbers when both are numbers (``3e-4`` == ``0.0003``), else as text."""
    try:
        return float(value)
    except ValueError:
        return value


def same_overrides(wanted: Mapping[str, str], have: Mapping[str, str]) -> bool:
    """Whether ``have`` sets every override of ``wanted`` to the same value."""
    return all(k in have and canonical(str(have[k])) == canonical(str(v)) for k, v in wanted.items())


def arm_owner(arms: Mapping[str, Mapping[str, str]], have: Mapping[str, str]) -> str | None:
    """The spec arm a sweep arm's overrides ``have`` run, or None unless exactly one: the arm whose every
    override ``have`` sets to the same value, and which sets every key of the spec's arms that ``have``
    sets (so ``{algo: dapo}`` never owns the runs of ``{algo: dapo, algo.loss_reduction: x}``). Never
    by label: a spec arm named like another arm's label (``grpo: {algo: rpp}``) still owns its own runs."""
    keys = {k for overrides in arms.values() for k in overrides}
    owners = [name for name, wanted in arms.items()
              if same_overrides(wanted, have) and not (keys - set(wanted)) & set(have)]
    return owners[0] if len(owners) == 1 else None


# ---- the verdict's part -------------------------------------------------------------------------

@dataclass(frozen=True)
class Criterion:
    """The pre-registered success criterion; thresholds in ``units`` (points = 100 x a rate)."""

    measure: Measure
    baseline: str
    treatments: tuple[str, ...]  # one, or several against the one baseline (a Holm-corrected family)
    threshold: float
    inconclusive_below: float | None
    collapse_drop: float | None
    units: str  # "points" or "units"
    ci_excludes_zero: bool = True

    @property
    def scale(self) -> float:
        return POINTS_PER_UNIT if self.units == "points" else 1.0

    @property
    def treatment(self) -> str:
        """The treatments' names as text (the one treatment's name in a two-arm spec)."""
        return ", ".join(self.treatments)

    @property
    def family(self) -> bool:
        """Several treatments against the baseline: the verdict corrects for them (Holm)."""
        return len(self.treatments) > 1


@dataclass(frozen=True)
class Tuning:
    """The tuning stage: per arm, a grid over ``setting``, selected on ``measure`` (``goal`` max or min)."""

    setting: str
    values: dict[str, tuple[str, ...]]  # arm name -> grid, as override text
    measure: Measure
    goal: str
    on_edge: str


@dataclass(frozen=True)
class Sizing:
    """Seeds in waves (``seeds: {n: auto, waves: [3, 3, 4], spending: obrien-fleming, futility: 0}``): wave k adds
    ``waves[k]`` seeds, and look k, after wave k, stops the design when its boundary is crossed (or its Z is below the
    futility bound); the looks spend α by the named rule (``evidence.statistics.waves``). The two-look sized design
    ``{n: auto, min, max}`` is waves ``[min, max - min]`` with ``resized``: its second wave runs only the seeds its
    first look says the threshold needs (at least two, ``evidence.statistics.sequential.required_seeds``)."""

    waves: tuple[int, ...]
    spending: str
    resized: bool = False
    futility: float | None = None
    power: float = MDE_POWER

    @property
    def min(self) -> int:
        """The first wave's seeds: the first look."""
        return self.waves[0]

    @property
    def max(self) -> int:
        """The design's largest size: every wave's seeds."""
        return sum(self.waves)

    @property
    def ends(self) -> tuple[int, ...]:
        """The last seed of each wave as planned: M_k = waves[0] + … + waves[k]."""
        return tuple(sum(self.waves[:k + 1]) for k in range(len(self.waves)))

    @property
    def fractions(self) -> tuple[float, ...]:
        """Each look's information fraction M_k/M_K, fixed before any seed runs."""
        return fractions(self.waves)

    @property
    def information_fraction(self) -> float:
        """The first look's share of the design's largest size: min/max."""
        return self.fractions[0]


@dataclass(frozen=True)
class Experiment:
    """The parts of an experiment spec that the verdict reads."""

    arms: dict[str, dict[str, str]]
    seeds: tuple[int, ...]  # a sized design's every possible seed: 1..max
    criterion: Criterion
    tuning: Tuning | None = None
    exploratory: bool = False
    sizing: Sizing | None = None
    equivalence_margin: float | None = None  # in the criterion's units; TOST's margin (claims.tost)


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


def _measure(block: Mapping, what: str) -> Measure:
    try:
        return parse_measure(block.get("metric"), block.get("at"), block.get("last_k"))
    except MeasureError as exc:
        raise VerdictError(f"{what}: {exc}") from None


def parse_margin(spec: Mapping, criterion: Criterion) -> float | None:
    """The spec's equivalence margin in the criterion's units: ``equivalence_margin_points`` (a rate's points) or
    ``equivalence_margin`` (the metric's own units), a positive number, for a rate below its whole range; None
    when the spec declares none. Equivalence is claimed only by TOST against it (``claims.tost``)."""
    points, plain = MARGIN_KEYS
    if points in spec and plain in spec:
        raise VerdictError(f"experiment: give {points} or {plain}, not both")
    key = points if points in spec else plain if plain in spec else None
    if key is None:
        return None
    value, metric = spec[key], criterion.measure.metric
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise VerdictError(f"experiment: {key} must be a positive number (the largest difference on {metric} that "
                           f"counts as none), not {value!r}")
    if key == points and not criterion.measure.is_rate:
        raise VerdictError(f"experiment: {metric} is not a rate, so it has no points; state {plain} in its own units")
    rate = value / POINTS_PER_UNIT if key == points else value
    if criterion.measure.is_rate and rate >= 1:
        raise VerdictError(f"experiment: {key} {value:g} spans the whole range of {metric} (a rate in [0, 1]); "
                           + (f"write {points}: {value:g} for points" if key == plain else "give it below 100"))
    return rate * criterion.scale if criterion.measure.is_rate else value


def parse_criterion(block, arms: Mapping[str, Mapping]) -> Criterion:
    """Check a spec's ``criterion`` mapping against its arms; every problem is one line."""
    if not isinstance(block, Mapping):
        raise VerdictError("experiment: 'criterion' must be a mapping (metric, baseline, treatment, threshold_points)")
    unknown = sorted(set(block) - _CRITERION_KEYS)
    if unknown:
        raise VerdictError(f"criterion: unknown key {unknown[0]!r}; known: {', '.join(sorted(_CRITERION_KEYS))}")
    measure = _measure(block, "criterion")
    treatments = _treatments(block, arms)
    if block["baseline"] in treatments:
        raise VerdictError("criterion: baseline and treatment are the same arm" if len(treatments) == 1 else
                           f"criterion: the baseline {block['baseline']} is also listed as a treatment; compare each "
                           f"treatment with the baseline, not the baseline with itself")
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
    return Criterion(measure, block["baseline"], treatments, threshold, below, drop, units, ci)


def _treatments(block: Mapping, arms: Mapping[str, Mapping]) -> tuple[str, ...]:
    """The criterion's baseline checked and its treatments: one arm (``treatment: sc``) or a list of distinct arms
    (``treatment: [sc, ent]``), each a spec arm; every problem one line naming the fix."""
    shown = ", ".join(arms) or "none"
    for role in ("baseline", "treatment"):
        if role not in block or block[role] is None:
            raise VerdictError(f"criterion: no {role}; name " + (
                "the arm every treatment is compared with (baseline: <arm>)" if role == "baseline" else
                "the arm compared with the baseline (treatment: <arm>), or a list of them (treatment: [a, b])")
                + f" (arms: {shown})")
    if block["baseline"] not in arms:
        raise VerdictError(f"criterion: baseline {block['baseline']!r} is not an arm of the spec (arms: {shown})")
    named = block["treatment"]
    treatments = list(named) if isinstance(named, (list, tuple)) else [named]
    if not treatments:
        raise VerdictError("criterion: treatment is an empty list; name at least one arm")
    for name in treatments:
        if name not in arms:
            raise VerdictError(f"criterion: treatment {name!r} is not an arm of the spec (arms: {shown})")
    twice = sorted({name for name in treatments if treatments.count(name) > 1})
    if twice:
        raise VerdictError(f"criterion: treatment lists {twice[0]} twice; name each treatment once")
    return tuple(treatments)


def _tuning_grids(block: Mapping, arms: Mapping[str, Mapping], setting: str) -> dict[str, tuple[str, ...]]:
    """Per arm, its grid of ``setting`` as override text: at least two distinct values, as many as every arm's."""
    values = block.get("values")
    grids = values if isinstance(values, Mapping) else {name: values for name in arms}
    if set(grids) != set(arms):
        raise VerdictError(f"tuning: values must name every arm ({', '.join(arms)}), not {', '.join(map(str, grids))}")
    out = {}
    for name in arms:
        grid = grids[name]
        if not isinstance(grid, (list, tuple)) or len(grid) < 2:
            raise VerdictError(f"tuning: the grid of {setting} for {name} needs at least two values")
        texts = tuple(override_text(v) for v in grid)
        if len({canonical(t) for t in texts}) != len(texts):
            raise VerdictError(f"tuning: the grid of {setting} for {name} repeats a value")
        out[name] = texts
    if len({len(g) for g in out.values()}) != 1:
        raise VerdictError("tuning: every arm gets the same number of settings (equal tuning budget per arm)")
    return out


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
    grids = _tuning_grids(block, arms, setting)
    measure = _measure(block, "tuning")
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
    if on_edge == "extend":  # extend_grid continues a numeric grid's outer ratio: nothing else extends
        for name, grid in grids.items():
            words = [v for v in grid if not isinstance(canonical(v), float)]
            if words:
                raise VerdictError(f"tuning: on_edge: extend needs a numeric grid, and {name}'s grid of {setting} "
                                   f"has {words[0]!r}; use on_edge: provisional or numeric values")
    return Tuning(setting, grids, measure, goal, on_edge)


def _arms(arms) -> dict[str, dict[str, str]]:
    """The spec's arms, each a non-empty mapping of overrides (as override text, sorted), no two alike."""
    if not isinstance(arms, Mapping) or len(arms) < 2:
        raise VerdictError("experiment: 'arms' must map at least two arm names to their overrides")
    clean: dict[str, dict[str, str]] = {}
    for name, overrides in arms.items():
        if not isinstance(overrides, Mapping) or not overrides:
            raise VerdictError(f"experiment: arm {name} must be a non-empty mapping of overrides, e.g. {{algo: rpp}}")
        clean[str(name)] = {str(k): override_text(v) for k, v in sorted(overrides.items())}
    seen: dict[tuple, str] = {}
    for name, overrides in clean.items():
        key = tuple(sorted((k, canonical(v)) for k, v in overrides.items()))
        if key in seen:
            raise VerdictError(f"experiment: arms {seen[key]} and {name} are identical")
        seen[key] = name
    return clean


def parse_experiment(spec) -> Experiment:
    """An ``Experiment`` from a spec mapping (or YAML text); the launcher's own keys are left alone."""
    if isinstance(spec, str):
        import yaml  # here: the evidence's error family (evidence.problems) imports this module, and a reader outside
        # the venv must still get its one-line error

        try:
            spec = yaml.safe_load(spec)
        except yaml.YAMLError as exc:
            raise VerdictError(f"experiment spec: not valid YAML ({exc.__class__.__name__})") from None
    if isinstance(spec, Mapping) and "criterion" not in spec and isinstance(spec.get("experiment"), Mapping):
        spec = spec["experiment"]  # the spec as Hydra composes it, under its group's package
    if not isinstance(spec, Mapping):
        raise VerdictError("experiment spec: not a mapping")
    arms = _arms(spec.get("arms"))
    exploratory = spec.get("exploratory", False)
    if not isinstance(exploratory, bool):
        raise VerdictError("experiment: exploratory must be true or false")
    seeds = spec.get("seeds")
    sizing = parse_sizing(seeds, exploratory) if isinstance(seeds, Mapping) else None
    if sizing is not None:
        seeds = list(range(1, sizing.max + 1))
    if not isinstance(seeds, (list, tuple)) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seeds) or len(set(seeds)) != len(seeds):
        raise VerdictError("experiment: 'seeds' must be a list of distinct integers, or {n: auto, waves: [3, 3, 4]} "
                           "for seeds in waves")
    if len(seeds) < MIN_SEEDS and not exploratory:
        raise VerdictError(f"experiment: {len(seeds)} seed(s); a verdict needs at least {MIN_SEEDS} "
                           f"(or declare exploratory: true)")
    criterion = parse_criterion(spec.get("criterion"), arms)
    if sizing is not None and criterion.family:
        raise VerdictError("seeds: n: auto sizes one comparison, and the criterion names several treatments; name one "
                           "treatment, or list the seeds")
    if sizing is not None and not criterion.ci_excludes_zero:
        raise VerdictError("seeds: n: auto decides by the looks' test of 0; drop ci_excludes_zero: false, or list "
                           "the seeds")
    tuning = parse_tuning(spec["tuning"], arms, criterion) if spec.get("tuning") is not None else None
    return Experiment(arms, tuple(seeds), criterion, tuning, exploratory, sizing, parse_margin(spec, criterion))


def parse_sizing(block: Mapping, exploratory: bool) -> Sizing:
    """``seeds: {n: auto, waves: [...], spending, futility}`` or ``{n: auto, min, max, spending, futility}`` checked:
    the first wave (min) of at least 3 seeds (2 when exploratory), every later wave of at least 2 (its own paired t
    statistic needs two; max >= min + 2), at most ``MAX_WAVES`` waves, a known spending rule (``obrien_fleming`` is
    ``obrien-fleming``), a finite futility bound on the Z scale; every problem one line."""
    unknown = sorted(set(block) - _SIZING_KEYS)
    if unknown:
        raise VerdictError(f"seeds: unknown key {unknown[0]!r}; seeds in waves are {{n: auto, waves: [3, 3, 4], "
                           f"spending: {SPENDING_RULES[0]}}} (or {{n: auto, min: 3, max: 10}})")
    if block.get("n") != "auto":
        what = "waves" if "waves" in block else "a sized design"
        raise VerdictError(f"seeds: n is {block.get('n')!r}; write n: auto for {what}, or list the seeds")
    lowest = 2 if exploratory else MIN_SEEDS
    spending = block.get("spending", SPENDING_RULES[0])
    spending = spending.replace("_", "-") if isinstance(spending, str) else spending
    if spending not in SPENDING_RULES:
        raise VerdictError(f"seeds: spending {block.get('spending')!r} is not a rule; choose "
                           f"{' or '.join(SPENDING_RULES)}")
    futility = block.get("futility")
    if futility is not None and (isinstance(futility, bool) or not isinstance(futility, (int, float))
                                 or not math.isfinite(futility)):
        raise VerdictError(f"seeds: futility is {futility!r}; give the Z below which an interim look stops the "
                           f"design (e.g. futility: 0, the treatment not ahead), or drop it")
    futility = None if futility is None else float(futility)
    if "waves" in block:
        return Sizing(_waves(block, lowest, exploratory), spending, False, futility)
    low, high = block.get("min"), block.get("max")
    for key, value in (("min", low), ("max", high)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise VerdictError(f"seeds: {key} must be an integer, not {value!r}")
    if low < lowest:
        raise VerdictError(f"seeds: min is {low}; the first look needs at least {lowest} seeds"
                           + ("" if exploratory else " (or declare exploratory: true)"))
    if high < low + 2:
        raise VerdictError(f"seeds: max is {high}; it must be at least min + 2 = {low + 2} (the second look tests "
                           f"two new seeds or more of its own)")
    return Sizing((low, high - low), spending, True, futility)


def _waves(block: Mapping, lowest: int, exploratory: bool) -> tuple[int, ...]:
    """The waves' sizes, each checked (see ``parse_sizing``)."""
    if "min" in block or "max" in block:
        raise VerdictError("seeds: give waves or min and max, not both (min/max is waves [min, max - min] with the "
                           "second wave sized by the first look)")
    waves = block["waves"]
    if not isinstance(waves, (list, tuple)) or not all(isinstance(w, int) and not isinstance(w, bool) for w in waves):
        raise VerdictError(f"seeds: waves must be a list of the seeds each wave adds, e.g. [3, 3, 4], not {waves!r}")
    if not 2 <= len(waves) <= MAX_WAVES:
        raise VerdictError(f"seeds: waves has {len(waves)} wave(s); give 2 to {MAX_WAVES} (one wave is a fixed "
                           f"design: list its seeds)")
    if waves[0] < lowest:
        raise VerdictError(f"seeds: the first wave has {waves[0]} seed(s); the first look needs at least {lowest}"
                           + ("" if exploratory else " (or declare exploratory: true)"))
    for k, size in enumerate(waves[1:], start=2):
        if size < 2:
            raise VerdictError(f"seeds: wave {k} adds {size} seed(s); each wave after the first adds at least 2 (its "
                               f"own paired t statistic needs two); the waves give each wave's new seeds, not a "
                               f"running total")
    return tuple(waves)


# ---- the whole spec, for the launcher's stages -----------------------------------------------

@dataclass(frozen=True)
class Study:
    """An experiment spec, checked: the verdict's part (``experiment``) and the stages' (the rest)."""

    name: str
    text: str  # the spec as run (YAML), whose SHA256 is pre-registered
    experiment: Experiment
    settings: dict[str, str]  # overrides every arm of every stage shares
    tuning_seeds: tuple[int, ...]
    probe: dict  # steps, and each declared check with its settings as override text
    budget: dict
    certify: tuple[str, ...] = ()  # the stages run with certify=true (reproducibility certificates)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def spec_text(spec: Mapping) -> str:
    """The spec as run: YAML with sorted keys, the text whose SHA256 is the pre-registration."""
    import yaml

    return yaml.safe_dump(dict(spec), sort_keys=True)


def _probe_checks(probe: Mapping, arms: Mapping[str, Mapping]) -> dict:
    """The probe block with each declared check naming spec arms, its settings as override text."""
    out = dict(probe)
    for check, roles in _PROBE_CHECK_ROLES:
        block = probe.get(check)
        if block is None:
            continue
        for role in roles:
            if block.get(role) not in arms:
                raise VerdictError(f"probe.{check}.{role} {block.get(role)!r} is not an arm ({', '.join(arms)})")
        out[check] = {**block, "settings": overrides_block(block.get("settings"), f"probe.{check}.settings")}
    return out


def _refuse_stage_owned(experiment: Experiment, settings: Mapping[str, str], probe: Mapping) -> None:
    """A setting the stages own is never set by the spec's arms, shared settings or probe check settings (the
    stage's own layer would silently win, or lose): the seed (``seeds:``, ``tuning_seeds:``), the tuned setting
    (the tuning stage's grid) and, in a probe check, the probe's run length (``probe.steps``)."""
    tuned = experiment.tuning.setting if experiment.tuning is not None else None
    places = [*((f"arm {a}", o) for a, o in experiment.arms.items()), ("settings", settings),
              *((f"probe.{check}.settings", probe[check]["settings"]) for check, _ in _PROBE_CHECK_ROLES
                if isinstance(probe.get(check), Mapping))]
    for where, overrides in places:
        if "seed" in overrides:
            raise VerdictError(f"{where} sets seed={overrides['seed']}; the spec's seeds are pre-registered (seeds:, "
                               "tuning_seeds:): drop it")
        if tuned is not None and tuned in overrides and not where.startswith("arm "):  # an arm's: refused by tuning
            raise VerdictError(f"{where} sets the tuned setting {tuned}={overrides[tuned]}; drop it (the tuning "
                               "stage chooses it per arm)")
        if where.startswith("probe.") and "workload.n_updates" in overrides:
            raise VerdictError(f"{where} sets workload.n_updates={overrides['workload.n_updates']}; the probe runs "
                               "probe.steps updates: set probe.steps instead")


def parse_study(spec: Mapping, name: str) -> Study:
    """A ``Study`` from a composed spec mapping: every key checked, in one place (one ``VerdictError`` line)."""
    unknown = sorted(set(spec) - LAUNCHER_KEYS - VERDICT_KEYS)
    if unknown:
        raise VerdictError(f"unknown key {unknown[0]!r}; known: {', '.join(sorted(LAUNCHER_KEYS | VERDICT_KEYS))}")
    for key in ("title", "hypothesis"):
        if not isinstance(spec.get(key), str) or not spec[key].strip():
            raise VerdictError(f"'{key}' must state it in words (a pre-registration needs one)")
    experiment = parse_experiment(spec)
    settings = overrides_block(spec.get("settings"), "settings")
    for arm, overrides in experiment.arms.items():
        shared = sorted(set(overrides) & set(settings))
        if shared:
            raise VerdictError(f"arm {arm} and settings both set {shared[0]}; set it in one place")
    sized = experiment.sizing
    tuning_seeds = spec.get("tuning_seeds", list(experiment.seeds[:sized.min] if sized else experiment.seeds))
    if not isinstance(tuning_seeds, list) or not tuning_seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in tuning_seeds):
        raise VerdictError("tuning_seeds must be a list of integers")
    probe, budget = spec.get("probe") or {}, spec.get("budget") or {}
    for block, keys, what in ((probe, PROBE_KEYS, "probe"), (budget, BUDGET_KEYS, "budget")):
        if not isinstance(block, Mapping) or set(block) - keys:
            raise VerdictError(f"{what} takes {', '.join(sorted(keys))}")
    steps = probe.get("steps", DEFAULT_PROBE_STEPS)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise VerdictError("probe.steps must be an integer >= 1")
    for key, value in budget.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise VerdictError(f"budget.{key} must be a positive number")
    probe = _probe_checks(probe, experiment.arms)
    _refuse_stage_owned(experiment, settings, probe)
    if experiment.sizing is not None:  # the spec as run names its spending rule, default or not: it is registered
        spec = {**spec, "seeds": {**spec["seeds"], "spending": experiment.sizing.spending}}
    certify = _certify_block(spec.get("certify"), experiment)
    return Study(name, spec_text(spec), experiment, settings, tuple(tuning_seeds), probe, dict(budget), certify)


def _certify_block(block, experiment: Experiment) -> tuple[str, ...]:
    """The stages a spec's ``certify: {stages: [confirm]}`` names (``tuning`` only with a tuning stage)."""
    if block is None:
        return ()
    stages = block.get("stages") if isinstance(block, Mapping) and set(block) == {"stages"} else None
    if not isinstance(stages, list) or not stages or not all(s in CERTIFY_STAGES for s in stages) \
            or len(set(stages)) != len(stages):
        raise VerdictError(f"certify takes {{stages: [...]}}, a list of distinct stages out of {', '.join(CERTIFY_STAGES)}")
    if "tuning" in stages and experiment.tuning is None:
        raise VerdictError("certify.stages names tuning, but the spec has no tuning stage")
    if "confirm" in stages and experiment.sizing is not None:
        # A sized design's confirm sweep grows at its second look, and with it the seeds a certificate would pick.
        raise VerdictError("certify.stages names confirm, but its seeds are sized (seeds: {n: auto}); "
                           "certify a design with a fixed list of seeds")
    return tuple(s for s in CERTIFY_STAGES if s in stages)
