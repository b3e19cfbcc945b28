"""Trainer specs (``conf/trainer/``, issue 20): the config group, the command's placeholders, the spec's
own refusals, arm labels that name the trainer, and the ecosystem caches pointed into the job, through
``launch.py`` dry runs in this process (nothing starts) and the spec parser underneath."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from launcher.grid import arm_bases, arm_labels
from tests.launch_in_process import launch_in_process
from tests.sweeps import REPO
from trainer.external.trainer_spec import SpecError, expand_command, parse_spec, placeholder_values

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


def _whole(sweep_dir: Path) -> list[str]:
    """Each job's whole command line, its environment included (the dry run shows the shared part once)."""
    return (sweep_dir / "commands.txt").read_text().splitlines()


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
    # a plan check runs while the launcher plans (dry runs too): proofgrid's adapters' checks only
    ({"plan_check": "subprocess:call"}, "plan_check='subprocess:call' is refused: a plan check runs in the launcher"),
    ({"plan_check": "os:system"}, "must be one of proofgrid's declared plan checks (trainer.adapters.PLAN_CHECKS: "
                                  "trainer.adapters.trl_grpo:check_command)"),
    ({"plan_check": "trainer.adaptersX.evil:check"}, "is refused"),
    ({"plan_check": "trainer.adapters:check"}, "is refused"),
    # any other function of an adapter, however it is spelled: main trains, plan and parser take other arguments
    ({"plan_check": "trainer.adapters.trl_grpo:main"}, "plan_check='trainer.adapters.trl_grpo:main' is refused"),
    ({"plan_check": "trainer.adapters.trl_grpo:train"}, "is refused"),
    ({"plan_check": "trainer.adapters.trl_grpo:plan"}, "is refused"),
    ({"plan_check": "trainer.adapters.trl_grpo.os:system"}, "is refused"),
    ({"plan_check": " trainer.adapters.trl_grpo:check_command"}, "is refused"),
    ({"plan_check": ["trainer.adapters.trl_grpo:check_command"]}, "is refused"),
    ({"requires_extra": "vllmx"}, "requires_extra='vllmx' is not an extra proofgrid knows; they are: trl, export"),
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
    (line,) = _whole(tmp_path / "d")
    assert line.startswith("[0] grpo-1:") and " -m trainer " in line and "trainer.external" not in line
    assert "VLLM_CACHE_ROOT" not in line  # proofgrid's own job environment is as before


