"""The back ends a sweep runs on (``cluster.kind``), named once: the config schema checks the value,
the launcher maps each to its package, and a job record's ``scheduler`` field says which ran it."""

from __future__ import annotations

LOCAL = "local"  # each job a process of this machine (launcher/local/)
SLURM = "slurm"  # one Slurm job array (launcher/slurm/)
BACKEND_KINDS = (LOCAL, SLURM)
