"""The main job end to end on this machine: the 3x3 toy sweep as local processes, the evidence
bundle, its audit, the learning claim, and a re-run that re-submits nothing; the local concurrency
cap, as a unit and with multi-CPU jobs. The end-to-end tests are marked slow."""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from tests.launch_in_process import launch_in_process
from tests.sweeps import GRID, index_rows, job_records, launch


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("sweep") / "main"
    proc = launch(sweep_dir, *GRID, "figures=true", env={"PROOFGRID_PORT_BASE": "23000"})  # make run's seal, figures too
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sweep_dir, proc


@pytest.mark.slow
def test_every_job_ran_isolated_and_was_accepted(sweep):
    sweep_dir, _ = sweep
    records = job_records(sweep_dir)
    assert sorted(records) == sorted(f"{a}-{s}" for a in ("grpo", "rpp", "rppb") for s in (42, 1234, 2026))
    for name, r in records.items():
        assert r["state"] == "COMPLETED" and r["exit_code"] == 0, name
        assert r["cleanup"] == [], name
        assert r["roots"] == {"ray": "roots/ray", "cache": "roots/cache", "tmp": "roots/tmp", "output": "run"}
        cmd = json.loads((sweep_dir / "jobs" / name / "command.json").read_text())
        assert cmd["env"]["TMPDIR"] == str(sweep_dir / "jobs" / name / "roots" / "tmp")
        assert cmd["env"]["PYTHONNOUSERSITE"] == "1" and cmd["env"]["HF_HUB_OFFLINE"] == "1"
        public = (sweep_dir / "jobs" / name / "command.public.json").read_text()
        assert str(sweep_dir) not in public and "<JOB_DIR>" in public
    assert all(row["accepted"] == "yes" for row in index_rows(sweep_dir).values())


@contextlib.contextmanager
def pinned_to(cores: set[int]):
    """Run this process (and the processes it starts) on ``cores`` only."""
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


def two_cores() -> set[int]:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two usable cores to pin the launcher to")
    return set(cores[:2])


def most_at_once(records: dict[str, dict]) -> int:
    spans = [(r["started_at"], r["started_at"] + r["elapsed_s"]) for r in records.values()]
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


@pytest.mark.parametrize(("cpus_per_job", "max_parallel", "slots"), [(2, None, 1), (1, 1, 1), (1, None, 2)])
def test_local_slots_are_the_pinned_cores_over_the_job_cpus_capped_by_max_parallel(cpus_per_job, max_parallel, slots):
    from launcher.local import local_concurrency

    with pinned_to(two_cores()):
        assert local_concurrency(cpus_per_job, max_parallel) == slots


@pytest.mark.slow
def test_two_cpu_jobs_on_two_pinned_cores_run_one_at_a_time(tmp_path):
    # The bound (2 cores // 2 CPUs per job = 1) comes from the pinning, not from this machine's size;
    # two jobs of several seconds each would overlap if the cap were not applied.
    sweep_dir = tmp_path / "two-cpu"
    with pinned_to(two_cores()):
        proc = launch(sweep_dir, "algo=grpo", "seed=1,2", "workload.cpus_per_job=2", "workload.n_updates=2",
                      "workload.eval.n_prompts=2", env={"PROOFGRID_PORT_BASE": "23600"})
    records = job_records(sweep_dir)
    assert sorted(records) == ["grpo-1", "grpo-2"], proc.stderr[-2000:]
    assert all(r["state"] == "COMPLETED" for r in records.values()), proc.stderr[-2000:]
    assert most_at_once(records) == 1


@pytest.mark.slow
def test_every_algorithm_and_seed_beats_its_initial_checkpoint(sweep):
    sweep_dir, _ = sweep
    for name in job_records(sweep_dir):
        ev = json.loads((sweep_dir / "jobs" / name / "run" / "eval.json").read_text())
        assert ev["final"]["pass@1"] > ev["initial"]["pass@1"], (name, ev["initial"]["pass@1"], ev["final"]["pass@1"])
        assert 0.1 <= ev["initial"]["pass@1"] <= 0.6


