"""The experiment's real run, stage by stage: probe -> (budget) -> tuning -> confirm -> verdict.

Each stage is an ordinary sweep of its own (jobs, evidence, bundle), so the same command resumes:
accepted jobs are never re-run. The spec is pre-registered before the first job starts. What runs next is
decided in one place, ``decide``: given the step just reached (``BEGIN``, or the stage that has just run and
been sealed), it makes the decision between stages (the probe's checks and the budget, the selection from the
tuning bundle, the grid extension at an edge, the next wave of seeds in waves, the verdict) and returns the next
stage's planned sweep (``Next``) or the experiment's exit code. The waiting launcher (``run_stages``) runs each
``Next`` and seals it; ``wait=false`` on Slurm (``launcher.experiment.chain``) submits each as an array followed
by a decision job that seals it and calls ``decide`` in turn. A stage's writing (its jobs, its seal, the records
the runner puts beside it) holds the stage's sweep lock, as a plain launcher does: a second launcher, a build or
a signing of its evidence meanwhile is refused at once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from evidence.dataset import load_bundle_data
from evidence.problems import EvidenceError
from evidence.verdict.probe import over_budget, plan_cost
from evidence.verdict.record import VERDICT_FILE
from evidence.verdict.selection import Selection, extend_grid, select_from_bundle
from evidence.verdict.sizing import WAVE_PENDING
from facts import atomic_write_json
from facts.files import (
    BUNDLE_ARCHIVE,
    BUNDLE_DIR,
    CONFIRM_STAGE,
    EXPERIMENT_FILE,
    INDEX_TABLE,
    PROBE_RECORD,
    PROBE_STAGE,
    SWEEP_RECORD,
    TUNING_STAGE,
    bundle_payload_dir,
)
from facts.states import FAILED
from launcher.directory_locks import sweep_lock
from launcher.experiment.budget import check_budget
from launcher.experiment.experiment_errors import ExperimentFailed
from launcher.experiment.probe_checks import probe_checks
from launcher.experiment.registration import register
from launcher.experiment.runner import Runner, stage_header
from launcher.job_spec import Sweep
from launcher.overrides import one_line
from launcher.sweep_runner import run_sweep
from study.spec import VerdictError


def plan_later_stages(runner: Runner, grids: dict[str, list[str]], seeds: int | None = None) -> list:
    """Every stage after the probe planned (and checked) before the first job starts: tuning, and confirm at
    each arm's first tuning value (what the budget counts; the real confirm runs at the winners) over the
    spec's seeds (its first ``seeds``: a sized design's first look)."""
    tuning = runner.study.experiment.tuning
    planned = [runner.plan(TUNING_STAGE, runner.tuning_cells(grids))] if grids else []
    planned.append(runner.plan(CONFIRM_STAGE, runner.confirm_cells(
        {a: {tuning.setting: v[0]} for a, v in tuning.values.items()} if grids else {}, seeds)))
    return planned


def check_planned_budget(runner: Runner, record: dict, planned: list, first_look: list | None = None) -> None:
    """The budget against every planned later run (``plan_later_stages``), recorded in ``probe.json``
    (written first without it, so that the probe's checks stay when the budget refuses); a sized design's
    record says what its largest plan (``max`` seeds) costs against the budget before anything long starts."""
    with sweep_lock(runner.stage_dir(PROBE_STAGE)):
        atomic_write_json(runner.stage_dir(PROBE_STAGE) / PROBE_RECORD, record)  # kept when the budget refuses
        record["budget"] = check_budget(runner.study, record, planned, first_look)
        atomic_write_json(runner.stage_dir(PROBE_STAGE) / PROBE_RECORD, record)
    speeds = ", ".join(f"{arm} {v['step_s']:.2f} s/step" for arm, v in record["arms"].items())
    budget = record["budget"]
    sizing = runner.study.experiment.sizing
    if sizing is None:
        print(f"probe passed: {speeds}; plan {budget['cpu_hours']:.3g} CPU-h")
        return
    over = [f"{key.replace('_', ' ')} {need:.3g} > {cap:g}" for key, need, cap in over_budget(budget, budget["budget"])]
    print(f"probe passed: {speeds}; the first wave ({sizing.min} seeds) {budget['first_look']['cpu_hours']:.3g} CPU-h, "
          f"every wave ({sizing.max} seeds) {budget['cpu_hours']:.3g} CPU-h, "
          f"{budget['longest_run_minutes']:.3g} min per run"
          + (f": over the budget ({', '.join(over)}); a later wave runs only if it fits" if over else
             ": within the budget"))


def next_wave_seeds(runner: Runner, v: dict, record: dict) -> int | None:
    """Seeds in waves: the last seed of the next wave, from the latest look's verdict (None: that look decided, or
    stopped the design as its rule allows), refused in one line when the plan through it is over the spec's budget."""
    sizing = v.get("sizing")
    if sizing is None or v["rule"] != WAVE_PENDING or sizing.get("next_wave") is None:
        return None
    look, (first, need) = sizing["looks"][-1], sizing["next_wave"]
    ran = _planned_seeds(runner)
    if ran is not None and need <= ran:  # the wave ran already (its jobs rejected): never planned twice
        raise ExperimentFailed(f"wave {look['look'] + 1} (seeds {first}..{need}) ran already and its look still waits "
                               f"for it; the design cannot decide (its verdict stands, INCONCLUSIVE): see "
                               f"{CONFIRM_STAGE}/{BUNDLE_DIR}/data/{VERDICT_FILE}")
    z = "—" if look["z"] is None else f"{look['z']:.3g}"
    sized = (f"; the threshold needs {need} seeds at {sizing['power'] * 100:g}% power from their SD {look['sd']:.3g}"
             if "required_seeds" in look else "")
    spent = sum((done.get("cost") or {}).get("cpu_hours", 0.0) for done in sizing["looks"])
    print(f"look {look['look']} of {len(sizing['waves'])}: {len(look['seeds'])} seeds, Z = {z} inside its boundary "
          f"{look['boundary']:.4g} ({sizing['rule']}){sized}: wave {look['look'] + 1} runs seeds {first}..{need} "
          f"({spent:.3g} CPU-h spent so far)")
    grids = runner.tuning_grids() if runner.study.experiment.tuning is not None else {}
    cost = plan_cost(record["budget"]["step_s"], [(spec.n_updates, spec.cpus) for sweep in
                                                  plan_later_stages(runner, grids, need) for spec in sweep.specs])
    over = over_budget(cost, runner.study.budget)
    if over:
        key, have, cap = over[0]
        raise ExperimentFailed(f"budget: wave {look['look'] + 1} (seeds 1..{need}) needs about {have:.3g} "
                               f"{key.replace('_', ' ')}, over the budget of {cap:g}; look {look['look']}'s verdict "
                               f"stands (INCONCLUSIVE); raise budget.{key} and run the same command again")
    return need


