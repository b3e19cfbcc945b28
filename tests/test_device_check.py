"""scripts/device_check.sh, checked where there is no GPU: which shipped wheels it installs into an
image like the H200 one, and the whole script in its --cpu-smoke mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from benchmarks.device_wheels import (
    SHIPPED,
    installed_versions,
    installs_on_device,
    plan_installs,
    project_requirements,
)

REPO = Path(__file__).resolve().parent.parent

# name, version, Requires-Dist (the real wheels' requirements, abridged to what the plan looks at)
WHEELS = [
    ("hydra_core", "1.3.8", ["omegaconf<2.4,>=2.2", "antlr4-python3-runtime==4.9.*", "packaging"]),
    ("omegaconf", "2.3.1", ["antlr4-python3-runtime==4.9.*", "PyYAML>=5.1.0"]),
    ("antlr4_python3_runtime", "4.9.3", []),
    ("submitit", "1.5.4", ["cloudpickle>=1.2.1", "typing_extensions>=3.7.4.2"]),
    ("cloudpickle", "3.1.3", []),
    ("bagit", "1.9.0", []),
    ("transformers", "5.24.0", ["huggingface-hub<3.0,>=1.31.0", "numpy>=1.17", "tokenizers<0.24.0,>=0.23.1",
                                "safetensors>=0.8.0", "pyyaml>=5.1", "tqdm>=4.60", "typer",
                                'torch>=2.4; extra == "torch"']),
    ("huggingface_hub", "1.33.0", ["click<9.0.0,>=8.4.2", "httpx<1,>=0.23.0", "tqdm>=4.42.1",
                                   'hf-xet<2.0.0,>=1.6.0; platform_machine == "x86_64"', 'tomli; python_version < "3.0"']),
    ("click", "8.5.1", []),
    ("detect_secrets", "1.5.0", ["pyyaml", "requests"]),
    ("requests", "2.32.5", ["charset_normalizer<4,>=2", "idna<4,>=2.5", "urllib3<3,>=1.21.1", "certifi>=2017.4.17"]),
    ("charset_normalizer", "3.4.4", []),
    ("idna", "3.11", []),
    ("urllib3", "2.5.0", []),
    ("certifi", "2025.11.12", []),
    ("rocrate", "0.16.0", ["requests", "arcp==0.2.1", "jinja2", "python-dateutil", "click",
                           'galaxy2cwl; extra == "ga2cwl"']),
    ("arcp", "0.2.1", []),
    ("python_dateutil", "4.0.0", ["tzdata"]),
    ("tzdata", "2026.1", []),
    ("psutil", "7.1.3", []),
    ("math_verify", "0.9.0", ["latex2sympy2_extended==1.11.0", 'lighteval[math]; extra == "inference"']),
    ("latex2sympy2_extended", "1.11.0", ["sympy", "antlr4-python3-runtime<=4.13.2,>=4.9.3"]),
    ("peft", "0.21.2", ["numpy>=1.17", "packaging>=20.0", "psutil", "pyyaml", "torch>=1.13.0", "transformers", "tqdm",
                        "accelerate>=0.21.0", "safetensors", "huggingface_hub>=0.25.0"]),
    ("accelerate", "1.16.0", ["numpy>=1.17", "packaging>=20.0", "psutil", "pyyaml", "torch>=2.6.0",
                              "huggingface_hub>=0.21.0", "safetensors>=0.4.3"]),
]
SECRET_RULES = {"detect_secrets", "requests", "charset_normalizer", "idna", "urllib3", "certifi"}
RO_CRATE = {"rocrate", "arcp", "python_dateutil", "tzdata", "psutil"}  # and the resource samples' psutil
MATH_VERIFY = {"math_verify", "latex2sympy2_extended"}  # the math_boxed reward (the audit re-scores with it)
LORA = {"peft", "accelerate"}  # workload.lora's adapters
# The H200 image: torch with CUDA, transformers 5.17 and what it needs; no Hydra, submitit, bagit or Ray.
H200_IMAGE = {"torch": "2.11.0", "transformers": "5.17.0", "huggingface-hub": "1.20.0", "tokenizers": "0.23.1",
              "safetensors": "0.8.0", "numpy": "2.3.0", "pyarrow": "21.0.0", "scipy": "1.16.0", "matplotlib": "3.10.0",
              "rich": "14.0.0", "tensorboard": "2.20.0", "pytest": "8.4.0", "packaging": "25.0", "pyyaml": "6.0.2",
              "tqdm": "4.67.0", "typer": "0.20.0", "click": "8.1.8", "httpx": "0.28.1", "hf-xet": "1.2.0",
              "typing-extensions": "4.15.0", "jinja2": "3.1.6", "markupsafe": "3.0.2",  # jinja2: torch requires it
              "sympy": "1.14.0"}  # torch requires it too


def make_wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    """A minimal but real wheel file: the metadata the plan reads."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    meta = "Metadata-Version: 2.1\n" f"Name: {name}\n" f"Version: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", meta)
    return path


