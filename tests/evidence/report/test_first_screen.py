"""The report's first screen (issue 12): arms by what tells them apart, the eval table and figure,
and what a reviewer must not read into the numbers; no negative zeros anywhere."""

from __future__ import annotations

import json

from benchmarks.synthetic_sweep import make_sweep
from evidence.seal.bundle import build_bundle
from evidence.tables import fmt, fmt_interval, fmt_signed


def test_the_report_leads_with_the_arms_the_eval_table_and_figure(clean_build_with_figures, clean_build):
    _, result = clean_build_with_figures
    lines = (result.bundle_dir / "data" / "report.md").read_text().splitlines()
    first_screen = lines[: lines.index("## Scope and evidence boundary")]
    assert first_screen[4] == "## At a glance"  # after the title and the headline sentence
    assert [ln for ln in first_screen if ln.startswith("- ") and "accepted seed(s)" in ln] == [
        "- GRPO: 3 accepted seed(s)", "- REINFORCE++: 3 accepted seed(s)", "- REINFORCE++-baseline: 3 accepted seed(s)"]
    assert any(ln.startswith("| GRPO | final − initial |") for ln in first_screen)
    assert "![Eval pass@k: final checkpoints against the initial-checkpoint control](figures/eval_passk.svg)" in first_screen
    assert len(first_screen) < 40
    _, without = clean_build  # built without figures: the place of the figure says so
    report = (without.bundle_dir / "data" / "report.md").read_text()
    assert "No figure *Eval pass@k: final checkpoints against the initial-checkpoint control*: the bundle was built " \
           "without figures" in report.split("## Scope and evidence boundary")[0]


def test_arms_are_told_apart_by_the_settings_that_vary_only(tmp_path):
    arms = {"rpp-lr1e-4": {"algo": "rpp", "workload.lr": "1e-4", "workload.n_updates": "10"},
            "rpp-lr3e-4": {"algo": "rpp", "workload.lr": "3e-4", "workload.n_updates": "10"}}
    report = build_bundle(make_sweep(tmp_path, arms=arms), figures=False).bundle_dir / "data" / "report.md"
    glance = report.read_text().split("## Scope and evidence boundary")[0]
    assert "- rpp-lr1e-4 (workload.lr=1e-4): 3 accepted seed(s)" in glance
    assert "workload.n_updates" not in glance


def test_a_zero_clip_fraction_is_called_out_and_a_nonzero_one_is_not(clean_build, sweep):
    _, result = clean_build  # the factory logs clip_frac 0.0 at every step
    glance = (result.bundle_dir / "data" / "report.md").read_text().split("## Scope and evidence boundary")[0]
    assert "`train/clip_frac` is 0 by construction" in glance
    log = sweep / "jobs" / "grpo-42" / "run" / "metrics.jsonl"
    log.write_text(log.read_text().replace('"train/clip_frac": 0.0', '"train/clip_frac": 0.125', 1))
    report = build_bundle(sweep, figures=False).bundle_dir / "data" / "report.md"
    assert "0 by construction" not in report.read_text()


def test_throughput_of_local_jobs_sharing_a_machine_is_called_a_confound(clean_build, sweep):
    _, result = clean_build  # the factory's jobs are Slurm array tasks: no note
    assert "sharing one machine's CPUs" not in (result.bundle_dir / "data" / "report.md").read_text()
    for i, record in enumerate(sorted((sweep / "jobs").glob("*/job.json"))):
        data = json.loads(record.read_text())
        record.write_text(json.dumps({**data, "job_id": f"local-{i}"}))
    glance = (build_bundle(sweep, figures=False).bundle_dir / "data" / "report.md").read_text()
    assert "sharing one machine's CPUs" in glance.split("## Scope and evidence boundary")[0]


def test_numbers_that_round_to_zero_carry_no_sign():
    assert fmt(-0.00001, 3) == "0.000" and fmt(-0.5, 1) == "-0.5" and fmt(0.0, 2) == "0.00"
    assert fmt_signed(-0.00001) == "0.0000" and fmt_signed(0.25, 2) == "+0.25" and fmt_signed(-0.25, 2) == "-0.25"
    assert fmt_interval((-0.00001, 0.5), 3) == "[0.000, 0.500]"


def test_the_config_dump_is_an_appendix_and_the_report_lists_only_settings_that_change_numbers(clean_build):
    _, result = clean_build
    data = result.bundle_dir / "data"
    report = (data / "report.md").read_text()
    assert "| Config:" not in report and "tables/resolved_config.csv" in report
    differ = (data / "tables" / "algorithm_config.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in differ[1:]] == ["algo.kl_coef", "algo.kl_loss_coef"]  # not algo.name
    appendix = (data / "tables" / "resolved_config.csv").read_text().splitlines()
    assert appendix[0] == "setting,arm,value" and "algo.name,rpp,rpp" in appendix


def test_the_job_column_names_each_job_as_its_reader_knows_it_and_the_scheduler_s_id_beside_it(clean_build):
    """Issue 36 section 5: every report table's "Job" is the job's name (grpo-42, its directory under jobs/), never
    the scheduler's id (local-0, 937650); the jobs table keeps that id in its own "Scheduler job" column."""
    import csv

    _, result = clean_build
    with open(result.bundle_dir / "data" / "index.csv", newline="") as f:
        index = list(csv.DictReader(f))
    names, ids = {r["job"] for r in index}, {r["job_id"] for r in index}
    report = (result.bundle_dir / "data" / "report.md").read_text().splitlines()
    tables = 0
    for i, line in enumerate(report):
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "Job" not in cells or not line.startswith("|"):
            continue
        tables += 1
        column = cells.index("Job")
        rows = [[c.strip() for c in r.strip("|").split("|")] for r in report[i + 2:] if r.startswith("|")]
        rows = rows[:next((k for k, r in enumerate(rows) if len(r) != len(cells)), len(rows))]
        assert rows and {r[column] for r in rows} <= names and not {r[column] for r in rows} & ids, line
        if "Scheduler job" in cells:
            assert {r[cells.index("Scheduler job")] for r in rows} == ids
    assert tables >= 3  # jobs, stability per run, efficiency per run (and resource peaks when sampled)