def _planned_seeds(runner: Runner) -> int | None:
    """The last seed the confirm stage's ``sweep.json`` planned (the wave it has just run), or None."""
    try:
        planned = json.loads((runner.stage_dir(CONFIRM_STAGE) / SWEEP_RECORD).read_text()).get("seeds")
        return max(int(s) for s in planned)
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def _reached_before(runner: Runner) -> int | None:
    """The last seed of the design an earlier run of this experiment reached, or None: through the looks its confirm
    bundle's verdict took, or through the wave it had planned (its confirm ``sweep.json``) when it stopped before
    sealing that wave. Accepted jobs never re-run, so the earlier looks' differences, and what they decided, are
    fixed."""
    reached = []
    try:
        sizing = json.loads((_bundle_data(runner, CONFIRM_STAGE) / VERDICT_FILE).read_text()).get("sizing")
        reached.append(int(sizing["design_seeds"]))
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        pass
    try:
        planned = json.loads((runner.stage_dir(CONFIRM_STAGE) / SWEEP_RECORD).read_text()).get("seeds")
        reached.append(max(int(s) for s in planned))
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    return max(reached, default=None)


def verdict_line(v: dict, bundle: str) -> str:
    """The confirm stage's printed line, from its ``verdict.json``: the verdict with its marks (under-powered:
    a FAILED verdict whose interval still reaches the threshold; provisional), the rule, the mean difference
    with its interval and the bundle; a family's verdict, then a line per treatment with its Holm-adjusted p."""
    if "family" in v:
        family = v["family"]
        return "\n".join([
            f"verdict: {v['verdict']}{' (provisional)' if v['provisional'] else ''} by rule {v['rule']}: "
            f"{len(family['treatments'])} treatments against {family['baseline']}, Holm-corrected at family-wise "
            f"α {family['alpha']:.2g}; bundle {bundle}",
            *(f"   {c['arms']['treatment']['name']}: " + verdict_line(c, bundle).split(": ", 1)[1].rsplit(
                "; bundle ", 1)[0] + ("" if (c.get("claim") or {}).get("sentence") else
                                      f"; Holm-adjusted p {c['holm']['adjusted_p_value']:.3g}")
              for c in v["comparisons"])])
    ci = v["difference_ci95"]
    marks = (" (under-powered)" if v["verdict"] == FAILED and v.get("under_powered") else "") \
        + (" (provisional)" if v["provisional"] else "")
    missing = (v.get("claim") or {}).get("sentence")  # the design lacks what an interval needs: no interval shown
    shown = (f" {v['metric']['units']} ({missing})" if missing else
             (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "") + f" {v['metric']['units']}")
    return (f"verdict: {v['verdict']}{marks} by rule {v['rule']}: {v['metric']['name']} difference "
            f"{v['difference_mean']:+.3g}{shown}; bundle {bundle}")




