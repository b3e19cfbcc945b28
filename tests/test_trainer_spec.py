"""Trainer specs (``conf/trainer/``, issue 20): the config group, the command's placeholders, the spec's
own refusals, arm labels that name the trainer, and the ecosystem caches pointed into the job, through
``launch.py`` dry runs in this process (nothing starts) and the spec parser underneath."""

from __future__ import annotations

import shutil

import pytest

from launcher.grid import arm_bases, arm_labels
from tests.launch_in_process import launch_in_process
from tests.sweeps import REPO
from trainer.external.spec import SpecError, expand_command, parse_spec, placeholder_values

ECOSYSTEM_CACHES = ("HF_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME",
                    "WANDB_DIR")
METRICS = {"format": "jsonl", "path": "log.jsonl", "step_key": "i", "map": {"train/loss": "loss"}}


def spec(command: list, **fields) -> dict:
    return {"name": "lab", "command": command, "metrics": METRICS, "checkpoint": "model", **fields}


def expanded(command: list, config: dict | None = None, **fields) -> list[str]:
    values = placeholder_values(config or {"seed": 3, "workload": {"lr": 1e-4, "adam_betas": [0.9, 0.999],
                                                                   "model_path": "m", "name": "toy"},
                                           "trainer": {"opt": None, "extra": []}},
                                REPO, python="PY")
    return expand_command(parse_spec(spec(command, **fields)), values)


def _commands(proc) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith("[")]


def _one_error(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("proofgrid: error:"), proc.stderr
    return lines[0]


def test_placeholders_fill_settings_paths_lists_and_leave_output_dir_for_the_job():
    argv = expanded(["{python}", "train.py", "--out", "{output_dir}/x", "--seed", "{seed}", "--lr={workload.lr}",
                     "--betas", "{workload.adam_betas}", "--b1", "{workload.adam_betas[0]}",
                     "--model", "{workload.model_path}", "{{literal}}"])
    assert argv == ["PY", "train.py", "--out", "{output_dir}/x", "--seed", "3", "--lr=0.0001", "--betas", "0.9",
                    "0.999", "--b1", "0.9", "--model", str(REPO / "m"), "{literal}"]


def test_an_optional_group_is_dropped_when_its_setting_is_null_or_an_empty_list():
    command = ["prog", ["--opt", "{trainer.opt}"], ["--extra", "{trainer.extra}"]]
    assert expanded(command, opt=None, extra=[]) == ["prog"]
    config = {"trainer": {"opt": "dapo", "extra": ["a=1", "b=2"]}}
    assert expanded(command, config, opt=None, extra=[]) == ["prog", "--opt", "dapo", "--extra", "a=1", "b=2"]


@pytest.mark.parametrize(("command", "says"), [
    (["prog", "{workload.lrr}"], "placeholder {workload.lrr} in its command names no setting; did you mean {workload.lr}?"),
    (["prog", "{workload}"], "names a mapping of settings"),
    (["prog", "{a b}"], "is not a placeholder"),
    (["prog", "{trainer.opt}"], "is null or an empty list"),
])
def test_a_bad_placeholder_is_one_line_naming_it(command, says):
    with pytest.raises(SpecError, match="^trainer lab: ") as err:
        expanded(command)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("fields", "says"), [
    ({"command": []}, "must be a non-empty list"),
    ({"checkpoint": "/abs/model"}, "must lie inside the trainer's {output_dir}"),
    ({"checkpoint": "../model"}, "must lie inside"),
    ({"metrics": {**METRICS, "format": "csv"}}, "metrics.format='csv' must be one of tensorboard, jsonl"),
    ({"metrics": {**METRICS, "step_key": None}}, "a JSONL log needs the key"),
    ({"metrics": {**METRICS, "map": {"train/los": "loss"}}}, "did you mean train/loss?"),
    ({"stop_signal": "INT"}, "must be one of USR2, TERM or null"),
    ({"loss_typ": "dapo"}, "option loss_typ is not used by its command"),
])
def test_a_bad_spec_is_refused_in_one_line(fields, says):
    node = {**spec(["prog"]), **fields}
    with pytest.raises(SpecError) as err:
        parse_spec(node, ("train/loss", "rollout/raw_reward"))
    assert says in str(err.value), str(err.value)


def test_proofgrid_is_the_default_and_its_command_is_unchanged(tmp_path):
    default = launch_in_process(tmp_path / "d", "seed=1", "dry_run=true")
    named = launch_in_process(tmp_path / "n", "seed=1", "trainer=proofgrid", "dry_run=true")
    assert default.returncode == 0, default.stderr
    # the override as typed is part of the cell's command, which is otherwise the default's
    assert [c.replace(" trainer=proofgrid", "") for c in _commands(named)] == _commands(default)
    (line,) = _commands(default)
    assert line.startswith("[0] grpo-1:") and " -m trainer " in line and "trainer.external" not in line
    assert "VLLM_CACHE_ROOT" not in line  # proofgrid's own job environment is as before


