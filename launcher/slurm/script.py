"""The sbatch script of a sweep: the profile as submitit's parameters, the script submitit writes
from them, its path-free form (the dry run, the records), and how a grid becomes arrays and names.

``sbatch_script`` is the one place proofgrid calls submitit's private code, and why: submitit has
no public way to render the script it would submit without submitting it (``SlurmExecutor``
refuses to exist without ``srun`` on PATH, so a dry run on a laptop could not even build one, and
its ``_make_submission_file_text`` is private too). The dry run must print exactly what is
submitted, so the script is rendered by submitit's own function from exactly the parameters
``submit`` hands the executor; tests/launcher/test_slurm_options.py and tests/launcher/test_arms_sweep.py submit
through ``SlurmExecutor`` on a real cluster and pin that the two scripts are the same.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from omegaconf import DictConfig

from facts.containers import PYXIS
from facts.repo import REPO_ROOT
from facts.slurm_formats import time_to_minutes
from launcher.container import container_literals, container_python, pyxis_srun_args
from launcher.job_spec import JobSpec, Sweep, allocation_shape
from launcher.slurm.slurm_profile import extra_sbatch_options, max_array_size, setup_lines
from launcher.slurm.slurm_states import describe_watch

# The submitit folder of the sweep's first submission, as the dry run shows it.
SUBMITIT_DIR = ".submitit"
# Tasks renamed one by one after submission (one scontrol call each); larger arrays keep the array's name.
MAX_NAMED_TASKS = 256


def sbatch_options(cluster: DictConfig, n_jobs: int) -> dict[str, str]:
    """sbatch long options of the profile, in a fixed order (also what the dry run prints)."""
    parallel = int(cluster.get("array_parallelism") or n_jobs)
    # One task: submitit submits a plain job, not a one-task array.
    opts = {"array": f"0-{n_jobs - 1}%{parallel}" if n_jobs > 1 else None, "partition": cluster.get("partition")}
    for key, option in (("account", "account"), ("qos", "qos"), ("gres", "gres"),
                        ("cpus_per_task", "cpus-per-task"), ("mem", "mem"), ("time", "time"),
                        ("constraint", "constraint")):
        if cluster.get(key) not in (None, ""):
            opts[option] = str(cluster.get(key))
    if cluster.get("requeue", True):
        opts["requeue"] = ""
    opts["signal"] = f"USR2@{signal_delay_s(cluster)}"
    for option, value in extra_sbatch_options(cluster).items():
        opts[option] = "" if value is True else value
    return {k: v for k, v in opts.items() if v is not None}


def signal_delay_s(cluster: DictConfig) -> int:
    """Seconds before the time limit at which Slurm sends USR2 (checkpoint, then requeue)."""
    return int(cluster.get("signal_delay_s") or 90)


def submitit_parameters(cluster: DictConfig, n_jobs: int, name: str = "proofgrid") -> dict:
    """The profile as ``submitit.SlurmExecutor`` parameters (sbatch's own names; ``time`` in minutes)."""
    opts = sbatch_options(cluster, n_jobs)
    params = {
        "job_name": name,
        "partition": opts.get("partition"),
        "cpus_per_task": int(cluster.cpus_per_task),
        "time": time_to_minutes(cluster.time),
        "array_parallelism": int(cluster.get("array_parallelism") or n_jobs),
        "signal_delay_s": signal_delay_s(cluster),
        "additional_parameters": {},
    }
    for key in ("mem", "account", "qos", "gres", "constraint"):
        if key in opts:
            params[key] = opts[key]
    nodes, tasks_per_node = allocation_shape(cluster)
    if nodes * tasks_per_node > 1:  # submitit's srun then starts one task (one trainer rank) per slot
        params["nodes"], params["ntasks_per_node"] = nodes, tasks_per_node
    if cluster.get("gpus_per_node"):
        params["gpus_per_node"] = int(cluster.gpus_per_node)
    if "requeue" in opts:
        params["additional_parameters"]["requeue"] = True
    params["additional_parameters"].update(extra_sbatch_options(cluster))
    if setup_lines(cluster):
        params["setup"] = setup_lines(cluster)
    return params


def sbatch_script(cluster: DictConfig, n_jobs: int, folder: Path, name: str = "proofgrid",
                  container: dict | None = None) -> str:
    """The sbatch script ``submit`` hands to ``sbatch`` for an array of ``n_jobs`` in ``folder``:
    what ``SlurmExecutor`` writes, by the same module-level function, from the same parameters and
    with its ``<python> -u -m submitit.core._submit <folder>`` command (see the module docstring);
    ``container``: ``container_parameters``' (Pyxis: the step in the image)."""
    # submitit's private renderer, here alone (see the module docstring); imported only when a script
    # is rendered, so that `launcher status` and `cancel` never load submitit.
    from submitit.slurm.slurm import _make_sbatch_string

    container = container or {}
    python = container.get("python", shlex.quote(sys.executable))
    command = " ".join([python, "-u -m submitit.core._submit", shlex.quote(str(folder))])
    # submitit submits a map of one job as a plain job, not as an array of one
    return _make_sbatch_string(command=command, folder=folder, map_count=n_jobs if n_jobs > 1 else None,
                               **submitit_parameters(cluster, n_jobs, name),
                               **{k: v for k, v in container.items() if k != "python"})


def container_parameters(sweep: Sweep) -> dict:
    """What a Pyxis sweep changes in submitit's script: srun's options that start each step in the image
    (``srun_args``) and the image's interpreter for submitit's command (``python``); {} otherwise."""
    container = sweep.specs[0].container if sweep.specs else None
    if not container or container["runtime"] != PYXIS:
        return {}
    return {"srun_args": pyxis_srun_args(container, sweep.sweep_dir), "python": shlex.quote(container_python(container))}


def path_free_script(script: str, folder: Path, container: dict | None = None) -> str:
    """The script with the submission folder, the interpreter and the sweep's name (in the job name)
    as placeholders (dry run, records). ``folder`` is ``<sweep>/.submitit/<run>``; ``container``: the sweep's
    (Pyxis: the image's directory, the mounts, the checkout and the sweep directory in srun's options)."""
    script = script.replace(str(folder), "<SWEEP_DIR>/.submitit/<RUN>").replace(shlex.quote(sys.executable), "<PYTHON>")
    if container:
        for path, placeholder in {**container_literals(container), str(folder.parent.parent): "<SWEEP_DIR>",
                                  str(REPO_ROOT): "<REPO>"}.items():
            script = script.replace(path, placeholder)
    return script.replace(f"--job-name={job_name(folder.parent.parent)}", "--job-name=pg-<SWEEP>")


def array_chunks(n_jobs: int, max_array_size: int) -> list[range]:
    """Task positions of each array: Slurm refuses an array index >= MaxArraySize, so a grid
    larger than that becomes several arrays of at most ``max_array_size`` tasks each."""
    return [range(start, min(start + max_array_size, n_jobs)) for start in range(0, n_jobs, max_array_size)]


def job_name(sweep_dir: Path, job: str | None = None) -> str:
    """Slurm job name: ``pg-<sweep>`` for an array, ``pg-<sweep>-<arm>-<seed>`` for one task."""
    name = f"pg-{sweep_dir.name}" + (f"-{job}" if job else "")
    return re.sub(r"[^\w.+-]", "_", name)


def chunk_name(sweep_dir: Path, specs: list[JobSpec]) -> str:
    """The job name one submission (an array, or a single task) is given."""
    return job_name(sweep_dir, specs[0].name if len(specs) == 1 else None)


def describe(sweep: Sweep) -> list[str]:
    """The sbatch script(s) the sweep submits (submitit's own, path-free), one ``# sbatch |``
    line each: one script per array, each headed by a line saying so when the grid is larger than
    the cluster's MaxArraySize; then how the waiting launcher will look at Slurm (``# watch |``)."""
    folder = sweep.sweep_dir / SUBMITIT_DIR / "run-0"
    limit = max_array_size(sweep.cluster)
    chunks = array_chunks(len(sweep.all_specs), limit)
    lines = []
    for k, chunk in enumerate(chunks):
        if len(chunks) > 1:
            lines.append(f"# sbatch | # array {k + 1} of {len(chunks)} (MaxArraySize {limit}): "
                         f"jobs [{chunk.start}]-[{chunk.stop - 1}]")
        name = chunk_name(sweep.sweep_dir, [sweep.all_specs[i] for i in chunk])
        script = path_free_script(sbatch_script(sweep.cluster, len(chunk), folder, name, container_parameters(sweep)),
                                  folder, sweep.specs[0].container if sweep.specs else None)
        lines += [f"# sbatch | {line}".rstrip() for line in script.splitlines()]
    return [*lines, describe_watch(sweep.cluster)]
