"""The pure-Python wheels a GPU machine without network needs, fetched here and installed there.

``python -m benchmarks.device_wheels fill wheels/device`` (here, with network; ``make device-wheels``)
builds or downloads one wheel per distribution in ``SHIPPED``, at the version this checkout's venv
runs, into a git-ignored folder that travels with the tree. ``python -m benchmarks.device_wheels
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
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from facts.repo import REPO_ROOT

REPO = REPO_ROOT
# Distribution -> version specifier for `fill` ("" = the version this venv runs). huggingface-hub
# stays on 1.x: 2.x pulls in httpx2, which such images lack; transformers accepts both.
SHIPPED = {
    "hydra-core": "", "omegaconf": "", "antlr4-python3-runtime": "", "submitit": "", "cloudpickle": "",
    "bagit": "", "transformers": "", "huggingface-hub": ">=1.31,<2", "click": "",
    # the evidence's secret rule set and what it needs (pure Python)
    "detect-secrets": "", "requests": "", "charset-normalizer": "", "idna": "", "urllib3": "", "certifi": "",
    # the bundle's RO-Crate and what it needs beyond the above and what torch brings (jinja2)
    "rocrate": "", "arcp": "", "python-dateutil": "", "tzdata": "",
    # the job runtime's resource samples: psutil's one compiled wheel is abi3 (any CPython >= 3.6 on the
    # same platform as this machine's, x86_64 Linux like the lent GPU machine)
    "psutil": "",
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
    out = {}
    for dist in metadata.distributions():
        try:
            out[canonicalize_name(dist.metadata["Name"])] = Version(dist.version)
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


def fill(dest: Path) -> int:
    """Build or download the shipped wheels (``pip wheel --no-deps``) at this venv's versions."""
    dest.mkdir(parents=True, exist_ok=True)
    specs = []
    for name, pin in SHIPPED.items():
        specs.append(f"{name}{pin}" if pin else f"{name}=={metadata.version(name)}")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
                    "--wheel-dir", str(dest), *specs], check=True)
    wheels = sorted(dest.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    for w in wheels:
        print(f"{w.stat().st_size / 2**20:6.2f} MiB  {w.name}")
    print(f"{total / 2**20:6.2f} MiB  in {len(wheels)} wheels ({dest})")
    if total > MAX_TOTAL_BYTES:
        print(f"device_wheels: error: {total / 2**20:.1f} MiB is over the {MAX_TOTAL_BYTES >> 20} MiB "
              "allowance for wheels; ship fewer or smaller ones", file=sys.stderr)
        return 1
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
