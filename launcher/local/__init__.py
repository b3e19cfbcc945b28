"""The local back end (``launcher.backend``): each job is a process of this machine.

``options`` checks the profile and the machine's cores and GPUs before anything runs; ``backend`` runs the
jobs (at most as many at once as the cores allow), shows them live and reads their records. There is no
scheduler to ask, script to write or requeue to handle: the runtime's default hooks
(``launcher.runtime.JobHooks``) are this back end's, and whether a job's runtime still lives is read from
its record (``launcher.liveness``).
"""

from launcher.local.local_backend import describe, in_flight, print_failures, refresh_job_records, submit
from launcher.local.local_profile import (
           check_environment,
           check_profile,
           check_resources,
           job_limits,
           local_concurrency,
           usable_cores,
)

__all__ = ["check_environment", "check_profile", "check_resources", "describe", "in_flight", "job_limits",
           "local_concurrency",
           "print_failures", "refresh_job_records", "submit", "usable_cores"]