@pytest.fixture
def wheels(tmp_path) -> list[Path]:
    return [make_wheel(tmp_path, *spec) for spec in WHEELS]


def image(**changes) -> dict[str, Version]:
    return {k: Version(v) for k, v in {**H200_IMAGE, **changes}.items() if v is not None}


def names(chosen: list[Path]) -> set[str]:
    return {p.name.split("-")[0] for p in chosen}


def test_the_h200_image_gets_the_missing_and_too_old_wheels_and_nothing_it_has(wheels):
    chosen, problems, notes = plan_installs(wheels, image(), project_requirements())
    # hydra & co. are missing; transformers 5.17 is below the floor; its hub 1.20 is below what
    # transformers 5.24 needs, and the image's click 8.1.8 below what that hub needs.
    assert names(chosen) == {"hydra_core", "omegaconf", "antlr4_python3_runtime", "submitit", "cloudpickle", "bagit",
                             "transformers", "huggingface_hub", "click"} | SECRET_RULES | RO_CRATE | MATH_VERIFY | LORA
    assert problems == []
    # hf-xet (downloads only) is kept at the image's version, and the output says so.
    expected = ["huggingface_hub-1.33.0-py3-none-any.whl asks for hf-xet<2.0.0,>=1.6.0; platform_machine == "
                '"x86_64"; keeping the installed 1.2.0']
    assert notes == (expected if os.uname().machine == "x86_64" else [])


def test_an_image_that_already_has_recent_enough_versions_gets_only_what_it_lacks(wheels):
    chosen, problems, _ = plan_installs(wheels, image(transformers="5.24.0", **{"huggingface-hub": "1.33.0",
                                                                             "hf-xet": "1.8.0"}),
                                     project_requirements())
    assert names(chosen) == {"hydra_core", "omegaconf", "antlr4_python3_runtime", "submitit", "cloudpickle",
                             "bagit"} | SECRET_RULES | RO_CRATE | MATH_VERIFY | LORA
    assert problems == []


def test_this_venv_needs_nothing(wheels):
    chosen, problems, notes = plan_installs(wheels, installed_versions(), project_requirements())
    assert chosen == [] and problems == [] and notes == []


def test_a_dependency_neither_installed_nor_shipped_is_named(wheels):
    without_bagit = [w for w in wheels if not w.name.startswith("bagit")]
    _, problems, _ = plan_installs(without_bagit, image(), project_requirements())
    assert any(p.startswith("bagit>=") and "not installed, and no wheel shipped" in p for p in problems), problems


def test_ray_and_torch_are_never_installed_on_the_device():
    declared = (REPO / "pyproject.toml").read_text()
    assert '"ray>=' in declared and '"torch>=' in declared  # declared, and left out below
    wanted = {r.name.lower() for r in project_requirements()}
    assert not wanted & {"ray", "torch"}
    assert {"hydra-core", "omegaconf", "submitit", "bagit", "transformers"} <= wanted