@pytest.mark.slow
def test_the_bundle_is_sealed_and_audits_clean(sweep):
    sweep_dir, proc = sweep
    from evidence import audit_bundle

    assert audit_bundle(sweep_dir / "bundle.tar.gz") == []
    assert "audit: clean" in proc.stdout
    digest = (sweep_dir / "bundle.tar.gz.sha256").read_text().split()[0]
    assert digest in proc.stdout


@pytest.mark.slow
def test_the_launcher_prints_the_reports_one_sentence_result(sweep):
    sweep_dir, proc = sweep
    lines = (sweep_dir / "bundle" / "data" / "report.md").read_text().splitlines()
    sentence = lines[2]  # after the title: the result from the paired intervals of eval pass@1
    assert sentence.startswith(("No difference detected on eval pass@1: every 95 % interval", "On eval pass@1, "))
    assert "this design detects differences of" in sentence
    assert sentence in proc.stdout.splitlines()


@pytest.mark.slow
def test_rerunning_the_sweep_resubmits_nothing_and_reseals_the_same_bundle(sweep):
    sweep_dir, _ = sweep
    before = (sweep_dir / "bundle.tar.gz.sha256").read_text()
    mtimes = {n: (sweep_dir / "jobs" / n / "job.json").stat().st_mtime for n in job_records(sweep_dir)}
    proc = launch_in_process(sweep_dir, *GRID, "figures=true")  # it starts no process: launch.py's own code, in this one
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "9 job(s) already accepted" in proc.stdout
    assert {n: (sweep_dir / "jobs" / n / "job.json").stat().st_mtime for n in job_records(sweep_dir)} == mtimes
    assert (sweep_dir / "bundle.tar.gz.sha256").read_text() == before


def _final_counts(data) -> dict[str, dict[int, list[int]]]:
    """Per job of a bundle, per question: [correct, responses] of its carried eval/final.jsonl (reward > 0 correct)."""
    counts: dict[str, dict[int, list[int]]] = {}
    for job in sorted((data / "runs").iterdir()):
        for line in (job / "eval" / "final.jsonl").read_text().splitlines():
            record = json.loads(line)
            cell = counts.setdefault(job.name, {}).setdefault(record["index"], [0, 0])
            cell[0] += record["reward"] > 0
            cell[1] += 1
    return counts


def _csv(path) -> list[dict[str, str]]:
    import csv

    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _anova_components(frame, k: int, within: float | None = None) -> tuple[float, float, float, float]:
    """statsmodels' ANOVA table of a crossed seeds x questions design (``y ~ C(s) * C(q)`` over every response, or
    ``d ~ C(s) + C(q)`` over cell differences with the pair's summed within-cell mean square), solved for the
    components by the expected mean squares and truncated at 0."""
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    if within is None:
        table = anova_lm(smf.ols("y ~ C(s) * C(q)", frame).fit())
        ms = (table["sum_sq"] / table["df"]).to_dict()
        ms_s, ms_q, ms_sq, ms_e = ms["C(s)"], ms["C(q)"], ms["C(s):C(q)"], ms["Residual"]
    else:
        table = anova_lm(smf.ols("d ~ C(s) + C(q)", frame).fit())
        ms = (k * table["sum_sq"] / table["df"]).to_dict()
        ms_s, ms_q, ms_sq, ms_e = ms["C(s)"], ms["C(q)"], ms["Residual"], within
    n_s, n_q = frame["s"].nunique(), frame["q"].nunique()
    return (max(0.0, (ms_s - ms_sq) / (k * n_q)), max(0.0, (ms_q - ms_sq) / (k * n_s)), max(0.0, (ms_sq - ms_e) / k),
            ms_e)


