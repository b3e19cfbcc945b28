"""The experiment's real run, stage by stage: probe -> (budget) -> tuning -> confirm -> verdict.

Each stage is an ordinary sweep of its own (jobs, evidence, bundle), so the same command resumes:
accepted jobs are never re-run. The spec is pre-registered as the first job starts. A stage's writing
(its jobs, its seal, the records the runner puts beside it) holds the stage's sweep lock, as a plain
launcher does: a second launcher, a build or a signing of its evidence meanwhile is refused at once.
"""

from __future__ import annotations

import json
from pathlib import Path

from evidence.dataset import EXPERIMENT_FILE, load_bundle_data
from evidence.verdict.probe import over_budget, plan_cost
from evidence.verdict.record import VERDICT_FILE
from evidence.verdict.selection import Selection, extend_grid, select_from_bundle
from evidence.verdict.sizing import SECOND_LOOK_PENDING
from evidence.verdict.spec import VerdictError
from evidence.verdict.stages import CONFIRM_STAGE, PROBE_RECORD, PROBE_STAGE, TUNING_STAGE
from facts import atomic_write_json
from facts.files import BUNDLE_ARCHIVE, BUNDLE_DIR, INDEX_TABLE, bundle_payload_dir
from facts.states import FAILED
from launcher.experiment.budget import check_budget
from launcher.experiment.errors import ExperimentFailed
from launcher.experiment.probe import probe_checks
from launcher.experiment.registration import register
from launcher.experiment.runner import Runner, stage_header
from launcher.locks import sweep_lock
from launcher.sweep import run_sweep


def _run(sweep) -> int:
    """One stage's sweep, run holding its directory's lock (``launcher.locks.sweep_lock``)."""
    with sweep_lock(sweep.sweep_dir):
        return run_sweep(sweep)


def _bundle_data(runner: Runner, stage: str) -> Path:
    return bundle_payload_dir(runner.stage_dir(stage) / BUNDLE_DIR)


def run_probe(runner: Runner, recorded: list[str]) -> dict:
    """Pre-register, run the probe's few steps of every arm and check them; its record (``probe.json``)."""
    probe = runner.plan(PROBE_STAGE, runner.probe_cells())
    register(runner.exp_dir, runner.study, recorded)  # the first job is about to start
    stage_header(PROBE_STAGE, f"{len(probe.specs)} job(s)")
    code = _run(probe)
    if code != 0 and not (_bundle_data(runner, PROBE_STAGE) / INDEX_TABLE).is_file():
        raise ExperimentFailed("probe failed: its sweep did not complete; see the messages above")
    return probe_checks(runner, load_bundle_data(_bundle_data(runner, PROBE_STAGE)))


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
    print(f"probe passed: {speeds}; the first look ({sizing.min} seeds) {budget['first_look']['cpu_hours']:.3g} CPU-h, "
          f"the sized design at its most ({sizing.max} seeds) {budget['cpu_hours']:.3g} CPU-h, "
          f"{budget['longest_run_minutes']:.3g} min per run"
          + (f": over the budget ({', '.join(over)}); the second look runs only the seeds that fit" if over else
             ": within the budget"))


def _select(runner: Runner, bundle: Path) -> dict[str, Selection]:
    try:
        return select_from_bundle(runner.study.experiment, bundle)
    except VerdictError as exc:
        raise ExperimentFailed(f"tuning: {exc}") from None


