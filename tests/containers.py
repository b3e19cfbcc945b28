"""The container test bed: a real OCI image built here from what this machine has, and a Podman configuration
that runs on this machine's cgroup v1 layout.

The image holds the interpreter the checkout's venv runs on (``sys.base_prefix``, without its own site-packages
and test suite) and the shared libraries that it, its extension modules and the venv's packages load (found with
``ldd``); the checkout (with its ``.venv``) is bound into it at the same path by the job, as at a site whose
image holds the stack and whose checkout is bind-mounted. It is imported with ``podman import`` and saved as an
OCI archive (``podman save --format oci-archive``): the file whose SHA256 a profile pins. Nothing is downloaded.

Podman here: Debian's 4.3 with crun fails on this machine's hybrid cgroup layout (a cgroup v2 controller,
hugetlb, beside the v1 hierarchies), so the configuration names runc with the cgroupfs manager and the host's
cgroup namespace; the machine's root lacks CAP_SYS_RESOURCE, so the default ulimits are set at or below the
current ones (runc sets them, and raising is refused). The storage is the test's own directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# What the image leaves out of the interpreter's tree: its own packages (the checkout's venv has the job's), its
# test suite and tools the job never loads.
SKIPPED = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data"}
NOFILE_NPROC = 4096  # the image's ulimits (at or below this machine's; see the module docstring)


def podman_missing() -> str | None:
    """Why the test bed cannot run here (``scripts/containers.sh install`` installs what it needs), or None."""
    missing = [tool for tool in ("podman", "runc") if shutil.which(tool) is None]
    return f"{', '.join(missing)} not installed: run `bash scripts/containers.sh install`" if missing else None


def podman_env(root: Path) -> dict[str, str]:
    """``CONTAINERS_CONF`` and ``CONTAINERS_STORAGE_CONF`` of a Podman that runs here, its storage below ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    conf, storage = root / "containers.conf", root / "storage.conf"
    limit = min(NOFILE_NPROC, *(int(v) for v in _hard_limits()))
    conf.write_text(f'[containers]\ncgroupns = "host"\ndefault_ulimits = ["nofile={limit}:{limit}", '
                    f'"nproc={limit}:{limit}"]\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'
                    'events_logger = "file"\n')
    storage.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n')
    return {"CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}


def _hard_limits() -> tuple[int, int]:
    import resource

    return tuple(min(resource.getrlimit(r)[1], 1 << 20) for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_NPROC))


def _shared_libraries(files: list[Path]) -> set[Path]:
    """The shared libraries ``files`` load (their ``ldd`` closure), outside the interpreter's and the venv's trees."""
    found: set[Path] = set()
    for chunk in range(0, len(files), 64):
        out = subprocess.run(["ldd", *map(str, files[chunk:chunk + 64])], capture_output=True, text=True).stdout
        found.update(Path(m) for m in re.findall(r"(?:=> |^\s+)(/\S+) \(0x", out, flags=re.M))
    return {p for p in found if p.is_file()}


def build_image(workdir: Path, env: dict[str, str]) -> Path:
    """The OCI archive of the test image (see the module docstring), built in ``workdir``; returns its path."""
    rootfs = workdir / "rootfs"
    for name in ("usr/bin", "usr/lib", "usr/lib64", "etc", "proc", "sys", "dev", "tmp", "run", "var/tmp"):
        (rootfs / name).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        (rootfs / link).symlink_to(f"usr/{link if link != 'sbin' else 'bin'}")
    base = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    target = rootfs / base.relative_to("/")
    shutil.copytree(base / "bin", target / "bin", symlinks=True)
    (target / "lib").mkdir(parents=True)
    for lib in base.glob("lib/libpython*"):
        shutil.copy2(lib, target / "lib", follow_symlinks=False)
    shutil.copytree(base / "lib" / version, target / "lib" / version, symlinks=True,
                    ignore=lambda d, names: [n for n in names if n in SKIPPED or n.startswith("config-")])
    binaries = [p for p in (target / "bin").iterdir() if p.is_file() and not p.is_symlink()]
    venv = REPO / ".venv" / "lib" / version / "site-packages"
    loaded = [base / p.relative_to(target) for p in binaries]
    loaded += [*(base / "lib" / version / "lib-dynload").glob("*.so"), *venv.rglob("*.so*")]
    for lib in sorted(_shared_libraries([p for p in loaded if p.is_file()])):
        if base in lib.parents or REPO in lib.parents:
            continue
        dest = rootfs / lib.relative_to("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib.resolve(), dest)
    for tool in ("sh", "dash", "bash"):  # subprocess(shell=True), ctypes.util's helpers, Ray's workers (bash -c)
        if shutil.which(tool):
            shutil.copy2(shutil.which(tool), rootfs / "usr" / "bin" / tool)
            for lib in _shared_libraries([Path(shutil.which(tool))]):
                dest = rootfs / lib.relative_to("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(lib.resolve(), dest)
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\n")
    layer = workdir / "rootfs.tar"
    with tarfile.open(layer, "w") as tar:
        tar.add(rootfs, arcname=".")
    name = f"localhost/proofgrid-test:{os.getpid()}"
    run_env = {**os.environ, **env}
    subprocess.run(["podman", "import", "-q", str(layer), name], check=True, env=run_env, capture_output=True)
    image = workdir / "image.tar"
    subprocess.run(["podman", "save", "-q", "--format", "oci-archive", "-o", str(image), name], check=True,
                   env=run_env, capture_output=True)
    subprocess.run(["podman", "rmi", "-f", name], env=run_env, capture_output=True)
    layer.unlink()
    shutil.rmtree(rootfs)
    return image
