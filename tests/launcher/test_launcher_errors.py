"""What a user types that cannot work fails at once, in one line, through `launch.py`: bad settings
and seeds, bad environment variables, unusable sweep directories, bad manifests, a missing Slurm,
a full disk. Sweep directories with odd characters are quoted for the trainer.

Every case runs ``launch.py`` in this process (tests/launch_in_process.py: the same script and
``__main__`` block; nothing is started, so no interpreter is needed); one golden test per kind of
refusal runs it as a process, as users do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from facts.repo import REPO_ROOT
from tests.launch_in_process import launch_in_process
from tests.sweeps import launch


def _one_line_error(proc, needle: str) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("proofgrid: error:") and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


BAD_SETTINGS = [
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
    (("cluster.kind=pbs",), "cluster.kind='pbs' is refused: it must be one of local, slurm"),
    # every count has an upper bound (10**15 passed plan time once) ...
    (("workload.eval.k=1000000000000000",), "workload.eval.k=1000000000000000 is refused: it must be >= 1 and "
                                            "<= 65536"),
    (("workload.eval.k=65537",), "workload.eval.k=65537 is refused: it must be >= 1 and <= 65536"),
    (("workload.max_response_len=1000000000000000",), "workload.max_response_len=1000000000000000 is refused"),
    (("workload.ppo_epochs=1000000000000000",), "workload.ppo_epochs=1000000000000000 is refused"),
    (("workload.num_threads=1000000000000000",), "workload.num_threads=1000000000000000 is refused"),
    (("workload.n_updates=10000000",), "workload.n_updates=10000000 is refused: it must be >= 1 and <= 1000000"),
    (("dp_size=100000",), "dp_size=100000 is refused: it must be >= 1 and <= 65536"),
    # ... and the bounds that follow from other settings and the inputs
    (("workload.num_threads=2",), "workload.num_threads=2 exceeds the job's workload.cpus_per_job=1"),
    (("workload.max_response_len=256",), "workload.max_response_len=256 is refused: it must be < 256, the model's "
                                         "max_position_embeddings"),
    (("workload.eval.max_response_len=4000",), "workload.eval.max_response_len=4000 is refused: it must be < 256"),
    (("workload.eval.k=30000",), "an evaluation of 1920000 responses x 48 tokens"),
    (("workload.prompts_per_step=4096", "workload.n_samples_per_prompt=512", "workload.global_batch_size=2097152"),
     "a training step's rollout of 2097152 responses x 48 tokens"),
]


def _bad_setting_args(args: tuple[str, ...]) -> tuple[str, ...]:
    return ("algo=grpo", *([] if args[0].startswith("seed=") else ["seed=1"]), *args, "dry_run=true")


@pytest.mark.parametrize(("args", "needle"), BAD_SETTINGS)
def test_a_bad_setting_is_refused_by_the_dry_run_in_one_line(tmp_path, args, needle):
    if "cuda" in args[0] and __import__("torch").cuda.is_available():
        pytest.skip("checks the no-GPU refusal")
    proc = launch_in_process(tmp_path / "bad", *_bad_setting_args(args))
    assert proc.returncode == 2
    _one_line_error(proc, needle)
    assert not (tmp_path / "bad" / "jobs").exists()


MULTINODE_BAD = [
    (("cluster=slurm", "cluster.nodes=0", "dp_size=2"),
     "cluster.nodes=0 is not a valid Slurm value; use a whole number >= 1"),
    (("cluster=slurm", "cluster.nodes=two"), "cluster.nodes='two' is not a valid Slurm value"),
    (("cluster=slurm", "cluster.nodes=1.5"), "cluster.nodes=1.5 is not a valid Slurm value"),
    (("cluster.nodes=2", "dp_size=2"), "cluster.nodes=2 needs cluster=slurm"),
    (("cluster=local", "cluster.tasks_per_node=2", "dp_size=2"), "cluster.tasks_per_node=2 needs cluster=slurm"),
    (("cluster=slurm", "cluster.nodes=2"),
     "dp_size=1 is not cluster.nodes x cluster.tasks_per_node = 2 x 1 = 2: a job of several tasks runs one trainer "
     "rank per task; set dp_size=2"),
    (("cluster=slurm", "cluster.nodes=2", "dp_size=4"), "set dp_size=2 or cluster.tasks_per_node=2"),
    (("cluster=slurm", "cluster.nodes=2", "cluster.rendezvous_timeout_s=0", "dp_size=2"),
     "cluster.rendezvous_timeout_s=0 is not a valid Slurm value"),
]


@pytest.mark.parametrize(("args", "needle"), MULTINODE_BAD)
def test_a_multi_node_setting_that_cannot_work_is_refused_in_one_line_before_anything_is_submitted(tmp_path, args,
                                                                                                    needle):
    proc = launch_in_process(tmp_path / "bad", "algo=grpo", "seed=1", *args, "dry_run=true")
    assert proc.returncode == 2
    _one_line_error(proc, needle)
    assert not (tmp_path / "bad" / "jobs").exists() and not (tmp_path / "bad" / ".submitit").exists()


@pytest.mark.parametrize("value", ["abc", "70000", "80", "2e4"])
def test_a_bad_port_base_is_refused_before_anything_starts(tmp_path, value):
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", "dry_run=true", env={"PROOFGRID_PORT_BASE": value})
    assert proc.returncode == 2
    _one_line_error(proc, "PROOFGRID_PORT_BASE")


def _taken(tmp_path: Path, layout: str) -> Path:
    (tmp_path / "taken").write_text("not a directory\n")
    return tmp_path / "taken" if layout == "file" else tmp_path / "taken" / "sweep"


@pytest.mark.parametrize("layout", ["file", "under a file"])
def test_a_sweep_dir_that_is_a_file_is_one_line(tmp_path, layout):
    proc = launch_in_process(_taken(tmp_path, layout), "algo=grpo", "seed=1", "dry_run=true")
    assert proc.returncode == 2
    _one_line_error(proc, "is a file, not a directory")
    assert (tmp_path / "taken").read_text() == "not a directory\n"


def test_an_unwritable_sweep_dir_is_one_line():
    proc = launch_in_process(Path("/proc/proofgrid-sweep"), "algo=grpo", "seed=1", "dry_run=true")
    assert proc.returncode == 2
    _one_line_error(proc, "not writable")


def _full_disk(tmp_path: Path) -> Path:
    sweep = tmp_path / "full"
    sweep.mkdir()
    (sweep / "commands.txt").symlink_to("/dev/full")  # every write there fails with ENOSPC
    return sweep


def test_a_full_disk_is_named_in_one_line(tmp_path):
    proc = launch_in_process(_full_disk(tmp_path), "algo=grpo", "seed=1", "dry_run=true")
    assert proc.returncode == 1
    _one_line_error(proc, "disk full")


BAD_MANIFESTS = ['{"files": [', "[1, 2]", '{"files": [{"path": "x"}]}', "\xff\xfe"]


def _bad_manifest(tmp_path: Path, content: str) -> Path:
    manifest = tmp_path / "bad.json"
    manifest.write_bytes(content.encode("latin-1"))
    return manifest


@pytest.mark.parametrize("content", BAD_MANIFESTS)
def test_a_manifest_that_is_not_a_manifest_is_one_line(tmp_path, content):
    manifest = _bad_manifest(tmp_path, content)
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", "dry_run=true", f"workload.manifest={manifest}")
    assert proc.returncode == 2
    _one_line_error(proc, "manifest")


def _empty_path(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "bin"
    empty.mkdir()
    return {"PATH": str(empty)}


def test_cluster_slurm_without_slurm_commands_is_one_line(tmp_path):
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", "cluster=slurm", env=_empty_path(tmp_path))
    assert proc.returncode == 2
    _one_line_error(proc, "sbatch")
    assert not (tmp_path / "s" / ".submitit").exists()


@pytest.mark.parametrize("kind", ["setting", "seed", "port base", "sweep dir", "manifest", "slurm", "full disk"])
def test_each_kind_of_refusal_is_one_line_from_launch_py_run_as_a_process(tmp_path, kind):
    """The golden check of the in-process cases above: one case of each kind, as users run it."""
    sweep, args, env, code, needle = {
        "setting": lambda: (tmp_path / "s", _bad_setting_args(("workload.lr=-0.001",)), None, 2, "workload.lr"),
        "seed": lambda: (tmp_path / "s", _bad_setting_args(("seed=01,1",)), None, 2, "seed=01"),
        "port base": lambda: (tmp_path / "s", ("algo=grpo", "seed=1", "dry_run=true"),
                              {"PROOFGRID_PORT_BASE": "abc"}, 2, "PROOFGRID_PORT_BASE"),
        "sweep dir": lambda: (_taken(tmp_path, "under a file"), ("algo=grpo", "seed=1", "dry_run=true"), None, 2,
                              "is a file, not a directory"),
        "manifest": lambda: (tmp_path / "s", ("algo=grpo", "seed=1", "dry_run=true",
                                              f"workload.manifest={_bad_manifest(tmp_path, '[1, 2]')}"),
                             None, 2, "manifest"),
        "slurm": lambda: (tmp_path / "s", ("algo=grpo", "seed=1", "cluster=slurm"), _empty_path(tmp_path), 2, "sbatch"),
        "full disk": lambda: (_full_disk(tmp_path), ("algo=grpo", "seed=1", "dry_run=true"), None, 1, "disk full"),
    }[kind]()
    proc = launch(sweep, *args, env=env)
    assert proc.returncode == code
    _one_line_error(proc, needle)
    assert not (sweep / "jobs").exists() and not (sweep / ".submitit").exists()


@pytest.mark.parametrize("path", ["/tmp/a,b/run", "/tmp/it's/run", "/tmp/é ü/run", "/tmp/x\\y'/run", "/tmp/a\\",
                                  "/tmp/a=b[c]", "/tmp/p-1/x_y.z/run"])
def test_the_run_dir_reaches_the_trainer_exactly_whatever_its_characters(path):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from launcher.job_spec import hydra_value

    (parsed,) = OverridesParser.create().parse_overrides([f"output_dir={hydra_value(path)}"])
    assert not parsed.is_sweep_override() and parsed.value() == path


def test_a_smaller_grid_or_a_plain_sweep_in_an_experiment_stage_is_refused_before_anything_is_written(tmp_path):
    base = ("algo=grpo", "seed=1,2", "workload.n_updates=2", "dry_run=true")
    assert launch_in_process(tmp_path / "s", *base).returncode == 0
    plan = (tmp_path / "s" / "sweep.json").read_bytes()
    proc = launch_in_process(tmp_path / "s", *base[:1], "seed=1", *base[2:])  # a subset of the recorded grid
    assert proc.returncode == 2
    _one_line_error(proc, "holds a sweep of 2 job(s) (grpo-1, grpo-2); this grid is another one (without grpo-2)")
    assert (tmp_path / "s" / "sweep.json").read_bytes() == plan
    (tmp_path / "registration.json").write_text("{}")  # tmp_path is now an experiment, s its stage
    proc = launch_in_process(tmp_path / "s", *base)
    assert proc.returncode == 2
    _one_line_error(proc, "is a stage of the pre-registered experiment")


def test_a_shared_evaluation_or_job_directories_the_launcher_did_not_plan_are_refused(tmp_path):
    """A shared initial evaluation placed in the sweep directory before any job of the sweep ran would be reused
    by every job as if this sweep had computed it (adv B2): refused in one line, before and after the plan."""
    base = ("algo=grpo", "seed=1,2", "workload.n_updates=2", "dry_run=true")
    (tmp_path / "s" / "initial_eval" / "8a2c2e6ac837").mkdir(parents=True)
    (tmp_path / "s" / "initial_eval" / "8a2c2e6ac837" / "eval.json").write_text("{}\n")
    proc = launch_in_process(tmp_path / "s", *base)
    assert proc.returncode == 2
    _one_line_error(proc, "holds initial_eval/ but no sweep.json: this launcher did not plan them")
    assert not (tmp_path / "s" / "sweep.json").exists()
    (tmp_path / "j" / "jobs" / "grpo-1").mkdir(parents=True)
    _one_line_error(launch_in_process(tmp_path / "j", *base), "holds jobs/ but no sweep.json")
    assert launch_in_process(tmp_path / "p", *base).returncode == 0  # planned (sweep.json), no job ran yet
    shutil.copytree(tmp_path / "s" / "initial_eval", tmp_path / "p" / "initial_eval")
    proc = launch_in_process(tmp_path / "p", *base)
    assert proc.returncode == 2
    _one_line_error(proc, "holds initial_eval/ before any job of this sweep ran")


@pytest.mark.parametrize("given", [("workload.n_updates=40", "workload.n_updates=6"),
                                   ("workload.n_updates=6", "workload.n_updates=40", "workload.n_updates=6"),
                                   ("workload.n_updates=40", "++workload.n_updates=6")])
def test_a_setting_given_twice_takes_its_last_value_everywhere(tmp_path, given):
    """Hydra's rule, resolved once by the launcher: the plan, the job's command and sweep.json hold one value."""
    import json

    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", *given, "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    (job,) = [ln for ln in (tmp_path / "s" / "commands.txt").read_text().splitlines() if ln.startswith("[0]")]
    assert job.count("workload.n_updates=") == 1 and "workload.n_updates=6 " in job, job
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["n_updates"] == 6


def test_a_sweep_whose_later_value_overrides_every_value_of_an_earlier_sweep_is_one_line(tmp_path):
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", "workload.lr=1e-4,2e-4", "workload.lr=3e-4",
                             "dry_run=true")
    assert proc.returncode == 2
    _one_line_error(proc, "the grid repeats the cell")


def _model_dir(tmp_path: Path, kind: str) -> Path:
    model = tmp_path / "model"
    toy = REPO_ROOT / "trainer" / "assets" / "toy" / "model"
    if kind == "empty":
        model.mkdir()
    elif kind == "a file":
        model.write_text("not a model\n")
    elif kind == "no weights":
        shutil.copytree(toy, model, ignore=shutil.ignore_patterns("*.safetensors"))
    elif kind == "no tokenizer":
        shutil.copytree(toy, model, ignore=shutil.ignore_patterns("tokenizer*", "vocab*"))
    return model


@pytest.mark.parametrize(("kind", "says"), [
    ("empty", "is not a Hugging Face model directory: it is empty; put the model there and pin it"),
    ("a file", "is a file, not a Hugging Face model directory"),
    ("no weights", "has no weights"),
    ("no tokenizer", "has no tokenizer"),
])
def test_a_model_directory_that_passes_its_pins_but_holds_no_model_is_refused_at_plan_time(tmp_path, kind, says):
    """The pins cover the files a directory has: an empty one (or one cut short) used to pass them and fail at run time."""
    import json

    from tests.sweeps import REPO

    model = _model_dir(tmp_path, kind)
    pinned = json.loads((REPO / "manifests" / "toy.json").read_text())
    files = [f for f in pinned["files"] if not f["path"].startswith("trainer/assets/toy/model/")]
    for f in (sorted(model.rglob("*")) if model.is_dir() else [model]):
        if f.is_file():
            from facts import sha256_file

            files.append({"path": str(f), "size": f.stat().st_size, "sha256": sha256_file(f)})
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"workload": "toy", "files": files}))
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", f"workload.model_path={model}",
                             f"workload.manifest={manifest}", "dry_run=true")
    assert proc.returncode == 2
    _one_line_error(proc, says)


@pytest.mark.parametrize("value", ["", "maybe"])
def test_a_proofgrid_figures_that_is_no_boolean_is_one_line_naming_it_before_hydra_composes(tmp_path, value):
    done = subprocess.run([sys.executable, "launch.py", "-m", "algo=grpo", "seed=1", "dry_run=true",
                           f"hydra.sweep.dir={tmp_path / 'dry'}"], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**os.environ, "PROOFGRID_FIGURES": value})
    assert done.returncode == 2 and done.stderr == (
        f"proofgrid: error: PROOFGRID_FIGURES={value!r}: the default of the launcher's figures= setting must be true "
        "or false; set it so, or unset it\n")
    assert not (tmp_path / "dry").exists()
