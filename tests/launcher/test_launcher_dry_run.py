"""Dry-run expansion: deterministic, path-free, checks everything, submits and starts nothing.

The checks run ``launch.py`` in this process (tests/launch_in_process.py: the same script and
``__main__`` block, no interpreter start-up); one golden test runs it as a process, as users do.
"""

from __future__ import annotations

import subprocess

import pytest

from launcher.errors import PreflightError
from launcher.preflight import check_source
from tests.launch_in_process import launch_in_process
from tests.sweeps import GRID, REPO, launch

GOLDEN = REPO / "tests" / "golden" / "dry_run_3x3.txt"
GOLDEN_SLURM = REPO / "tests" / "golden" / "dry_run_3x3_slurm.txt"
GOLDEN_TWO_NODES = REPO / "tests" / "golden" / "dry_run_2node_slurm.txt"


def _commands(proc: subprocess.CompletedProcess) -> list[str]:
    """The dry run's deterministic lines (the goldens): the sbatch script, the estimate, the shared environment and
    the jobs. ``# limits |`` (this machine's memory for a local sweep) is not among them."""
    return [line for line in proc.stdout.splitlines() if line.startswith(("[", "# sbatch", "# estimate", "# env"))]


def _jobs(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith("[")]


def _env(proc: subprocess.CompletedProcess) -> list[str]:
    """The environment the dry run shows once for every job: ``-u X`` and ``K=V`` words."""
    return [line.removeprefix("# env | ") for line in proc.stdout.splitlines()
            if line.startswith("# env | ") and not line.startswith("# env | every job")]


def whole_commands(proc: subprocess.CompletedProcess) -> list[str]:
    """Each job line with the shared environment put back in, as ``commands.txt`` writes it: ``env -u X K=V ...
    argv``, the unset variables first, then every ``K=V`` (the job's own over the shared) in name order."""
    shared = _env(proc)
    out = []
    for line in _jobs(proc):
        head, _, rest = line.partition(": ")
        words = rest.split(" ")
        unset = [w for w in shared if w.startswith("-u ")]
        env = dict(w.split("=", 1) for w in shared if not w.startswith("-u "))
        i = 1 if words[0] == "env" else 0
        while i and i < len(words) and (words[i] == "-u" or "=" in words[i]):  # the job's own environment
            if words[i] == "-u":
                unset.append(f"-u {words[i + 1]}")
                i += 2
            else:
                key, value = words[i].split("=", 1)
                env[key] = value
                i += 1
        pairs = [f"{k}={v}" for k, v in sorted(env.items())]
        out.append(f"{head}: env {' '.join([*unset, *pairs])} {' '.join(words[i:])}")
    return out


def test_dry_run_expands_the_grid_deterministically_and_matches_the_golden_file(tmp_path):
    a = launch_in_process(tmp_path / "a", *GRID, "dry_run=true")
    b = launch_in_process(tmp_path / "elsewhere" / "b", *GRID, "dry_run=true")
    assert a.returncode == 0, a.stderr
    lines, jobs = _commands(a), _jobs(a)
    assert len(jobs) == 9 and lines == _commands(b)  # no timestamps, random ports or paths
    assert [line.split(":")[0] for line in jobs] == [
        "[0] grpo-42", "[1] grpo-1234", "[2] grpo-2026", "[3] rpp-42", "[4] rpp-1234", "[5] rpp-2026",
        "[6] rppb-42", "[7] rppb-1234", "[8] rppb-2026"]  # natural order: seed 42 before 1234
    assert all("output_dir=<JOB_DIR>/run" in line for line in jobs) and "MASTER_PORT=<PORT:master_port>" in _env(a)
    assert all(str(tmp_path) not in line for line in a.stdout.splitlines() if not line.startswith("dry run:"))
    # the environment once, each job its command: the screen's lines are short, commands.txt keeps the whole ones
    assert max(len(line) for line in jobs) < 200 and len(_env(a)) >= 20
    assert (tmp_path / "a" / "commands.txt").read_text().splitlines() == whole_commands(a)
    assert not (tmp_path / "a" / "jobs").exists()  # nothing submitted, nothing started
    assert lines == GOLDEN.read_text().splitlines(), "update tests/golden/dry_run_3x3.txt if this change is intended"


