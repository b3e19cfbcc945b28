"""The sweep and job directory layout stated once in facts/files.py: the helpers every package uses
spell ``<sweep>/jobs/<job>/run``, and ``sweep_dir_of_run`` inverts them."""

from __future__ import annotations

from pathlib import Path

from facts import run_dir_of_job, sweep_dir_of_run, sweep_job_dir, sweep_jobs_dir
from facts.failures import log_pointer


def test_the_layout_helpers_spell_sweep_jobs_job_run_and_sweep_dir_of_run_inverts_them(tmp_path):
    sweep = tmp_path / "sweep"
    for given in (sweep, str(sweep)):  # callers pass paths and the strings of the records alike
        assert sweep_jobs_dir(given) == Path(f"{sweep}/jobs")
        assert sweep_job_dir(given, "grpo-42") == Path(f"{sweep}/jobs/grpo-42")
        assert run_dir_of_job(str(sweep_job_dir(given, "grpo-42"))) == Path(f"{sweep}/jobs/grpo-42/run")
    assert sweep_dir_of_run(run_dir_of_job(sweep_job_dir(sweep, "grpo-42"))) == sweep
    assert sweep_dir_of_run(Path("sweep/jobs/grpo-42/run")) == Path.cwd() / "sweep"  # relative: made absolute
    # a job's log pointer (relative to the sweep) lands in the same job directory
    assert sweep / log_pointer("grpo-42") == sweep_job_dir(sweep, "grpo-42") / "trainer.log"
    # not laid out so: a run of its own, a job directory, a run under another folder name
    assert sweep_dir_of_run(tmp_path / "run") is None
    assert sweep_dir_of_run(sweep_job_dir(sweep, "grpo-42")) is None
    assert sweep_dir_of_run(sweep / "runs" / "grpo-42" / "run") is None
