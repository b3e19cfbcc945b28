"""Jobs inside a container image (``cluster.container``; docs/containers.md).

Before submission, ``plan_container`` checks the profile's container (the runtime serves the back end and is
installed, the image exists and is of the runtime's kind, its digest is the pinned one, every mount lies below
a root the profile allows) and returns the record every ``JobSpec`` carries. Inside each job, the runtime checks
the digest again (``check_image``) and ``Contained`` turns the trainer's command (and the job's Ray) into the
runtime's: the checkout, the sweep directory and the declared mounts bound read-only at the same paths, the job's
directory (and the sweep's shared initial evaluation) writable, the job's variables passed in, ports on the host
network; inside, ``launcher.runtime.inside`` runs first (the preflight, then Landlock), then the command.

- Apptainer: ``apptainer exec --no-home --pwd <checkout> [--nv] --bind SRC:SRC[:ro] ... IMAGE.sif ...``.
- Podman (a local OCI runtime): ``podman run --rm --read-only --network=host --pid=host --ipc=host -v SRC:SRC:ro
  ... --env NAME ... oci-archive:IMAGE.tar ...`` (or a registry reference pinned by digest).
- Pyxis: the whole Slurm step runs in the image (``srun --container-image=... --container-mounts=...``, the
  script's ``srun_args``), so the runtime itself starts inside it and the trainer's command needs no prefix.

The digest is the image file's SHA256, or the digest a registry reference pins (``name@sha256:<hex>``: the runtime
pulls by content, so the pin is the check). A mount may not write: only the job's own directories are writable.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from facts.containers import (
    APPTAINER,
    CONTAINER_RUNTIME_STARTED,
    IMAGE_DIGEST_FIELD,
    INSIDE_MODULE,
    PINNED_REFERENCE,
    PODMAN,
    PYXIS,
    RUNTIMES,
)
from facts.files import INITIAL_EVAL_DIR
from facts.repo import REPO_ROOT
from launcher.directory_locks import INHERITED_FD_ENV
from launcher.errors import PreflightError

SETTING = "cluster.container"
INHERITED_LOCK_FD = 3  # the run lock's descriptor inside the image (podman --preserve-fds=1 passes fd 3 on)
# The first bytes of each runtime's image file: a SIF starts with its launch line then SIF_MAGIC, a squashfs
# with "hsqs"; an OCI or Docker archive is a tar holding oci-layout or manifest.json.
SIF_MAGIC = b"SIF_MAGIC"
SQUASHFS_MAGIC = b"hsqs"


def image_digest(image: str) -> str:
    """``sha256:<hex>`` of the image file, or the digest a registry reference pins."""
    pinned = PINNED_REFERENCE.fullmatch(image)
    if pinned:
        return pinned["digest"]
    path = Path(image)
    if not path.is_file():
        raise PreflightError(f"{SETTING}.image {image}: no such image file; build it there, fix the path, or name "
                             "a registry image by its digest (name@sha256:...)")
    return _file_digest(str(path.resolve()), *_stamp(path))


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


@functools.lru_cache(maxsize=8)  # a plan checks the image once per arm; keyed by size, mtime and inode too
def _file_digest(path: str, size: int, mtime_ns: int, inode: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def check_image(image: str, pinned: str) -> str:
    """The image's digest, which must be ``pinned``: a mismatch names both (a job fails on it before it starts)."""
    actual = image_digest(image)
    if actual != pinned:
        raise PreflightError(f"the image {image} has digest {actual} but {SETTING}.digest pins {pinned}; restore the "
                             "pinned image, or pin this one deliberately")
    return actual


def _format_problem(runtime: str, path: Path) -> str | None:
    """Why the image file is not one ``runtime`` runs, or None."""
    with open(path, "rb") as handle:
        head = handle.read(256)
    if runtime == APPTAINER and SIF_MAGIC not in head:
        return "is not a SIF image (apptainer build IMAGE.sif ...)"
    if runtime == PYXIS and not head.startswith(SQUASHFS_MAGIC):
        return "is not a squashfs image (enroot import / enroot export)"
    if runtime == PODMAN and not _archive_kind(path):
        return "is not an OCI or Docker archive (podman save --format oci-archive)"
    return None


