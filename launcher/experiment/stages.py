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
from evidence.verdict.record import VERDICT_FILE
from evidence.verdict.selection import Selection, extend_grid, select_from_bundle
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


def plan_later_stages(runner: Runner, grids: dict[str, list[str]]) -> list:
    """Every stage after the probe planned (and checked) before the first job starts: tuning, and confirm at
    each arm's first tuning value (what the budget counts; the real confirm runs at the winners)."""
    tuning = runner.study.experiment.tuning
    planned = [runner.plan(TUNING_STAGE, runner.tuning_cells(grids))] if grids else []
    planned.append(runner.plan(CONFIRM_STAGE, runner.confirm_cells(
        {a: {tuning.setting: v[0]} for a, v in tuning.values.items()} if grids else {})))
    return planned


def check_planned_budget(runner: Runner, record: dict, planned: list) -> None:
    """The budget against every planned later run (``plan_later_stages``), recorded in ``probe.json``
    (written first without it, so that the probe's checks stay when the budget refuses)."""
    with sweep_lock(runner.stage_dir(PROBE_STAGE)):
        atomic_write_json(runner.stage_dir(PROBE_STAGE) / PROBE_RECORD, record)  # kept when the budget refuses
        record["budget"] = check_budget(runner.study, record, planned)
        atomic_write_json(runner.stage_dir(PROBE_STAGE) / PROBE_RECORD, record)
    speeds = ", ".join(f"{arm} {v['step_s']:.2f} s/step" for arm, v in record["arms"].items())
    print(f"probe passed: {speeds}; plan {record['budget']['cpu_hours']:.3g} CPU-h")


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


def run_confirm(runner: Runner, selected: dict[str, dict[str, str]]) -> int:
    """Every arm at its selected setting over the spec's seeds, with the spec beside the sweep (its bundle
    carries the verdict); prints the verdict line."""
    study = runner.study
    confirm = runner.plan(CONFIRM_STAGE, runner.confirm_cells(selected))
    confirm.experiment_sha256 = study.sha256
    with sweep_lock(runner.stage_dir(CONFIRM_STAGE)):  # the spec beside the sweep, its jobs and its seal
        (runner.stage_dir(CONFIRM_STAGE) / EXPERIMENT_FILE).write_text(study.text)
        stage_header(CONFIRM_STAGE, f"{len(confirm.specs)} job(s)")
        code = run_sweep(confirm)
    verdict = _bundle_data(runner, CONFIRM_STAGE) / VERDICT_FILE
    if not verdict.is_file():
        raise ExperimentFailed("no verdict: the confirm stage's bundle was not built; see the messages above")
    print(verdict_line(json.loads(verdict.read_text()), f"{runner.stage_dir(CONFIRM_STAGE).name}/{BUNDLE_ARCHIVE}"))
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
    record = run_probe(runner, recorded)
    check_planned_budget(runner, record, planned)
    selected = run_tuning(runner, grids) if grids else {}
    return run_confirm(runner, selected)
