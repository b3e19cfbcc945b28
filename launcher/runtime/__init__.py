"""The job runtime: what runs inside one allocation, a local process or one Slurm array task.

``run_job`` runs one job's phases in order (``launcher.runtime.job``); what a scheduler adds is the
back end's ``JobHooks`` (``launcher.runtime.runtime_hooks``). Locally it runs as
``python -m launcher.runtime <job_dir>``; on Slurm submitit calls ``launcher.slurm.array_task.run_task``.
"""

from launcher.runtime.job import run_job
from launcher.runtime.runtime_hooks import JobHooks, Reaction, RunEnd

__all__ = ["JobHooks", "Reaction", "RunEnd", "run_job"]