def run_tuning(runner: Runner, grids: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    """Run the grid, select per arm; an edge winner extends its grid once when the spec says so."""
    tuning = runner.study.experiment.tuning
    bundle = runner.stage_dir(TUNING_STAGE) / BUNDLE_DIR
    stage_header(TUNING_STAGE, f"{sum(map(len, grids.values())) * len(runner.study.tuning_seeds)} job(s)")
    _run(runner.plan(TUNING_STAGE, runner.tuning_cells(grids)))
    chosen = _select(runner, bundle)
    if tuning.on_edge == "extend":
        edges = {arm: s.edge for arm, s in chosen.items() if s.edge}
        if edges:
            for arm, side in edges.items():
                value = extend_grid(grids[arm], side)
                grids[arm] = [value, *grids[arm]] if side == "low" else [*grids[arm], value]
                print(f"tuning: {arm}'s best {tuning.setting}={chosen[arm].value} is on the {side} edge; "
                      f"extending its grid once with {value}")
            _run(runner.plan(TUNING_STAGE, runner.tuning_cells(grids)))
            chosen = _select(runner, bundle)
    print("tuning selected: " + "; ".join(
        f"{arm} {s.setting}={s.value}" + (f" (on the {s.edge} edge)" if s.edge else "") for arm, s in chosen.items()))
    return {arm: {s.setting: s.value} for arm, s in chosen.items()}


def _confirm_look(runner: Runner, selected: dict[str, dict[str, str]], seeds: int | None, what: str) -> tuple[int, dict]:
    """The confirm stage over the spec's (first ``seeds``) seeds, with the spec beside the sweep (its bundle carries
    the verdict): the exit code and ``verdict.json``."""
    study = runner.study
    confirm = runner.plan(CONFIRM_STAGE, runner.confirm_cells(selected, seeds))  # bound to the spec's SHA256
    with sweep_lock(runner.stage_dir(CONFIRM_STAGE)):  # the spec beside the sweep, its jobs and its seal
        (runner.stage_dir(CONFIRM_STAGE) / EXPERIMENT_FILE).write_text(study.text)
        stage_header(CONFIRM_STAGE, f"{len(confirm.specs)} job(s){what}")
        code = run_sweep(confirm)
    verdict = _bundle_data(runner, CONFIRM_STAGE) / VERDICT_FILE
    if not verdict.is_file():
        raise ExperimentFailed("no verdict: the confirm stage's bundle was not built; see the messages above")
    return code, json.loads(verdict.read_text())


def second_look_seeds(runner: Runner, v: dict, record: dict) -> int | None:
    """A sized design's second look, from its first look's verdict: the seeds it needs (None: the first look
    stopped, as its rule allows, or decided), refused in one line when their plan is over the spec's budget."""
    sizing = v.get("sizing")
    if sizing is None or sizing["look"] != 1 or sizing["stopped_early"] or v["rule"] != SECOND_LOOK_PENDING:
        return None
    first, need = sizing["first_look"], sizing["first_look"]["required_seeds"]
    z = "—" if first["z"] is None else f"{first['z']:.3g}"
    print(f"first look: {len(first['seeds'])} seeds, Z = {z} inside its boundary {sizing['boundaries'][0]:.4g} "
          f"({sizing['rule']}); the threshold needs {need} seeds at {sizing['power'] * 100:g}% power from their SD "
          f"{first['sd']:.3g}: the second look runs seeds {sizing['min'] + 1}..{need}")
    grids = runner.tuning_grids() if runner.study.experiment.tuning is not None else {}
    cost = plan_cost(record["budget"]["step_s"], [(spec.n_updates, spec.cpus) for sweep in
                                                  plan_later_stages(runner, grids, need) for spec in sweep.specs])
    over = over_budget(cost, runner.study.budget)
    if over:
        key, have, cap = over[0]
        raise ExperimentFailed(f"budget: the second look's {need} seeds need about {have:.3g} "
                               f"{key.replace('_', ' ')}, over the budget of {cap:g}; the first look's verdict "
                               f"stands (INCONCLUSIVE); raise budget.{key} and run the same command again")
    return need


def _sized_before(runner: Runner) -> int | None:
    """The seeds an earlier run of this experiment's first look sized (its confirm bundle's verdict at the second
    look), or None. Accepted jobs never re-run, so the first look's differences, and the size they give, are fixed."""
    try:
        sizing = json.loads((_bundle_data(runner, CONFIRM_STAGE) / VERDICT_FILE).read_text()).get("sizing")
    except (OSError, ValueError, AttributeError):
        return None
    return sizing["first_look"]["required_seeds"] if isinstance(sizing, dict) and sizing.get("look") == 2 else None


def run_confirm(runner: Runner, selected: dict[str, dict[str, str]], record: dict) -> int:
    """Every arm at its selected setting over the spec's seeds (a sized design: its first look's, then the
    seeds its first look sizes); prints the verdict line."""
    sizing = runner.study.experiment.sizing
    sized = _sized_before(runner)
    if sizing is None:
        code, v = _confirm_look(runner, selected, None, "")
    elif sized is not None:  # resumed after the second look was sized: its first look's seeds never re-run
        code, v = _confirm_look(runner, selected, sized, f", the second look: seeds 1..{sized}")
    else:
        code, v = _confirm_look(runner, selected, sizing.min, f", the first look of a sized design ({sizing.spending})")
        need = second_look_seeds(runner, v, record)
        if need is not None:
            code, v = _confirm_look(runner, selected, need, f", the second look: seeds 1..{need}")
    print(verdict_line(v, f"{runner.stage_dir(CONFIRM_STAGE).name}/{BUNDLE_ARCHIVE}"))
    return code


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
                "; bundle ", 1)[0] + f"; Holm-adjusted p {c['holm']['adjusted_p_value']:.3g}"
              for c in v["comparisons"])])
    ci = v["difference_ci95"]
    marks = (" (under-powered)" if v["verdict"] == FAILED and v.get("under_powered") else "") \
        + (" (provisional)" if v["provisional"] else "")
    return (f"verdict: {v['verdict']}{marks} by rule {v['rule']}: {v['metric']['name']} difference "
            f"{v['difference_mean']:+.3g}" + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "")
            + f" {v['metric']['units']}; bundle {bundle}")


def run_stages(runner: Runner, recorded: list[str]) -> int:
    """probe -> (budget) -> tuning -> confirm -> verdict; each stage resumes from its own sweep."""
    grids = runner.tuning_grids() if runner.study.experiment.tuning is not None else {}
    planned = plan_later_stages(runner, grids)
    sizing = runner.study.experiment.sizing
    first_look = plan_later_stages(runner, grids, sizing.min) if sizing is not None else None
    record = run_probe(runner, recorded)
    check_planned_budget(runner, record, planned, first_look)
    selected = run_tuning(runner, grids) if grids else {}
    return run_confirm(runner, selected, record)