def _archive_kind(path: Path) -> str | None:
    """``oci-archive`` or ``docker-archive`` for a tar holding the layout's index, else None."""
    try:
        with tarfile.open(path) as tar:
            names = {m.name.lstrip("./") for m in tar.getmembers()}
    except (tarfile.TarError, OSError):
        return None
    return "oci-archive" if "oci-layout" in names else "docker-archive" if "manifest.json" in names else None


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_mounts(mounts: list[str], allowed: list[str]) -> list[str]:
    """The declared mounts, each an existing host path below one of the profile's ``allowed_roots``."""
    roots = [Path(os.path.realpath(r)) for r in allowed]
    checked = []
    for mount in mounts:
        real = Path(os.path.realpath(mount))
        if not any(_inside(real, root) for root in roots):
            where = ", ".join(allowed) if allowed else "none"
            raise PreflightError(f"{SETTING}.mounts: {mount} is outside what the profile allows ({SETTING}.allowed_roots: "
                                 f"{where}); add its root to allowed_roots in the cluster profile, or drop the mount")
        if not real.exists():
            raise PreflightError(f"{SETTING}.mounts: {mount} does not exist on this machine; create it or drop the mount")
        checked.append(str(real))
    return checked


def runtime_problem(runtime: str) -> str | None:
    """Why ``runtime`` cannot run here (its command not on PATH; srun without Pyxis), or None."""
    command = RUNTIMES[runtime][0]
    if shutil.which(command) is None:
        return f"{SETTING}.runtime={runtime}: {command} is not installed here (not on PATH); install it or load its " \
               "module, or choose another runtime"
    if runtime == PYXIS:
        help_text = subprocess.run([command, "--help"], capture_output=True, text=True).stdout
        if "--container-image" not in help_text:
            return f"{SETTING}.runtime=pyxis: this Slurm's srun has no --container-image (the Pyxis plugin is not " \
                   "installed); ask the site for Pyxis, or choose runtime=apptainer"
    return None


def plan_container(cluster: DictConfig, kind: str, dry_run: bool) -> dict | None:
    """The profile's container checked before anything is submitted (``JobSpec.container`` without the job's own
    parts), or None for jobs on the host. The runtime must be installed here unless it is a dry run."""
    node = cluster.get("container")
    if node is None:
        return None
    from trainer.schema import ContainerSchema

    container = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(ContainerSchema), node), resolve=True)
    runtime = container["runtime"]
    kinds = RUNTIMES[runtime][1]
    if kind not in kinds:
        raise PreflightError(f"{SETTING}.runtime={runtime} runs under cluster={' or '.join(kinds)} only (srun starts its "
                             f"container); use cluster=slurm, or runtime={APPTAINER} or {PODMAN} here")
    if not dry_run and (problem := runtime_problem(runtime)):
        raise PreflightError(problem)
    image = str(container["image"])
    if not PINNED_REFERENCE.fullmatch(image):
        path = Path(image)
        if not path.is_absolute():
            raise PreflightError(f"{SETTING}.image {image}: give the image file's absolute path (jobs start elsewhere)")
        if path.is_file() and (problem := _format_problem(runtime, path)):
            raise PreflightError(f"{SETTING}.image {image} {problem}; give an image {runtime} runs")
    check_image(image, str(container["digest"]))
    python = str(container["python"])
    if "/" in python and not Path(python).is_absolute() and not (REPO_ROOT / python).exists():
        raise PreflightError(f"{SETTING}.python {python} is not in the checkout (a relative interpreter is the "
                             "checkout's, bound into the image); fix the path, or name the image's python3")
    return {"runtime": runtime, "image": image, "digest": str(container["digest"]),
            "mounts": check_mounts(list(container["mounts"]), list(container["allowed_roots"])),
            "python": python, "runtime_args": [str(a) for a in container["runtime_args"]]}


def check_container_here(container: dict) -> str:
    """Inside the job, before it starts: the runtime is installed on this node (Pyxis: the job already runs in the
    image) and the image is the pinned one. Returns its digest; raises ``PreflightError`` naming both digests."""
    if container["runtime"] in CONTAINER_RUNTIME_STARTED and (problem := runtime_problem(container["runtime"])):
        raise PreflightError(problem)
    return check_image(container["image"], container["digest"])


