"""The ``proofgrid`` console command and the reviewer's install.

``proofgrid <command>`` runs the entry point it names with the remaining arguments (``python launch.py``,
``python -m launcher``, ``python -m evidence``), which keep working; its audit imports neither the
trainer, the launcher nor their libraries; and a clean venv with only ``pip install proofgrid`` (the
evidence's dependencies, no ``train`` extra) audits a real bundle."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep
from evidence import build_bundle
from tests.sweeps import GRID, REPO

PROOFGRID = Path(sys.executable).with_name("proofgrid")  # the console script `make venv` installs
GOLDEN = REPO / "tests" / "golden" / "dry_run_3x3.txt"
COMMANDS = ("run", "status", "cancel", "build", "audit", "validate", "compare", "export", "sign")
# What a reviewer's audit must not need (nor import): the training stack, and proofgrid's own upper rooms.
TRAINING_STACK = ("torch", "transformers", "ray", "hydra", "omegaconf", "submitit", "tensorboard", "safetensors",
                  "tokenizers", "launcher", "trainer")


def proofgrid(*args, executable: Path = PROOFGRID, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(executable), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A real bundle archive of a 2 x 2 synthetic sweep, built with its figures."""
    sweep = make_sweep(tmp_path_factory.mktemp("console"), algos=("grpo", "rpp"), seeds=(1, 2), figures=True)
    return build_bundle(sweep).archive


def test_help_lists_every_command():
    result = proofgrid("--help")
    assert result.returncode == 0 and result.stderr == ""
    listed = re.findall(r"^  (\w+) ", result.stdout, re.M)
    assert listed == [*COMMANDS] and "sign" in listed


def test_sign_signs_and_audit_verifies_through_the_console_command(bundle, tmp_path):
    key = tmp_path / "lab"
    assert proofgrid("sign", "--generate-key", key).returncode == 0
    signed = tmp_path / bundle.name
    shutil.copy(bundle, signed)
    made = proofgrid("sign", signed, "--key", key)
    assert made.returncode == 0, made.stderr
    audit = proofgrid("audit", signed, "--public-key", f"{key}.pub")
    assert audit.returncode == 0 and audit.stdout.splitlines()[0].startswith("signature: verified"), audit.stdout


@pytest.mark.parametrize("args", [("sgin", "bundle.tar.gz"), ("sing",)])
def test_an_unknown_command_is_one_line(args):
    result = proofgrid(*args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"proofgrid: error: unknown command {args[0]!r}; the commands are "
                             f"{', '.join(COMMANDS)} (proofgrid --help)\n")


@pytest.mark.slow  # four interpreter starts, each loading the evidence
def test_the_evidence_commands_are_python_m_evidence_with_the_same_output(bundle):
    for command in (("audit", bundle), ("compare", bundle, bundle)):
        console = proofgrid(*command)
        module = subprocess.run([sys.executable, "-m", "evidence", *map(str, command)], cwd=REPO,
                                capture_output=True, text=True, timeout=300)
        assert console.returncode == module.returncode == 0, console.stderr
        assert console.stdout == module.stdout
    assert proofgrid("audit", bundle).stdout.splitlines()[-1] == "clean"
    missing = proofgrid("audit", "no-such.tar.gz")
    assert missing.returncode == 2 and missing.stderr.startswith("proofgrid: error: ")
    assert missing.stderr.count("\n") == 1


def test_proofgrid_audit_of_a_sweep_directory_audits_its_bundle_and_names_its_own_commands(bundle, tmp_path):
    """Issue 36 section 5: ``proofgrid audit <sweep dir>`` audits the sweep's bundle (and says which); a sweep not
    sealed yet is one line naming ``proofgrid build`` and ``proofgrid audit``, as the user types them."""
    sweep = bundle.parent
    audited = proofgrid("audit", sweep)
    assert audited.returncode == 0, audited.stderr
    assert audited.stdout.splitlines()[0] == f"auditing {bundle}, the bundle of the sweep {sweep}"
    assert audited.stdout.splitlines()[-1] == "clean"
    fresh = make_sweep(tmp_path / "fresh", algos=("grpo",), seeds=(1,))
    refused = proofgrid("audit", fresh)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"seal it first: proofgrid build {fresh}, then proofgrid audit {fresh}/bundle.tar.gz" in refused.stderr
    assert "python -m evidence" not in refused.stderr


