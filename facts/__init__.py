"""Facts shared by trainer, launcher and evidence, stated once: metric keys, the algorithm records, the
job-state vocabulary (facts.states), the repository's own paths (facts.repo),
the sweep and job directory layout, run-directory file names, checkpoint naming, file hashing (and hash-then-parse reads) and atomic JSON writes.

Dependency-free (standard library only), so every package may import it and none imports upward.
"""

from facts.algorithms import (
    ALGO_ORDER,
    ALGORITHM_FIELD,
    ALGORITHMS,
    DISPLAY_NAMES,
    KL_IN_REWARD,
    KL_LOSS_BY_ALGO,
    algo_sort_key,
    algorithm,
    display_name,
)
from facts.files import (
    CHECKPOINTS_DIR,
    EVAL_RECORD,
    INITIAL_EVAL_DIR,
    INITIAL_EVAL_RESPONSES,
    JOB_RUN_DIR,
    JOBS_DIR,
    METRICS_LOG,
    RUN_RECORD,
    SHARED_KEY_CHARS,
    atomic_write_json,
    checkpoint_name,
    initial_eval_relpath,
    loads_strict,
    read_with_sha256,
    run_dir_of_job,
    sha256_file,
    sweep_dir_of_run,
    sweep_job_dir,
    sweep_jobs_dir,
)
from facts.metrics import (
    DYNAMIC_SAMPLING_KEYS,
    KL_LOSS_KEY,
    METRIC_KEYS_FIELD,
    OFF_POLICY_KEYS,
    REQUIRED_KEYS,
)

__all__ = [
    "ALGORITHMS", "ALGORITHM_FIELD", "ALGO_ORDER", "CHECKPOINTS_DIR", "DISPLAY_NAMES", "DYNAMIC_SAMPLING_KEYS", "EVAL_RECORD", "INITIAL_EVAL_DIR",
    "INITIAL_EVAL_RESPONSES", "JOBS_DIR", "JOB_RUN_DIR", "KL_IN_REWARD", "KL_LOSS_BY_ALGO",
    "KL_LOSS_KEY", "METRICS_LOG", "METRIC_KEYS_FIELD", "OFF_POLICY_KEYS", "REQUIRED_KEYS", "RUN_RECORD",
    "SHARED_KEY_CHARS", "algo_sort_key", "algorithm", "atomic_write_json", "checkpoint_name", "display_name", "initial_eval_relpath", "loads_strict",
    "read_with_sha256", "run_dir_of_job", "sha256_file", "sweep_dir_of_run", "sweep_job_dir", "sweep_jobs_dir",
]