def test_a_sweep_over_trainers_names_the_trainer_in_the_arm_and_points_every_cache_into_the_job(tmp_path):
    proc = launch_in_process(tmp_path / "s", "trainer=proofgrid,trl,command", "algo=grpo", "seed=1,2", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    lines = _whole(tmp_path / "s")
    assert [line.split(":")[0] for line in _commands(proc)] == [
        "[0] grpo-proofgrid-1", "[1] grpo-proofgrid-2", "[2] grpo-trl-1", "[3] grpo-trl-2",
        "[4] reinforce-command-1", "[5] reinforce-command-2"]  # command.yaml declares algorithm: REINFORCE
    trl = lines[2]
    assert "-m trainer.external --job-spec <JOB_DIR>/spec.json --output-dir <JOB_DIR>/run" in trl
    assert "-m trainer.adapters.trl_grpo --output-dir <JOB_DIR>/run/trainer --seed 1 " in trl
    assert "--model-dir <REPO>/trainer/assets/toy/model" in trl and "--adam-betas 0.9 0.999" in trl
    for name in ECOSYSTEM_CACHES:
        assert f" {name}=<JOB_DIR>/roots/" in trl, name
    assert " WANDB_MODE=offline " in trl
    assert "examples/trainers/reinforce.py --output-dir <JOB_DIR>/run/trainer --seed 1 " in lines[4]


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
    assert _commands(proc)[0].startswith("[0] reinforce-mine-1:")  # labelled by the algorithm its spec declares
    error = _one_error(launch_in_process(tmp_path / "t", "trainer=mine", "seed=1", "dry_run=true"))
    assert "unknown trainer 'mine'; choose from command, proofgrid, trl (conf/trainer/ or a config directory given " \
           "with -cd)" in error
    shutil.rmtree(lab)


@pytest.mark.parametrize(("args", "says"), [
    (("trainer=trl", "algo=rpp"), "job rpp-trl: trainer trl refuses it: algo=rpp cannot run on TRL"),
    (("trainer=trl", "trainer.loss_type=sum"), "loss_type=sum is not one of TRL's"),
    (("trainer=trl", "workload.ppo_epochs=2"), "workload.ppo_epochs=2: the TRL adapter runs one on-policy update"),
    (("trainer=trl", "trainer.use_vllm=true"), "trainer.use_vllm=true: TRL's colocated vLLM syncs weights with vLLM's "
                                               "in-place load_weights, which vLLM's CPU build 0.32.0 cannot take"),
    # TRL's fields that change a recorded setting or the contract (adv-trust F12), in the docs' quoting
    (("trainer=trl", """trainer.trl=['generation_kwargs={"temperature": 0.3, "do_sample": false}']"""),
     "trainer trl refuses it: TRL option generation_kwargs is not passed through: it may change the settings"),
    (("trainer=trl", "trainer.trl=['optim=sgd']"), "TRL option optim is not passed through"),
    (("trainer=trl", "trainer.trl=['log_level=info','delta=2.0']"), "TRL option delta is not passed through"),
    (("trainer=trl", "trainer.trl=['reward_weights=[2.0]']"), "TRL option reward_weights is not passed through"),
    (("trainer=trl", "trainer.trl=['top_entropy_quantile=0.2']"), "TRL option top_entropy_quantile is not passed"),
    (("trainer=command", "trainer.command=[python,x.py,'{workload.lrr}']"),
     "placeholder {workload.lrr} in its command names no setting; did you mean {workload.lr}?"),
])
def test_a_job_its_trainer_cannot_run_is_refused_at_plan_time_in_one_line(tmp_path, args, says):
    error = _one_error(launch_in_process(tmp_path / "bad", *args, "seed=1", "dry_run=true"))
    assert says in error, error
    assert not (tmp_path / "bad" / "jobs").exists()


def test_a_trl_field_passed_through_as_the_docs_write_it_is_planned_into_the_command(tmp_path):
    proc = launch_in_process(tmp_path / "s", "trainer=trl", "trainer.trl=['cache_implementation=static','log_level=info']",
                             "seed=1", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert "--trl cache_implementation=static log_level=info" in _commands(proc)[0], _commands(proc)


def test_the_trl_loss_normalisation_experiment_plans_both_loss_types_on_trl(tmp_path):
    proc = launch_in_process(tmp_path / "e", "experiment=loss_norm_trl", "dry_run=true", multirun=False)
    assert proc.returncode == 0, proc.stderr
    jobs = [line for line in _commands(proc) if "-m trainer.adapters.trl_grpo" in line]
    assert len(jobs) == 2 + 6  # the probe's two arms, then both arms over three seeds
    assert {line.split(":")[0].split("] ")[1].rsplit("-", 1)[0] for line in jobs} == {
        "grpo-trl-loss_type_dapo", "grpo-trl-loss_type_grpo"}
    assert all(("--loss-type dapo" in line) == ("loss_type_dapo" in line) for line in jobs)


@pytest.mark.parametrize("override", ["trainer.plan_check=subprocess:call", "+trainer.plan_check=os:system",
                                      "++trainer.plan_check=builtins:exec", "~trainer.plan_check",
                                      "trainer.plan_check=null", "trainer.plan_check=trainer.adapters.trl_grpo:plan"])
@pytest.mark.parametrize("trainer", ["trl", "command"])
def test_no_command_line_names_a_plan_check_and_nothing_runs_or_is_written(tmp_path, override, trainer):
    before = sorted(p.name for p in REPO.iterdir())
    error = _one_error(launch_in_process(tmp_path / "s", f"trainer={trainer}", override, "seed=1", "dry_run=true"))
    assert f"{override}: trainer.plan_check cannot be set on the command line" in error, error
    assert sorted(p.name for p in REPO.iterdir()) == before  # no {output_dir}/ left in the checkout
    assert not (tmp_path / "s" / "jobs").exists()


def test_a_spec_file_naming_a_third_party_plan_check_is_refused_before_it_is_imported(tmp_path):
    lab = tmp_path / "lab"
    (lab / "trainer").mkdir(parents=True)
    text = (REPO / "conf" / "trainer" / "command.yaml").read_text().replace("name: command", "name: mine")
    (lab / "trainer" / "mine.yaml").write_text(text + "plan_check: os:system\n")
    error = _one_error(launch_in_process(tmp_path / "s", "-cd", str(lab), "trainer=mine", "seed=1", "dry_run=true"))
    assert "plan_check='os:system' is refused" in error and "Traceback" not in error


def _pc_spec(tmp_path, plan_check: str, drop_interpreter: bool) -> Path:
    """The adversary's pc.yaml (adv-trust F11): conf/trainer/trl.yaml named pc, with another function of the adapter
    as its plan check and (``drop_interpreter``) its command starting at --output-dir, as that function's argv."""
    text = (REPO / "conf" / "trainer" / "trl.yaml").read_text().replace("name: trl", "name: pc")
    text = text.replace("plan_check: trainer.adapters.trl_grpo:check_command", f"plan_check: {plan_check}")
    if drop_interpreter:
        text = text.replace('command: ["{python}", -m, trainer.adapters.trl_grpo, --output-dir',
                            "command: [--output-dir")
    assert f"plan_check: {plan_check}" in text and (not drop_interpreter or "command: [--output-dir" in text)
    lab = tmp_path / "conf2"
    (lab / "trainer").mkdir(parents=True)
    (lab / "trainer" / "pc.yaml").write_text(text)
    return lab


@pytest.mark.parametrize(("plan_check", "drop_interpreter"), [
    ("trainer.adapters.trl_grpo:main", True),  # would train TRL in the launcher, into {output_dir}/ of the checkout
    ("trainer.adapters.trl_grpo:main", False),  # would end in argparse's usage and SystemExit
    ("trainer.adapters.trl_grpo:train", True), ("trainer.adapters.trl_grpo:parser", True),
])
def test_a_spec_naming_an_adapter_function_that_is_no_declared_plan_check_is_refused_and_nothing_runs(
        tmp_path, plan_check, drop_interpreter):
    lab = _pc_spec(tmp_path, plan_check, drop_interpreter)
    before = sorted(p.name for p in REPO.iterdir())
    proc = launch_in_process(tmp_path / "s", "-cd", str(lab), "trainer=pc", "algo=grpo", "seed=1",
                             "workload.n_updates=1", "workload.eval.n_prompts=4", "dry_run=true")
    error = _one_error(proc)
    assert f"trainer pc: plan_check={plan_check!r} is refused" in error and "PLAN_CHECKS" in error, error
    assert "trained" not in proc.stdout and "usage:" not in proc.stdout + proc.stderr, proc.stdout
    assert sorted(p.name for p in REPO.iterdir()) == before  # no {output_dir}/ left in the checkout
    assert not (tmp_path / "s").exists() or not (tmp_path / "s" / "jobs").exists()


def _exits(argv):  # a plan check whose failure is no Exception: argparse's SystemExit
    raise SystemExit(2)


def _interrupted_by_a_base_exception(argv):
    class Odd(BaseException):
        pass

    raise Odd("first line\nsecond line")


@pytest.mark.parametrize(("check", "says"), [
    ("_exits", "plan_check tests.trainer.test_trainer_spec:_exits failed (SystemExit: 2); fix the spec or the check"),
    ("_interrupted_by_a_base_exception", "failed (Odd: first line); fix the spec or the check"),
])
def test_a_declared_plan_checks_own_failure_is_one_line_whatever_it_raises(monkeypatch, check, says):
    import trainer.external.trainer_spec as spec_module
    from trainer.external.trainer_spec import run_plan_check

    name = f"tests.trainer.test_trainer_spec:{check}"
    monkeypatch.setattr(spec_module, "PLAN_CHECKS", spec_module.PLAN_CHECKS | {name})
    lab = parse_spec(spec(["prog"], plan_check=name))
    with pytest.raises(SpecError) as err:
        run_plan_check(lab, ["prog"])
    assert says in str(err.value) and str(err.value).startswith("trainer lab's plan_check"), str(err.value)
    assert "\n" not in str(err.value)


def test_every_declared_plan_check_is_importable_and_refuses_a_command_it_cannot_read():
    import importlib

    from trainer.adapters import PLAN_CHECKS

    for name in PLAN_CHECKS:
        module, _, function = name.partition(":")
        check = getattr(importlib.import_module(module), function)
        with pytest.raises(ValueError):
            check(["--output-dir", "x"])  # no adapter named in it: a one-line refusal, nothing run


def test_an_external_trainer_in_an_allocation_of_several_tasks_is_refused_at_plan_time(tmp_path):
    from launcher.errors import PreflightError
    from launcher.planning import plan_trainer
    from trainer.run_config import compose

    for nodes, tasks in ((2, 1), (1, 2)):
        cfg = compose(["trainer=command", "cluster=slurm", f"cluster.nodes={nodes}", f"cluster.tasks_per_node={tasks}",
                       f"dp_size={nodes * tasks}"])
        with pytest.raises(PreflightError, match=rf"trainer command runs as one process per job, but cluster.nodes="
                                                 rf"{nodes} x cluster.tasks_per_node={tasks} gives the job 2 tasks"):
            plan_trainer(cfg, "grpo-command")
    assert plan_trainer(compose(["trainer=command", "cluster=slurm"]), "grpo-command") is not None
    error = _one_error(launch_in_process(tmp_path / "s", "trainer=command", "cluster=slurm", "cluster.nodes=2",
                                         "dp_size=2", "seed=1", "dry_run=true"))
    assert "trainer command runs as one process per job" in error and not (tmp_path / "s" / "jobs").exists()


HIDE = """import sys

class _Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Hidden())
"""


def test_trainer_trl_where_trl_is_not_installed_is_one_line_naming_its_make_target(tmp_path):
    """A Python without the trl extra (its modules hidden from the import system by a sitecustomize, as if never
    installed): launch.py refuses at plan time, naming make trl, rather than failing at run time."""
    import importlib.util
    import os
    import subprocess
    import sys

    for hidden in ({"trl"}, {"datasets"}):
        site = tmp_path / "site" / "-".join(hidden)
        site.mkdir(parents=True)
        (site / "sitecustomize.py").write_text(HIDE.format(hidden=hidden))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
        proc = subprocess.run([sys.executable, "launch.py", "-m", "trainer=trl", "seed=1", "dry_run=true",
                               f"hydra.sweep.dir={tmp_path / 's'}"], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
        module = next(m for m in ("trl", "datasets", "accelerate") if m in hidden or importlib.util.find_spec(m) is None)
        assert proc.returncode == 2 and proc.stderr == (
            f"proofgrid: error: job grpo-trl: trainer trl needs the trl extra, which is not installed here (no module "
            f"{module}): pip install -e \".[trl]\" (in a checkout: make trl)\n"), proc.stderr


def test_a_spec_that_declares_its_algorithm_labels_and_describes_its_arm_by_it(tmp_path):
    """A lab's RLOO script under proofgrid's default algo=grpo: its spec's ``algorithm`` is the arm's label
    (``rloo-lab``, never ``grpo-lab``) and the display name its runs declare (the report's Algorithms line)."""
    from trainer.external.run import ExternalRun, declared_algorithm
    from trainer.external.trainer_spec import from_record, to_record

    parsed = parse_spec(spec(["python", "train.py", "{output_dir}"], algorithm="RLOO",
                             contract={"loss": "RLOO leave-one-out baseline"}))
    assert parsed.algorithm == "RLOO" and from_record(to_record(parsed)).algorithm == "RLOO"
    run = ExternalRun(parsed, {"algo": {"short": "grpo", "estimator": "grpo", "loss_reduction": "response_mean"}},
                      [], tmp_path, None)
    declared = declared_algorithm(run)
    assert (declared["display_name"], declared["trainer"]) == ("RLOO", "lab")
    assert declared["contract"]["loss"] == "RLOO leave-one-out baseline"
    lab = tmp_path / "lab"
    (lab / "trainer").mkdir(parents=True)
    text = (REPO / "conf" / "trainer" / "command.yaml").read_text().replace("name: command", "name: mylab")
    (lab / "trainer" / "mylab.yaml").write_text(text.replace("algorithm: REINFORCE ", "algorithm: RLOO "))
    proc = launch_in_process(tmp_path / "s", "-cd", str(lab), "trainer=mylab", "seed=1", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert _commands(proc)[0].startswith("[0] rloo-mylab-1:")


@pytest.mark.parametrize("value", ["", "  RLOO", "R/L", "x" * 41, 3, ["RLOO"]])
def test_a_bad_declared_algorithm_is_one_line_naming_the_field(value):
    with pytest.raises(SpecError, match=r"^trainer lab: algorithm=.* must name the algorithm the trainer runs"):
        parse_spec(spec(["python", "train.py"], algorithm=value))
