"""What runs in each task of a Slurm array: the job runtime with Slurm's hooks.

``run_task`` is the function ``submit`` hands submitit. A job of one task runs with ``SlurmHooks``
(``launcher.slurm.slurm_hooks``); each task of a job of several tasks is one rank, with
``SlurmRankHooks`` (``launcher.slurm.rank_task``).
"""

from __future__ import annotations

from launcher.job_spec import JobSpec
from launcher.runtime import run_job
from launcher.slurm.rank_task import SlurmRankHooks
from launcher.slurm.slurm_hooks import SlurmHooks


def run_task(spec: JobSpec) -> dict:
    """One task of the array (pickled by submitit, called on the compute node): the job's runtime, or
    one rank's runtime of a job of several tasks."""
    return run_job(spec, SlurmRankHooks(spec) if spec.tasks > 1 else SlurmHooks())