# The steps of ``decide``: the start, and each one named after what has just run and been sealed.
BEGIN = "begin"
AFTER_PROBE = PROBE_STAGE
AFTER_TUNING = TUNING_STAGE
AFTER_EXTENSION = "tuning-extended"  # the tuning grid extended once at an edge winner (on_edge: extend)
AFTER_LOOK = "confirm-look"  # a look of seeds in waves: the next wave, or the verdict
AFTER_FIRST_LOOK = "confirm-first-look"  # the same, as a chain submitted before seeds in waves named it
AFTER_CONFIRM = CONFIRM_STAGE  # the confirm stage of a fixed list of seeds
STEPS = (BEGIN, AFTER_PROBE, AFTER_TUNING, AFTER_EXTENSION, AFTER_LOOK, AFTER_FIRST_LOOK, AFTER_CONFIRM)


@dataclass
class Next:
    """The stage to run next: its planned sweep, the step that decides once it has run and been sealed, and the
    stage header's text (None: the stage continues, as a tuning grid's extension does)."""

    stage: str
    sweep: Sweep
    after: str
    header: str | None


def decide(runner: Runner, step: str, code: int, recorded: list[str]) -> Next | int:
    """The decision at ``step`` (``BEGIN``, or the ``after`` of the stage that has just run and been sealed, its
    seal's exit code ``code``): the next stage to run, or the experiment's exit code once the verdict is printed.
    Raises ``ExperimentFailed`` (or ``ExperimentError``) in one line when the result stops the experiment. At
    ``BEGIN`` the spec and the plan of every stage are pre-registered (``recorded``: the run's overrides)."""
    if step == BEGIN:
        later = _later(runner)
        probe = runner.plan(PROBE_STAGE, runner.probe_cells())
        register(runner.exp_dir, runner.study, recorded, [probe, *(later[1] if later[1] is not None else later[0])])
        return Next(PROBE_STAGE, probe, AFTER_PROBE, f"{len(probe.specs)} job(s)")
    if step == AFTER_PROBE:
        if code != 0 and not (_bundle_data(runner, PROBE_STAGE) / INDEX_TABLE).is_file():
            raise ExperimentFailed("probe failed: its sweep did not complete; see the messages above")
        record = probe_checks(runner, load_bundle_data(_bundle_data(runner, PROBE_STAGE)))
        check_planned_budget(runner, record, *_later(runner))
        grids = _grids(runner)
        if grids:
            tuning = runner.plan(TUNING_STAGE, runner.tuning_cells(grids))
            return Next(TUNING_STAGE, tuning, AFTER_TUNING, f"{len(tuning.specs)} job(s)")
        return _confirm(runner, {})
    if step == AFTER_TUNING:
        chosen = _select(runner)
        edges = {arm: s.edge for arm, s in chosen.items() if s.edge}
        if runner.study.experiment.tuning.on_edge == "extend" and edges:
            grids = _grids(runner)
            for arm, side in edges.items():
                value = extend_grid(grids[arm], side)
                grids[arm] = [value, *grids[arm]] if side == "low" else [*grids[arm], value]
                print(f"tuning: {arm}'s best {chosen[arm].setting}={chosen[arm].value} is on the {side} edge; "
                      f"extending its grid once with {value}")
            return Next(TUNING_STAGE, runner.plan(TUNING_STAGE, runner.tuning_cells(grids)), AFTER_EXTENSION, None)
        return _confirm(runner, _selected(chosen))
    if step == AFTER_EXTENSION:
        return _confirm(runner, _selected(_select(runner)))
    if step in (AFTER_LOOK, AFTER_FIRST_LOOK):
        need = next_wave_seeds(runner, _verdict(runner), json.loads(
            (runner.stage_dir(PROBE_STAGE) / PROBE_RECORD).read_text()))
        if need is not None:
            selected = _selected(_select(runner), quiet=True) if _grids(runner) else {}
            return _confirm_look(runner, selected, need, _wave_header(runner, need), AFTER_LOOK)
    elif step != AFTER_CONFIRM:
        raise ValueError(f"unknown step {step!r}; one of {', '.join(STEPS)}")
    print(verdict_line(_verdict(runner), f"{runner.stage_dir(CONFIRM_STAGE).name}/{BUNDLE_ARCHIVE}"))
    return code


def _grids(runner: Runner) -> dict[str, list[str]]:
    return runner.tuning_grids() if runner.study.experiment.tuning is not None else {}


