"""The launcher's settings for the bundle's license and live tracking, through ``launch.py``'s dry run: what
sweep.json and each spec.json record, and each refusal in one line before anything runs."""

from __future__ import annotations

import json
import sys

import pytest

from tests.launch_in_process import launch_in_process

pytestmark = pytest.mark.slow  # launch.py composes and checks the grid: a second or two a dry run


def dry_run(tmp_path, *args):
    return launch_in_process(tmp_path / "s", "algo=grpo", "seed=1,2", "dry_run=true", *args)


def test_the_license_is_recorded_in_sweep_json_with_its_documented_default(tmp_path):
    done = dry_run(tmp_path / "default")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "default" / "s" / "sweep.json").read_text())["license"] == "CC-BY-4.0"
    done = dry_run(tmp_path / "mit", "license=MIT")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "mit" / "s" / "sweep.json").read_text())["license"] == "MIT"
    assert "license=" not in (tmp_path / "mit" / "s" / "commands.txt").read_text()  # a launcher setting only


@pytest.mark.parametrize("value", ["'CC BY 4.0'", "'../x'", "''", "'-MIT'"])
def test_a_license_that_is_no_spdx_identifier_is_one_line(tmp_path, value):
    done = dry_run(tmp_path, f"license={value}")
    assert done.returncode != 0 and "setting license=" in done.stderr and "is refused" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "s" / "sweep.json").exists()


@pytest.mark.parametrize(("args", "needle"), [
    (("tracking.live=neptune",), "setting tracking.live='neptune' is refused: it must be one of wandb, mlflow, tensorboard"),
    (("tracking.live=wandb", "tracking.uri=http://localhost:5000"),
     "tracking.uri=http://localhost:5000 is refused for tracking.live=wandb"),
    (("tracking.live=mlflow", "tracking.project=../x"), "setting tracking.project='../x' is refused"),
])
def test_a_bad_tracking_setting_is_one_line_before_anything_runs(tmp_path, args, needle):
    done = dry_run(tmp_path, *args)
    assert done.returncode != 0 and needle in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0 and not (tmp_path / "s" / "jobs").exists()


@pytest.mark.parametrize("tool", ["wandb", "mlflow"])
def test_a_tracker_whose_library_is_not_installed_is_one_line_naming_its_make_target(tmp_path, monkeypatch, tool):
    monkeypatch.setitem(sys.modules, tool, None)  # importlib finds no such module
    done = dry_run(tmp_path, f"tracking.live={tool}")
    assert done.returncode != 0, done.stderr
    assert f"tracking.live={tool} needs the export extra, which is not installed here (no module {tool})" in done.stderr
    assert "make export" in done.stderr and done.stderr.strip().count("\n") == 0