def test_launch_py_run_as_a_process_prints_the_golden_dry_run(tmp_path):
    proc = launch(tmp_path / "p", *GRID, "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert _commands(proc) == GOLDEN.read_text().splitlines()
    assert not (tmp_path / "p" / "jobs").exists()


def test_without_multirun_the_single_composed_job_goes_through_the_same_checks(tmp_path):
    proc = launch_in_process(tmp_path / "single", "algo=rpp", "seed=9", "dry_run=true", multirun=False)
    assert proc.returncode == 0, proc.stderr
    (line,) = _jobs(proc)
    assert line.startswith("[0] rpp-9:") and "algo=rpp seed=9" in line
    assert (tmp_path / "single" / "commands.txt").read_text().splitlines() == whole_commands(proc)


def test_slurm_dry_run_prints_the_array_script_submitit_submits_and_matches_its_golden_file(tmp_path):
    proc = launch_in_process(tmp_path / "s", *GRID, "dry_run=true", "cluster=slurm", "cluster.partition=gpu")
    assert proc.returncode == 0, proc.stderr
    sbatch = [line for line in proc.stdout.splitlines() if line.startswith("# sbatch")]
    assert sbatch[0] == "# sbatch | #!/bin/bash"
    for flag in ("--array=0-8%9", "--partition=gpu", "--cpus-per-task=1", "--time=30", "--signal=USR2@90", "--requeue"):
        assert f"# sbatch | #SBATCH {flag}" in sbatch, flag
    assert sbatch[-1].endswith("<PYTHON> -u -m submitit.core._submit <SWEEP_DIR>/.submitit/<RUN>")
    assert all(str(tmp_path) not in line for line in sbatch)
    assert _commands(proc) == GOLDEN_SLURM.read_text().splitlines(), \
        "update tests/golden/dry_run_3x3_slurm.txt if this change is intended"


def test_a_two_node_dry_run_prints_submitit_s_multi_node_script_and_each_rank_s_env_and_matches_its_golden(tmp_path):
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1,2", "dp_size=2", "dry_run=true", "cluster=slurm",
                             "cluster.partition=gpu", "cluster.nodes=2")
    assert proc.returncode == 0, proc.stderr
    sbatch = [line.removeprefix("# sbatch | ") for line in proc.stdout.splitlines() if line.startswith("# sbatch")]
    for flag in ("--array=0-1%2", "--nodes=2", "--ntasks-per-node=1"):
        assert f"#SBATCH {flag}" in sbatch, flag
    # submitit's srun starts one task per slot, each task's log by its task id (%t)
    assert sbatch[-1].startswith("srun --unbuffered --output <SWEEP_DIR>/.submitit/<RUN>/%A_%a_%t_log.out")
    jobs = _jobs(proc)
    for word in ("MASTER_ADDR=<RANK0_NODE_ADDR>", "RANK=<SLURM_PROCID>", "LOCAL_RANK=<SLURM_LOCALID>", "WORLD_SIZE=2",
                 "PROOFGRID_RENDEZVOUS_TIMEOUT_S=300"):
        assert word in _env(proc), word  # the same for every job: shown once
    assert all("dp_size=2" in line for line in jobs)
    assert _commands(proc) == GOLDEN_TWO_NODES.read_text().splitlines(), \
        "update tests/golden/dry_run_2node_slurm.txt if this change is intended"