def _later(runner: Runner) -> tuple[list, list | None]:
    """Every later stage as planned before the probe (``plan_later_stages``), and a sized design's first look:
    what the registration binds and the budget counts; planned once per process (composing every cell)."""
    if "later" not in runner.cache:
        sizing = runner.study.experiment.sizing
        runner.cache["later"] = (plan_later_stages(runner, _grids(runner)),
                                 plan_later_stages(runner, _grids(runner), sizing.min) if sizing is not None else None)
    return runner.cache["later"]


def _bundle_data(runner: Runner, stage: str) -> Path:
    return bundle_payload_dir(runner.stage_dir(stage) / BUNDLE_DIR)


def _select(runner: Runner) -> dict[str, Selection]:
    """Per arm, the winner in the tuning stage's sealed bundle (``evidence.verdict.selection``)."""
    try:
        return select_from_bundle(runner.study.experiment, runner.stage_dir(TUNING_STAGE) / BUNDLE_DIR)
    except VerdictError as exc:
        raise ExperimentFailed(f"tuning: {exc}") from None


def _selected(chosen: dict[str, Selection], quiet: bool = False) -> dict[str, dict[str, str]]:
    if not quiet:
        print("tuning selected: " + "; ".join(
            f"{arm} {s.setting}={s.value}" + (f" (on the {s.edge} edge)" if s.edge else "") for arm, s in chosen.items()))
    return {arm: {s.setting: s.value} for arm, s in chosen.items()}


def _confirm(runner: Runner, selected: dict[str, dict[str, str]]) -> Next:
    """The confirm stage at the selected settings: over the spec's seeds; for seeds in waves, the first wave, or the
    waves through the looks an earlier run of this experiment took (their seeds never re-run)."""
    sizing = runner.study.experiment.sizing
    if sizing is None:
        return _confirm_look(runner, selected, None, "", AFTER_CONFIRM)
    seeds = _reached_before(runner) or sizing.min
    return _confirm_look(runner, selected, seeds, _wave_header(runner, seeds), AFTER_LOOK)


def _wave_header(runner: Runner, seeds: int) -> str:
    """The confirm stage's header for seeds in waves: which wave runs, through which seed."""
    sizing = runner.study.experiment.sizing
    wave = next((k for k, end in enumerate(sizing.ends) if seeds <= end), len(sizing.ends) - 1) + 1
    return f", wave {wave} of {len(sizing.waves)} ({sizing.spending} spending): seeds 1..{seeds}"


def _confirm_look(runner: Runner, selected: dict[str, dict[str, str]], seeds: int | None, what: str, after: str) -> Next:
    confirm = runner.plan(CONFIRM_STAGE, runner.confirm_cells(selected, seeds))  # bound to the spec's SHA256
    return Next(CONFIRM_STAGE, confirm, after, f"{len(confirm.specs)} job(s){what}")


def _verdict(runner: Runner) -> dict:
    """The confirm stage's ``verdict.json``, as its seal wrote it."""
    verdict = _bundle_data(runner, CONFIRM_STAGE) / VERDICT_FILE
    if not verdict.is_file():
        raise ExperimentFailed("no verdict: the confirm stage's bundle was not built; see the messages above")
    return json.loads(verdict.read_text())


def spec_beside(runner: Runner, sweep: Sweep) -> None:
    """The spec as run beside a stage's sweep: every stage's bundle carries the spec its records name."""
    (sweep.sweep_dir / EXPERIMENT_FILE).parent.mkdir(parents=True, exist_ok=True)
    (sweep.sweep_dir / EXPERIMENT_FILE).write_text(runner.study.text)


@contextlib.contextmanager
def stage_evidence(sweep_dir: Path) -> Iterator[None]:
    """A stage's seal inside: evidence it refuses is one line naming the stage's directory to build once fixed."""
    try:
        yield
    except (EvidenceError, VerdictError) as exc:  # the jobs ran; the stage's evidence was not sealed
        raise ExperimentFailed(f"{sweep_dir.name}: the jobs ran but the evidence was not sealed: "
                               f"{one_line(exc)}; fix that, then python -m evidence build {sweep_dir}") from None


def _run(runner: Runner, sweep: Sweep) -> int:
    """One stage's sweep run to its end and sealed, holding its directory's lock (``launcher.directory_locks.sweep_lock``),
    with the spec beside it."""
    with sweep_lock(sweep.sweep_dir), stage_evidence(sweep.sweep_dir):
        spec_beside(runner, sweep)
        return run_sweep(sweep)


def run_stages(runner: Runner, recorded: list[str]) -> int:
    """probe -> (budget) -> tuning -> confirm -> verdict, waiting for each stage; each resumes from its own sweep."""
    step, code = BEGIN, 0
    while not isinstance(nxt := decide(runner, step, code, recorded), int):
        if nxt.header is not None:
            stage_header(nxt.stage, nxt.header)
        code, step = _run(runner, nxt.sweep), nxt.after
    return nxt
