"""The Slurm profile's values are checked in the dry run: one line naming the key and the fix."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from facts.slurm_formats import mem_mb
from launcher.errors import PreflightError
from launcher.slurm.slurm_profile import _gres_fits, check_formats, explain_refusal
from tests.launch_in_process import launch_in_process
from tests.sweeps import launch

BASE = {"kind": "slurm", "partition": "debug", "account": None, "qos": None, "gres": None, "cpus_per_task": 1,
        "mem": "4G", "time": "00:30:00", "constraint": None, "array_parallelism": None, "signal_delay_s": 90}


@pytest.mark.parametrize(("key", "value"), [
    ("partition", "gpu a40"), ("partition", None), ("time", "garbage"), ("time", "1:2:3:4"), ("mem", "4 GB"),
    ("mem", "lots"), ("gres", "gpu::"), ("gres", "1:gpu"), ("cpus_per_task", 0), ("cpus_per_task", "two"),
    ("account", "my account"), ("qos", "hi;rm"), ("constraint", "a40 ib"), ("array_parallelism", -1),
    ("signal_delay_s", 70000),
])
def test_every_malformed_profile_value_is_one_line_naming_its_key(key, value):
    with pytest.raises(PreflightError) as err:
        check_formats(OmegaConf.create({**BASE, key: value}))
    message = str(err.value)
    assert f"cluster.{key}=" in message and "\n" not in message and "use " in message


@pytest.mark.parametrize(("key", "value"), [
    ("time", "90"), ("time", "1-12"), ("time", "2-00:00:00"), ("time", "45:30"), ("mem", "64000M"), ("mem", "0"),
    ("gres", "gpu:NVIDIAA40:1"), ("gres", "gpu:2"), ("gres", "gpu"), ("constraint", "a40&ib"),
    ("constraint", "a40|h100"), ("account", "proj-42.x"),
])
def test_the_forms_slurm_accepts_pass(key, value):
    check_formats(OmegaConf.create({**BASE, key: value}))


def test_the_dry_run_refuses_a_malformed_time_before_printing_anything(tmp_path):
    proc = launch(tmp_path / "s", "algo=grpo", "seed=1", "dry_run=true", "cluster=slurm", "cluster.time=garbage")
    assert proc.returncode == 2 and "# sbatch" not in proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert "cluster.time='garbage'" in line and "H:M:S" in line


@pytest.mark.parametrize(("asked", "offered", "fits"), [
    ("gpu:1", "gpu:a40:4(S:0-1)", True), ("gpu:a40:4", "gpu:a40:4(S:0-1)", True), ("gpu:a40:5", "gpu:a40:4", False),
    ("gpu:h100:1", "gpu:a40:4", False), ("gpu:1", "", False), ("gpu:2", "gpu:a40:1,gpu:v100:1", True),
])
def test_gres_requests_are_matched_against_a_nodes_gres(asked, offered, fits):
    assert _gres_fits(asked, offered) is fits


@pytest.mark.parametrize(("text", "mb"), [("4G", 4096), ("512", 512), ("64000M", 64000), ("1T", 1048576), ("2048K", 2)])
def test_slurm_sizes_are_megabytes(text, mb):
    assert mem_mb(text) == mb


def test_a_refusal_names_what_slurm_said_and_the_key_to_change():
    stderr = ("sbatch: error: invalid partition specified: nope\n"
              "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    line = explain_refusal(stderr)
    assert "\n" not in line and "invalid partition specified: nope" in line and "change cluster.partition" in line


def test_a_grid_above_the_array_limit_is_split_and_the_dry_run_says_so(tmp_path):
    proc = launch_in_process(tmp_path / "s", "algo=grpo,rpp", "seed=1,2,3", "dry_run=true", "cluster=slurm",
                             "cluster.partition=gpu", "cluster.max_array_size=4")
    assert proc.returncode == 0, proc.stderr
    sbatch = [line for line in proc.stdout.splitlines() if line.startswith("# sbatch")]
    heads = [i for i, line in enumerate(sbatch) if "MaxArraySize" in line]
    assert len(heads) == 2 and heads[0] == 0
    assert "array 1 of 2" in sbatch[0] and "jobs [0]-[3]" in sbatch[0]
    assert "array 2 of 2" in sbatch[heads[1]] and "jobs [4]-[5]" in sbatch[heads[1]]
    first, second = sbatch[:heads[1]], sbatch[heads[1]:]
    assert "# sbatch | #SBATCH --array=0-3%4" in first and "# sbatch | #SBATCH --array=0-1%2" in second


def test_a_one_cell_grid_is_dry_run_as_the_plain_job_submitit_submits(tmp_path):
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", "dry_run=true", "cluster=slurm",
                             "cluster.partition=gpu")
    assert proc.returncode == 0, proc.stderr
    sbatch = [line for line in proc.stdout.splitlines() if line.startswith("# sbatch")]
    assert sbatch and not any("--array" in line for line in sbatch)


def test_an_unknown_profile_key_is_refused_not_dropped():
    with pytest.raises(PreflightError, match=r"unknown cluster setting 'mail_type'.*cluster\.sbatch\.mail-type="):
        check_formats(OmegaConf.create({**BASE, "mail_type": "END"}))


@pytest.mark.parametrize(("option", "key"), [("time", "cluster.time"), ("job-name", "the sweep"), ("array", "the grid")])
def test_an_option_proofgrid_sets_cannot_be_overridden_under_sbatch(option, key):
    with pytest.raises(PreflightError, match=f"cluster.sbatch.{option} is set by proofgrid"):
        check_formats(OmegaConf.create({**BASE, "sbatch": {option: "x"}}))


def test_extra_sbatch_options_and_setup_lines_reach_the_dry_run_and_submitit(tmp_path):
    from launcher.slurm.script import submitit_parameters

    cluster = OmegaConf.create({**BASE, "sbatch": {"mail-type": "END", "exclusive": True, "exclude": "n[1-2]",
                                                   "gpus_per_task": 1, "comment": None},
                                "setup": ["module load cuda/12.4"]})
    check_formats(cluster)
    params = submitit_parameters(cluster, 3)
    assert params["additional_parameters"] == {"requeue": True, "mail-type": "END", "exclusive": True,
                                               "exclude": "n[1-2]", "gpus-per-task": "1"}
    assert params["setup"] == ["module load cuda/12.4"]
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1,2", "dry_run=true", "cluster=slurm",
                             "cluster.partition=gpu", "+cluster.sbatch.mail-type=END", "+cluster.sbatch.exclusive=true")
    assert proc.returncode == 0, proc.stderr
    sbatch = [line for line in proc.stdout.splitlines() if line.startswith("# sbatch")]
    assert "# sbatch | #SBATCH --mail-type=END" in sbatch and "# sbatch | #SBATCH --exclusive" in sbatch, sbatch


@pytest.mark.parametrize("n_jobs", [1, 3], ids=["a plain job", "an array"])
def test_the_script_the_dry_run_renders_is_the_one_submitit_hands_sbatch(slurm_cluster, tmp_path, n_jobs):
    """submitit renders its script with private code (launcher/slurm/script.py says why): what the
    dry run prints must be what ``SlurmExecutor`` really submits, a one-task grid (a plain job) and
    an array alike, with the profile's extra options and setup lines."""
    import submitit

    from launcher.slurm.script import sbatch_script, submitit_parameters

    cluster = OmegaConf.create({**BASE, "time": "00:05:00", "sbatch": {"comment": "pinned"}, "setup": ["true"]})
    folder = tmp_path / "sweep" / ".submitit" / "run-0"
    executor = submitit.SlurmExecutor(folder=str(folder))
    executor.update_parameters(**submitit_parameters(cluster, n_jobs, "pg-pin"))
    jobs = executor.map_array(abs, [-1] * n_jobs)
    try:
        submitted = Path(jobs[0].paths.submission_file).read_text()
    finally:
        subprocess.run(["scancel", str(jobs[0].job_id).split("_")[0]], capture_output=True)
    assert ("--array=0-2%3" in submitted) is (n_jobs > 1)
    assert submitted == sbatch_script(cluster, n_jobs, folder, "pg-pin")