@pytest.mark.slow
def test_cpu_smoke_runs_the_whole_check_and_writes_its_figures(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(["bash", "scripts/device_check.sh", "--cpu-smoke", "--steps", "2", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "skipped (--cpu-smoke)" in proc.stdout
    figures = json.loads((out / "device_check.json").read_text())
    assert figures["mode"] == "cpu-smoke" and figures["weights"].startswith("RANDOM")
    assert figures["geometry"] == {"prompts_per_step": 2, "n_samples_per_prompt": 2, "max_response_len": 8,
                                   "dtype": "float32", "device": "cpu"}
    assert len(figures["steps"]) == 2 and figures["summary"]["steps_measured"] == 1
    summary = figures["summary"]
    assert summary["response_tok_per_s_of_step_time"] > 0 and summary["s_per_step_median"] > 0
    assert "reference" not in summary  # seed 000's A40 figure is no yardstick for the smoke model
    assert figures["cuda_tests"] == "not run"
    assert not (REPO / "models" / "qwen3-0p6b-random-init").exists()  # the random model is removed


def test_an_unknown_argument_is_one_line_naming_the_choices():
    proc = subprocess.run(["bash", "scripts/device_check.sh", "--gpu"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("device_check: error: unknown argument '--gpu'; use --out DIR, --steps N, "
                                   "--budget-s S, --cpu-smoke")


@pytest.mark.parametrize(("wheel", "installs"), [
    ("charset_normalizer-3.5.3-cp311-cp311-manylinux_2_28_x86_64.whl", False),  # this machine's Python, not the image's
    ("charset_normalizer-3.5.3-cp312-cp312-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl", True),
    ("psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.manylinux_2_12_x86_64.manylinux_2_28_x86_64.whl", True),
    ("psutil-7.2.2-cp36-abi3-macosx_10_9_x86_64.whl", False),
    ("numpy-2.5.2-cp312-cp312-manylinux_2_28_aarch64.whl", False),
    ("transformers-5.24.0-py3-none-any.whl", True),
    ("arcp-0.2.1-py2.py3-none-any.whl", True),
    ("tokenizers-0.23.2-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
])
def test_a_wheel_ships_only_if_the_images_python_312_on_x86_64_linux_installs_it(wheel, installs):
    assert installs_on_device(wheel) is installs


def test_the_shipped_transformers_is_one_the_images_huggingface_hub_1_x_runs():
    """transformers 5.25 requires huggingface-hub >= 2.4 (and httpx2) and kernels, which the image lacks."""
    from packaging.specifiers import SpecifierSet

    shipped = SpecifierSet(SHIPPED["transformers"])
    assert "5.25.0" not in shipped and "5.24.0" in shipped and "5.19.0" not in shipped
    assert "2.4.0" not in SpecifierSet(SHIPPED["huggingface-hub"])


@pytest.mark.slow
@pytest.mark.rehearsal
def test_the_rehearsal_installs_imports_and_smokes_the_check_on_emulations_of_the_image():
    """``make device-rehearsal``: wheels/device filled for Python 3.12, installed into an emulation of the image
    (Python 3.12, the image's versions, no torch) as the GPU machine's check installs them, imported there, and
    the whole check's --cpu-smoke run on this Python with the CPU torch and the image's other versions. The
    emulations are built from PyPI the first time (minutes) and kept in .device-image/ after."""
    proc = subprocess.run(["make", "device-rehearsal"], cwd=REPO, capture_output=True, text=True, timeout=3600)
    tail = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, tail
    out = proc.stdout
    assert "device_rehearsal: passed" in out, tail
    first = next(line for line in out.splitlines() if line.startswith("device_wheels: installing"))
    # the image lacks Hydra & co. and runs transformers 5.17 (refused): those come from the folder; its
    # huggingface-hub 1.33 and tokenizers 0.23.2 stay
    for name in ("hydra_core", "omegaconf", "antlr4_python3_runtime", "submitit", "bagit", "transformers-5.24"):
        assert name in first, first
    assert "huggingface_hub" not in first and "tokenizers" not in first and "cp311" not in out
    assert "device_wheels: the image already has every dependency; nothing to install" in out
    figures = json.loads((REPO / ".device-image" / "out" / "device_check.json").read_text())
    assert figures["mode"] == "cpu-smoke" and figures["summary"]["steps_measured"] == 1
