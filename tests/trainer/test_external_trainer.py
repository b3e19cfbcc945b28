"""Trainers that are not proofgrid's, run as jobs (issue 20): the cross-trainer comparison through
``launch.py`` (proofgrid, TRL's GRPOTrainer and the plain example script, one small sweep shared by the
tests below), and the contract's bad input, each a one-line cause: real processes, real TensorBoard
files, the toy's real model directory."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.gates.metrics_log import validate_metrics
from facts import METRICS_LOG, RUN_RECORD, checkpoint_name
from facts.files import BUNDLE_ARCHIVE, MACHINE_NAMES
from launcher.experiment import REGISTRATION
from tests.sweeps import CONTRACT_SCRIPT_HEAD, REPO, index_rows, job_records, launch, reseal_bag
from trainer.external.external_metrics import MetricsError, jsonl_line, read_log, to_records
from trainer.external.external_process import TrainerProcess, WriteWatch, exit_words, wait_watching
from trainer.external.final_model import CheckpointError, check_final_model
from trainer.external.trainer_spec import MetricsSpec

TOY_MODEL = REPO / "trainer" / "assets" / "toy" / "model"
NO_TRL = importlib.util.find_spec("trl") is None
STEPS = 2
JSONL = MetricsSpec("jsonl", "log.jsonl", {"train/loss": "loss", "rollout/raw_reward": "reward"}, "it", 0)


@pytest.fixture(scope="module")
def three_trainers(tmp_path_factory):
    """One sweep: algo=grpo on proofgrid's trainer, on TRL and as the plain script, one seed, 2 steps."""
    if NO_TRL:
        pytest.fail("TRL is part of the test install (make test installs the trl extra)")
    sweep = tmp_path_factory.mktemp("trainers") / "sweep"
    proc = launch(sweep, "trainer=proofgrid,trl,command", "algo=grpo", "seed=1", f"workload.n_updates={STEPS}",
                  f"workload.checkpoint_every={STEPS}", "workload.eval.n_prompts=16", timeout=900)
    return sweep, proc


@pytest.mark.slow
def test_one_sweep_runs_three_trainers_and_one_evaluation_judges_them_all(three_trainers):
    sweep, proc = three_trainers
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = index_rows(sweep)
    assert sorted(rows) == ["grpo-proofgrid-1", "grpo-trl-1", "reinforce-command-1"]
    assert all(r["accepted"] == "yes" for r in rows.values()), rows
    evals = {job: json.loads((sweep / "jobs" / job / "run" / "eval.json").read_text()) for job in rows}
    finals = {job: e["final"]["checkpoint"] for job, e in evals.items()}
    assert finals == {"reinforce-command-1": "trainer/model", "grpo-proofgrid-1": checkpoint_name(STEPS),
                      "grpo-trl-1": "trainer/final"}
    # one evaluation for every trainer: the same subset, seed and sampling, one shared initial control
    identity = {tuple(e["final"][k] for k in ("subset_sha256", "eval_seed", "n_prompts", "k")) for e in evals.values()}
    assert len(identity) == 1
    assert len({json.dumps(e["initial"], sort_keys=True) for e in evals.values()}) == 1


@pytest.mark.slow
def test_trl_metrics_are_mapped_onto_proofgrids_names_and_validated_as_its_own(three_trainers):
    sweep, _ = three_trainers
    run = sweep / "jobs" / "grpo-trl-1" / "run"
    record = json.loads((run / RUN_RECORD).read_text())
    keys = record["metric_keys"]
    assert "rollout/raw_reward" in keys and "train/loss" in keys
    log = validate_metrics(run / METRICS_LOG, "grpo", STEPS)
    assert log.ok and [r["step"] for r in log.records] == list(range(STEPS))  # TRL's steps 1..N, shifted
    source = record["trainer"]["metrics_source"]
    assert source["map"]["rollout/raw_reward"] == "train/reward" and "train/entropy" in source["tags_written"]
    declared = record["algorithm"]
    assert (declared["trainer"], declared["loss_type"], declared["scale_rewards"]) == ("trl", "grpo", "group")
    assert (record["trainer"]["resume"], record["trainer"]["exit_code"]) == (True, 0)


