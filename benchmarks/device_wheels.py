"""The wheels a GPU machine without network needs, fetched here and installed there.

``python -m benchmarks.device_wheels fill wheels/device`` (here, with network; ``make device-wheels``)
downloads one wheel per distribution in ``SHIPPED`` for the lent image's Python (``DEVICE_PYTHON``,
x86_64 Linux), at the version this checkout's venv runs unless ``SHIPPED`` says otherwise, into a
git-ignored folder that travels with the tree: a binary wheel for that Python (cp312, abi3) or a
pure one (py3-none-any), built here from the source only where it is pure. ``make device-rehearsal``
(scripts/device_rehearsal.sh) installs the folder into an emulation of the image
(benchmarks/device_image.txt) as the GPU machine will. ``python -m benchmarks.device_wheels
install wheels/device SITE`` (there, by scripts/device_check.sh) installs into ``SITE`` only the
shipped wheels the image needs: a project dependency that is missing or whose installed version
pyproject.toml refuses, and then whatever an installed wheel itself requires that the image cannot
satisfy. Only the standard library and ``packaging`` (a transformers dependency) are used, so this
runs before anything is installed. Ray is not shipped: the GPU path scores rewards in process.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from facts.repo import REPO_ROOT

REPO = REPO_ROOT
# The lent image's interpreter and platform (benchmarks/device_image.txt lists its packages): every shipped
# wheel must install there, whatever Python fills the folder.
DEVICE_PYTHON = (3, 12)
DEVICE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                    "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64")
# Distribution -> version specifier for `fill` ("" = the version this venv runs). The image has
# huggingface-hub 1.33 and neither httpx2 nor kernels: transformers 5.25 requires huggingface-hub >= 2.4
# (which pulls in httpx2) and kernels, so the newest transformers that runs on the image's hub is
# shipped (5.24; the rehearsal trains on it), and huggingface-hub stays on 1.x for images with an older one.
SHIPPED = {
    "hydra-core": "", "omegaconf": "", "antlr4-python3-runtime": "", "submitit": "", "cloudpickle": "",
    "bagit": "", "transformers": ">=5.20,<5.25", "huggingface-hub": ">=1.31,<2", "click": "",
    # the evidence's secret rule set and what it needs (pure Python)
    "detect-secrets": "", "requests": "", "charset-normalizer": "", "idna": "", "urllib3": "", "certifi": "",
    # the bundle's RO-Crate and what it needs beyond the above and what torch brings (jinja2)
    "rocrate": "", "arcp": "", "python-dateutil": "", "tzdata": "",
    # the job runtime's resource samples (psutil's wheel is abi3: any CPython >= 3.6 on x86_64 Linux)
    "psutil": "",
    # workload.lora's adapters (peft) and what peft needs beyond the above and what torch brings (accelerate)
    "peft": "", "accelerate": "",
    # the math_boxed reward's checker (math-verify) and its LaTeX parser (pure Python; sympy comes with torch)
    "math-verify": "", "latex2sympy2-extended": "",
}
# Ray: not on the GPU path; torch: the image's CUDA build stays; the signing library: a device trains and
# seals, it never signs or verifies (the audit loads it only for a signed bundle or a given key).
NOT_ON_THE_DEVICE = {"ray", "torch", "securesystemslib", "cryptography"}
MAX_TOTAL_BYTES = 32 << 20  # the whole tree sent to the device machine must stay under 64 MiB


def project_requirements(pyproject: Path = REPO / "pyproject.toml") -> list[Requirement]:
    """The ``[project] dependencies`` of pyproject.toml and its ``train`` extra (the launcher's and the
    trainer's), less the ones the device never installs."""
    text = pyproject.read_text()
    blocks = [re.search(rf"^{name} = \[(.*?)^\]", text, re.S | re.M).group(1) for name in ("dependencies", "train")]
    reqs = [Requirement(m) for block in blocks for m in re.findall(r'^\s*"([^"]+)"', block, re.M)]
    return [r for r in reqs if canonicalize_name(r.name) not in NOT_ON_THE_DEVICE]


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The unconditional (and marker-true) ``Requires-Dist`` of a wheel, extras left out."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(name).decode())
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def installed_versions() -> dict[str, Version]:
    """Each distribution's version as an import finds it: the first on ``sys.path`` (a shipped wheel in
    the site that PYTHONPATH puts first wins over the image's older copy, which comes later)."""
    out = {}
    for dist in metadata.distributions():
        try:
            out.setdefault(canonicalize_name(dist.metadata["Name"]), Version(dist.version))
        except (TypeError, ValueError):  # a broken or nameless record
            continue
    return out


def plan_installs(wheels: list[Path], installed: dict[str, Version],
                  wanted: list[Requirement]) -> tuple[list[Path], list[str], list[str]]:
    """Which shipped wheels to install so that ``wanted`` and the chosen wheels' own requirements
    hold: ``(wheels, problems, notes)``. A problem is a requirement that neither the image nor a
    shipped wheel meets; a note is a chosen wheel's requirement on a distribution the image has in
    another version (e.g. huggingface-hub's on hf-xet, which only downloads use): kept, and said."""
    shipped = {canonicalize_name(parse_wheel_filename(w.name)[0]): w for w in wheels}
    chosen: dict[str, Path] = {}
    problems: list[str] = []
    notes: list[str] = []
    queue = [(req, None) for req in wanted]
    while queue:
        req, wanted_by = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in NOT_ON_THE_DEVICE and name not in shipped:
            continue
        if name in chosen:
            version = parse_wheel_filename(chosen[name].name)[1]
            if not req.specifier.contains(version, prereleases=True):
                problems.append(f"{req} is not met by the shipped {chosen[name].name}")
            continue
        if name in installed and req.specifier.contains(installed[name], prereleases=True):
            continue
        wheel = shipped.get(name)
        if wheel is None or not req.specifier.contains(parse_wheel_filename(wheel.name)[1], prereleases=True):
            if wanted_by is not None and name in installed:
                notes.append(f"{wanted_by} asks for {req}; keeping the installed {installed[name]}")
                continue
            have = f"installed {installed[name]}" if name in installed else "not installed"
            problems.append(f"{req}: {have}, and {'the shipped wheel does not match' if wheel else 'no wheel shipped'}")
            continue
        chosen[name] = wheel
        queue.extend((r, wheel.name) for r in wheel_requirements(wheel))
    return sorted(chosen.values()), problems, notes


def device_tags(python: tuple[int, int] = DEVICE_PYTHON, platforms=DEVICE_PLATFORMS) -> frozenset:
    """The wheel tags the image's CPython installs (its own ABI, abi3, none; pure wheels)."""
    abi = f"cp{python[0]}{python[1]}"
    return frozenset([*cpython_tags(python, [abi], platforms), *compatible_tags(python, abi, platforms)])


def installs_on_device(wheel_name: str, tags: frozenset | None = None) -> bool:
    return bool(parse_wheel_filename(wheel_name)[3] & (device_tags() if tags is None else tags))


def shipped_specs() -> list[str]:
    return [f"{name}{pin}" if pin else f"{name}=={metadata.version(name)}" for name, pin in SHIPPED.items()]


def fill(dest: Path) -> int:
    """Download the shipped wheels for the image's Python and platform (``pip download --no-deps``); a
    distribution published only as source is built here, and kept only if its wheel is pure. The folder's
    earlier wheels are replaced, so a wheel of another version or Python cannot linger beside the new one."""
    py = f"{DEVICE_PYTHON[0]}.{DEVICE_PYTHON[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        got = Path(tmp) / "got"
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run([*pip, "download", "--no-deps", "--python-version", py, "--implementation", "cp",
                        "--abi", f"cp{py.replace('.', '')}", *(f"--platform={p}" for p in DEVICE_PLATFORMS),
                        "--dest", str(got), *shipped_specs()], check=True)
        sources = [p for p in got.iterdir() if not p.name.endswith(".whl")]
        if sources:
            subprocess.run([*pip, "wheel", "--no-deps", "--wheel-dir", str(got), *map(str, sources)], check=True)
        wheels = sorted(got.glob("*.whl"))
        foreign = [w.name for w in wheels if not installs_on_device(w.name)]
        if foreign:
            print(f"device_wheels: error: {', '.join(foreign)} cannot install on the image's Python {py} "
                  "(x86_64 Linux); pin a version published as a cp312, abi3 or pure wheel in SHIPPED",
                  file=sys.stderr)
            return 1
        total = sum(w.stat().st_size for w in wheels)
        if total > MAX_TOTAL_BYTES:
            print(f"device_wheels: error: {total / 2**20:.1f} MiB is over the {MAX_TOTAL_BYTES >> 20} MiB "
                  "allowance for wheels; ship fewer or smaller ones", file=sys.stderr)
            return 1
        dest.mkdir(parents=True, exist_ok=True)
        for old in dest.glob("*.whl"):
            old.unlink()
        for w in wheels:
            w.rename(dest / w.name)
    for w in sorted(dest.glob("*.whl")):
        print(f"{w.stat().st_size / 2**20:6.2f} MiB  {w.name}")
    print(f"{total / 2**20:6.2f} MiB  in {len(wheels)} wheels for CPython {py} ({dest})")
    return 0


def install(source: Path, site: Path) -> int:
    """Install what the image lacks into ``site`` (``pip install --target``, offline, no resolver:
    the plan above already chose every wheel)."""
    wheels, problems, notes = plan_installs(sorted(source.glob("*.whl")), installed_versions(), project_requirements())
    for note in notes:
        print(f"device_wheels: note: {note}")
    for problem in problems:
        print(f"device_wheels: error: {problem}", file=sys.stderr)
    if problems:
        return 1
    if not wheels:
        print("device_wheels: the image already has every dependency; nothing to install")
        return 0
    print("device_wheels: installing " + ", ".join(w.name for w in wheels))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                    "--disable-pip-version-check", "-q", "--target", str(site), *map(str, wheels)], check=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("fill", help="fetch the wheels here").add_argument("dest", type=Path)
    inst = sub.add_parser("install", help="install what the image lacks")
    inst.add_argument("source", type=Path)
    inst.add_argument("site", type=Path)
    args = ap.parse_args(argv)
    if args.command == "fill":
        return fill(args.dest)
    if not args.source.is_dir():
        _, problems, _ = plan_installs([], installed_versions(), project_requirements())
        if not problems:
            print("device_wheels: the image already has every dependency; nothing to install")
            return 0
        print(f"device_wheels: error: {args.source} is missing and the image lacks dependencies; run "
              "`make device-wheels` where there is network and send the folder with the tree", file=sys.stderr)
        return 1
    return install(args.source, args.site)


if __name__ == "__main__":
    sys.exit(main())