@pytest.mark.slow
def test_the_question_statistics_of_the_real_sweep_recompute_from_its_responses_and_an_edited_one_is_found(
        sweep, tmp_path):
    """Issue 32 §2 through the real 3 x 3 sweep: the question-clustered paired difference (statsmodels' clustered
    OLS), the variance components (statsmodels' ANOVA table) and each run's Wilson interval (statsmodels) from the
    responses the bundle carries; then `python -m evidence build` and `audit` on a copy, and an edited variance
    component resealed is the audit's finding."""
    import shutil
    import subprocess
    import sys

    import numpy as np
    import pandas as pd
    import statsmodels.api as sm
    from statsmodels.stats.proportion import proportion_confint

    from tests.sweeps import reseal_bag

    sweep_dir, _ = sweep
    data = sweep_dir / "bundle" / "data"
    counts = _final_counts(data)
    seeds = (42, 1234, 2026)
    questions = sorted(counts["grpo-42"])
    k = counts["grpo-42"][questions[0]][1]
    rate = {(arm, s): np.array([counts[f"{arm}-{s}"][i][0] / k for i in questions]) for arm in ("grpo", "rpp", "rppb")
            for s in seeds}

    def responses(arm):
        return pd.DataFrame([{"y": float(r < counts[f"{arm}-{s}"][i][0]), "s": s, "q": i}
                             for s in seeds for i in questions for r in range(k)])

    within = {arm: _anova_components(responses(arm), k)[3] for arm in ("grpo", "rpp", "rppb")}
    for row in _csv(data / "tables" / "variance_components.csv"):
        if row["b"]:
            cells = pd.DataFrame([{"d": rate[(row["a"], s)][j] - rate[(row["b"], s)][j], "s": s, "q": i}
                                  for s in seeds for j, i in enumerate(questions)])
            want = _anova_components(cells, k, within[row["a"]] + within[row["b"]])
        else:
            want = _anova_components(responses(row["a"]), k)
        got = tuple(float(row[c]) for c in ("var_seed", "var_question", "var_seed_x_question", "var_response"))
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), row
        assert float(row["icc_question"]) == pytest.approx(want[1] / sum(want), rel=1e-9)
    for row in _csv(data / "tables" / "question_differences.csv"):
        d = np.concatenate([rate[(row["a"], s)] - rate[(row["b"], s)] for s in seeds])
        fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="cluster", use_t=True,
                                            cov_kwds={"groups": np.tile(np.arange(len(questions)), len(seeds))})
        assert (float(row["mean"]), float(row["se"])) == pytest.approx((fit.params[0], fit.bse[0]), rel=1e-9, abs=1e-15)
        assert (float(row["low"]), float(row["high"])) == pytest.approx(tuple(fit.conf_int(0.05)[0]), rel=1e-9)
    for row in _csv(data / "tables" / "eval_intervals.csv"):
        if row["j"] == "1":
            p_i = rate[(row["a"] if "a" in row else row["arm"], int(row["seed"]))]
            p = float(np.mean(p_i))
            se = float(np.std(p_i, ddof=1)) / np.sqrt(len(p_i))
            n = len(p_i) if p in (0.0, 1.0) else (len(p_i) * k if se == 0 else min(p * (1 - p) / se ** 2, len(p_i) * k))
            want = proportion_confint(p * n, n, method="wilson")
            assert (float(row["wilson_low"]), float(row["wilson_high"])) == pytest.approx(want, abs=1e-9)
    report = (data / "report.md").read_text()
    assert "## Questions as the unit of the evaluation" in report
    assert sum(line.startswith("- ") and " at 80% power" in line for line in report.splitlines()) == 3

    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy, symlinks=True, ignore=shutil.ignore_patterns("bundle", "bundle.tar.gz*"))
    for command in (["build", str(copy), "--no-figures"], ["audit", str(copy / "bundle.tar.gz")]):
        proc = subprocess.run([sys.executable, "-m", "evidence", *command], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (copy / "bundle" / "data" / "tables" / "variance_components.csv").read_bytes() == \
        (data / "tables" / "variance_components.csv").read_bytes()
    table = copy / "bundle" / "data" / "tables" / "variance_components.csv"
    lines = table.read_text().splitlines()
    header, cells = lines[0].split(","), lines[1].split(",")
    column = header.index("var_seed_x_question")
    cells[column] = repr(float(cells[column]) + 0.001)
    lines[1] = ",".join(cells)
    table.write_text("\n".join(lines) + "\n")
    reseal_bag(copy / "bundle")
    proc = subprocess.run([sys.executable, "-m", "evidence", "audit", str(copy / "bundle")], capture_output=True,
                          text=True)
    assert proc.returncode == 1
    assert f"data/tables/variance_components.csv: line 2, column var_seed_x_question: {cells[column]!r} does not " \
           "recompute" in proc.stdout