def test_a_sweep_over_trainers_names_the_trainer_in_the_arm_and_points_every_cache_into_the_job(tmp_path):
    proc = launch_in_process(tmp_path / "s", "trainer=proofgrid,trl,command", "algo=grpo", "seed=1,2", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    lines = _commands(proc)
    assert [line.split(":")[0] for line in lines] == [
        "[0] grpo-command-1", "[1] grpo-command-2", "[2] grpo-proofgrid-1", "[3] grpo-proofgrid-2",
        "[4] grpo-trl-1", "[5] grpo-trl-2"]
    trl = lines[4]
    assert "-m trainer.external --job-spec <JOB_DIR>/spec.json --output-dir <JOB_DIR>/run" in trl
    assert "-m trainer.adapters.trl_grpo --output-dir <JOB_DIR>/run/trainer --seed 1 " in trl
    assert "--model-dir <REPO>/trainer/assets/toy/model" in trl and "--adam-betas 0.9 0.999" in trl
    for name in ECOSYSTEM_CACHES:
        assert f" {name}=<JOB_DIR>/roots/" in trl, name
    assert " WANDB_MODE=offline " in trl
    assert "examples/trainers/reinforce.py --output-dir <JOB_DIR>/run/trainer --seed 1 " in lines[0]


def test_arm_labels_name_the_trainer_when_it_varies_or_is_not_the_default():
    arms = {(("algo", "grpo"), ("trainer", "proofgrid")): ("grpo", "proofgrid"),
            (("algo", "grpo"), ("trainer", "trl")): ("grpo", "trl")}
    assert set(arm_labels(arm_bases(arms, "proofgrid")).values()) == {"grpo-proofgrid", "grpo-trl"}
    only = {(("algo", "grpo"),): ("grpo", "proofgrid")}
    assert set(arm_labels(arm_bases(only, "proofgrid")).values()) == {"grpo"}


def test_a_labs_own_trainer_spec_is_found_through_the_config_dir(tmp_path):
    lab = tmp_path / "lab"
    (lab / "trainer").mkdir(parents=True)
    text = (REPO / "conf" / "trainer" / "command.yaml").read_text().replace("name: command", "name: mine")
    (lab / "trainer" / "mine.yaml").write_text(text)
    proc = launch_in_process(tmp_path / "s", "-cd", str(lab), "trainer=mine", "seed=1", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert _commands(proc)[0].startswith("[0] grpo-mine-1:")
    error = _one_error(launch_in_process(tmp_path / "t", "trainer=mine", "seed=1", "dry_run=true"))
    assert "unknown trainer 'mine'; choose from command, proofgrid, trl (conf/trainer/ or a config directory given " \
           "with -cd)" in error
    shutil.rmtree(lab)


@pytest.mark.parametrize(("args", "says"), [
    (("trainer=trl", "algo=rpp"), "job rpp-trl: trainer trl refuses it: algo=rpp cannot run on TRL"),
    (("trainer=trl", "trainer.loss_type=sum"), "loss_type=sum is not one of TRL's"),
    (("trainer=trl", "workload.ppo_epochs=2"), "workload.ppo_epochs=2: the TRL adapter runs one on-policy update"),
    (("trainer=command", "trainer.command=[python,x.py,'{workload.lrr}']"),
     "placeholder {workload.lrr} in its command names no setting; did you mean {workload.lr}?"),
])
def test_a_job_its_trainer_cannot_run_is_refused_at_plan_time_in_one_line(tmp_path, args, says):
    error = _one_error(launch_in_process(tmp_path / "bad", *args, "seed=1", "dry_run=true"))
    assert says in error, error
    assert not (tmp_path / "bad" / "jobs").exists()


def test_the_trl_loss_normalisation_experiment_plans_both_loss_types_on_trl(tmp_path):
    proc = launch_in_process(tmp_path / "e", "experiment=loss_norm_trl", "dry_run=true", multirun=False)
    assert proc.returncode == 0, proc.stderr
    jobs = [line for line in _commands(proc) if "-m trainer.adapters.trl_grpo" in line]
    assert len(jobs) == 2 + 6  # the probe's two arms, then both arms over three seeds
    assert {line.split(":")[0].split("] ")[1].rsplit("-", 1)[0] for line in jobs} == {
        "grpo-trl-loss_type_dapo", "grpo-trl-loss_type_grpo"}
    assert all(("--loss-type dapo" in line) == ("loss_type_dapo" in line) for line in jobs)
