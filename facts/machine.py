"""Who ran a job, and where: the user and host names its runtime knows and a build elsewhere does not.

A bundle built off the cluster (a laptop, CI) knows neither the cluster's user (``$USER``,
``$SLURM_JOB_USER``) nor its nodes' and login node's names (``$HOSTNAME``, ``$SLURM_SUBMIT_HOST``, their
fully qualified forms), so its sanitiser could not replace them. The job's runtime records them in the job
directory (``facts.files.MACHINE_NAMES``: never copied into a bundle) and the build's sanitiser reads them
(``evidence.seal.bundle``) beside its own machine's.
"""

from __future__ import annotations

import contextlib
import getpass
import socket
import threading
from collections.abc import Mapping

# Variables naming the user (Slurm's for the job's owner), and this host (bash's ``$HOSTNAME``, which a batch job
# inherits from the login node it was submitted on; Slurm's on a compute node and for the submitting host).
USER_NAME_VARIABLES = ("USER", "LOGNAME", "SLURM_JOB_USER")
HOST_NAME_VARIABLES = ("HOSTNAME", "SLURMD_NODENAME", "SLURM_SUBMIT_HOST")
FQDN_TIMEOUT_S = 2.0  # a node whose resolver does not answer: its short names are recorded without the long ones


def _fqdn(name: str) -> str | None:
    """``socket.getfqdn(name)`` within ``FQDN_TIMEOUT_S`` (a resolver that hangs must not hold a job's start)."""
    found: list[str] = []
    worker = threading.Thread(target=lambda: found.append(socket.getfqdn(name)), daemon=True)
    worker.start()
    worker.join(FQDN_TIMEOUT_S)
    return found[0] if found else None


def machine_names(env: Mapping[str, str]) -> dict[str, list[str]]:
    """The user and host names of this process's machine and job, sorted: what ``MACHINE_NAMES`` records."""
    users = {env.get(name, "") for name in USER_NAME_VARIABLES}
    with contextlib.suppress(KeyError, OSError):  # no passwd entry in some containers: the environment's then
        users.add(getpass.getuser())
    hosts = {socket.gethostname(), *(env.get(name, "") for name in HOST_NAME_VARIABLES)}
    hosts |= {fqdn for host in list(hosts) if host and (fqdn := _fqdn(host))}
    return {"users": sorted(u for u in users if u), "hosts": sorted(h for h in hosts if h)}
