"""Experiments through ``launch.py experiment=<name>``: the staged dry run (golden), the bad-input
refusals (one line each, before anything starts), pre-registration, the budget refusal, and one small
run end to end (probe -> confirm -> verdict, then resumed)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from evidence.verdict.stages import CONFIRM_STAGE
from launcher.experiment import (
    REGISTRATION,
    ExperimentError,
    check_arm_settings,
    check_budget,
    compose,
    load_study,
    register,
    spec_changes,
)
from launcher.experiment.runner import Runner
from tests.evidence_cli import evidence_in_process
from tests.experiment_spec import experiment_spec
from tests.launch_in_process import launch_in_process
from tests.sweeps import REPO

GOLDEN = REPO / "tests" / "golden" / "experiment_loss_norm_dry_run.txt"
def _study(spec: dict):
    return load_study(OmegaConf.create(spec), "test")


def _experiment(out: Path, *args: str, env: dict[str, str] | None = None):
    return launch_in_process(out, *args, multirun=False, env=env)


def _plan_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines()
            if line.startswith(("[", "# sbatch", "# estimate", "# env", "==", "experiment ", "   "))]


def test_experiment_dry_run_prints_every_stage_and_matches_the_golden_file(tmp_path):
    a = _experiment(tmp_path / "a", "experiment=loss_norm", "dry_run=true")
    b = _experiment(tmp_path / "b", "experiment=loss_norm", "dry_run=true")
    assert a.returncode == 0, a.stderr
    lines = _plan_lines(a.stdout)
    assert lines == _plan_lines(b.stdout)
    stages = [line for line in lines if line.startswith("==")]
    assert [s.split(":")[0] for s in stages] == ["== probe", "== confirm", "== verdict"]
    jobs = [line.split(":")[0] for line in lines if line.startswith("[")]
    assert jobs == ["[0] dapo-loss_reduction_response_mean-1", "[1] dapo-loss_reduction_token_mean-1",
                    *(f"[{i}] dapo-loss_reduction_{arm}-{s}" for i, (arm, s) in enumerate(
                        (a, s) for a in ("response_mean", "token_mean") for s in (1, 2, 3)))]
    probe_cmds = [line for line in lines if line.startswith("[") and "workload.n_updates=2" in line]
    assert len(probe_cmds) == 2  # the probe's few steps; the confirm runs keep the workload's length
    assert all(str(tmp_path) not in line for line in lines)
    assert not (tmp_path / "a" / REGISTRATION).exists()  # a dry run pre-registers nothing
    assert not any((tmp_path / "a" / stage / "jobs").exists() for stage in ("probe", "confirm"))
    assert lines == GOLDEN.read_text().splitlines(), f"update {GOLDEN.name} if this change is intended"


def test_any_other_override_applies_to_every_stage_and_slurm_gets_the_wall_cap(tmp_path):
    proc = _experiment(tmp_path, "experiment=stale_score_centering", "workload.eval.n_prompts=16", "dry_run=true",
                       "cluster=slurm", "cluster.partition=gpu")
    assert proc.returncode == 0, proc.stderr
    jobs = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(jobs) == 3 + 6 + 6  # probe (2 arms + the fresh baseline), tuning 2 arms x 3 lr x 1 seed, confirm
    assert all("workload.eval.n_prompts=16" in j for j in jobs)
    assert all("workload.eval.k=1 " in j for j in jobs[:3])  # the probe's small evaluation
    tuning = [j.split(":")[0].split("] ")[1] for j in jobs[3:9]]
    assert tuning == ["is_pg-lr1e-3-101", "is_pg-lr3e-3-101", "is_pg-lr3e-4-101", "score_centering-lr1e-3-101",
                      "score_centering-lr3e-3-101", "score_centering-lr3e-4-101"]
    assert "# sbatch | #SBATCH --time=10" in proc.stdout  # budget.wall_minutes_per_run -> Slurm --time


def test_unknown_experiment_is_one_line(tmp_path):
    proc = _experiment(tmp_path, "experiment=nope", "dry_run=true")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "proofgrid: error: bad grid: unknown experiment 'nope'; choose from loss_norm, loss_norm_trl, stale_score_centering "
        "(conf/experiment/)"]


@pytest.mark.parametrize(("overrides", "message"), [
    (("experiment.seeds=[1,2]",), "2 seed(s); a verdict needs at least 3 (or declare exploratory: true)"),
    (("experiment.tuning.metric=eval/pass@1", "experiment.tuning.at=final", "~experiment.tuning.last_k"), "tuning: metric eval/pass@1 is the verdict metric"),
    (("experiment.criterion.metric=train/entropy", "experiment.criterion.at=last_k",
      "~experiment.criterion.threshold_points", "+experiment.criterion.threshold=0.1",
      "~experiment.criterion.inconclusive_below_points", "~experiment.criterion.collapse"), "criterion metric train/entropy is logged by no run of arm"),
    (("experiment.criterion.metric=eval/pass@4", "workload.eval.k=2"),
     "criterion metric eval/pass@4 is logged by no run of arm is_pg"),
    (("workload.lr=1e-3",), "sets the tuned setting workload.lr"),
    (("workload.max_grad_norm=0.5",), None),  # a shared override is fine ...
    (("algo=grpo",), "would change arm is_pg's own setting"),  # ... one that rewrites an arm is not
    (("seed=5",), "the spec's seeds are pre-registered"),
    (("+experiment.settings.seed=5",), "settings sets seed=5; the spec's seeds are pre-registered"),  # the spec's own
    # a collapse criterion on an evaluation metric needs evaluations during training (seed 003's every 25 steps)
    (("workload.eval.every=0",), "experiment stale_score_centering: criterion.collapse needs evaluations during "
                                 "training, but arm is_pg has workload.eval.every=0 with workload.n_updates=32, so "
                                 "eval/pass@1's peak is its initial or final value and a collapse between them is "
                                 "never seen; set workload.eval.every below n_updates (e.g. 8) in settings, or drop "
                                 "criterion.collapse"),
    (("workload.eval.every=32",), "arm is_pg has workload.eval.every=32 with workload.n_updates=32"),
    (("workload.n_updates=6",), "arm is_pg has workload.eval.every=8 with workload.n_updates=6"),
    (("workload.n_updates=6", "workload.eval.every=2"), None),
    (("workload.eval.every=0", "~experiment.criterion.collapse"), None),  # no collapse clause: nothing to observe
    (("workload.eval.every=0", "experiment.criterion.metric=train/clip_frac", "experiment.criterion.at=last_k"),
     None),  # a training metric's curve is every step's
    # issue 32: an equivalence margin (TOST's) that is no positive number, or a rate's in the wrong units
    (("+experiment.equivalence_margin_points=-2",), "experiment: equivalence_margin_points must be a positive number"),
    (("+experiment.equivalence_margin=2",), "equivalence_margin 2 spans the whole range of eval/pass@1 (a rate in "
                                            "[0, 1]); write equivalence_margin_points: 2 for points"),
    (("+experiment.equivalence_margin_points=2",), None),
])
def test_bad_experiment_input_is_refused_in_one_line_before_anything_starts(tmp_path, overrides, message):
    proc = _experiment(tmp_path, "experiment=stale_score_centering", *overrides, "dry_run=true")
    if message is None:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("proofgrid: error: ") and message in line
    assert not (tmp_path / "probe").exists()


SWAPPED = ("~experiment.arms.per_example", "~experiment.arms.token_mean", "experiment.criterion.baseline=grpo",
           "experiment.criterion.treatment=rpp")


@pytest.mark.parametrize(("overrides", "message"), [
    # a spec arm named like the label of another arm's runs: refused, whichever arm it names
    ((*SWAPPED, "+experiment.arms.grpo={algo:rpp}", "+experiment.arms.rpp={algo:grpo}"),
     "spec arm grpo (algo=rpp) is named like the label of arm rpp's runs (grpo-1); rename the spec arm"),
    ((*SWAPPED[:2], "experiment.criterion.baseline=rpp", "experiment.criterion.treatment=other",
      "+experiment.arms.rpp={algo:grpo}", "+experiment.arms.other={algo:rpp}"),
     "spec arm rpp (algo=grpo) is named like the label of arm other's runs (rpp-1)"),
    # arms that differ only by what the config already sets: the resolved settings, any default
    (("~experiment.arms.per_example", "+experiment.arms.per_example={algo:dapo}"),
     "arms token_mean and per_example resolve to the same settings (algo.loss_reduction=token_mean is what the "
     "config already sets)"),
    (("~experiment.arms.per_example", "+experiment.arms.per_example={algo:dapo,workload.lr:2e-4}"), None),
    (("~experiment.arms.per_example", "+experiment.arms.per_example={algo:dapo,algo.clip_low:0.2}"),
     "(algo.clip_low=0.2, algo.loss_reduction=token_mean is what the config already sets)"),
    # derived settings (the algorithm record's identity), in an arm and on the command line
    (("~experiment.arms.per_example", "+experiment.arms.per_example={algo:dapo,algo.short:foo}"),
     "arm per_example: the setting algo.short is derived: the algorithm's record sets it through algo=<short>"),
    (("algo.short=foo",), "the setting algo.short is derived"),
    (("algo.display_name=Foo",), "the setting algo.display_name is derived"),
    (("algo.estimator=grpo",), "the setting algo.estimator is derived"),
])
def test_arms_that_cannot_be_told_apart_or_derived_settings_are_refused_before_anything_starts(
        tmp_path, overrides, message):
    proc = _experiment(tmp_path, "experiment=loss_norm", *overrides, "dry_run=true")
    if message is None:  # arms that differ by settings the config does not set by default are fine
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stdout[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("proofgrid: error: ") and message in line, line
    assert not (tmp_path / REGISTRATION).exists()
    assert not any((tmp_path / stage / "jobs").exists() for stage in ("probe", "tuning", "confirm"))


def test_a_plain_sweep_refuses_a_derived_setting_in_one_line(tmp_path):
    proc = launch_in_process(tmp_path, "algo=grpo,rpp", "algo.short=foo", "dry_run=true")
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "the setting algo.short is derived" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_extending_a_grid_that_is_not_numeric_is_refused_before_anything_starts(tmp_path):
    proc = _experiment(tmp_path, "experiment=stale_score_centering", "experiment.tuning.setting=workload.name",
                       "experiment.tuning.values=[toy,other,third]", "dry_run=true")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.endswith("tuning: on_edge: extend needs a numeric grid, and is_pg's grid of workload.name has 'toy'; "
                         "use on_edge: provisional or numeric values")


@pytest.mark.parametrize("text", ['{"spec_sha256": "ab', '[]', '{"overrides": []}', '{"spec_sha256": 7, "overrides": []}',
                                  '{"spec_sha256": "' + "a" * 64 + '", "overrides": "x"}', '\xff\xfe'])
def test_a_corrupt_registration_is_one_line_naming_the_file_and_the_fix(tmp_path, text):
    (tmp_path / REGISTRATION).write_bytes(text.encode().decode("unicode_escape").encode("latin-1"))
    proc = _experiment(tmp_path, "experiment=loss_norm", "dry_run=true")
    assert proc.returncode == 2, proc.stdout[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"proofgrid: error: {tmp_path / REGISTRATION}: ")
    assert line.endswith("restore it (its spec_sha256 is the SHA256 of the experiment.yaml beside it), or run the "
                         "experiment in a new hydra.run.dir")


@pytest.mark.parametrize(("spec", "message"), [
    (experiment_spec(arms={"isp": {"algo": "grpo"}, "sc": {"algo": "grpo"}}), "arms isp and sc are identical"),
    (experiment_spec(arms={"isp": {"algo": "grpo", "workload.lrr": 1}, "sc": {"algo": "rppb"}}),
     "arm isp: unknown setting 'workload.lrr'; did you mean workload.lr?"),
    (experiment_spec(arms={"isp": {"algo": "grpoo"}, "sc": {"algo": "rppb"}}), "unknown algo 'grpoo'"),
    (experiment_spec(settings={"workload.n_update": 3}), "settings: unknown setting 'workload.n_update'"),
    (experiment_spec(hypothesis=""), "'hypothesis' must state it in words"),
    (experiment_spec(colour="red"), "unknown key 'colour'"),
    (experiment_spec(probe={"gradient_check": {"baseline": "isp", "treatment": "nobody"}}),
     "probe.gradient_check.treatment 'nobody' is not an arm"),
    (experiment_spec(criterion={"treatment": ["sc", "sc"]}), "criterion: treatment lists sc twice; name each treatment once"),
    (experiment_spec(criterion={"baseline": None}), "criterion: no baseline"),
    (experiment_spec(certify=True), "certify takes {stages: [...]}, a list of distinct stages out of tuning, confirm"),
    (experiment_spec(certify={"stages": ["probe"]}), "certify takes {stages: [...]}"),
    (experiment_spec(certify={"stages": ["tuning"]}), "certify.stages names tuning, but the spec has no tuning stage"),
    (experiment_spec(seeds={"n": "auto", "min": 3, "max": 10}, certify={"stages": ["confirm"]}),
     "certify.stages names confirm, but its seeds are sized (seeds: {n: auto}); certify a design with a fixed list"),
    # a setting the stages own, set by the spec (adv B17): the stage's own layer would silently win or lose
    (experiment_spec(settings={"seed": 5}), "settings sets seed=5; the spec's seeds are pre-registered"),
    (experiment_spec(arms={"isp": {"algo": "grpo", "seed": 7}, "sc": {"algo": "rppb"}}),
     "arm isp sets seed=7; the spec's seeds are pre-registered"),
    (experiment_spec(probe={"gradient_check": {"baseline": "isp", "treatment": "sc", "settings": {"seed": 2}}}),
     "probe.gradient_check.settings sets seed=2"),
    (experiment_spec(probe={"staleness_check": {"arm": "isp", "settings": {"seed": 2}}}), "probe.staleness_check.settings sets seed=2"),
    (experiment_spec(probe={"staleness_check": {"arm": "isp", "settings": {"workload.n_updates": 9}}}),
     "probe.staleness_check.settings sets workload.n_updates=9; the probe runs probe.steps updates"),
    (experiment_spec(settings={"workload.lr": 1e-3}, tuning={"setting": "workload.lr", "values": [1e-4, 3e-4],
                                                   "metric": "rollout/raw_reward", "at": "last_k", "last_k": 2}),
     "settings sets the tuned setting workload.lr=0.001"),
])
def test_bad_spec_is_one_line_naming_the_problem(spec, message):
    with pytest.raises(ExperimentError) as err:
        check_arm_settings(_study(spec))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_family_spec_dry_run_names_every_treatment_and_the_holm_correction(tmp_path):
    proc = _experiment(tmp_path, "experiment=loss_norm", "+experiment.arms.lr_high={algo:dapo,workload.lr:2e-4}",
                       "experiment.criterion.treatment=[token_mean,lr_high]", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    lines = _plan_lines(proc.stdout)
    assert lines[0].startswith("experiment loss_norm: token_mean, lr_high vs per_example, spec sha256 ")
    assert lines[-1] == ("== verdict: eval/pass@1 (final checkpoint): token_mean, lr_high - per_example >= 4 points "
                         "each, Holm-corrected across 2 treatments")
    assert len(_jobs(proc.stdout)) == 3 + 9  # the probe's every arm, then every arm over the 3 seeds


def test_a_changed_spec_in_a_pre_registered_directory_is_refused_naming_the_change(tmp_path):
    study = load_study(compose(["experiment=loss_norm"]).experiment, "loss_norm")
    register(tmp_path, study, [])
    same = _experiment(tmp_path, "experiment=loss_norm", "dry_run=true")
    assert same.returncode == 0, same.stderr  # the registered spec resumes
    proc = _experiment(tmp_path, "experiment=loss_norm", "experiment.criterion.threshold_points=2", "dry_run=true")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "pre-registered with another spec (criterion.threshold_points: 4 -> 2)" in line
    other = _experiment(tmp_path, "experiment=loss_norm", "workload.n_updates=8", "dry_run=true")
    assert other.returncode == 2 and "ran with overrides [], not [workload.n_updates=8]" in other.stderr


def _finished(exp: Path) -> dict[str, bytes]:
    """An experiment directory as a finished run leaves it (its registration, each stage's records and jobs);
    returns every file's bytes."""
    study = load_study(compose(["experiment=loss_norm"]).experiment, "loss_norm")
    register(exp, study, [])
    for stage in ("probe", "confirm"):
        (exp / stage / "jobs" / "x-1").mkdir(parents=True)
        (exp / stage / "jobs" / "x-1" / "job.json").write_text('{"state": "COMPLETED"}\n')
        record = {"jobs": ["x-1"], "arms": {}, **({"experiment_sha256": study.sha256} if stage == "confirm" else {})}
        (exp / stage / "sweep.json").write_text(json.dumps(record) + "\n")
        (exp / stage / "commands.txt").write_text("[0] x-1: python -m trainer\n")
    return {str(p.relative_to(exp)): p.read_bytes() for p in sorted(exp.rglob("*")) if p.is_file()}


def test_a_dry_run_in_a_finished_experiment_writes_nothing_a_real_run_reads(tmp_path):
    before = _finished(tmp_path)
    proc = _experiment(tmp_path, "experiment=loss_norm", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert "nothing submitted or written" in proc.stdout
    after = {str(p.relative_to(tmp_path)): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    assert after == before  # confirm/sweep.json keeps its experiment_sha256; no file added


@pytest.mark.parametrize("kept", ["experiment.yaml", "stage jobs"])
def test_a_run_directory_that_lost_its_registration_is_refused_not_reused_under_a_newexperiment_spec(tmp_path, kept):
    _finished(tmp_path)
    (tmp_path / REGISTRATION).unlink()
    if kept != "experiment.yaml":
        (tmp_path / "experiment.yaml").unlink()
    proc = _experiment(tmp_path, "experiment=loss_norm", "experiment.criterion.threshold_points=1",
                       "experiment.criterion.inconclusive_below_points=0.5", "dry_run=true")
    assert proc.returncode == 2, proc.stdout[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line == (f"proofgrid: error: {tmp_path.name} has run an experiment ({kept if kept == 'experiment.yaml' else 'probe/jobs/'}) "
                    f"but its registration.json is gone: its finished runs cannot be reused under a spec nobody "
                    f"registered; restore registration.json, or run the experiment in a new hydra.run.dir")
    assert not (tmp_path / REGISTRATION).exists()


BETAS = "workload.adam_betas=[0.9,0.99]"  # a list-valued setting, as Hydra writes it on a command line
LIST_ARM = "+experiment.arms.token_mean={algo:dapo,algo.loss_reduction:token_mean,workload.adam_betas:[0.9,0.99]}"


def _jobs(stdout: str, *having: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("[") and all(h in line for h in having)]


def test_a_list_valued_arm_setting_is_one_override_for_the_launcher_and_the_verdict(tmp_path):
    """The spec is parsed in one place: an arm's list value is the same text in the commands the dry run
    prints, in the arm the sweep records, and in the arms the verdict reads from the spec as run (the
    bundle's experiment.yaml), so the verdict finds the arm that ran it."""
    from evidence.verdict import parse_experiment, same_overrides

    proc = _experiment(tmp_path, "experiment=loss_norm", "~experiment.arms.token_mean", LIST_ARM, "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert len(_jobs(proc.stdout, "loss_reduction=token_mean")) == 1 + 3  # probe, then confirm over 3 seeds
    assert _jobs(proc.stdout, "loss_reduction=token_mean") == _jobs(proc.stdout, "loss_reduction=token_mean",
                                                                    f" {BETAS} ")
    assert not (tmp_path / "confirm").exists()  # a dry run writes nothing a real run reads
    study = load_study(compose(["experiment=loss_norm", "~experiment.arms.token_mean", LIST_ARM]).experiment, "t")
    runner = Runner(study, tmp_path, {}, ["dry_run=true"], True)
    recorded = runner.plan(CONFIRM_STAGE, runner.confirm_cells({})).arms  # what sweep.json records in a real run
    (ran,) = [overrides for overrides in recorded.values() if overrides["algo.loss_reduction"] == "token_mean"]
    verdict_arms = parse_experiment(study.text).arms  # what the verdict reads from data/experiment.yaml
    assert ran["workload.adam_betas"] == verdict_arms["token_mean"]["workload.adam_betas"] == "[0.9,0.99]"
    assert study.experiment.arms == verdict_arms and same_overrides(verdict_arms["token_mean"], ran)


def test_every_stage_job_is_planned_with_the_registered_digest_certificates_and_second_looks_included(tmp_path):
    """The spec's SHA256 (registration.json's spec_sha256) is in every record a stage's plan writes before its job
    runs: sweep.json, each job's spec.json and the identity its job.json starts with, for the probe, a certified
    confirm's certificate jobs and a sized design's second look; a plain sweep's records stay as they were."""
    from launcher.experiment.stage_runner import plan_later_stages
    from launcher.job_spec import JobSpec
    from launcher.planning import plan_cells

    planned = []
    for name, extra in (("certified", ["+experiment.certify={stages:[confirm]}"]),
                        ("sized", ["~experiment.seeds", "+experiment.seeds={n:auto,min:3,max:5}"])):
        study = load_study(compose(["experiment=loss_norm", *extra]).experiment, "loss_norm")
        register(tmp_path / name, study, [])
        digest = json.loads((tmp_path / name / REGISTRATION).read_text())["spec_sha256"]
        runner = Runner(study, tmp_path / name, {}, ["dry_run=true"], True)
        planned += [(digest, runner.plan("probe", runner.probe_cells())), *((digest, sweep) for sweep in
                    plan_later_stages(runner, {}, 5 if name == "sized" else None))]
    (c_digest, certified), (s_digest, second_look) = planned[1], planned[3]
    assert len(certified.certify) == 4 and c_digest != s_digest  # a rerun and a resume per arm
    assert len(second_look.specs) == 10  # the second look: seeds 1..5 of both arms
    for digest, sweep in planned:
        assert sweep.record()["experiment_sha256"] == digest
        for spec in sweep.all_specs:
            assert spec.identity()["experiment_sha256"] == digest, spec.name
            assert JobSpec.from_json(spec.to_json()).experiment_sha256 == digest
    plain = plan_cells([["algo=grpo", "seed=1", "dry_run=true"]], tmp_path / "plain")
    assert "experiment_sha256" not in plain.record() and "experiment_sha256" not in plain.specs[0].identity()
    assert "experiment_sha256" not in json.loads(plain.specs[0].to_json())


def test_a_list_valued_shared_setting_is_written_as_an_arm_setting_is(tmp_path):
    """``settings:`` (every arm of every stage) gives a list value the same override text as an arm does."""
    proc = _experiment(tmp_path, "experiment=loss_norm", "+experiment.settings={workload.adam_betas:[0.9,0.99]}",
                       "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert len(_jobs(proc.stdout)) == 2 + 6 and _jobs(proc.stdout) == _jobs(proc.stdout, f" {BETAS} ")
    study = load_study(compose(["experiment=loss_norm", "+experiment.settings={workload.adam_betas:[0.9,0.99]}"])
                       .experiment, "t")
    assert study.settings == {"workload.adam_betas": "[0.9,0.99]"}


def test_spec_changes_names_every_changed_and_added_key():
    old = "a: 1\nb: {c: 2}\n"
    assert spec_changes(old, "a: 1\nb: {c: 3}\nd: x\n") == ["b.c: 2 -> 3", "d: (absent) -> x"]


def test_a_budget_the_probe_shows_cannot_be_met_is_refused():
    study = _study(experiment_spec(budget={"cpu_hours": 0.5, "wall_minutes_per_run": 30}))
    record = {"arms": {"a": {"step_s": 2.0}, "b": {"step_s": 4.0}}}  # the slowest arm's step cost counts
    runs = SimpleNamespace(all_specs=[SimpleNamespace(n_updates=100, cpus=2)] * 6)  # a stage's jobs, certificate jobs too
    # 6 runs x 100 steps x 4 s x 2 CPUs = 4800 CPU-s = 1.33 CPU-h > 0.5
    with pytest.raises(ExperimentError, match=r"needs about 1.33 cpu-hours \(6 runs, 600 steps at the probe's 4.00 "
                                              r"s/step\), over the budget of 0.5"):
        check_budget(study, record, [runs])
    fits = check_budget(_study(experiment_spec(budget={"cpu_hours": 2})), record, [runs])
    assert fits["cpu_hours"] == pytest.approx(4800 / 3600)
    with pytest.raises(ExperimentError, match="a run needs about 6.7 min"):
        check_budget(_study(experiment_spec(budget={"wall_minutes_per_run": 5})), record, [runs])


SIZED = {"n": "auto", "min": 3, "max": 10}


def test_a_sized_design_is_refused_only_when_its_first_look_does_not_fit_the_budget():
    """The plan at the design's most (10 seeds) is recorded against the budget; only the first look (3 seeds)
    must fit before anything starts."""
    record = {"arms": {"a": {"step_s": 2.0}, "b": {"step_s": 4.0}}}
    most = SimpleNamespace(all_specs=[SimpleNamespace(n_updates=100, cpus=2)] * 20)  # 2 arms x 10 seeds
    first = SimpleNamespace(all_specs=[SimpleNamespace(n_updates=100, cpus=2)] * 6)  # 2 arms x 3 seeds
    # 20 x 100 x 4 s x 2 CPUs = 4.44 CPU-h at the most; 6 x 100 x 4 x 2 = 1.33 CPU-h at the first look
    fits = check_budget(_study(experiment_spec(seeds=SIZED, budget={"cpu_hours": 2})), record, [most], [first])
    assert fits["cpu_hours"] == pytest.approx(16000 / 3600) and fits["first_look"]["cpu_hours"] == pytest.approx(4800 / 3600)
    with pytest.raises(ExperimentError, match=r"^budget: the first look's plan needs about 1.33 cpu-hours \(6 runs"):
        check_budget(_study(experiment_spec(seeds=SIZED, budget={"cpu_hours": 1})), record, [most], [first])


def test_the_registration_records_the_sized_designs_rule_before_any_seed_runs(tmp_path):
    study = _study(experiment_spec(seeds=SIZED))
    assert study.experiment.seeds == tuple(range(1, 11))
    assert "spending: obrien-fleming" in study.text  # the spec as run names the default rule: its SHA256 registers it
    register(tmp_path, study, [])
    sizing = json.loads((tmp_path / REGISTRATION).read_text())["sizing"]
    assert {k: sizing[k] for k in ("n", "min", "max", "spending", "power")} == {
        "n": "auto", "min": 3, "max": 10, "spending": "obrien-fleming", "power": 0.8}
    assert sizing["alpha"] == pytest.approx(0.05) and sizing["information_fractions"] == pytest.approx([0.3, 1.0])
    assert sizing["waves"] == [3, 7] and sizing["resized"] is True
    assert sizing["weights"] == pytest.approx([math.sqrt(0.3), math.sqrt(0.7)])
    # O'Brien-Fleming-type spending at t = 0.3: c1 = z_{0.975} / sqrt(0.3)
    assert sizing["boundaries"][0] == pytest.approx(1.959963984540054 / math.sqrt(0.3), rel=1e-9)


def test_a_sized_design_dry_run_shows_its_first_look_and_names_its_rule(tmp_path):
    proc = _experiment(tmp_path, "experiment=loss_norm", "~experiment.seeds", "+experiment.seeds={n:auto,min:3,max:6,"
                       "spending:pocock}", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert ("== confirm: every arm over seeds 1..3 (the first look), then seeds up to 6 as the first look sizes them "
            "(pocock spending, registered before any seed runs)") in proc.stdout
    assert len(_jobs(proc.stdout)) == 2 + 6  # the probe, then the first look: 2 arms x 3 seeds
    assert not (tmp_path / REGISTRATION).exists()


def test_a_dry_run_of_seeds_in_waves_shows_the_first_wave_and_the_waves_after_it(tmp_path):
    proc = _experiment(tmp_path, "experiment=loss_norm", "~experiment.seeds", "+experiment.seeds={n:auto,waves:[3,3,4],"
                       "spending:obrien_fleming}", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert ("== confirm: every arm over seeds 1..3 (the first look), then waves of 3, 4 seeds while no look has "
            "decided (obrien-fleming spending, registered before any seed runs)") in proc.stdout
    assert len(_jobs(proc.stdout)) == 2 + 6  # the probe, then the first wave: 2 arms x 3 seeds


def test_experiment_with_dash_m_is_refused(tmp_path):
    proc = launch_in_process(tmp_path, "experiment=loss_norm", "dry_run=true")
    assert proc.returncode == 2 and "drop -m" in proc.stderr


@pytest.mark.slow
def test_loss_norm_smoke_run_end_to_end_then_resumed(tmp_path):
    """probe -> confirm -> verdict through ``launch.py`` as users type it, on tiny runs; the bundle carries
    the spec, the verdict, every stage's evidence, and passes the audit; the same command resumes."""
    exp = tmp_path / "exp"
    cmd = [sys.executable, "launch.py", "experiment=loss_norm", "workload.n_updates=3", "workload.eval.n_prompts=4",
           f"hydra.run.dir={exp}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    registration = json.loads((exp / REGISTRATION).read_text())
    assert registration["overrides"] == ["workload.eval.n_prompts=4", "workload.n_updates=3"]
    data = exp / "confirm" / "bundle" / "data"
    verdict = json.loads((data / "verdict.json").read_text())
    assert verdict["verdict"] in ("VALIDATED", "FAILED", "INCONCLUSIVE")
    for key in ("rule", "metric", "arms", "seeds", "per_seed", "difference_mean", "difference_ci95", "threshold",
                "edge_of_grid", "selected"):
        assert key in verdict
    assert verdict["seeds"] == [1, 2, 3] and verdict["arms"]["treatment"]["name"] == "token_mean"
    assert (data / "experiment.yaml").read_text() == (exp / "experiment.yaml").read_text()
    assert json.loads((exp / "confirm" / "sweep.json").read_text())["experiment_sha256"] == registration["spec_sha256"]
    # every run's own records carry the registered digest, written before its results (a loosened spec disagrees)
    records = sorted([*(exp / "confirm" / "jobs").glob("*/job.json"), *(exp / "probe" / "jobs").glob("*/job.json"),
                      *(data / "runs").glob("*/job.json"), *(data / "stages" / "probe" / "runs").glob("*/job.json"),
                      exp / "probe" / "sweep.json", data / "stages" / "probe" / "probe.json"])
    assert len(records) == 2 * (6 + 2) + 2
    assert {str(p): json.loads(p.read_text()).get("experiment_sha256") for p in records} == {
        str(p): registration["spec_sha256"] for p in records}
    probe = json.loads((data / "stages" / "probe" / "probe.json").read_text())
    assert set(probe["arms"]) == {"dapo-loss_reduction_response_mean", "dapo-loss_reduction_token_mean"}
    assert all(a["step_s"] > 0 and a["peak_mem_gib"] > 0 for a in probe["arms"].values())
    assert (data / "stages" / "probe" / "index.csv").is_file()
    report = (data / "report.md").read_text()
    assert report.index("## ") == report.index("## Verdict: " + verdict["verdict"])  # the report opens with it
    assert f"verdict: {verdict['verdict']}" in proc.stdout
    audit = subprocess.run([sys.executable, "-m", "evidence", "audit", str(exp / "confirm" / "bundle.tar.gz")],
                           cwd=REPO, capture_output=True, text=True, env=env)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    # The same command again, in this process: it starts nothing (every stage's jobs are accepted).
    again = _experiment(exp, *cmd[2:-1], env={"OMP_NUM_THREADS": "1"})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 job(s) already accepted" in again.stdout and "6 job(s) already accepted" in again.stdout
    assert json.loads((exp / REGISTRATION).read_text()) == registration


@pytest.mark.slow
def test_an_edge_of_grid_winner_extends_its_grid_once_through_the_runner(tmp_path):
    """A two-value grid always has its winner on an edge: with ``on_edge: extend`` each arm's grid grows by
    the one value ``extend_grid`` gives in the winner's direction, once, and the verdict records the selection."""
    from evidence.verdict import extend_grid

    exp = tmp_path / "exp"
    cmd = [sys.executable, "launch.py", "experiment=stale_score_centering", "experiment.tuning.values=[1e-4,3e-4]",
           "experiment.seeds=[1]", "+experiment.exploratory=true", "~experiment.probe.gradient_check",
           "~experiment.probe.staleness_check", "experiment.probe.steps=1", "workload.n_updates=2",
           "workload.eval.every=1", "workload.eval.n_prompts=2", f"hydra.run.dir={exp}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    extended = [line for line in proc.stdout.splitlines() if line.startswith("tuning: ") and "extending" in line]
    assert len(extended) == 2, proc.stdout[-3000:]  # both arms, once each
    jobs = sorted(p.name for p in (exp / "tuning" / "jobs").iterdir())
    assert len(jobs) == 6
    for line in extended:
        arm, side = line.split("tuning: ")[1].split("'s best")[0], line.split("on the ")[1].split(" edge")[0]
        value = extend_grid(["1e-4", "3e-4"], side)
        assert line.endswith(f"extending its grid once with {value}")
        assert any(j.startswith(arm) and j.endswith("-101") for j in jobs)
    verdict = json.loads((exp / "confirm" / "bundle" / "data" / "verdict.json").read_text())
    assert set(verdict["selected"]) == {"is_pg", "score_centering"}
    assert verdict["tuning"]["evidence"] == "tuning stage"
    assert all(len(scores) == 3 for scores in verdict["tuning"]["scores"].values())
    # the grid before its extension is the tuning stage's earlier plan, which its first four jobs carry
    tuning = json.loads((exp / "tuning" / "sweep.json").read_text())
    assert [len(e["jobs"]) for e in tuning["earlier_plans"]] == [4] and len(tuning["plan"]["jobs"]) == 6
    # every stage's own bundle (the probe's and the tuning stage's carry the spec, no verdict) audits clean
    for stage in ("probe", "tuning", "confirm"):
        audit = subprocess.run([sys.executable, "-m", "evidence", "audit", str(exp / stage / "bundle.tar.gz")],
                               cwd=REPO, capture_output=True, text=True, timeout=600)
        assert audit.returncode == 0, (stage, audit.stdout[-2000:])


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "message"), [
    (("experiment.probe.staleness_check.min_ratio=1e12",),
     "proofgrid: experiment stopped: probe failed: staleness has no effect on train/sampler_logp_gap"),
    # without the staleness check's third probe job: the budget needs only the arms' step times
    (("experiment.budget.cpu_hours=1e-6", "~experiment.probe.staleness_check"),
     "proofgrid: error: budget: the plan needs about"),
])
def test_a_failed_probe_or_an_unaffordable_plan_stops_before_tuning(tmp_path, overrides, message):
    cmd = [sys.executable, "launch.py", "experiment=stale_score_centering", *overrides,
           "~experiment.probe.gradient_check", "experiment.probe.steps=2", f"hydra.run.dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode in (1, 2), proc.stdout[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    last = last[last.index(message):]  # after the local back end's live progress table, on its own line
    assert last.endswith(("fix the sampler", "plan fewer runs")), last
    assert (tmp_path / "probe" / "jobs").is_dir() and (tmp_path / REGISTRATION).is_file()
    assert not (tmp_path / "tuning").exists() and not (tmp_path / "confirm").exists()  # nothing else ran


@pytest.mark.slow
def test_a_stage_whose_sweep_another_writer_holds_is_refused_in_one_line_before_its_jobs_start(tmp_path):
    """Each stage's writing takes its sweep's lock, as a plain launcher does: while a build holds the probe
    stage, the experiment is refused in one line naming the holder, and no probe job starts."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom facts.locks import BUILD, sweep_lock\nfrom pathlib import Path\n"
        f"Path({str(tmp_path / 'probe')!r}).mkdir(parents=True)\n"
        f"with sweep_lock({str(tmp_path / 'probe')!r}, BUILD):\n    print('held', flush=True)\n    time.sleep(120)\n")],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = subprocess.run([sys.executable, "launch.py", "experiment=loss_norm", f"hydra.run.dir={tmp_path}"],
                              cwd=REPO, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode != 0, proc.stdout[-2000:]
    (line,) = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("proofgrid: ")]
    assert f"refused: {tmp_path / 'probe'} is held by python -m evidence build (pid {holder.pid}" in line, line
    assert not (tmp_path / "probe" / "jobs").exists()


SIZED_RUN = ("experiment=loss_norm", "~experiment.seeds", "+experiment.seeds={n:auto,waves:[2,2,2]}",
             "+experiment.exploratory=true", "workload.n_updates=3", "workload.eval.n_prompts=4")


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    """``seeds: {n: auto, waves: [2, 2, 2]}`` (exploratory) run once through ``launch.py`` on tiny runs (probe, the first
    wave's two seeds, then each next wave while no look has decided): (experiment dir, the command, its
    CompletedProcess)."""
    exp = tmp_path_factory.mktemp("sized") / "exp"
    cmd = [sys.executable, "launch.py", *SIZED_RUN, f"hydra.run.dir={exp}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    return exp, cmd, proc


def _evidence(*args: str) -> subprocess.CompletedProcess:
    """``python -m evidence <args>`` in this process (tests/evidence_cli.py; the smoke run above audits as a process)."""
    return evidence_in_process(*args)


@pytest.mark.slow
def test_seeds_in_waves_run_wave_by_wave_until_a_look_decides_through_launch_py(sized):
    """The registration names the rule and the boundaries before any seed runs, the probe's record prices the design
    at its most and its first wave, the first wave's two seeds run, then each next wave only while the previous look
    has not decided (the launcher says why it runs it), and the bundle's verdict carries every look taken and passes
    the audit."""
    exp, cmd, proc = sized
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    registration = json.loads((exp / REGISTRATION).read_text())
    assert registration["sizing"]["spending"] == "obrien-fleming" and registration["sizing"]["waves"] == [2, 2, 2]
    assert len(registration["sizing"]["boundaries"]) == 3
    probe = json.loads((exp / "probe" / "probe.json").read_text())
    assert probe["budget"]["runs"] == 12 and probe["budget"]["first_look"]["runs"] == 4  # 2 arms x 6, x 2 seeds
    data = exp / "confirm" / "bundle" / "data"
    verdict = json.loads((data / "verdict.json").read_text())
    sizing = verdict["sizing"]
    looks = sizing["looks"]
    jobs = sorted(p.name for p in (exp / "confirm" / "jobs").iterdir())
    assert len(jobs) == 4 * len(looks) and sizing["design_seeds"] == 2 * len(looks)
    assert [look["decision"] for look in looks[:-1]] == ["continue"] * (len(looks) - 1)
    assert looks[-1]["decision"] != "continue" and sizing["next_wave"] is None  # the last look taken decided
    for look in looks[:-1]:  # each wave after a look that went on, and the line that says why
        assert f"look {look['look']} of 3: 2 seeds, Z = " in proc.stdout
        assert f"wave {look['look'] + 1} runs seeds {2 * look['look'] + 1}..{2 * look['look'] + 2}" in proc.stdout
    assert f"look {len(looks)} of 3: 2 seeds, Z = " not in proc.stdout  # the deciding look submits nothing more
    assert verdict["seeds"] == list(range(1, 2 * len(looks) + 1))
    assert all(look["cost"]["jobs"] == 4 and look["cost"]["unmeasured"] == 0 and look["cost"]["cpu_hours"] > 0
               for look in looks)
    assert "Seeds in waves (`seeds: {n: auto, waves: [2, 2, 2]}`)" in (data / "report.md").read_text()
    assert f"verdict: {verdict['verdict']}" in proc.stdout
    # every confirm job, the second look's included, records the digest registered before any seed ran
    assert {json.loads(p.read_text()).get("experiment_sha256") for p in (exp / "confirm" / "jobs").glob("*/job.json")} \
        == {json.loads((exp / REGISTRATION).read_text())["spec_sha256"]}
    # the plan of each look, bound before its jobs ran: the first look's jobs carry the first look's plan (an earlier
    # plan of the confirm stage, which the registration recorded before the probe), the second look's the second's
    confirm = json.loads((exp / "confirm" / "sweep.json").read_text())
    first = registration["plans"]["confirm"]
    assert confirm["stage"] == "confirm" and set(registration["plans"]) == {"probe", "confirm"}
    assert first["jobs"] == [j for j in jobs if int(j.rsplit("-", 1)[1]) <= 2]
    carried = {p.parent.name: json.loads(p.read_text())["plan_sha256"] for p in (exp / "confirm" / "jobs").glob("*/job.json")}
    assert {job: digest for job, digest in carried.items() if int(job.rsplit("-", 1)[1]) <= 2} == {
        job: first["plan_sha256"] for job in first["jobs"]}
    plans = [*confirm.get("earlier_plans", []), {"plan_sha256": confirm["plan_sha256"]}]
    assert len(plans) == len(looks) and plans[0] == first
    for k, plan in enumerate(plans):  # each wave's jobs carry the plan of the look that ran them
        assert {digest for job, digest in carried.items() if 2 * k < int(job.rsplit("-", 1)[1]) <= 2 * k + 2} == {
            plan["plan_sha256"]}
    audit = _evidence("audit", exp / "confirm" / "bundle.tar.gz")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    # The same command again starts nothing: the confirm stage resumes at the look it reached
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert again.returncode in (0, 1), again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{len(jobs)} job(s) already accepted" in again.stdout and " of 3: 2 seeds, Z = " not in again.stdout
    assert json.loads((data / "verdict.json").read_text()) == verdict


@pytest.mark.slow
def test_every_stage_s_bundle_of_an_experiment_builds_and_audits_clean(sized, tmp_path):
    """The probe's bundle carries the spec its records name (and no verdict), so it audits clean as the confirm
    stage's does (issue 33 item 8: it had 3 findings); each stage rebuilt by ``python -m evidence build`` is clean."""
    exp, _, _ = sized
    copy = Path(shutil.copytree(exp, tmp_path / "exp", symlinks=True))
    for stage in ("probe", "confirm"):
        assert (copy / stage / "bundle" / "data" / "experiment.yaml").read_text() == (exp / "experiment.yaml").read_text()
        assert (copy / stage / "bundle" / "data" / "verdict.json").is_file() is (stage == "confirm")
        for _ in range(2):  # as the launcher sealed it, then rebuilt by the evidence command
            audit = _evidence("audit", copy / stage / "bundle.tar.gz")
            assert audit.returncode == 0 and audit.stdout.splitlines()[-1] == "clean", (stage, audit.stdout[-2000:])
            build = _evidence("build", copy / stage, "--no-figures")
            assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    assert (copy / "confirm" / "bundle" / "data" / "stages" / "probe" / "experiment.yaml").is_file()


def _rebind(confirm: Path, keep) -> None:
    """A forger's rewrite of the confirm stage's plan after deleting jobs: the plan keeps the entries ``keep`` accepts,
    its digest recomputed into sweep.json and into every job's records, the earlier plans and the dropped jobs' command
    lines gone (everything the sweep's own files say, consistent again)."""
    record = json.loads((confirm / "sweep.json").read_text())
    record["plan"]["jobs"] = [e for e in record["plan"]["jobs"] if keep(e)]
    record["jobs"] = [e["job"] for e in record["plan"]["jobs"]]
    record["seeds"] = sorted({e["seed"] for e in record["plan"]["jobs"]})
    record["plan_sha256"] = hashlib.sha256(json.dumps(record["plan"], sort_keys=True, separators=(",", ":")).encode()
                                           ).hexdigest()
    record.pop("earlier_plans", None)
    (confirm / "sweep.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    for path in [*confirm.glob("jobs/*/run/run.json"), *confirm.glob("jobs/*/job.json")]:  # run.json first: then
        changed = {"plan_sha256": record["plan_sha256"]}  # job.json's digests of the run's records, rewritten too
        if path.name == "job.json":
            run = path.parent / "run"
            changed["run_outputs_sha256"] = {name: hashlib.sha256((run / name).read_bytes()).hexdigest()
                                             for name in json.loads(path.read_text())["run_outputs_sha256"]}
        path.write_text(json.dumps({**json.loads(path.read_text()), **changed}) + "\n")
    lines = (confirm / "commands.txt").read_text().splitlines()
    (confirm / "commands.txt").write_text("".join(f"{line}\n" for line in lines if not line.startswith("[")
                                                  or line.split(": ", 1)[0].split("] ", 1)[1] in record["jobs"]))


TOKEN, RESPONSE = "dapo-loss_reduction_token_mean", "dapo-loss_reduction_response_mean"


def _seed_gone(looks: int) -> str:
    return (f"data/index.csv: spec arm token_mean: seed(s) [2] of the design's waves 1..{looks}, seeds 1..{2 * looks} "
            "have no run in this bundle (planned by the pre-registered spec; never run, or removed)")


DELETIONS = {  # variant -> (the edit of the confirm stage, a finding of the build, findings of the audit), given L looks
    "a first-look seed": lambda n: (lambda c: shutil.rmtree(c / "jobs" / f"{TOKEN}-2"),
                                    f"plan: jobs/{TOKEN}-2/job.json: planned (plan ",
                                    [f"data/runs/{TOKEN}-2/job.json: planned (plan ", _seed_gone(n)]),
    "a first-look seed and its plan entry": lambda n: (
        lambda c: (shutil.rmtree(c / "jobs" / f"{TOKEN}-2"), _rebind(c, lambda e: e["job"] != f"{TOKEN}-2")),
        None, [_seed_gone(n)]),
    "the last wave": lambda n: (
        lambda c: [shutil.rmtree(c / "jobs" / f"{arm}-{seed}") for arm in (TOKEN, RESPONSE) for seed in (2 * n - 1, 2 * n)],
        f"plan: jobs/{RESPONSE}-{2 * n - 1}/job.json: planned (plan ",
        [f"data/runs/{arm}-{seed}/job.json: planned (plan " for arm in (RESPONSE, TOKEN) for seed in (2 * n - 1, 2 * n)]),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(DELETIONS))
def test_a_deleted_seed_or_wave_of_a_design_in_waves_is_a_finding_of_the_build_and_the_audit(sized, tmp_path, variant):
    """The reported attack: a FAILED design made INCONCLUSIVE by deleting a first-wave seed (or the whole last wave)
    and rebuilding. The plan bound before the jobs ran names the missing jobs; with the plan rewritten too, the
    pre-registered spec still does."""
    exp, _, proc = sized
    looks = json.loads((exp / "confirm" / "bundle" / "data" / "verdict.json").read_text())["sizing"]["look"]
    if looks < 2:
        pytest.skip("the first look stopped the design: there is no later wave to delete")
    copy = Path(shutil.copytree(exp, tmp_path / "exp", symlinks=True))
    edit, built, audited = DELETIONS[variant](looks)
    edit(copy / "confirm")
    build = _evidence("build", copy / "confirm", "--no-figures")
    assert build.returncode == (1 if built else 0), build.stdout[-2000:] + build.stderr[-2000:]
    assert built is None or any(line.startswith(built) for line in build.stdout.splitlines()), build.stdout[-2000:]
    audit = _evidence("audit", copy / "confirm" / "bundle.tar.gz")
    assert audit.returncode == 1, audit.stdout[-2000:]
    for finding in audited:
        assert any(line.startswith(finding) for line in audit.stdout.splitlines()), (finding, audit.stdout[-3000:])


@pytest.mark.slow
def test_the_first_look_s_bundle_presented_after_later_waves_ran_claims_no_decision(sized, tmp_path):
    """What stays out of reach (evidence/README.md): every later wave deleted and the plan rolled back to the first
    look's is the bundle the launcher sealed after the first look; it audits clean, and its verdict is pending,
    never a decision."""
    exp, _, _ = sized
    looks = json.loads((exp / "confirm" / "bundle" / "data" / "verdict.json").read_text())["sizing"]["look"]
    if looks < 2:
        pytest.skip("the first look stopped the design: there is no later wave to delete")
    copy = Path(shutil.copytree(exp, tmp_path / "exp", symlinks=True))
    for arm in (TOKEN, RESPONSE):
        for seed in range(3, 2 * looks + 1):
            shutil.rmtree(copy / "confirm" / "jobs" / f"{arm}-{seed}")
    _rebind(copy / "confirm", lambda e: e["seed"] <= 2)
    assert _evidence("build", copy / "confirm", "--no-figures").returncode == 0
    assert _evidence("audit", copy / "confirm" / "bundle.tar.gz").returncode == 0
    verdict = json.loads((copy / "confirm" / "bundle" / "data" / "verdict.json").read_text())
    assert (verdict["verdict"], verdict["rule"], verdict["sizing"]["look"]) == ("INCONCLUSIVE", "next-wave-pending", 1)


@pytest.mark.slow
def test_a_stage_whose_evidence_cannot_be_sealed_names_its_own_directory_to_build(sized, tmp_path):
    """Re-running a finished experiment re-seals each stage; one whose seal is refused (an invalid incidents.yaml in the
    confirm stage) stops the experiment in one line naming ``python -m evidence build <exp>/confirm``, not the
    experiment's directory, which is no sweep."""
    exp, cmd, _ = sized
    copy = Path(shutil.copytree(exp, tmp_path / "exp", symlinks=True))
    (copy / "confirm" / "incidents.yaml").write_text("exclusions: [{job: nobody-1}]\n")
    proc = subprocess.run([*cmd[:-1], f"hydra.run.dir={copy}"], cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("proofgrid: ")]
    assert line.startswith("proofgrid: experiment stopped: confirm: the jobs ran but the evidence was not sealed: ")
    assert line.endswith(f"; fix that, then python -m evidence build {copy / 'confirm'}"), line


def test_a_certify_block_certifies_the_stages_it_names_and_the_budget_counts_their_certificate_jobs(tmp_path):
    from evidence.dataset import BundleData
    from evidence.verdict.probe import planned_runs

    study = _study(experiment_spec(certify={"stages": ["confirm"]}))
    assert study.certify == ("confirm",) and _study(experiment_spec()).certify == ()
    # the audit's recount of the plan: 2 arms x 3 seeds, and a rerun and a resume per arm, each of 4 steps x 2 CPUs
    confirm = BundleData(sweep={"n_updates": 4}, settings={}, index=[], incidents=[],
                         runs={("isp", 1): {"config": {"workload": {"cpus_per_job": 2}}}})
    assert planned_runs(study, confirm) == [(4, 2)] * (6 + 4)
    assert planned_runs(_study(experiment_spec()), confirm) == [(4, 2)] * 6
    proc = _experiment(tmp_path / "e", "experiment=loss_norm", "+experiment.certify={stages:[confirm]}", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    lines = _plan_lines(proc.stdout)
    confirm_at = lines.index(next(line for line in lines if line.startswith("== confirm")))
    certificates = [line.split(":")[0] for line in lines if "(certificate:" in line]
    assert certificates == ["[6] dapo-loss_reduction_response_mean-1.rerun", "[7] dapo-loss_reduction_response_mean-3.resume",
                            "[8] dapo-loss_reduction_token_mean-1.rerun", "[9] dapo-loss_reduction_token_mean-3.resume"]
    assert all(lines.index(next(x for x in lines if x.startswith(c))) > confirm_at for c in certificates)  # confirm's only
    assert "6 job(s) + 4 certificate job(s)" in proc.stdout
    refused = _experiment(tmp_path / "r", "experiment=loss_norm", "certify=true", "dry_run=true")
    assert refused.returncode == 2 and "an experiment certifies through its spec, inside its budget" in refused.stderr


@pytest.mark.parametrize(("seeds", "message"), [
    ("{n:auto,waves:[3,3,4],futility:100}", "experiment loss_norm: seeds: futility 100 is at or above look 1's "
                                            "boundary 3.578 (obrien-fleming, α 0.05): every design would stop at look 1"),
    ("{n:auto,waves:[3,1000000]}", "experiment loss_norm: seeds: waves [3, 1000000] give look 1"),
])
def test_a_design_in_waves_the_looks_cannot_run_is_refused_by_the_dry_run_in_one_line(tmp_path, seeds, message):
    """The dry run refuses what registering the design (the real run's first step) would: a futility bound at or
    above an interim boundary, a first wave too small a share for a finite boundary."""
    proc = _experiment(tmp_path, "experiment=loss_norm", "~experiment.seeds", f"+experiment.seeds={seeds}",
                       "dry_run=true")
    assert proc.returncode == 2, proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("proofgrid: error: ") and message in line, line


@pytest.mark.slow
def test_the_launchers_verdict_line_at_a_pending_look_says_the_design_has_not_decided(tmp_path):
    """Look 1 of waves [3, 3, 4] has not decided: the line names the look, its Z and boundary and the next wave,
    never a fixed-sample interval (it printed '+6 [+3.52, +8.48]')."""
    from evidence import build_bundle
    from launcher.experiment.stage_runner import verdict_line
    from tests.evidence.experiment_stages import paired_experiment
    from tests.evidence.verdict.test_verdict_waves import BASE, SPEC

    bag = build_bundle(paired_experiment(tmp_path, SPEC, BASE, {1: 5, 2: 6, 3: 7}), figures=False).bundle_dir
    line = verdict_line(json.loads((bag / "data" / "verdict.json").read_text()), "confirm/bundle.tar.gz")
    assert line.startswith("verdict: INCONCLUSIVE by rule next-wave-pending: eval/pass@1 difference +6 points "
                           "(not decided at look 1 of 3 (Z = 2.61, boundary ±3.578): no interval until the design "
                           "decides; wave 2, seeds 4..6, runs next)"), line
    assert "[" not in line


def test_a_wave_that_ran_is_never_planned_again(tmp_path):
    """A verdict still naming the wave the confirm stage has just run as the next one (its jobs rejected) stops the
    runner in one line instead of planning the same wave again."""
    from launcher.experiment.experiment_errors import ExperimentFailed
    from launcher.experiment.stage_runner import next_wave_seeds

    (tmp_path / CONFIRM_STAGE).mkdir()
    (tmp_path / CONFIRM_STAGE / "sweep.json").write_text(json.dumps({"seeds": [1, 2, 3, 4, 5, 6]}))
    runner = SimpleNamespace(stage_dir=lambda stage: tmp_path / stage)
    v = {"rule": "next-wave-pending", "sizing": {"next_wave": [4, 6], "looks": [{"look": 1}]}}
    with pytest.raises(ExperimentFailed, match=r"^wave 2 \(seeds 4\.\.6\) ran already and its look still waits"):
        next_wave_seeds(runner, v, {})
