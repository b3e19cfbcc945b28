"""Experiments: a pre-registered spec (``conf/experiment/<name>.yaml``) run as staged sweeps.

``python launch.py experiment=<name> [overrides]`` runs, in ``<experiment dir>/``::

    experiment.yaml     the spec as run; its SHA256 is the pre-registration
    registration.json   that SHA256 and the overrides, written when the first job starts; every stage's
                        sweep.json, every job's spec.json and job.json and probe.json carry the SHA256 too
    probe/              a few steps of every arm: finite loss and gradients, seconds per step, peak
                        memory, the spec's gradient and staleness checks (probe/probe.json)
    tuning/             per arm, a grid over the declared setting (when the spec tunes)
    confirm/            every arm at its selected setting over the spec's seeds; its bundle is the
                        experiment's: the verdict, the spec and every earlier stage's data

Each stage is an ordinary sweep (its own jobs, evidence and bundle), so re-running the same command
resumes: accepted jobs are never re-run. The spec is parsed and the verdict decided by
``evidence.verdict``; this package checks, plans and sequences: ``study`` (the spec against the config
and the command line), ``registration``, ``runner`` (each stage's jobs), ``probe`` (its checks),
``budget``, ``dry_run``, ``stages`` (the real run: each decision between stages made in one place) and
``chain`` (``wait=false`` on Slurm: the stages as a chain of Slurm jobs, each decision a job of its own, and
no launcher waiting). Every refusal is one line, before the stage it concerns starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from launcher.errors import PreflightError
from launcher.experiment.budget import check_budget
from launcher.experiment.dry_run import dry_run
from launcher.experiment.experiment_errors import ExperimentError, ExperimentFailed
from launcher.experiment.registration import REGISTRATION, register, spec_changes
from launcher.experiment.runner import experiment_dir, runner_for
from launcher.experiment.stage_runner import run_stages
from launcher.experiment.study import check_arm_settings, compose, load_study
from study.spec import Study


def run_experiment(cfg: DictConfig, overrides: list[str], exp_dir: Path, name: str) -> int:
    """Check the spec and the directory, then run (or dry-run) every stage in order, or (``wait=false`` on Slurm)
    submit them as a chain of Slurm jobs and return; an exit code."""
    # The chain asks Slurm (the back end's package): imported when an experiment runs, not with this package (a plain
    # sweep's check that its directory is no experiment's stage imports the registration alone).
    from launcher.experiment.chain import experiment_lock, submit_chain  # noqa: PLC0415

    try:
        runner, recorded = runner_for(cfg, overrides, exp_dir, name)
        if runner.dry_run:
            return dry_run(runner)
        if not runner.wait:
            return submit_chain(runner, recorded, overrides, name, cfg.cluster)
        with experiment_lock(exp_dir):  # no chain of this experiment is running meanwhile
            return run_stages(runner, recorded)
    except PreflightError as exc:
        print(f"proofgrid: error: {exc}", file=sys.stderr)
        return 2
    except ExperimentFailed as exc:
        print(f"proofgrid: experiment stopped: {exc}", file=sys.stderr)
        return 1


__all__ = ["REGISTRATION", "ExperimentError", "ExperimentFailed", "Study", "check_arm_settings", "check_budget",
           "compose", "experiment_dir", "load_study", "register", "run_experiment", "spec_changes"]