@pytest.mark.slow
def test_the_report_says_what_each_trainer_ran(three_trainers):
    sweep, _ = three_trainers
    report = (sweep / "bundle" / "data" / "report.md").read_text()
    section = report.split("## Algorithm contract", 1)[1].split("\n## ", 1)[0]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in section.splitlines()
            if line.startswith(("| grpo", "| reinforce"))}
    assert set(rows) == {"reinforce-command", "grpo-proofgrid", "grpo-trl"}, section
    assert "TRL loss_type=grpo" in rows["grpo-trl"] and "k3" in rows["grpo-trl"]
    assert "separate k2 KL loss" in rows["grpo-proofgrid"] and "REINFORCE" in rows["reinforce-command"]


@pytest.mark.slow
def test_a_failing_command_is_a_rejected_job_naming_its_last_error_line(tmp_path):
    script = tmp_path / "lab_train.py"
    script.write_text("import sys\nprint('loading')\nprint('ValueError: the lab config has no lr')\nsys.exit(3)\n")
    proc = launch(tmp_path / "s", "trainer=command", f"trainer.command=[{sys.executable},{script}]", "seed=1",
                  "workload.n_updates=2", timeout=300)
    assert proc.returncode != 0 and (tmp_path / "s" / "jobs").is_dir(), proc.stderr[-2000:]
    (record,) = job_records(tmp_path / "s").values()
    assert record["state"] == "FAILED"
    assert "the trainer's command exited with 3: ValueError: the lab config has no lr" in record["failure"], record


# A lab's script that trains nothing but keeps the contract (its log, the initial model copied as its final
# one). Seed 1 leaves processes behind that shed every mark of the job but their descent (issue 33): a new
# session, the issue's ``env -i setsid``, a double fork, ``nohup`` in a shell that exits, ``setsid -f``, and one
# that closes every descriptor; each would write outside the job and into its metrics log after the job ended.
# Seed 2 opens a file outside its job directory for writing and fails on the refusal; seed 3 writes outside
# once, at once, ignores the refusal and completes.
MISBEHAVING = CONTRACT_SCRIPT_HEAD + """late = lambda n: f"sleep {n}; echo late >> {OUTSIDE}; echo late >> {a.output_dir.parent / 'metrics.jsonl'}"
if a.seed == 1:
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.Popen(["sleep", "90"], start_new_session=True, **quiet)
    subprocess.Popen(["env", "-i", "setsid", "sh", "-c", late(91)], **quiet)
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid(); os.execvp("sh", ["sh", "-c", late(92)])
        os._exit(0)
    (a.output_dir / "late93.sh").write_text(late(93))
    subprocess.run(["sh", "-c", f"nohup sh {a.output_dir / 'late93.sh'} >/dev/null 2>&1 &"])
    subprocess.run(["setsid", "-f", "sh", "-c", late(94)], **quiet)
    subprocess.Popen(["env", "-i", "sh", "-c", "exec 0<&- 1>&- 2>&-; " + late(95)], start_new_session=True)
    time.sleep(1)  # the forks are on their way
elif a.seed == 2:
    with open(OUTSIDE, "w") as f:
        f.write("a lab's habit"); f.flush(); time.sleep(1.5)
else:
    try:
        with open(OUTSIDE, "a") as f:
            f.write("once")
    except PermissionError as exc:
        print(f"not written: {exc}")
"""


def _alive(pid: int) -> bool:
    from facts.processes import process_start_ticks

    return process_start_ticks(pid) is not None


def _lab(tmp_path: Path) -> tuple[Path, Path]:
    """The misbehaving lab script as a trainer spec of its own (``-cd <lab> trainer=lab``); and its outside file."""
    outside = tmp_path / "lab_cache.log"
    script = tmp_path / "lab_train.py"
    script.write_text(f"OUTSIDE = {str(outside)!r}\n" + MISBEHAVING)
    lab = tmp_path / "lab"
    (lab / "trainer").mkdir(parents=True)
    text = (REPO / "conf" / "trainer" / "command.yaml").read_text().replace("name: command", "name: lab")
    (lab / "trainer" / "lab.yaml").write_text(text.replace('"{repo}/examples/trainers/reinforce.py"', f'"{script}"'))
    return lab, outside


def _left_running(sweep: Path) -> list[dict]:
    run = json.loads((sweep / "jobs" / "reinforce-lab-1" / "run" / RUN_RECORD).read_text())
    return run["trainer"].get("left_running", [])


