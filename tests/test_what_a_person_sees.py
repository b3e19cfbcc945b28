"""What a person sees (issue 12): failure causes in the summary, ``launcher status`` and the
incidents; plain progress lines off a terminal; natural job order; the small one-line errors."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from facts.failures import failure_cause
from launcher.progress import SweepProgress, natural_key
from tests.sweeps import REPO, index_rows, launch

ENV = {"OMP_NUM_THREADS": "1"}
# lr=1e30 passes the schema but the first update blows the weights up: the trainer itself fails
# at its second step (non-finite gradient norm), after validation, as a real job failure would.
DIVERGING = ("algo=grpo", "seed=1234,42", "workload.lr=1e30", "workload.n_updates=3",
             "workload.eval.n_prompts=8")


@pytest.fixture(scope="module")
def failed_sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("ux") / "fail"
    proc = launch(sweep_dir, *DIVERGING, env=ENV)  # stdout is a pipe, as under tee or nohup
    return sweep_dir, proc


def test_a_trainer_exception_is_named_with_its_log_in_the_plain_output_and_the_summary(failed_sweep):
    sweep_dir, proc = failed_sweep
    assert proc.returncode == 1, proc.stderr[-2000:]
    out = proc.stdout
    for job in ("grpo-42", "grpo-1234"):
        assert f"{job}: started" in out
        failed = next(line for line in out.splitlines() if line.startswith(f"{job}: FAILED"))
        assert "non-finite gradient norm" in failed and f"see jobs/{job}/trainer.log" in failed
        rejected = next(line for line in out.splitlines() if line.strip().startswith(f"rejected {job}"))
        assert "job failed: the trainer exited with" in rejected and "non-finite gradient norm" in rejected
        assert f"jobs/{job}/trainer.log" in rejected
        assert json.loads((sweep_dir / "jobs" / job / "job.json").read_text())["failure"]
    assert "tensorboard --logdir" in out


def test_plain_output_has_one_line_per_change_in_natural_order_and_no_live_table(failed_sweep):
    _, proc = failed_sweep
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("sweep ") and "2 job(s)" in lines[0]
    started = [line for line in lines if line.endswith(": started")]
    assert started == ["grpo-42: started", "grpo-1234: started"]  # 42 before 1234
    assert "┏" not in "\n".join(lines[: lines.index(next(ln for ln in lines if ln.startswith("sealing")))])
    # The summary table starts after a blank line and is followed by one: never glued to a heading.
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    bottom = next(i for i, line in enumerate(lines) if line.startswith("└"))
    assert lines[bottom + 1] == "" and all(len(line) <= 200 for line in lines[top:bottom + 1])


def test_launcher_status_names_the_cause_of_each_failed_job(failed_sweep):
    sweep_dir, _ = failed_sweep
    status = subprocess.run([sys.executable, "-m", "launcher", "status", str(sweep_dir)], cwd=REPO,
                            capture_output=True, text=True, env={**os.environ, **ENV})
    assert status.returncode == 0, status.stderr
    assert "None" not in status.stdout
    rows = [line for line in status.stdout.splitlines() if "grpo-" in line and "│" in line]
    assert [r.split("│")[2].strip() for r in rows] == ["grpo-42", "grpo-1234"]
    causes = [line for line in status.stdout.splitlines() if line.startswith("job grpo-")]
    assert len(causes) == 2 and all("non-finite gradient norm" in c and "trainer.log" in c for c in causes)


def test_the_incident_table_names_the_trainer_exception(failed_sweep):
    sweep_dir, _ = failed_sweep
    for job in ("grpo-42", "grpo-1234"):
        assert "non-finite gradient norm (nan) at step 1" in (sweep_dir / "jobs" / job / "trainer.log").read_text()
        assert index_rows(sweep_dir)[job]["accepted"] == "no"
    incidents = (sweep_dir / "bundle" / "data" / "incidents.csv").read_text()
    assert all(job in incidents for job in ("grpo-42", "grpo-1234")) and "non-finite gradient norm" in incidents
    with open(sweep_dir / "bundle" / "data" / "tables" / "incidents.csv", newline="") as f:
        incidents = list(csv.DictReader(f))
    rejected = [row for row in incidents if row.get("kind") == "rejected"]
    assert {row["job"] for row in rejected} == {"grpo-42", "grpo-1234"}
    assert all("non-finite gradient norm" in " ".join(row.values()) for row in rejected)
    assert "non-finite gradient norm" in (sweep_dir / "bundle" / "data" / "report.md").read_text()


@pytest.fixture(scope="module")
def one_job(tmp_path_factory):
    """One short job, sealed without figures (``figures=false``, said here whatever the suite's default)."""
    sweep_dir = tmp_path_factory.mktemp("ux") / "ok"
    proc = launch(sweep_dir, "algo=grpo", "seed=3", "workload.n_updates=1", "workload.eval.n_prompts=8",
                  "workload.eval.k=2", "figures=false", env=ENV)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return sweep_dir, proc


def test_eval_pass_at_k_reaches_the_trainer_log_and_tensorboard(one_job):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sweep_dir, proc = one_job
    job = sweep_dir / "jobs" / "grpo-3"
    evaluation = json.loads((job / "run" / "eval.json").read_text())
    log_line = next(line for line in (job / "trainer.log").read_text().splitlines() if "eval final" in line)
    assert f"pass@1={evaluation['final']['pass@1']:.4f}" in log_line
    assert f"initial control: pass@1={evaluation['initial']['pass@1']:.4f}" in log_line
    tags = {}
    for events in (job / "run" / "tensorboard").glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            tags[tag] = [(e.step, e.value) for e in acc.Scalars(tag)]
    # One line per value: the initial checkpoint at step 0, the final one at n_updates.
    assert tags["eval/pass@2"] == [(0, pytest.approx(evaluation["initial"]["pass@2"])),
                                   (1, pytest.approx(evaluation["final"]["pass@2"]))]
    assert "grpo-3: finished" in proc.stdout


def test_a_sweep_sealed_without_figures_says_so_and_a_later_build_draws_them(one_job):
    sweep_dir, proc = one_job
    data = sweep_dir / "bundle" / "data"
    assert json.loads((sweep_dir / "sweep.json").read_text())["figures"] is False
    assert "audit: clean" in proc.stdout and not (data / "figures").exists()
    report = (data / "report.md").read_text()
    assert "](figures/" not in report and "- `figures/*.svg`" not in report
    assert ("No figure *Raw reward per step*: the bundle was built without figures (`figures=false` at launch, or "
            "`python -m evidence build --no-figures`; `python -m evidence build --figures <sweep>` draws them).") in report
    drawn = subprocess.run([sys.executable, "-m", "evidence", "build", "--figures", str(sweep_dir)], cwd=REPO,
                           capture_output=True, text=True)
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    assert {p.name for p in (data / "figures").iterdir()} >= {"reward.svg", "reward.png", "eval_passk.svg"}
    assert "![Raw reward per step](figures/reward.svg)" in (data / "report.md").read_text()
    audit = subprocess.run([sys.executable, "-m", "evidence", "audit", str(sweep_dir / "bundle.tar.gz")], cwd=REPO,
                           capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]


def _metrics(job_dir: Path, rewards: list[float]) -> None:
    (job_dir / "run").mkdir(parents=True, exist_ok=True)
    with open(job_dir / "run" / "metrics.jsonl", "w") as f:
        for step, reward in enumerate(rewards):
            f.write(json.dumps({"step": step, "rollout/raw_reward": reward}) + "\n")


def test_plain_progress_reports_each_quarter_of_the_steps_once_with_the_latest_reward(tmp_path):
    job = tmp_path / "jobs" / "grpo-1"
    view = SweepProgress.of(tmp_path, {"grpo-1": job}, {"grpo-1": 8})
    view.set_state("grpo-1", "RUNNING")
    assert view.events() == []
    _metrics(job, [0.1, 0.2, 0.3])
    assert view.events() == ["grpo-1: step 3/8 reward 0.300"]
    assert view.events() == []  # nothing new: nothing printed
    _metrics(job, [0.1] * 6 + [0.25])
    assert view.events() == ["grpo-1: step 7/8 reward 0.250"]
    _metrics(job, [0.1] * 8)
    assert view.events() == []  # the last step is reported by the finished line
    assert view.jobs["grpo-1"].phase == "eval"


def test_the_terminal_table_shows_path_phase_reward_and_eta(tmp_path):
    from rich.console import Console

    jobs = {n: tmp_path / "jobs" / n for n in ("grpo-1234", "grpo-42")}
    view = SweepProgress.of(tmp_path, jobs, {n: 4 for n in jobs})
    view.started = time.monotonic() - 10
    view.set_state("grpo-42", "RUNNING")
    _metrics(jobs["grpo-42"], [0.5, 0.75])
    console = Console(width=160, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(view.table("proofgrid sweep"))
    text = console.export_text()
    assert str(tmp_path) in text and "train" in text and "0.750" in text and "ETA 0:" in text
    assert text.index("grpo-42") < text.index("grpo-1234")


def test_natural_order_puts_seed_42_before_1234():
    names = ["rpp-lr3e-4-1234", "grpo-1234", "grpo-42", "grpo-7", "rpp-lr3e-4-42"]
    assert sorted(names, key=natural_key) == ["grpo-7", "grpo-42", "grpo-1234", "rpp-lr3e-4-42", "rpp-lr3e-4-1234"]


@pytest.mark.parametrize("state, words", [("CANCELLED", "cancelled by the scheduler"),
                                          ("TIMEOUT", "time limit"), ("OUT_OF_MEMORY", "memory")])
def test_a_scheduler_end_without_a_recorded_failure_is_named_with_the_log(state, words):
    cause = failure_cause({"state": state, "exit_code": 0}, "grpo-1")
    assert words in cause and cause.endswith("see jobs/grpo-1/trainer.log")
    assert failure_cause({"state": "COMPLETED", "exit_code": 0}, "grpo-1") is None
    assert failure_cause({"state": "RUNNING"}, "grpo-1") is None


@pytest.mark.usefixtures("slurm_cluster")
def test_a_scancelled_slurm_job_shows_the_scheduler_reason_in_status_and_evidence(tmp_path):
    from evidence.gates.index import evaluate_job

    submitted = subprocess.run(["sbatch", "--parsable", "--wrap", "sleep 300", "-o", str(tmp_path / "slurm.out")],
                               capture_output=True, text=True, check=True)
    job_id = submitted.stdout.strip().split(";")[0]
    subprocess.run(["scancel", job_id], check=True)
    job_dir = tmp_path / "sweep" / "jobs" / "grpo-1"
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(json.dumps({"scheduler": "slurm", "job_id": job_id, "state": "RUNNING",
                                                  "algo": "grpo", "seed": 1, "arm": "grpo"}))
    deadline = time.monotonic() + 60
    while True:  # sacct learns of the cancellation within a few seconds
        status = subprocess.run([sys.executable, "-m", "launcher", "status", str(tmp_path / "sweep")], cwd=REPO,
                                capture_output=True, text=True)
        if "CANCELLED" in status.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)
    line = next(ln for ln in status.stdout.splitlines() if ln.startswith("job grpo-1"))
    assert "CANCELLED" in line and "cancelled by the scheduler (scancel" in line and "jobs/grpo-1/trainer.log" in line
    evidence = evaluate_job(job_dir, n_updates=2)
    assert "job failed: cancelled by the scheduler" in evidence.reason()


def test_audit_of_a_sweep_dir_audits_its_bundle_and_a_plain_tar_is_named_as_such(tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "jobs" / "grpo-1").mkdir(parents=True)
    (sweep / "bundle.tar.gz").write_bytes(b"")
    plain = tmp_path / "bundle.tar"
    with tarfile.open(plain, "w") as tar:
        tar.add(sweep / "jobs", arcname="bundle")
    # a sweep directory: its bundle is audited (here an empty file where the archive should be: findings)
    proc = subprocess.run([sys.executable, "-m", "evidence", "audit", str(sweep)], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines()[0] == f"auditing {sweep}/bundle.tar.gz, the bundle of the sweep {sweep}"
    proc = subprocess.run([sys.executable, "-m", "evidence", "audit", str(plain)], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "is an uncompressed tar archive" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("override, suggestion", [("worklaod.lr=1", "workload.lr"), ("workload.lrr=1", "workload.lr"),
                                                  ("workload.evl.k=2", "workload.eval.k")])
def test_a_misspelt_group_or_key_gets_did_you_mean(override, suggestion):
    from launcher.overrides import check_overrides

    assert f"did you mean {suggestion}?" in check_overrides([override])


@pytest.mark.parametrize("override, expected", [
    ("workload.lrr=1", "unknown setting 'workload.lrr'; did you mean workload.lr? (workload.lr=1)"),
    ("workload.lrr=1,2", "unknown setting 'workload.lrr'; did you mean workload.lr? (workload.lr=1,2)"),
    ("+workload.lrr=1", "unknown setting 'workload.lrr' (+ cannot add it: the schema has no such setting); did you "
                        "mean workload.lr? (workload.lr=1)"),
    ("+worklaod.lr=1", "unknown setting 'worklaod.lr' (+ cannot add it: the schema has no such setting); did you "
                       "mean workload.lr? (workload.lr=1)"),
    ("+zzz=red", "unknown setting 'zzz' (+ cannot add it: the schema has no such setting); the config has: "
                    "algo, certify, cluster, debug, dp_size, dry_run, figures, formal, license, output_dir, resume, seed, "
                    "stop_at_step, sweep_dir, tracking, trainer, wait, workload"),
    ("workload.sampling.zzz=1", "unknown setting 'workload.sampling.zzz'; workload.sampling has: "),
    ("clustr=slurm", "unknown setting 'clustr'; did you mean cluster=<option>? (the options are conf/cluster/)"),
])
def test_a_misspelt_key_gets_the_close_existing_key_and_never_a_plus_the_schema_refuses(override, expected):
    """Through ``launch.py``: the suggestion is a command that works, never ``+key=`` for a key the
    schema would refuse next (every schema node is closed)."""
    proc = subprocess.run([sys.executable, "launch.py", override, "dry_run=true"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"proofgrid: error: {expected}") and "+workload" not in line.split(";", 1)[1]
    assert "adds a new key" not in line
    if "did you mean" in line and "<option>" not in line:  # the suggested override is one the config takes
        from launcher.overrides import check_overrides

        assert check_overrides([line.rsplit("(", 1)[1].rstrip(")")]) is None


def test_an_unpinned_input_error_prints_the_exact_pin_command(tmp_path):
    from trainer.inputs import InputDigestError, verify_inputs

    with pytest.raises(InputDigestError) as exc:
        verify_inputs(tmp_path / "gsm8k.json", required=["models/qwen", "data/train.parquet"])
    assert str(exc.value).endswith(".venv/bin/python -m trainer.inputs pin gsm8k models/qwen data/train.parquet")
