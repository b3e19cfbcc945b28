"""``python -m launcher.runtime.inside --job-dir D --record-dir R [--write W ...] [--preflight] -- COMMAND...``:
what runs first inside a job's container image, then becomes ``COMMAND`` (``launcher.container``).

With ``--preflight`` (the trainer's command) it records and checks what seed 000's container wrapper did before
the recipe ran, in ``<R>/container_preflight.json`` (path-free: ``<REPO>``, ``<PREFIX>``, ``<BASE_PREFIX>``):

- the source commit of the checkout the image sees, which must be the one the launcher planned with;
- the Python that runs (executable, version, prefixes) with the user site off (``PYTHONNOUSERSITE=1``), and the
  file each of the job's modules is imported from: proofgrid's own must come from the bound checkout;
- the job's input files, each hashed as the image sees it, which must match their pins;
- the visible accelerators (``nvidia-smi``, ``CUDA_VISIBLE_DEVICES``), which must hold the model the profile names.

A failed check writes its reason there and exits ``PREFLIGHT_FAILED`` with one line on stderr (the trainer's log),
before the command starts. Then, with or without the preflight, the process holds itself to the job's write roots
with Landlock (``WriteGuard``: what the runtime does on the host, done here because the container runtime must
mount, which Landlock forbids) and ``exec``s ``COMMAND``: its processes stay the runtime's descendants.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from facts import atomic_write_json, sha256_file
from facts.containers import CONTAINER_PREFLIGHT
from facts.files import JOB_SPEC
from facts.repo import REPO_ROOT
from launcher.job_spec import JobSpec
from launcher.runtime.confine import WriteGuard

PREFLIGHT_FAILED = 3
# The modules whose files the record names: proofgrid's own (which must be the checkout's) and the stack's.
OWN_MODULES = ("trainer", "launcher", "facts", "evidence")
STACK_MODULES = ("torch", "transformers", "numpy", "omegaconf", "hydra", "ray", "vllm")


def _commit_of(repo: Path) -> str | None:
    """The checkout's HEAD commit, read from its git files (the image needs no git)."""
    dot_git = repo / ".git"
    try:
        gitdir = dot_git if dot_git.is_dir() else (repo / dot_git.read_text().split(":", 1)[1].strip()).resolve()
        common = gitdir / (gitdir / "commondir").read_text().strip() if (gitdir / "commondir").is_file() else gitdir
        head = (gitdir / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(":", 1)[1].strip()
        for base in (gitdir, common):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()
        packed = common / "packed-refs"
        for line in packed.read_text().splitlines() if packed.is_file() else []:
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    except (OSError, IndexError):
        return None
    return None


def _shown(path: str | None) -> str | None:
    """A path as the record shows it: below the checkout, the venv's prefix or the interpreter's base prefix."""
    if path is None:
        return None
    for root, name in ((str(REPO_ROOT), "<REPO>"), (sys.prefix, "<PREFIX>"), (sys.base_prefix, "<BASE_PREFIX>")):
        if path == root or path.startswith(root + os.sep):
            return name + path[len(root):]
    return f"<IMAGE>/{Path(path).name}"


def _module_file(name: str) -> str | None:
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return None if found is None else (found.origin if found.origin not in (None, "namespace") else
                                       next(iter(found.submodule_search_locations or []), None))


def _accelerators() -> dict:
    names: list[str] = []
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
        names = [n.strip() for n in out.stdout.splitlines() if n.strip()] if out.returncode == 0 else []
    return {"gpus": names, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}


def preflight(spec: JobSpec) -> tuple[dict, str | None]:
    """What the image shows the job, and the first check it fails (None: all pass)."""
    commit = _commit_of(REPO_ROOT)
    modules = {name: _module_file(name) for name in (*OWN_MODULES, *STACK_MODULES)}
    inputs = {}
    problems = []
    for rel, pinned in sorted((spec.container.get("inputs") or {}).items()):
        path = REPO_ROOT / rel if not Path(rel).is_absolute() else Path(rel)
        actual = sha256_file(path) if path.is_file() else None
        inputs[rel] = actual
        if actual != pinned:
            problems.append(f"input {rel} is {'missing' if actual is None else f'SHA256 {actual}'} in the image, "
                            f"pinned {pinned}; bind its directory (cluster.container.mounts)")
    accelerators = _accelerators()
    record = {
        "source_commit": commit,
        "python": {"executable": _shown(sys.executable), "version": sys.version.split()[0],
                   "prefix": _shown(sys.prefix), "base_prefix": _shown(sys.base_prefix),
                   "user_site": bool(site.ENABLE_USER_SITE), "PYTHONNOUSERSITE": os.environ.get("PYTHONNOUSERSITE")},
        "modules": {name: _shown(path) for name, path in modules.items() if path is not None},
        "inputs": inputs,
        "accelerators": accelerators,
    }
    if spec.source_commit and commit != spec.source_commit:
        problems.insert(0, f"the checkout in the image is at {commit or 'no readable commit'}, the launcher planned "
                           f"{spec.source_commit}; bind the checkout the sweep was planned from")
    if site.ENABLE_USER_SITE or os.environ.get("PYTHONNOUSERSITE") != "1":
        problems.append("the user site is on in the image (PYTHONNOUSERSITE is not 1): a package under ~/.local "
                        "could shadow the image's")
    for name in OWN_MODULES[:3]:
        where = modules.get(name)
        if where is None or not Path(where).is_relative_to(REPO_ROOT):
            problems.append(f"module {name} is imported from {_shown(where) or 'nowhere'}, not from the bound checkout "
                            "<REPO>; remove the image's copy or fix cluster.container.python")
    model = spec.gpu_model
    if model and not any(model.lower() in n.lower() for n in accelerators["gpus"]):
        problems.append(f"the job asked for a {model} GPU but the image sees {', '.join(accelerators['gpus']) or 'none'}; "
                        "run with the runtime's GPU option (apptainer --nv, podman --device)")
    return record, (problems[0] if problems else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.runtime.inside")
    parser.add_argument("--job-dir", required=True)
    parser.add_argument("--record-dir", required=True)
    parser.add_argument("--write", action="append", default=[])
    parser.add_argument("--preflight", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    guard = WriteGuard([Path(w) for w in args.write])
    writes = guard.describe(Path(args.job_dir))
    if args.preflight:
        spec = JobSpec.from_json((Path(args.job_dir) / JOB_SPEC).read_text())
        record, failure = preflight(spec)
        atomic_write_json(Path(args.record_dir) / CONTAINER_PREFLIGHT, {**record, "writes": writes, "failure": failure})
        if failure:
            print(f"proofgrid container preflight: {failure}", file=sys.stderr, flush=True)
            return PREFLIGHT_FAILED
    guard.restrict()
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