def container_record(container: dict, digest: str | None = None) -> dict:
    """``job.json``'s container record (path-free): the runtime, the image's file name or reference, its digest."""
    image = container["image"]
    shown = image if PINNED_REFERENCE.fullmatch(image) else Path(image).name
    return {"runtime": container["runtime"], "image": shown, IMAGE_DIGEST_FIELD: digest or container["digest"]}


def container_literals(container: dict | None) -> dict[str, str]:
    """The image's directory and the mounts as placeholders in the path-free records (``<IMAGE_DIR>``, ``<MOUNT>``,
    ``<MOUNT2>``, ...); a registry reference is no machine path."""
    if not container:
        return {}
    literals = {m: f"<MOUNT{i + 1 if i else ''}>" for i, m in enumerate(container.get("mounts") or [])}
    literals.update({str(d): f"<GIT_DIR{i + 1 if i else ''}>" for i, d in enumerate(git_dirs())})
    if not PINNED_REFERENCE.fullmatch(container["image"]):
        literals[str(Path(container["image"]).parent)] = "<IMAGE_DIR>"
    return literals


def git_dirs(repo: Path = REPO_ROOT) -> list[Path]:
    """The checkout's git directories outside it (a worktree's ``.git`` file points elsewhere): bound read-only so
    that the commit can be read inside the image."""
    dot_git = repo / ".git"
    if not dot_git.is_file():
        return []
    text = dot_git.read_text().strip()
    if not text.startswith("gitdir:"):
        return []
    gitdir = (repo / text.split(":", 1)[1].strip()).resolve()
    found = [gitdir]
    common = gitdir / "commondir"
    if common.is_file():
        found.append((gitdir / common.read_text().strip()).resolve())
    return [d for d in found if not _inside(d, repo.resolve())]


def pyxis_srun_args(container: dict, sweep_dir: Path) -> list[str]:
    """srun's options that start a Slurm step in the image (Pyxis): the image, the checkout, the sweep directory and
    the mounts at the same paths (the sweep read-write: each job writes its own directory), the checkout as the
    working directory. The image file itself is bound too, so that the runtime inside checks its digest."""
    ro = [str(REPO_ROOT), *map(str, git_dirs()), *container["mounts"]]
    if not PINNED_REFERENCE.fullmatch(container["image"]):
        ro.append(container["image"])
    mounts = [f"{p}:{p}:ro" for p in ro] + [f"{sweep_dir}:{sweep_dir}"]
    return [f"--container-image={container['image']}", f"--container-mounts={','.join(mounts)}",
            f"--container-workdir={REPO_ROOT}", "--no-container-mount-home", *container["runtime_args"]]


def job_container(container: dict | None, workload: DictConfig) -> dict | None:
    """A job's ``JobSpec.container``: the profile's, with the GPUs the workload asks for and its inputs' pins (the
    preflight inside the image hashes each input as the image sees it)."""
    if container is None:
        return None
    from trainer.inputs import load_manifest

    pins = {pin.path: pin.sha256 for pin in load_manifest(workload.manifest)}
    return {**container, "gpus": int(workload.get("gpus_per_job") or 0), "inputs": pins}


