"""Building the bundle: acceptance from evidence, incidents, aggregates, sanitising, determinism."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tarfile

import bagit
import pytest

from benchmarks.synthetic_sweep import job_dir, make_sweep, metric_records, set_job_fields, write_eval
from evidence import SweepError, audit_bundle, build_bundle, evaluate_job
from evidence.gates.incidents import IncidentsFileError
from evidence.seal.bundle import LeakError, seal
from evidence.seal.sanitize import Sanitizer
from facts.repo import REPO_ROOT

PAYLOAD = ("report.md", "index.csv", "incidents.csv", "steps.csv", "eval.csv", "tables/stability.csv",
           "tables/efficiency.csv", "tables/eval_per_run.csv", "tables/eval_aggregate.csv",
           "tables/paired_differences.csv", "tables/k1_activation.csv", "figures/reward.svg",
           "figures/eval_passk.svg", "runs/rpp-42/metrics.jsonl", "runs/rpp-42/eval.json",
           "runs/rpp-42/command.public.json", "runs/rpp-42/job.json")


def rows(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def index_of(result) -> dict[str, dict]:
    return {row["job"]: row for row in result.jobs}


def test_clean_sweep_builds_a_valid_bag_that_audits_clean(clean_build_with_figures):
    sweep, result = clean_build_with_figures
    assert result.accepted == 9 and result.incidents == []
    data = result.bundle_dir / "data"
    for rel in PAYLOAD:
        assert (data / rel).is_file(), rel
    bagit.Bag(str(result.bundle_dir)).validate()
    info = (result.bundle_dir / "bag-info.txt").read_text()
    assert "Payload-Oxum: " in info and "Source-Commit: 5f7cd574372288391bb1c41ca0677422cd31e725" in info
    assert "Bagging-Date: 2026-01-15" in info  # from sweep.json, not the build's clock
    assert sorted(p.name for p in result.bundle_dir.glob("*manifest-*.txt")) == ["manifest-sha256.txt",
                                                                               "tagmanifest-sha256.txt"]
    assert (sweep / "bundle.tar.gz.sha256").read_text() == f"{result.archive_sha256}  bundle.tar.gz\n"
    assert audit_bundle(result.bundle_dir) == []
    assert audit_bundle(result.archive) == []
    # one row per (algo, seed, step), metric columns named as in metrics.jsonl
    steps = rows(data / "steps.csv")
    assert len(steps) == 90 and "train/kl_loss" in steps[0] and "rollout/raw_reward" in steps[0]
    assert len(rows(data / "eval.csv")) == 18


def test_archive_is_deterministic(clean_build):
    _, result = clean_build
    with open(result.archive, "rb") as handle:
        header = handle.read(10)
    assert header[3] & 0x08 == 0, "gzip header must not carry a file name"
    assert header[4:8] == b"\0\0\0\0", "gzip mtime must be 0"
    with tarfile.open(result.archive) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and names[0] == "bundle"
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert {m.mode for m in members if m.isfile()} == {0o644}
    assert {m.mode for m in members if m.isdir()} == {0o755}


def test_archive_digest_is_stable_across_rebuilds_and_locations(clean_build_with_figures, tmp_path):
    sweep, result = clean_build_with_figures
    again = build_bundle(sweep)
    assert again.archive_sha256 == result.archive_sha256
    moved = shutil.copytree(sweep, tmp_path / "elsewhere" / "renamed-sweep")
    shutil.rmtree(moved / "bundle")
    assert build_bundle(moved).archive_sha256 == result.archive_sha256


def test_scheduler_failed_with_complete_evidence_is_accepted_and_reported(sweep):
    # Seed 000's job 937654: all updates done, Slurm said FAILED with exit code 2.
    set_job_fields(sweep, "rpp", 1234, state="FAILED", exit_code=2, job_id="937654")
    result = build_bundle(sweep, figures=False)
    row = index_of(result)["rpp-1234"]
    assert (row["accepted"], row["scheduler_state"], row["exit_code"]) == ("yes", "FAILED", 2)
    assert "scheduler state FAILED, exit code 2" in row["reason"]
    (incident,) = result.incidents
    assert (incident.job, incident.job_id, incident.kind) == ("rpp-1234", "937654", "scheduler-state")
    assert incident.action.startswith("accepted on evidence")
    assert "10/10 steps valid" in incident.evidence_boundary
    report = (result.bundle_dir / "data" / "report.md").read_text()
    assert "rpp-1234 (job 937654: FAILED, exit 2)" in report
    assert len([r for r in rows(result.bundle_dir / "data" / "steps.csv") if r["algo"] == "rpp"]) == 30


def test_completed_state_does_not_rescue_broken_evidence(sweep):
    path = job_dir(sweep, "rppb", 2026) / "run" / "metrics.jsonl"
    path.write_text(path.read_text()[:-40])  # truncated last line; job.json still says COMPLETED
    result = build_bundle(sweep, figures=False)
    row = index_of(result)["rppb-2026"]
    assert row["accepted"] == "no" and row["scheduler_state"] == "COMPLETED"
    assert "truncated last line" in row["reason"]


def test_rejected_job_is_kept_out_of_every_aggregate(sweep):
    run = job_dir(sweep, "grpo", 42) / "run" / "metrics.jsonl"
    run.write_text(run.read_text().replace('"train/grad_norm": ', '"train/grad_norm": Infinity, "z": ', 1))
    result = build_bundle(sweep, figures=False)
    assert index_of(result)["grpo-42"]["accepted"] == "no"
    data = result.bundle_dir / "data"
    assert not [r for r in rows(data / "steps.csv") if (r["algo"], r["seed"]) == ("grpo", "42")]
    assert not [r for r in rows(data / "eval.csv") if (r["algo"], r["seed"]) == ("grpo", "42")]
    (grpo,) = [r for r in rows(data / "tables" / "stability.csv") if r["algo"] == "grpo"]
    assert grpo["n_runs"] == "2"
    # Independent reference: plain mean of the two accepted seeds' last-10 raw rewards.
    per_run = [sum(r["rollout/raw_reward"] for r in metric_records("grpo", s, 10)) / 10 for s in (1234, 2026)]
    assert float(grpo["raw_reward_mean"]) == pytest.approx(sum(per_run) / 2, rel=1e-12)
    assert float(grpo["raw_reward_sd"]) == pytest.approx(abs(per_run[0] - per_run[1]) / 2 ** 0.5, rel=1e-12)
    for row in rows(data / "tables" / "paired_differences.csv"):
        if "grpo" in (row["a"], row["b"]):
            assert row["seed_42"] == "" and row["n"] == "2"
    assert not [r for r in rows(data / "tables" / "eval_per_run.csv") if (r["algo"], r["seed"]) == ("grpo", "42")]
    (incident,) = [i for i in result.incidents if i.job == "grpo-42"]
    assert incident.kind == "rejected" and incident.action == "excluded from every aggregate"
    assert "key train/grad_norm: non-finite number Infinity" in incident.title
    assert audit_bundle(result.bundle_dir) == []


def test_all_zero_eval_reward_is_flagged_and_excluded(sweep):
    run_dir = job_dir(sweep, "rppb", 42) / "run"
    write_eval(run_dir, "step_000010", 0.0)
    result = build_bundle(sweep, figures=False)
    assert index_of(result)["rppb-42"]["accepted"] == "no"
    (incident,) = [i for i in result.incidents if i.job == "rppb-42"]
    assert incident.kind == "all-zero-eval-reward" and "final checkpoint" in incident.title


def test_a_sweep_with_a_job_still_running_is_not_sealed(sweep):
    set_job_fields(sweep, "rpp", 1234, state="RUNNING", exit_code=None)
    with pytest.raises(SweepError, match="rpp-1234 is still RUNNING"):
        build_bundle(sweep, figures=False)
    assert not (sweep / "bundle.tar.gz").exists()


def test_a_local_job_is_waited_for_only_while_its_runtime_process_lives(sweep):
    import os
    import subprocess
    import sys

    from facts.processes import runtime_identity

    alive = runtime_identity(os.getpid())  # this test process: alive for the whole test
    set_job_fields(sweep, "rpp", 1234, state="RUNNING", exit_code=None, scheduler="local", **alive)
    with pytest.raises(SweepError, match="rpp-1234 is still RUNNING"):
        build_bundle(sweep, figures=False)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = {**alive, "runtime_pid": int(gone.stdout)}  # reaped: no process with that pid and start time
    set_job_fields(sweep, "rpp", 1234, state="RUNNING", exit_code=None, scheduler="local", **dead)
    result = build_bundle(sweep, figures=False)  # sealed, not waited for forever
    assert index_of(result)["rpp-1234"]["scheduler_state"] == "RUNNING"
    assert any(i.job == "rpp-1234" and "RUNNING" in i.title for i in result.incidents)


def test_all_zero_initial_control_is_flagged_but_not_rejected(sweep):
    write_eval(job_dir(sweep, "rpp", 42) / "run", "step_000010", 0.5, initial_pass1=0.0)
    result = build_bundle(sweep, figures=False)
    assert index_of(result)["rpp-42"]["accepted"] == "yes"
    (incident,) = [i for i in result.incidents if i.job == "rpp-42"]
    assert incident.kind == "all-zero-eval-reward" and "initial" in incident.title


def test_missing_job_directory_is_an_incident(sweep):
    shutil.rmtree(job_dir(sweep, "grpo", 2026))
    result = build_bundle(sweep, figures=False)
    assert index_of(result)["grpo-2026"]["reason"] == "job directory missing"
    assert [i.kind for i in result.incidents] == ["missing-job"]


def test_incidents_yaml_resolutions_exclusions_and_user_incidents(sweep):
    set_job_fields(sweep, "rpp", 1234, state="FAILED", exit_code=2)
    (sweep / "incidents.yaml").write_text(
        "resolutions:\n"
        "  - job: rpp-1234\n    kind: scheduler-state\n"
        "    resolution: replaced the loss...nan regex with the structured validator\n"
        "exclusions:\n  - job: grpo-42\n    reason: wrong eval labels\n"
        "incidents:\n  - title: Container preflight lacked Ruff\n"
        "    evidence: CUDA/import checks passed; pytest had not run\n    resolution: reran pytest\n")
    result = build_bundle(sweep, figures=False)
    kinds = {(i.job, i.kind): i for i in result.incidents}
    assert kinds[("rpp-1234", "scheduler-state")].resolution.startswith("replaced the loss...nan regex")
    assert kinds[("grpo-42", "manual-exclusion")].action == "excluded from every aggregate"
    assert index_of(result)["grpo-42"]["accepted"] == "no"
    assert kinds[("", "user")].source == "incidents.yaml"
    assert (result.bundle_dir / "data" / "incidents.yaml").is_file()
    assert audit_bundle(result.bundle_dir) == []


@pytest.mark.parametrize("text,message", [
    ("exclusions:\n  - job: grpo-42\n", "missing key 'reason'"),
    ("exclusions:\n  - job: grpo-7\n    reason: x\n", "not in the sweep grid"),
    ("notes: []\n", "unknown section 'notes'"),
    ("resolutions:\n  - job: grpo-42\n    resolution: fixed\n", "job 'grpo-42' has no automatic incident to resolve"),
])
def test_incidents_yaml_schema_errors(sweep, text, message):
    (sweep / "incidents.yaml").write_text(text)
    with pytest.raises(IncidentsFileError, match=message):
        build_bundle(sweep, figures=False)


def test_one_seed_statistics_say_n_below_two(tmp_path):
    result = build_bundle(make_sweep(tmp_path, seeds=(42,)), figures=False)
    data = result.bundle_dir / "data"
    report = (data / "report.md").read_text()
    assert "(n<2)" in report and "| n<2 |" in report
    for path in [data / "report.md", *sorted((data / "tables").glob("*.csv"))]:
        assert "nan" not in path.read_text().lower().replace("nancy", ""), path.name
    assert audit_bundle(result.bundle_dir) == []


def test_paths_names_and_secrets_are_sanitised_on_the_way_in(sweep, monkeypatch):
    token = "hf_" + "Q7xYz" * 7
    password = "correct-horse-battery-staple"
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("MY_SERVICE_PASSWORD", password)
    log = job_dir(sweep, "rpp", 42) / "runtime.log"
    log.write_text(log.read_text() + f"HF_TOKEN={token}\nsaving to /home/alice/ckpt and {sweep.resolve()}/x\n"
                   f"db password {password}\nnode cn-042.cluster.example ok\n")
    (job_dir(sweep, "rpp", 42) / "trainer.log").write_text(f"cache in /tmp/ray/session_1, {token}\n")
    run_json = job_dir(sweep, "rpp", 42) / "run" / "run.json"
    record = json.loads(run_json.read_text())
    record["config"]["data_path"] = "/srv/data/gsm8k.parquet"
    run_json.write_text(json.dumps(record))
    result = build_bundle(sweep, figures=False)
    everything = "".join(p.read_text() for p in result.bundle_dir.rglob("*") if p.is_file())
    for leaked in (token, password, "/home/alice", "/srv/data", str(sweep.resolve()), "cn-042"):
        assert leaked not in everything, leaked
    bundled_log = (result.bundle_dir / "data" / "runs" / "rpp-42" / "logs" / "runtime.log").read_text()
    assert "HF_TOKEN=<SECRET>" in bundled_log and "<PATH>" in bundled_log and "<SWEEP_DIR>/x" in bundled_log
    assert "node <HOST> ok" in bundled_log
    assert "Nancy" in bundled_log  # ordinary text survives
    trainer_log = (result.bundle_dir / "data" / "runs" / "rpp-42" / "logs" / "trainer.log").read_text()
    assert trainer_log == "cache in <PATH>, <SECRET>\n"
    assert audit_bundle(result.bundle_dir) == []


def test_seal_refuses_a_bag_that_still_leaks(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_" + "k" * 30)
    stage = tmp_path / "stage"
    stage.mkdir()
    (stage / "log.txt").write_text("loaded /home/alice/model with hf_" + "k" * 30 + "\n")
    with pytest.raises(LeakError) as caught:
        seal(stage, {"Source-Commit": "abc"}, Sanitizer.from_environment())
    reasons = " ".join(str(leak) for leak in caught.value.problems)
    assert "absolute machine path" in reasons and "$HF_TOKEN" in reasons
    assert "k" * 30 not in reasons  # findings never print the secret


def test_user_name_is_replaced(sweep, monkeypatch):
    monkeypatch.setenv("USER", "alice-jones")
    log = job_dir(sweep, "grpo", 42) / "runtime.log"
    log.write_text("run by alice-jones\n")
    result = build_bundle(sweep, figures=False)
    assert (result.bundle_dir / "data" / "runs" / "grpo-42" / "logs" / "runtime.log").read_text() == "run by <USER>\n"


def test_launcher_records_are_understood(sweep):
    # The launcher writes the grid's distinct run lengths as a list, and asks evaluate_job(job_dir).
    record = json.loads((sweep / "sweep.json").read_text())
    record["n_updates"] = [10]
    (sweep / "sweep.json").write_text(json.dumps(record))
    assert evaluate_job(job_dir(sweep, "rppb", 1234)).accepted
    assert build_bundle(sweep, figures=False).accepted == 9
    record["n_updates"] = [10, 20]
    (sweep / "sweep.json").write_text(json.dumps(record))
    with pytest.raises(SweepError, match="not one comparable grid"):
        build_bundle(sweep, figures=False)


def test_one_sample_per_prompt_eval_has_no_pass_at_2_or_4(tmp_path):
    sweep = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=(42, 1234))
    for job in (sweep / "jobs").iterdir():
        summary = write_eval(job / "run", "step_000010", 0.5, n_prompts=8, k=1)
        run = json.loads((job / "run" / "run.json").read_text())
        run["config"]["workload"]["eval"]["n_prompts"] = 8  # as the trainer records the evaluation it ran
        (job / "run" / "run.json").write_text(json.dumps(run))
        for command in job.glob("command*.json"):  # and as the command asked for it
            command.write_text(command.read_text().replace("workload.eval.n_prompts=25", "workload.eval.n_prompts=8"))
        assert all("pass@2" not in entry and "pass@4" not in entry for entry in summary.values())
    commands = sweep / "commands.txt"
    commands.write_text(commands.read_text().replace("workload.eval.n_prompts=25", "workload.eval.n_prompts=8"))
    result = build_bundle(sweep, figures=True)
    assert result.accepted == 4
    aggregate = rows(result.bundle_dir / "data" / "tables" / "eval_aggregate.csv")
    assert {r["pass@2_mean"] for r in aggregate} == {""}
    assert audit_bundle(result.archive) == []


def test_evidence_build_writes_nothing_under_home(sweep, tmp_path):
    """matplotlib's config and font cache (and fontconfig's cache) stay out of ~/.cache and ~/.config."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}
    env["HOME"] = str(home)
    done = subprocess.run([sys.executable, "-m", "evidence", "build", "--figures", str(sweep)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (sweep / "bundle" / "data" / "figures" / "reward.svg").is_file()
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == []


def test_secrets_of_every_kind_are_sealed_out_and_the_audit_agrees(sweep):
    from tests.evidence.seal.test_sanitize import SECRETS

    log = job_dir(sweep, "rpp", 42) / "runtime.log"
    log.write_text(log.read_text() + "".join(f"{kind}: {text}\n" for kind, (text, _) in SECRETS.items()))
    run_json = job_dir(sweep, "rpp", 42) / "run" / "run.json"
    record = json.loads(run_json.read_text())
    record["config"]["notes"] = {kind: text for kind, (text, _) in SECRETS.items()}
    run_json.write_text(json.dumps(record))
    result = build_bundle(sweep, figures=False)
    everything = "".join(p.read_text() for p in result.bundle_dir.rglob("*") if p.is_file())
    for kind, (_, secret_part) in SECRETS.items():
        assert secret_part not in everything, kind
    assert "Nancy" in (result.bundle_dir / "data" / "runs" / "rpp-42" / "logs" / "runtime.log").read_text()
    assert audit_bundle(result.archive) == []


def test_ordinary_word_user_and_host_names_neither_block_sealing_nor_rewrite_keys(sweep, monkeypatch):
    monkeypatch.setenv("USER", "seed")
    monkeypatch.setenv("LOGNAME", "mean")
    for algo in ("grpo", "rpp", "rppb"):
        for seed in (42, 1234, 2026):
            set_job_fields(sweep, algo, seed, node="grpo")
    result = build_bundle(sweep, figures=False)
    assert result.accepted == 9
    data = result.bundle_dir / "data"
    job = json.loads((data / "runs" / "grpo-42" / "job.json").read_text())
    assert job["algo"] == "grpo" and job["seed"] == 42 and job["node"] == "<HOST>"
    assert rows(data / "index.csv")[0]["job"] == "grpo-42"
    assert "seed" in rows(data / "steps.csv")[0] and "<USER>" not in (data / "steps.csv").read_text()
    assert "grpo" in json.loads((data / "sweep.json").read_text())["algos"]
    assert audit_bundle(result.archive) == []


def test_an_integer_too_large_for_a_float_rejects_the_job(sweep):
    log = job_dir(sweep, "grpo", 42) / "run" / "metrics.jsonl"
    log.write_text(log.read_text().replace('"rollout/valid_tokens": ', '"rollout/valid_tokens": -1' + "0" * 400
                                           + ', "x": ', 1))
    result = build_bundle(sweep, figures=False)
    (row,) = [r for r in result.jobs if r["job"] == "grpo-42"]
    assert row["accepted"] == "no" and "integer -10000000000… too large for a float" in row["reason"]
    assert audit_bundle(result.archive) == []


@pytest.mark.parametrize("odd", ["symlink", "directory"])
def test_an_odd_launcher_lock_is_the_launchers_one_line_not_a_traceback(tmp_path, odd):
    """``.launcher.lock`` a symlink (never followed: nothing is created at its target) or a directory:
    ``python -m evidence build`` says so in the launcher's one line, exit 2, and builds nothing."""
    sweep = make_sweep(tmp_path / "s", algos=("grpo",), seeds=(42,))
    lock, victim = sweep / ".launcher.lock", tmp_path / "victim.txt"
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim) if odd == "symlink" else lock.mkdir()
    done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.endswith(f" at {lock}; fix the path or its permissions, then re-run the same command\n")
    assert not victim.exists() and not (sweep / "bundle.tar.gz").exists()