def _shed_processes_were_found_and_ended(sweep: Path, records: dict) -> None:
    """Seed 1's job names every process that shed the job's marks (found when its command exited, below the external
    run, their subreaper, and ended before proofgrid's evaluation), none of them lives on, and nothing it would have
    written after the job is anywhere."""
    left = _left_running(sweep)
    commands = {c["cmd"] for c in left}
    assert {"sleep 90", *(f"sleep {n}" for n in range(91, 96))} <= commands, left
    assert not [c["pid"] for c in left if _alive(c["pid"])], left  # found, then ended: none writes later
    record = records["reinforce-lab-1"]
    assert record["state"] == "FAILED" and "process(es) running after it exited, ended before proofgrid's evaluation" \
        in record["failure"], record
    assert index_rows(sweep)["reinforce-lab-1"]["accepted"] == "no"
    # the run failed before its metrics were read: a late ``echo late >> metrics.jsonl`` would have made the file
    assert not (sweep / "jobs" / "reinforce-lab-1" / "run" / METRICS_LOG).exists()


def _end_what_is_left(sweep: Path, records: dict) -> None:
    left = records.get("reinforce-lab-1", {}).get("cleanup", [])
    with contextlib.suppress(OSError, ValueError, KeyError):
        left = [*left, *_left_running(sweep)]
    for item in left:
        if item.get("pid") and _alive(item["pid"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(item["pid"], signal.SIGKILL)


@pytest.mark.slow
def test_processes_that_shed_the_jobs_marks_are_found_ended_and_reject_it_and_no_write_leaves_the_job(tmp_path):
    lab, outside = _lab(tmp_path)
    sweep = tmp_path / "s"
    proc = launch(sweep, "-cd", str(lab), "trainer=lab", "seed=1,2,3", "workload.n_updates=2",
                  "workload.eval.n_prompts=4", timeout=600)
    records = job_records(sweep)
    try:
        assert proc.returncode != 0 and sorted(records) == ["reinforce-lab-1", "reinforce-lab-2", "reinforce-lab-3"], proc.stderr[-2000:]
        for record in records.values():  # what held each job, in its record
            assert record["guard"]["processes"] == "subreaper", record["guard"]
            assert record["guard"]["writes"].startswith("landlock ABI "), record["guard"]
        names = json.loads((sweep / "jobs" / "reinforce-lab-3" / MACHINE_NAMES).read_text())  # for a build elsewhere
        assert socket.gethostname() in names["hosts"], names
        _shed_processes_were_found_and_ended(sweep, records)
        rows = index_rows(sweep)
        wrote = records["reinforce-lab-2"]
        assert wrote["state"] == "FAILED" and rows["reinforce-lab-2"]["accepted"] == "no"
        assert f"Permission denied: '{outside}'; a job writes only inside its job directory" in wrote["failure"], wrote
        assert rows["reinforce-lab-3"]["accepted"] == "yes", rows["reinforce-lab-3"]  # its write was refused at the source
        assert not outside.exists()
    finally:
        _end_what_is_left(sweep, records)


@pytest.mark.usefixtures("slurm_cluster")
def test_processes_that_shed_the_jobs_marks_are_found_and_ended_inside_a_slurm_step(tmp_path):
    """The same on the real cluster (proctrack/linuxproc: the step follows the process tree, which a double fork
    or setsid leaves; main's runtime let such a process outlive the step and write into the sealed job): the
    runtime, a child subreaper inside the step, keeps them in its tree, names and ends them."""
    lab, outside = _lab(tmp_path)
    sweep = tmp_path / "s"
    proc = launch(sweep, "-cd", str(lab), "trainer=lab", "seed=1", "cluster=slurm", "workload.n_updates=2",
                  "workload.eval.n_prompts=4", timeout=600, env={"PROOFGRID_PORT_BASE": "21000"})
    records = job_records(sweep)
    try:
        assert proc.returncode != 0 and records["reinforce-lab-1"]["scheduler"] == "slurm", proc.stderr[-2000:]
        assert records["reinforce-lab-1"]["guard"]["processes"] == "subreaper"
        _shed_processes_were_found_and_ended(sweep, records)
        assert not outside.exists()
    finally:
        _end_what_is_left(sweep, records)


# The TRL experiment cut down for a run in the suite's budget: two seeds (so exploratory: a verdict
# on fewer than three seeds must say so), a one-step probe, 2-step runs, 4 evaluation prompts.
SMALL_TRL_EXPERIMENT = ("experiment.seeds=[1,2]", "+experiment.exploratory=true", "experiment.probe.steps=1",
                        f"workload.n_updates={STEPS}", f"workload.checkpoint_every={STEPS}", "workload.eval.n_prompts=4")
TRL_ARMS = {"per_sequence": "grpo", "batch_tokens": "dapo"}  # conf/experiment/loss_norm_trl.yaml: TRL's loss_type


def _run_trl_experiment(exp: Path, *overrides: str, env: dict[str, str] | None = None,
                        timeout: float = 1200) -> subprocess.CompletedProcess:
    if NO_TRL:
        pytest.fail("TRL is part of the test install (make test installs the trl extra)")
    cmd = [sys.executable, "launch.py", "experiment=loss_norm_trl", *overrides, f"hydra.run.dir={exp}"]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def _check_trl_experiment(exp: Path, proc: subprocess.CompletedProcess, seeds: list[int]) -> dict[str, dict]:
    """What the TRL experiment must show after probe -> confirm -> verdict, wherever it ran: each arm TRL's
    GRPOTrainer with its own loss_type in every stage, judged by proofgrid's one evaluation; the verdict's
    arms are those loss types, the report's contract table names TRL's loss per arm, and the sealed bundle
    audits clean through ``python -m evidence audit``. Returns the confirm stage's job records."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    labels = {arm: f"grpo-trl-loss_type_{loss_type}" for arm, loss_type in TRL_ARMS.items()}
    data = exp / "confirm" / "bundle" / "data"
    probe = json.loads((data / "stages" / "probe" / "probe.json").read_text())
    assert set(probe["arms"]) == set(labels.values()) and all(a["step_s"] > 0 for a in probe["arms"].values())
    confirm = exp / "confirm"
    rows = index_rows(confirm)
    assert sorted(rows) == sorted(f"{label}-{seed}" for label in labels.values() for seed in seeds), rows
    assert all(row["accepted"] == "yes" for row in rows.values()), rows
    for stage, stage_seeds in (("probe", [1]), ("confirm", seeds)):
        for arm, loss_type in TRL_ARMS.items():
            for seed in stage_seeds:
                run = json.loads((exp / stage / "jobs" / f"{labels[arm]}-{seed}" / "run" / RUN_RECORD).read_text())
                command = run["trainer"]["command"]
                assert command[command.index("--loss-type") + 1] == loss_type, command
                declared = run["algorithm"]
                assert (declared["trainer"], declared["loss_type"]) == ("trl", loss_type), declared
                assert f"(TRL loss_type={loss_type})" in declared["contract"]["normalization"], declared
    verdict = json.loads((data / "verdict.json").read_text())
    assert verdict["verdict"] in ("VALIDATED", "FAILED", "INCONCLUSIVE") and verdict["seeds"] == seeds
    for side, arm in (("baseline", "per_sequence"), ("treatment", "batch_tokens")):
        chosen = verdict["arms"][side]
        assert (chosen["name"], chosen["arm"]) == (arm, labels[arm]), verdict["arms"]
        assert chosen["overrides"] == {"algo": "grpo", "trainer": "trl", "trainer.loss_type": TRL_ARMS[arm]}
    assert [row["seed"] for row in verdict["per_seed"]] == seeds
    assert f"verdict: {verdict['verdict']}" in proc.stdout
    report = (data / "report.md").read_text()
    contract = report[report.index("## Algorithm contract"):].split("\n## ", 1)[0]  # what each arm's runs declare
    for loss_type in TRL_ARMS.values():
        (row,) = [line for line in contract.splitlines() if line.startswith(f"| grpo-trl-loss_type_{loss_type} |")]
        assert row.startswith(f"| grpo-trl-loss_type_{loss_type} | trl | GRPO |") and f"(TRL loss_type={loss_type}) |" in row
    audit = subprocess.run([sys.executable, "-m", "evidence", "audit", str(confirm / BUNDLE_ARCHIVE)], cwd=REPO,
                           capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    return job_records(confirm)


@pytest.mark.slow
@pytest.mark.usefixtures("slurm_cluster")
def test_the_loss_norm_trl_experiment_runs_end_to_end_on_slurm_and_its_bundle_audits_clean(tmp_path):
    """Seed 002's question on TRL (conf/experiment/loss_norm_trl.yaml) through ``launch.py`` on the real Slurm
    cluster, cut down by overrides as a user would for a smoke run: probe -> confirm -> verdict -> sealed bundle,
    the audit clean, the verdict marked exploratory (two seeds). One run for TRL under an experiment: TRL's local
    jobs are tests/trainer/test_workloads.py's and test_trl_adapter.py's, a local experiment's test_experiment.py's
    (three seeds, a verdict that is not exploratory)."""
    exp = tmp_path / "exp"
    proc = _run_trl_experiment(exp, *SMALL_TRL_EXPERIMENT, "cluster=slurm", env={"PROOFGRID_PORT_BASE": "31000"})
    records = _check_trl_experiment(exp, proc, [1, 2])
    assert all(r["job_id"].split("_")[0].isdigit() for r in records.values())  # Slurm jobs, not local
    assert json.loads((exp / "confirm" / "bundle" / "data" / "verdict.json").read_text())["exploratory"] is True
    registration = json.loads((exp / REGISTRATION).read_text())  # the experiment.* overrides are in the spec
    assert registration["overrides"] == sorted(o for o in SMALL_TRL_EXPERIMENT if o.startswith("workload."))
    spec = (exp / "confirm" / "bundle" / "data" / "experiment.yaml").read_text()
    assert "exploratory: true" in spec and "probe:\n  steps: 1" in spec


# -- bad input, underneath: the metrics log -------------------------------------------------------------

def _events(directory: Path, steps: range, tags=("train/reward", "train/loss"), nan_at: int | None = None):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(directory)) as writer:
        for step in steps:
            for tag in tags:
                writer.add_scalar(tag, math.nan if step == nan_at else step / 10, step)


def _records(tmp_path: Path, spec: MetricsSpec, n_updates: int):
    converted = to_records(read_log(spec, tmp_path, n_updates), spec)
    path = tmp_path / METRICS_LOG
    (tmp_path / RUN_RECORD).write_text(json.dumps({"metric_keys": sorted(spec.map)}))  # as the runner declares
    path.write_text("".join(jsonl_line(r) + "\n" for r in converted.records))
    return converted, validate_metrics(path, "grpo", n_updates)


@pytest.mark.slow
def test_every_tensorboard_point_is_read_past_a_thousand_steps_and_judged_by_the_validator(tmp_path):
    _events(tmp_path / "tb", range(1, 1501))
    spec = MetricsSpec("tensorboard", "tb", {"rollout/raw_reward": "train/reward", "train/loss": "train/loss"},
                       None, -1)
    converted, log = _records(tmp_path, spec, 1500)
    assert converted.steps == 1500 and log.ok, log.violations[:3]
    assert [r["step"] for r in log.records] == list(range(1500))
    assert log.records[1499]["train/loss"] == pytest.approx(150.0)


@pytest.mark.parametrize(("steps", "nan_at", "n_updates", "says"), [
    (range(1, 5), 3, 4, "NaN"),
    (range(1, 4), None, 4, "3 of 4 steps present; missing step 3"),  # fewer steps than declared
    ([1, 2, 4], None, 4, "missing step 2"),
])
def test_a_nan_a_missing_step_or_too_few_steps_fails_the_same_validator(tmp_path, steps, nan_at, n_updates, says):
    _events(tmp_path / "tb", steps, nan_at=nan_at)
    spec = MetricsSpec("tensorboard", "tb", {"rollout/raw_reward": "train/reward"}, None, -1)
    _, log = _records(tmp_path, spec, n_updates)
    assert not log.ok and any(says in str(v.problem()) for v in log.violations), log.violations


def test_a_repeated_step_in_one_log_is_a_violation_not_a_silent_overwrite(tmp_path):
    (tmp_path / "log.jsonl").write_text("".join(json.dumps({"it": s, "loss": 0.5, "reward": 1.0}) + "\n"
                                                for s in (0, 1, 1)))
    _, log = _records(tmp_path, JSONL, 3)
    assert not log.ok and any("step" in str(v.problem()) for v in log.violations), log.violations


@pytest.mark.parametrize(("lines", "n_updates", "says"), [
    # a million lines for 4 declared steps: refused at the first step past them, the rest never read
    ((0, 1, 2, 3, 4, 5, 6), 4, "log.jsonl writes tag 'loss' at step 4 (proofgrid step 4), outside the 4 "
                               "declared updates (steps 0..3 after metrics.step_offset 0)"),
    ((0,), 4, "log.jsonl holds more than 4 points of tag 'loss' for 4 declared updates"),
    ((-1, 0, 1), 3, "at step -1 (proofgrid step -1), outside the 3 declared updates"),
])
def test_a_log_past_its_declared_steps_is_refused_at_the_first_point_past_them(tmp_path, lines, n_updates, says):
    import time
    import tracemalloc

    block = "".join(json.dumps({"it": s, "loss": 0.5, "reward": 1.0}) + "\n" for s in lines)
    (tmp_path / "log.jsonl").write_text(block * (10**6 // len(lines)))  # about a million lines
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(MetricsError, match=re.escape(says)):
        read_log(JSONL, tmp_path, n_updates)
    seconds, peak = time.perf_counter() - started, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 1.0 and peak < 1 << 20, (seconds, peak)  # judged while reading: not the whole file


def test_a_tensorboard_log_past_its_declared_steps_is_refused_with_the_file_and_step(tmp_path):
    _events(tmp_path / "tb", range(1, 40))
    spec = MetricsSpec("tensorboard", "tb", {"train/loss": "train/loss"}, None, -1)
    with pytest.raises(MetricsError, match=r"writes tag 'train/loss' at step 5 \(proofgrid step 4\), outside the 4 "
                                           r"declared updates .*; stopped reading there"):
        read_log(spec, tmp_path, 4)


def test_a_jsonl_line_longer_than_any_metrics_line_is_refused_without_reading_it_whole(tmp_path):
    (tmp_path / "log.jsonl").write_text('{"it": 0, "loss": 1, "pad": "' + "x" * (2 << 20) + '"}\n')
    with pytest.raises(MetricsError, match="line 1 is longer than 1048576 bytes"):
        read_log(JSONL, tmp_path, 4)


def test_a_mapped_tag_the_trainer_never_wrote_is_refused_with_the_tags_it_did_write(tmp_path):
    _events(tmp_path / "tb", range(1, 3))
    spec = MetricsSpec("tensorboard", "tb", {"train/grad_norm": "train/gradnorm"}, None, -1)
    with pytest.raises(MetricsError, match=r"tag 'train/gradnorm' \(for train/grad_norm\) that the trainer never "
                                           r"wrote to tb; it wrote: train/loss, train/reward \(2 tags\)"):
        to_records(read_log(spec, tmp_path, 2), spec)


def test_a_tensorboard_file_truncated_mid_record_is_refused(tmp_path):
    _events(tmp_path / "tb", range(1, 20))
    (event,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    event.write_bytes(event.read_bytes()[:-7])
    spec = MetricsSpec("tensorboard", "tb", {"train/loss": "train/loss"}, None, -1)
    with pytest.raises(MetricsError, match="the trainer's TensorBoard log tb: .*"):
        read_log(spec, tmp_path, 19)


@pytest.mark.parametrize(("text", "says"), [
    ('{"it": 0, "loss": 1}\n{"it": 1, "lo', "line 2 is not JSON (a truncated last line)"),
    ('{"step": 0, "loss": 1}\n', "line 1 is not an object with an integer 'it'"),
])
def test_a_jsonl_log_that_cannot_be_read_whole_is_refused(tmp_path, text, says):
    (tmp_path / "log.jsonl").write_text(text)
    with pytest.raises(MetricsError, match=says.replace("(", r"\(").replace(")", r"\)")):
        read_log(JSONL, tmp_path, 4)


# -- bad input, underneath: the final model --------------------------------------------------------------

@pytest.fixture(scope="module")
def model_copy(tmp_path_factory) -> Path:
    return Path(shutil.copytree(TOY_MODEL, tmp_path_factory.mktemp("model") / "final"))


def _variant(model_copy: Path, tmp_path: Path, change) -> Path:
    final = Path(shutil.copytree(model_copy, tmp_path / "final"))
    change(final)
    return final


def _config_change(**values):
    def change(final: Path) -> None:
        config = json.loads((final / "config.json").read_text())
        (final / "config.json").write_text(json.dumps({**config, **values}))
    return change


@pytest.mark.parametrize(("change", "says"), [
    (lambda f: shutil.rmtree(f), "exited 0 but left no final model at trainer/final"),
    (lambda f: (f / "config.json").unlink(), "is not a Hugging Face model directory: it has no config.json"),
    (lambda f: [p.unlink() for p in f.glob("*.safetensors")], "has no weights"),
    (_config_change(num_hidden_layers=7), "is a different architecture: its num_hidden_layers is 7"),
    # settings that keep every tensor's shape but change what the weights compute
    (_config_change(hidden_act="gelu"), "its hidden_act is 'gelu', the workload's model has 'silu'"),
    (_config_change(rms_norm_eps=1e-5), "its rms_norm_eps is 1e-05, the workload's model has 1e-06"),
    (_config_change(rope_parameters={"rope_theta": 1e6, "rope_type": "default"}),
     "its rope_parameters.rope_theta is 1000000.0, the workload's model has 10000.0"),
    (_config_change(rope_parameters={"rope_theta": 1e4, "rope_type": "linear", "factor": 2.0}),
     "its rope_parameters.factor is 2.0, the workload's model has \\(absent\\)"),
    (_config_change(max_position_embeddings=4096), "its max_position_embeddings is 4096"),
    (_config_change(attention_bias=True), "its attention_bias is True"),
    (lambda f: [p.unlink() for p in f.glob("tokenizer*")], "has no tokenizer"),
])
def test_a_final_model_the_evaluator_cannot_load_is_refused_saying_why(model_copy, tmp_path, change, says):
    final = _variant(model_copy, tmp_path, change)
    with pytest.raises(CheckpointError, match=says):
        check_final_model(final, "trainer/final", TOY_MODEL)


def test_the_toy_model_itself_passes_the_final_model_check(model_copy):
    check_final_model(model_copy, "trainer/final", TOY_MODEL)


def test_a_final_model_may_differ_only_in_its_writer_storage_and_runtime_switches(model_copy, tmp_path):
    final = _variant(model_copy, tmp_path, _config_change(transformers_version="9.0.0", dtype="bfloat16",
                                                          use_cache=False, pad_token_id=3))
    check_final_model(final, "trainer/final", TOY_MODEL)


# -- bad input, underneath: the trainer's process --------------------------------------------------------

def _run(tmp_path: Path, argv: list[str]) -> tuple[int, TrainerProcess, WriteWatch]:
    log = open(tmp_path / "trainer.log", "wb")  # noqa: SIM115 (closed below)
    (tmp_path / "job" / "run").mkdir(parents=True)
    process = TrainerProcess(argv, tmp_path / "job" / "run", {"PATH": "/usr/bin:/bin"}, log, hold_stop_signals=False)
    watch = WriteWatch(tmp_path / "job")
    process.start()
    code = wait_watching(process, watch, lambda: None)
    log.close()
    return code, process, watch


def test_a_command_that_is_not_found_is_one_line_naming_it(tmp_path):
    from trainer.external.external_process import CommandError

    with pytest.raises(CommandError, match="the trainer's command 'no-such-trainer' was not found"):
        _run(tmp_path, ["no-such-trainer", "--x"])


def test_a_command_killed_or_failing_reports_its_exit_and_last_error_line(tmp_path):
    code, process, _ = _run(tmp_path, [sys.executable, "-c", "import os; print('RuntimeError: out of memory'); "
                                                              "print('bye', flush=True); os.kill(os.getpid(), 9)"])
    assert exit_words(code) == "was killed by SIGKILL"
    assert process.last_error_line() == "RuntimeError: out of memory"


def test_a_file_written_outside_the_job_directory_is_found(tmp_path):
    outside = tmp_path / "outside.log"
    code, _, watch = _run(tmp_path, [sys.executable, "-c", f"import time; f = open({str(outside)!r}, 'w'); "
                                                          "f.write('x'); f.flush(); time.sleep(1.0)"])
    assert code == 0 and [w.path for w in watch.found.values()] == [str(outside)]


# -- signals: a trainer without a stop handler -----------------------------------------------------------

def _job_spec(tmp_path: Path, script: Path) -> tuple[Path, list[str]]:
    """A job's spec.json for trainer=command running ``script``, as the planner writes it."""
    from omegaconf import OmegaConf

    from trainer.external.trainer_spec import parse_spec, to_record
    from trainer.run_config import compose

    config = OmegaConf.to_container(compose(["trainer=command", "workload.n_updates=2"]), resolve=True)
    spec = parse_spec({**config["trainer"], "command": [sys.executable, str(script), "{output_dir}"]})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"external": {"spec": to_record(spec), "config": config}}))
    return path, [sys.executable, str(script), str(tmp_path / "run" / "trainer")]