def test_the_local_back_end_still_runs_a_job_s_dp_size_ranks_itself(tmp_path):
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", "dp_size=2", "workload.cpus_per_job=2", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    (line,) = whole_commands(proc)  # one process, whose trainer spawns its ranks: no scheduler's rank variables
    assert "dp_size=2" in line and "MASTER_ADDR=127.0.0.1" in line
    assert not any(f" {name}=" in line for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PROOFGRID_RENDEZVOUS_TIMEOUT_S"))


def test_seed000_profile_reproduces_its_request_as_submitted(tmp_path):
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=42", "dry_run=true", "cluster=a40_seed000")
    assert proc.returncode == 0, proc.stderr
    flags = {ln.removeprefix("# sbatch | #SBATCH ") for ln in proc.stdout.splitlines() if ln.startswith("# sbatch")}
    # submitit submits minutes and its own USR2 warning 90 s before the end; one job is no array
    assert {"--gres=gpu:NVIDIAA40:1", "--cpus-per-task=16", "--mem=64G", "--time=360", "--signal=USR2@90"} <= flags
    assert not any(f.startswith("--array") for f in flags)


@pytest.mark.parametrize(("args", "needle"), [
    (("algo=grpo,bogus", "seed=1"), "bogus"),
    (("algo=grpo", "seed=1", "workload.lrr=3"), "did you mean workload.lr"),
    (("algo=grpo", "seed=1", "workload.engine=sglang"), "workload.engine='sglang'"),
    (("algo=rppb", "seed=1", "workload.n_samples_per_prompt=1", "workload.global_batch_size=4"), "[group-size]"),
    (("algo=rpp", "seed=1", "algo.loss_reduction=token_mean"), "[loss-reduction]"),
    (("algo=grpo", "seed=1", "workload.global_batch_size=30"), "global_batch_size"),
    (("algo=grpo", "seed=1", "workload.reward_workers=4"), "cpus_per_job"),
    (("algo=grpo", "seed=1", "workload.cpus_per_job=4096"), "this machine has"),
    (("algo=grpo", "seed=1", "cluster=slurm", "workload.reward_workers=3", "workload.cpus_per_job=4",
      "cluster.cpus_per_task=2"), "cpus_per_task"),
    (("algo=grpo", "seed=1", "wait=false"), "wait=false needs cluster=slurm"),
    (("algo=grpo", "seed=1", "workload.manifest=manifests/missing.json"), "manifest"),
    (("algo=grpo", "seed=1", "workload.lr=1e-4,0.0001"), "equal values"),
    (("algo=grpo", "seed=1", "workload.lr=interval(0.1,0.2)"), "interval sweep"),
])
def test_a_bad_grid_fails_in_the_dry_run_with_one_line(tmp_path, args, needle):
    proc = launch_in_process(tmp_path / "bad", *args, "dry_run=true")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("proofgrid: error:") and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "bad" / "jobs").exists()


def test_formal_runs_refuse_a_dirty_tree(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.txt").write_text("a")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    commit = check_source(formal=True, repo=repo)
    assert len(commit) == 40
    (repo / "f.txt").write_text("b")
    assert check_source(formal=False, repo=repo) == commit
    with pytest.raises(PreflightError, match="dirty"):
        check_source(formal=True, repo=repo)
    with pytest.raises(PreflightError, match="git checkout"):
        (tmp_path / "not-a-repo").mkdir()
        check_source(formal=True, repo=tmp_path / "not-a-repo")


def test_fast_grid_composition_equals_hydra_composing_each_cell():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from launcher.grid import compose_jobs

    cells = [["algo=rpp", "seed=3", "workload.lr=0.002"], ["algo=grpo", "seed=4", "workload.eval.k=2"],
             ["algo=rppb", "seed=5", "workload.sampling={temperature:0.7,top_k:5,top_p:0.9}", "cluster=slurm"]]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        root = compose("config", return_hydra_config=True)
        loader = GlobalHydra.instance().config_loader()
        fast = compose_jobs(lambda overrides: loader.load_sweep_config(root, overrides), cells)
        for overrides, cfg in zip(cells, fast):
            full = compose("config", overrides=overrides)
            assert OmegaConf.to_container(cfg, resolve=True) == OmegaConf.to_container(full, resolve=True)


def test_a_dry_run_in_a_directory_that_holds_a_sweep_changes_none_of_its_records(tmp_path):
    """A dry run writes nothing a real run reads: in a directory that already holds a sweep it prints the same
    commands and leaves sweep.json and commands.txt byte for byte; in one whose sweep.json carries an
    experiment's pre-registration link (a confirm stage's) a plain sweep is refused in one line, writing nothing."""
    sweep_dir = tmp_path / "confirm"
    first = launch_in_process(sweep_dir, *GRID, "dry_run=true")
    assert first.returncode == 0, first.stderr
    record = sweep_dir / "sweep.json"
    before = {name: (sweep_dir / name).read_bytes() for name in ("sweep.json", "commands.txt")}
    again = launch_in_process(sweep_dir, *GRID, "dry_run=true")
    assert again.returncode == 0, again.stderr
    assert _commands(again) == _commands(first)
    assert {name: (sweep_dir / name).read_bytes() for name in before} == before
    assert f"{sweep_dir} already holds a sweep, whose sweep.json and commands.txt are left as they are" in again.stdout
    record.write_text(record.read_text().replace("{", '{"experiment_sha256": "' + "ab" * 32 + '", ', 1))
    before = {name: (sweep_dir / name).read_bytes() for name in ("sweep.json", "commands.txt")}
    refused = launch_in_process(sweep_dir, *GRID, "dry_run=true")
    assert refused.returncode == 2 and "is a stage of the pre-registered experiment" in refused.stderr
    assert {name: (sweep_dir / name).read_bytes() for name in before} == before
