"""The experiment's dry run: every stage's plan and commands, checked and printed, nothing started.

A stage that depends on an earlier one's result says so: confirm is shown at each arm's middle tuning
value. A dry run writes nothing into the experiment's directory (no ``sweep.json``, no ``commands.txt``):
a real run reads those, and a finished experiment's confirm stage keeps its pre-registration link.
"""

from __future__ import annotations

from facts.files import CONFIRM_STAGE, PROBE_STAGE, TUNING_STAGE
from launcher.experiment.probe_checks import DEFAULT_MIN_COSINE
from launcher.experiment.runner import Runner, stage_header
from launcher.job_spec import Sweep
from launcher.jobs import check_arms
from launcher.planning import dry_run_lines
from launcher.sweep_runner import jobs_checked


def show(sweep: Sweep) -> None:
    """A stage's plan, checked against what its directory already ran and printed; nothing is written."""
    check_arms(sweep.sweep_dir, sweep.arms)
    print("\n".join(dry_run_lines(sweep)))
    print(f"dry run: {jobs_checked(sweep)} checked, nothing submitted or written")


def dry_run(runner: Runner) -> int:
    """Print every stage's plan and commands; a stage that depends on an earlier one's result says so."""
    study = runner.study
    print(f"experiment {study.name}: {study.experiment.criterion.treatment} vs {study.experiment.criterion.baseline}, "
          f"spec sha256 {study.sha256}")
    print(f"directory: {runner.exp_dir} (a run of this command writes there; this dry run writes nothing)")
    if not runner.wait:
        print("wait=false: the stages run as a chain of Slurm jobs, each stage's array followed (--dependency=afterany) "
              "by a one-CPU decision job (python -m launcher experiment-step <dir> <k>) that seals it, decides and submits "
              "the next; the launcher returns once the probe is submitted")
    stage_header(PROBE_STAGE, f"{runner.probe_steps()} step(s) of every arm, seed {study.experiment.seeds[0]}")
    show(runner.plan(PROBE_STAGE, runner.probe_cells()))
    grad = study.probe.get("gradient_check")
    if grad:
        print(f"   gradient check: python -m trainer.gradient_probe ({grad['treatment']} vs {grad['baseline']}, staleness 0, "
              f"cosine >= {float(grad.get('min_cosine', DEFAULT_MIN_COSINE)):g})")
    if study.budget:
        print(f"   budget: {', '.join(f'{k}={v}' for k, v in sorted(study.budget.items()))}; checked against the "
              f"probe's measured step cost before the next stage")
    selected: dict[str, dict[str, str]] = {}
    if study.experiment.tuning is not None:
        t = study.experiment.tuning
        stage_header(TUNING_STAGE, f"{t.setting} per arm, selected on {t.measure.label()} ({t.goal}); "
                                   f"edge of grid: {t.on_edge}")
        show(runner.plan(TUNING_STAGE, runner.tuning_cells(runner.tuning_grids())))
        selected = {arm: {t.setting: values[len(values) // 2]} for arm, values in runner.tuning_grids().items()}
        print(f"   confirm runs at each arm's tuning winner; shown here at "
              f"{', '.join(f'{a}: {t.setting}={v[t.setting]}' for a, v in selected.items())}")
    sizing = study.experiment.sizing
    if sizing is None:
        stage_header(CONFIRM_STAGE, f"every arm over seeds {', '.join(map(str, study.experiment.seeds))}")
    else:
        later = (f"then seeds up to {sizing.max} as the first look sizes them" if sizing.resized else
                 "then waves of " + ", ".join(map(str, sizing.waves[1:])) + " seeds while no look has decided")
        stage_header(CONFIRM_STAGE, f"every arm over seeds 1..{sizing.min} (the first look), {later} "
                                    f"({sizing.spending} spending, registered before any seed runs)")
    confirm = runner.plan(CONFIRM_STAGE, runner.confirm_cells(selected, sizing.min if sizing else None))
    if selected:  # illustrative settings: a directory that ran other winners is no contradiction
        print("\n".join(dry_run_lines(confirm)))
    else:
        show(confirm)
    c = study.experiment.criterion
    stage_header("verdict", f"{c.measure.label()}: {c.treatment} - {c.baseline} >= {c.threshold:g} {c.units}"
                            + (f" each, Holm-corrected across {len(c.treatments)} treatments" if c.family else ""))
    return 0