@pytest.mark.slow
def test_a_trainer_without_a_stop_handler_is_ended_exits_76_and_its_rerun_starts_from_scratch(tmp_path):
    import signal
    import subprocess
    import time

    from trainer.preemption import EXIT_STOPPED_UNSAVED

    script = tmp_path / "slow_train.py"
    script.write_text("import pathlib, sys, time\npathlib.Path(sys.argv[1], 'partial').write_text('x')\n"
                      "print('training', flush=True)\ntime.sleep(60)\n")
    spec_json, command = _job_spec(tmp_path, script)
    argv = [sys.executable, "-m", "trainer.external", "--job-spec", str(spec_json), "--output-dir",
            str(tmp_path / "run"), "--", *command]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    partial = tmp_path / "run" / "trainer" / "partial"
    deadline = time.monotonic() + 120
    while not partial.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGUSR2)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_STOPPED_UNSAVED, output[-2000:]
    assert "stopped without a checkpoint it can resume from" in output and "starting it from scratch" in output
    assert json.loads((tmp_path / "run" / RUN_RECORD).read_text())["status"] == "stopped"
    script.write_text("import sys\nprint('ValueError: stop here', flush=True)\nsys.exit(1)\n")  # the rerun
    rerun = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 1 and not partial.exists()  # its earlier output was removed
    restarts = json.loads((tmp_path / "run" / RUN_RECORD).read_text())["trainer"]["restarts"]
    assert [r["from"] for r in restarts] == ["scratch"], restarts


