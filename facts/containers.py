"""A job run inside a container image (``cluster.container``): the runtimes proofgrid knows, the back ends each
serves, the form of a pinned digest, and the names of what records the image.

The image's digest is the SHA256 of the image file (an Apptainer SIF, an enroot squashfs, an OCI archive), or,
for a registry reference, the manifest digest the reference pins (``name@sha256:<hex>``). The launcher checks it
before submission, each job's runtime again before the job starts, and it is recorded in ``job.json``
(``CONTAINER_FIELD``), the trainer's ``run.json`` (``IMAGE_DIGEST_FIELD``, from ``IMAGE_DIGEST_ENV``) and the
bundle's environment table (``IMAGE_DIGEST_ITEM``); the audit checks that every run of a sweep ran one image.
"""

from __future__ import annotations

import re

from facts.backends import LOCAL, SLURM

APPTAINER = "apptainer"  # apptainer exec --bind ... image.sif ... (Singularity's successor; what HPC sites run)
PODMAN = "podman"  # podman run ... (a local OCI runtime: an OCI archive, or a pinned registry reference)
PYXIS = "pyxis"  # srun --container-image=... (NVIDIA's Slurm plugin over enroot: a squashfs or registry reference)
# runtime -> (the command the submitting machine and each job must find, the back ends it serves)
RUNTIMES = {APPTAINER: ("apptainer", (LOCAL, SLURM)), PODMAN: ("podman", (LOCAL, SLURM)), PYXIS: ("srun", (SLURM,))}

# The runtimes whose command a job starts (which then mounts the image: Landlock, which forbids mounting, applies
# inside it); Pyxis starts the whole Slurm step in the image, the job's runtime included.
CONTAINER_RUNTIME_STARTED = (APPTAINER, PODMAN)

DIGEST_PATTERN = r"sha256:[0-9a-f]{64}"  # how cluster.container.digest pins an image
# A registry reference that pins its content: ``[registry/]name[:tag]@sha256:<hex>`` (pyxis also writes ``registry#name``)
PINNED_REFERENCE = re.compile(r"(?P<name>[A-Za-z0-9][\w.\-/:#]*)@(?P<digest>" + DIGEST_PATTERN + r")")

CONTAINER_FIELD = "container"  # job.json: {"runtime", "image", "image_digest", "preflight": {...}} (path-free)
IMAGE_DIGEST_FIELD = "image_digest"  # run.json and job.json's container record: the digest the job ran
IMAGE_DIGEST_ENV = "PROOFGRID_IMAGE_DIGEST"  # what the runtime hands the trainer (inside the image) to record
IMAGE_DIGEST_ITEM = "Image digest"  # the environment table's row (seed 000's "Image digest")
# What the in-container preflight (``launcher.runtime.inside``) writes in the job's record directory before the
# trainer starts: the Python and module paths it found, the source commit, the input digests, the accelerators.
CONTAINER_PREFLIGHT = "container_preflight.json"
INSIDE_MODULE = "launcher.runtime.inside"  # what runs first inside the image (the preflight, Landlock), then the command


def contained_command(words: list[str]) -> list[str]:
    """The command a job's image runs (the words after ``-m launcher.runtime.inside ... --``), or ``words``
    themselves for a job on the host: what the evidence reads a trainer's settings from."""
    for i, (flag, module) in enumerate(zip(words, words[1:])):
        if flag == "-m" and module == INSIDE_MODULE:
            rest = words[i + 2:]
            return rest[rest.index("--") + 1:] if "--" in rest else []
    return words