@dataclass
class Contained:
    """One job's commands in its image: ``wrap`` turns a host command (the trainer's, Ray's) into the runtime's."""

    container: dict  # JobSpec.container
    job_dir: Path
    record_dir: Path
    writable: list[Path]  # the job's write roots (the runtime's WriteGuard's): bound writable, held by Landlock inside
    read_only: list[Path]  # the checkout, its git directories, the sweep directory, config directories, the mounts
    env_names: list[str]  # the job's variables, passed into the image by name (podman; apptainer passes all)

    @classmethod
    def of(cls, spec, record_dir: Path, env_names: list[str], ray_alias: Path | None) -> Contained:
        """``spec``'s (a ``JobSpec`` with a container) commands run from ``record_dir`` with ``env_names`` set;
        ``ray_alias``: the job's Ray directory alias (``JobRoots.ray_alias``) when it starts Ray."""
        writable = [Path(spec.job_dir)]
        if spec.share_initial_eval:
            writable.append(Path(spec.sweep_dir) / INITIAL_EVAL_DIR)
        if ray_alias is not None and spec.container["runtime"] == PODMAN:  # its /tmp is the image's own
            writable.append(ray_alias)
        read_only = [REPO_ROOT, *git_dirs(), *map(Path, spec.config_dirs), *map(Path, spec.container["mounts"]),
                     Path(spec.sweep_dir)]
        return cls(spec.container, Path(spec.job_dir), Path(record_dir), writable, read_only, list(env_names))

    @property
    def runtime(self) -> str:
        return self.container["runtime"]

    @property
    def starts_runtime(self) -> bool:
        """The job's command starts the container runtime (Apptainer, Podman): the runtime mounts, so the host's
        Landlock (which forbids mounting) applies inside instead. Pyxis: the runtime already runs in the image."""
        return self.runtime in CONTAINER_RUNTIME_STARTED

    @property
    def python(self) -> str:
        """The interpreter inside the image (a relative one is the checkout's, bound at the same path)."""
        if not self.starts_runtime:
            return sys.executable
        return container_python(self.container)

    def binds(self) -> list[tuple[str, bool]]:
        """(host path, writable): the read-only ones first (the checkout, the mounts, then the sweep directory), then
        the writable ones, so that the job's directory lies over the read-only sweep directory that holds it."""
        paths = {str(p): False for p in self.read_only}
        paths.update({str(p): True for p in self.writable})
        return [(path, rw) for rw in (False, True) for path, writable in paths.items() if writable == rw]

    def _image(self) -> str:
        image = self.container["image"]
        if self.runtime == PODMAN and not PINNED_REFERENCE.fullmatch(image):
            return f"{_archive_kind(Path(image)) or 'oci-archive'}:{image}"
        return image

    def prefix(self, lock: bool = False) -> list[str]:
        """The runtime's command up to the image (empty for Pyxis), with its GPU option when the job asks for GPUs;
        ``lock``: the command inherits the job's run lock as fd 3 (Podman passes it on)."""
        extra = list(self.container.get("runtime_args") or [])
        gpus = int(self.container.get("gpus") or 0) > 0
        if self.runtime == APPTAINER:
            binds = [a for path, rw in self.binds() for a in ("--bind", path if rw else f"{path}:{path}:ro")]
            return ["apptainer", "exec", "--no-home", "--pwd", str(REPO_ROOT), *(["--nv"] if gpus else []),
                    *binds, *extra, self._image()]
        if self.runtime == PODMAN:
            binds = [a for path, rw in self.binds() for a in ("-v", f"{path}:{path}" + ("" if rw else ":ro"))]
            user = [] if os.getuid() == 0 else ["--userns=keep-id"]
            # the run lock's descriptor is passed on as fd 3 (podman leaves out a variable the job has not set)
            env = [a for name in sorted({*self.env_names, INHERITED_FD_ENV}) for a in ("--env", name)]
            return ["podman", "run", "--rm", "--quiet", "--read-only", "--network=host", "--pid=host", "--ipc=host",
                    "--log-driver=none", *(["--preserve-fds=1"] if lock else []), "--security-opt=label=disable", *user,
                    *(["--device", "nvidia.com/gpu=all"] if gpus else []), "--workdir", str(REPO_ROOT), *binds, *env,
                    *extra, self._image()]
        return []

    def wrap(self, argv: list[str], preflight: bool, lock: bool = False) -> list[str]:
        """``argv`` (a host command: the trainer's, Ray's) as the runtime's: the image's interpreter for the host's,
        ``launcher.runtime.inside`` first (the preflight when ``preflight``; then Landlock over the job's roots);
        ``lock``: it inherits the run lock (the trainer of a job's first rank)."""
        inner = list(argv)
        host_ray = str(Path(sys.executable).with_name("ray"))
        if inner and inner[0] == sys.executable:
            inner[0] = self.python
        elif inner and inner[0] == host_ray:
            inner[:1] = [self.python, "-m", "ray.scripts.scripts"]
        entry = [self.python, "-m", INSIDE_MODULE, "--job-dir", str(self.job_dir), "--record-dir", str(self.record_dir),
                 *[a for w in self.writable for a in ("--write", str(w))], *(["--preflight"] if preflight else []), "--"]
        return [*self.prefix(lock), *entry, *inner]


def container_python(container: dict) -> str:
    """The interpreter inside the image: ``python`` as the profile gives it, a relative one the checkout's."""
    python = container["python"]
    return str(REPO_ROOT / python) if "/" in python and not Path(python).is_absolute() else python