def test_status_is_python_m_launcher_status(bundle):
    sweep = bundle.parent
    console, module = proofgrid("status", sweep), subprocess.run(
        [sys.executable, "-m", "launcher", "status", str(sweep)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert console.returncode == module.returncode and console.stdout == module.stdout
    assert "grpo-1" in console.stdout
    usage = proofgrid("status")
    assert usage.returncode == 2 and usage.stderr == "proofgrid: error: usage: proofgrid status <sweep_dir>\n"


def imported_modules(stderr: str) -> set[str]:
    """Top-level names of every module ``python -X importtime`` reports."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the header line
                names.add(name.split(".")[0])
    return names


def test_the_audit_imports_no_trainer_launcher_torch_transformers_or_ray(bundle):
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "proofgrid", "audit", str(bundle)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    imported = imported_modules(result.stderr)
    assert {"evidence", "bagit", "facts"} <= imported  # the probe sees the audit's own imports
    assert not imported & set(TRAINING_STACK), sorted(imported & set(TRAINING_STACK))


@pytest.mark.slow
def test_proofgrid_run_is_launch_py_the_dry_run_matches_the_golden(tmp_path):
    result = proofgrid("run", "-m", *GRID, "dry_run=true", f"hydra.sweep.dir={tmp_path / 'dry'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("[", "# sbatch", "# estimate", "# env"))]
    assert lines == GOLDEN.read_text().splitlines()
    typo = proofgrid("run", "-m", "algo=grpo", "seeed=1", "dry_run=true", f"hydra.sweep.dir={tmp_path / 'typo'}",
                     cwd=tmp_path)
    launch_py = subprocess.run([sys.executable, "launch.py", "-m", "algo=grpo", "seeed=1", "dry_run=true",
                                f"hydra.sweep.dir={tmp_path / 'typo2'}"], cwd=REPO, capture_output=True, text=True,
                               timeout=300)
    assert typo.returncode == launch_py.returncode == 2 and typo.stderr == launch_py.stderr


def tracked_sources(dest: Path) -> Path:
    """A copy of the files the package is built from (git's tracked files and this tree's own), so the
    build writes nothing into the checkout."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dest / name)
    import tomllib

    found = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in (pattern.rstrip("*") for pattern in found):  # every package the wheel is built from
        shutil.copytree(REPO / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.mark.slow
def test_a_clean_venv_with_only_the_reviewers_install_audits_a_real_bundle(bundle, tmp_path):
    # The package as a wheel (built here with this venv's setuptools, so the test pays no isolated build),
    # installed with its declared dependencies only into a fresh venv that has nothing else.
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(tracked_sources(tmp_path / "src"))],
                   check=True, capture_output=True, timeout=300)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    (wheel,) = wheels.glob("proofgrid-*.whl")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                              "--disable-pip-version-check", "--no-compile", str(wheel)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "list", "--format=freeze"],
                               capture_output=True, text=True, check=True).stdout.lower()
    names = {line.split("==")[0].replace("_", "-") for line in installed.splitlines()}
    assert "proofgrid" in names and not names & {"torch", "transformers", "ray", "hydra-core", "submitit",
                                                 "tensorboard", "pandas", "wandb", "mlflow-skinny"}

    console = venv / "bin" / "proofgrid"
    audit = proofgrid("audit", bundle, executable=console, cwd=tmp_path)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert audit.stdout.splitlines()[-1] == "clean"
    tampered = tmp_path / "tampered"
    shutil.copytree(bundle.parent / "bundle", tampered)
    steps = tampered / "data" / "steps.csv"
    steps.write_text(steps.read_text().replace("0.", "0.9", 1))
    found = proofgrid("audit", tampered, executable=console, cwd=tmp_path)
    assert found.returncode == 1 and "data/steps.csv" in found.stdout

    run = proofgrid("run", "-m", "algo=grpo", "seed=1", executable=console, cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert run.stderr.startswith("proofgrid: error: proofgrid run needs the training install (Hydra, torch)")
    export = proofgrid("export", "--to", "wandb", bundle, executable=console, cwd=tmp_path)
    assert export.returncode == 2 and export.stderr == (
        "proofgrid: error: export --to wandb needs the wandb library, which is not installed: "
        "pip install -e \".[export]\" (in a checkout: make export)\n")
    loaded = subprocess.run([str(python), "-c", "import evidence; r = evidence.load(__import__('sys').argv[1]); "
                             "print(r.steps.num_rows)\ntry:\n    r.to_pandas('steps')\n"
                             "except evidence.EvidenceError as exc:\n    print(exc)", str(bundle)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert loaded.stdout.splitlines() == ["40", "to_pandas needs pandas, which is not installed: pip install pandas"]