# A user's trainer that takes credentials as options (adv-trust F1): it drops them and runs the example REINFORCE script.
CREDENTIAL_TAKER = """import runpy, sys
argv, rest = sys.argv[1:], []
while argv:
    item = argv.pop(0)
    if item in ("--api-key", "--password"):
        print(f"{item} given ({len(argv.pop(0))} characters)")
    else:
        rest.append(item)
sys.argv = [REINFORCE, *rest]
runpy.run_path(REINFORCE, run_name="__main__")
"""
API_KEY, DB_PASSWORD = "Tr0ub4dor&3xyzQ", "q8Zr2LmPv4Ks9TnWc3Xy"


@pytest.mark.slow
def test_a_credential_option_of_a_command_trainer_is_sealed_as_secret_and_a_raw_one_is_an_audit_finding(tmp_path):
    script = tmp_path / "cred_train.py"
    script.write_text(f"REINFORCE = {str(REPO / 'examples' / 'trainers' / 'reinforce.py')!r}\n" + CREDENTIAL_TAKER)
    lab = tmp_path / "lab"
    (lab / "trainer").mkdir(parents=True)
    text = (REPO / "conf" / "trainer" / "command.yaml").read_text().replace("name: command", "name: cred")
    text = text.replace('"{repo}/examples/trainers/reinforce.py"', f'"{script}"')
    text = text.replace('--temperature, "{workload.sampling.temperature}"]',
                        '--temperature, "{workload.sampling.temperature}",\n'
                        '          [--api-key, "{trainer.api_key}"], [--password, "{trainer.db_password}"]]')
    assert "[--api-key" in text
    (lab / "trainer" / "cred.yaml").write_text(text + "api_key: null\ndb_password: null\n")
    sweep = tmp_path / "s"
    proc = launch(sweep, "-cd", str(lab), "trainer=cred", "seed=1", "workload.n_updates=2", "workload.eval.n_prompts=4",
                  f"trainer.api_key='{API_KEY}'", f"trainer.db_password={DB_PASSWORD}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = "reinforce-cred-1"
    log = (sweep / "jobs" / job / "trainer.log").read_text()
    assert "--api-key given (15 characters)" in log and "--password given (20 characters)" in log  # it got them
    bundle = sweep / "bundle"
    public = json.loads((bundle / "data" / "runs" / job / "command.public.json").read_text())["argv"]
    run_argv = json.loads((bundle / "data" / "runs" / job / RUN_RECORD).read_text())["trainer"]["command"]
    launcher_copy = json.loads((sweep / "jobs" / job / "command.public.json").read_text())["argv"]
    for argv in (public, run_argv, launcher_copy):
        assert argv[argv.index("--api-key") + 1] == argv[argv.index("--password") + 1] == "<SECRET>", argv
    sealed = [p for p in bundle.rglob("*") if p.is_file() and p.suffix != ".gz"]
    assert not [p for p in sealed if API_KEY.encode() in p.read_bytes() or DB_PASSWORD.encode() in p.read_bytes()]
    audit = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bundle)], cwd=REPO, capture_output=True,
                           text=True, timeout=600)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    # The raw credential put back into the sealed record, the bundle's manifests and crate restated: a finding.
    forged = tmp_path / "forged"
    shutil.copytree(bundle, forged)
    record = forged / "data" / "runs" / job / "command.public.json"
    data = json.loads(record.read_text())
    data["argv"][data["argv"].index("--password") + 1] = DB_PASSWORD
    record.write_text(json.dumps(data, indent=1))
    reseal_bag(forged)
    audit = subprocess.run([sys.executable, "-m", "evidence", "audit", str(forged)], cwd=REPO, capture_output=True,
                           text=True, timeout=600)
    said = audit.stdout + audit.stderr
    assert audit.returncode != 0 and f"data/runs/{job}/command.public.json" in said, said
    assert "secret option value" in said and DB_PASSWORD not in said, said
