"""What a user types that cannot work fails at once, in one line, through `launch.py`: bad settings
and seeds, bad environment variables, unusable sweep directories, bad manifests, a missing Slurm,
a full disk. Sweep directories with odd characters are quoted for the trainer."""

from __future__ import annotations

import pytest

from tests.sweeps import launch


def _one_line_error(proc, needle: str) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("proofgrid: error:") and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "needle"), [
    (("workload.max_grad_norm=-1",), "workload.max_grad_norm=-1"),
    (("workload.lr=-0.001",), "workload.lr"),
    (("workload.max_response_len=0",), "workload.max_response_len"),
    (("workload.num_threads=0",), "workload.num_threads"),
    (("workload.dtype=int8",), "workload.dtype"),
    (("workload.reward_workers=-1",), "workload.reward_workers"),
    (("workload.sampling.temperature=0",), "workload.sampling.temperature"),
    (("workload.eval.n_prompts=100000",), "workload.eval.n_prompts=100000"),
    (("workload.device=cuda", "workload.gpus_per_job=1"), "GPU"),
    (("seed=1.5",), "seed=1.5"),
    (("seed=true",), "seed=true"),
    (("seed=1e3",), "seed=1e3"),
    (("seed=01,1",), "seed=01"),
    (("seed=2**70",), "seed=2**70"),
])
def test_a_bad_setting_is_refused_by_the_dry_run_in_one_line(tmp_path, args, needle):
    if "cuda" in args[0] and __import__("torch").cuda.is_available():
        pytest.skip("checks the no-GPU refusal")
    proc = launch(tmp_path / "bad", "algo=grpo", *([] if args[0].startswith("seed=") else ["seed=1"]), *args,
                  "dry_run=true")
    assert proc.returncode == 2
    _one_line_error(proc, needle)
    assert not (tmp_path / "bad" / "jobs").exists()


@pytest.mark.parametrize("value", ["abc", "70000", "80", "2e4"])
def test_a_bad_port_base_is_refused_before_anything_starts(tmp_path, value):
    proc = launch(tmp_path / "s", "algo=grpo", "seed=1", "dry_run=true", env={"PROOFGRID_PORT_BASE": value})
    assert proc.returncode == 2
    _one_line_error(proc, "PROOFGRID_PORT_BASE")


@pytest.mark.parametrize("layout", ["file", "under a file"])
def test_a_sweep_dir_that_is_a_file_is_one_line(tmp_path, layout):
    (tmp_path / "taken").write_text("not a directory\n")
    target = tmp_path / "taken" if layout == "file" else tmp_path / "taken" / "sweep"
    proc = launch(target, "algo=grpo", "seed=1", "dry_run=true")
    assert proc.returncode == 2
    _one_line_error(proc, "is a file, not a directory")
    assert (tmp_path / "taken").read_text() == "not a directory\n"


def test_an_unwritable_sweep_dir_is_one_line():
    proc = launch("/proc/proofgrid-sweep", "algo=grpo", "seed=1", "dry_run=true")
    assert proc.returncode == 2
    _one_line_error(proc, "not writable")


def test_a_full_disk_is_named_in_one_line(tmp_path):
    sweep = tmp_path / "full"
    sweep.mkdir()
    (sweep / "commands.txt").symlink_to("/dev/full")  # every write there fails with ENOSPC
    proc = launch(sweep, "algo=grpo", "seed=1", "dry_run=true")
    assert proc.returncode == 1
    _one_line_error(proc, "disk full")


@pytest.mark.parametrize("content", ['{"files": [', "[1, 2]", '{"files": [{"path": "x"}]}', "\xff\xfe"])
def test_a_manifest_that_is_not_a_manifest_is_one_line(tmp_path, content):
    manifest = tmp_path / "bad.json"
    manifest.write_bytes(content.encode("latin-1"))
    proc = launch(tmp_path / "s", "algo=grpo", "seed=1", "dry_run=true", f"workload.manifest={manifest}")
    assert proc.returncode == 2
    _one_line_error(proc, "manifest")


def test_cluster_slurm_without_slurm_commands_is_one_line(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = launch(tmp_path / "s", "algo=grpo", "seed=1", "cluster=slurm", env={"PATH": str(empty)})
    assert proc.returncode == 2
    _one_line_error(proc, "sbatch")
    assert not (tmp_path / "s" / ".submitit").exists()


@pytest.mark.parametrize("path", ["/tmp/a,b/run", "/tmp/it's/run", "/tmp/é ü/run", "/tmp/x\\y'/run", "/tmp/a\\",
                                  "/tmp/a=b[c]", "/tmp/p-1/x_y.z/run"])
def test_the_run_dir_reaches_the_trainer_exactly_whatever_its_characters(path):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from launcher.runtime import hydra_value

    (parsed,) = OverridesParser.create().parse_overrides([f"output_dir={hydra_value(path)}"])
    assert not parsed.is_sweep_override() and parsed.value() == path

