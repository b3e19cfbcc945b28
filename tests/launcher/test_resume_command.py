"""The command that resumes a sweep is the one that started it with its directory pinned: the default
directory is timestamped, so "the same command" would start a new sweep from scratch."""

from __future__ import annotations

import shlex

from launcher.resume import recorded_resume_command, resume_command


def test_a_multirun_gets_its_sweep_dir_pinned_and_any_given_one_replaced(tmp_path):
    argv = ["py", "launch.py", "-m", "algo=grpo,rpp", "seed=1,2", "hydra.sweep.dir=elsewhere"]
    assert shlex.split(resume_command(tmp_path / "s", argv)) == [
        "py", "launch.py", "-m", "algo=grpo,rpp", "seed=1,2", f"hydra.sweep.dir={tmp_path / 's'}"]


def test_a_single_job_and_an_experiment_pin_the_run_dir(tmp_path):
    for argv in (["py", "/x/launch.py", "algo=grpo"], ["py", "launch.py", "experiment=loss_norm", "hydra.run.dir=a"]):
        assert shlex.split(resume_command(tmp_path, argv)) == [*argv[:3], f"hydra.run.dir={tmp_path}"]


def test_a_directory_hydra_would_misparse_is_quoted_for_hydra(tmp_path):
    odd = tmp_path / "a,b it's é"
    last = shlex.split(resume_command(odd, ["py", "launch.py", "-m", "seed=1"]))[-1]
    assert last.startswith("hydra.sweep.dir=") and last != f"hydra.sweep.dir={odd}"
    from hydra.core.override_parser.overrides_parser import OverridesParser

    assert OverridesParser.create().parse_override(last).value() == str(odd)


def test_only_a_launch_py_command_gives_one():
    assert resume_command("/tmp/s", ["python", "-m", "pytest", "tests"]) is None


def test_a_stage_of_an_experiment_finds_the_experiments_command(tmp_path):
    (tmp_path / "resume.txt").write_text("py launch.py experiment=x hydra.run.dir=/e\n")
    (tmp_path / "probe").mkdir()
    assert recorded_resume_command(tmp_path / "probe") == "py launch.py experiment=x hydra.run.dir=/e"
