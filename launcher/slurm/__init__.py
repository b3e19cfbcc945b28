"""The Slurm back end (``launcher.backend``): a grid as one submitit job array.

``backend`` submits, waits, refreshes and cancels; ``script`` renders the sbatch script (submitit's
own) and names the arrays; ``options`` checks the cluster profile; ``states`` reads and confirms
``sacct``/``squeue``; ``commands`` runs Slurm's commands; ``task`` and ``requeue`` are what runs
inside each task (the job runtime with Slurm's hooks, the requeue, the history).
"""

from launcher.slurm.script import describe
from launcher.slurm.slurm_backend import cancel_sweep, in_flight, refresh_job_records, submit
from launcher.slurm.slurm_profile import check_environment, check_profile, check_resources, job_limits

__all__ = ["cancel_sweep", "check_environment", "check_profile", "check_resources", "describe", "in_flight",
           "job_limits", "refresh_job_records", "submit"]
