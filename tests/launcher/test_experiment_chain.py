"""An experiment with no waiting launcher (``launch.py experiment=... cluster=slurm wait=false``): the chain of Slurm
jobs on the throwaway cluster, every launcher process gone between its stages; and its refusals, before anything
is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.launch_in_process import launch_in_process
from tests.sweeps import REPO, wait_for

# loss_norm cut down as tests/launcher/test_experiment.py's smoke run is: probe 2 jobs of 2 steps, confirm 6 jobs of 3 steps
RUN = ("experiment=loss_norm", "workload.n_updates=3", "workload.eval.n_prompts=4", "cluster=slurm", "wait=false")
ENV = {"PROOFGRID_PORT_BASE": "12000", "OMP_NUM_THREADS": "1"}


def _launch(exp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "launch.py", *RUN, f"hydra.run.dir={exp}"], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **ENV})


def _launcher(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def _chain(exp: Path) -> list[dict]:
    return json.loads((exp / "chain.json").read_text())["steps"]


def _stopped(exp: Path, timeout: float = 900) -> dict:
    """The last decision's record once the chain has stopped: a decision that submitted the next stage appends its
    step before it records its own end, so a last step that ended (done, failed, cancelled) is the chain's end."""
    def ended():
        last = _chain(exp)[-1]["decision"]
        return last.get("outcome") not in (None, "decided") and last
    return wait_for(ended, timeout, "the chain to stop", every_s=2)


def _confirm_submitted(exp: Path) -> bool:
    """Whether the chain has submitted the confirm stage; fails at once, with the log's end, if it stopped first."""
    steps = _chain(exp)
    last = steps[-1]["decision"]
    assert last.get("outcome") not in ("done", "failed", "cancelled"), (exp / last["log"]).read_text()[-3000:]
    return any(s["stage"] == "confirm" for s in steps)


def _started(record: dict) -> float:
    return float(record["started_at"])


@pytest.fixture(scope="module")
def chain(slurm_cluster, tmp_path_factory):
    """One experiment through its whole story, each launcher process gone before the chain goes on: submitted
    (status while it runs); its first decision refused (the probe's evidence held by a build), which stops the
    chain; resumed by the same command; a rerun while it runs submits nothing; cancelled once the confirm stage is
    queued; resumed again to its verdict. What each step printed and left, for the tests below. About 5 min here."""
    exp = tmp_path_factory.mktemp("chain") / "exp"
    seen = SimpleNamespace(exp=exp)
    seen.first = _launch(exp)
    seen.status_running = _launcher("status", exp)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom facts.locks import BUILD, sweep_lock\n"
        f"with sweep_lock({str(exp / 'probe')!r}, BUILD):\n    print('held', flush=True)\n    time.sleep(900)\n")],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        seen.holder_pid = holder.pid
        seen.refused = _stopped(exp)
        seen.status_stopped = _launcher("status", exp)
        seen.stopped_steps = _chain(exp)
        seen.confirm_after_refusal = (exp / "confirm").exists()
    finally:
        holder.kill()
        holder.wait()
    seen.resumed = _launch(exp)
    wait_for(lambda: _confirm_submitted(exp), 600, "the confirm stage's submission", every_s=1)
    seen.while_running = _launch(exp)
    seen.steps_while_running = _chain(exp)
    seen.cancel = _launcher("cancel", exp)
    seen.cancelled_steps = _chain(exp)
    seen.status_cancelled = _launcher("status", exp)
    seen.again = _launch(exp)
    seen.final = _stopped(exp)
    seen.steps = _chain(exp)
    seen.status_done = _launcher("status", exp)
    return seen


@pytest.mark.slow
def test_the_launcher_submits_the_probe_and_a_decision_job_after_it_and_returns(chain):
    first = chain.first
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "== probe: 2 job(s)" in first.stdout and "no launcher needs to stay" in first.stdout
    step = chain.stopped_steps[0]
    assert (step["stage"], step["tasks"], step["decision"]["after"]) == ("probe", 2, "probe")
    assert f"decision job {step['decision']['job_id']} after it seals the probe stage" in first.stdout
    # status while it runs: the chain's table (the probe's array, the decision job waiting on it) and the probe's jobs
    status = chain.status_running
    assert status.returncode == 0, status.stderr
    assert "chain of Slurm jobs (wait=false)" in status.stdout and "has no jobs/" not in status.stderr
    row = next(line for line in status.stdout.splitlines() if f"{step['decision']['job_id']} (after probe)" in line)
    assert step["arrays"][0] in row and ("PENDING" in row or "RUNNING" in row) and "not yet" in row
    assert status.stdout.count("dapo-loss_reduction_") >= 4  # the probe's two jobs: arm and job columns


@pytest.mark.slow
def test_a_decision_that_fails_says_why_in_status_and_its_log_and_the_chain_stops_there(chain):
    refused = chain.refused
    assert (refused["outcome"], refused["exit_code"]) == ("failed", 1)
    why = f"{chain.exp / 'probe'} is held by python -m evidence build (pid {chain.holder_pid}"
    log = (chain.exp / refused["log"]).read_text()
    assert why in log.splitlines()[-1] and log.splitlines()[-1].startswith("proofgrid: experiment stopped: ")
    status = chain.status_stopped
    line = next(ln for ln in status.stdout.splitlines() if ln.startswith(f"decision job {refused['job_id']} "))
    assert "stopped the chain" in line and why in line and line.endswith(f"log: {chain.exp / refused['log']}")
    assert len(chain.stopped_steps) == 1 and not chain.confirm_after_refusal  # nothing ran after it


@pytest.mark.slow
def test_a_rerun_resumes_what_is_missing_and_submits_nothing_while_the_chain_runs(chain):
    resumed = chain.resumed
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "2 job(s) already accepted" in resumed.stdout and "probe: nothing left to run; decision job " in resumed.stdout
    probe_arrays = [a for s in chain.steps if s["stage"] == "probe" for a in s["arrays"]]
    assert probe_arrays == chain.stopped_steps[0]["arrays"]  # the probe was never submitted again
    running = chain.while_running
    assert running.returncode == 0 and "chain of Slurm jobs is still running" in running.stdout, running.stdout
    assert "nothing submitted" in running.stdout and chain.steps_while_running == chain.cancelled_steps[
        :len(chain.steps_while_running)]


@pytest.mark.slow
def test_cancel_stops_the_chain_mid_way_and_the_same_command_resumes_it(chain):
    cancel = chain.cancel
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert "cancelled exp's chain" in cancel.stdout
    confirm = next(s for s in chain.cancelled_steps if s["stage"] == "confirm")
    decision = confirm["decision"]
    states = subprocess.run(["sacct", "-X", "-n", "-P", "-j", decision["job_id"], "--format=State"], capture_output=True,
                            text=True).stdout.split()
    assert states and states[0].startswith("CANCELLED"), states  # the confirm stage's decision job never decided
    assert "the chain was cancelled" in chain.status_cancelled.stdout
    cancelled = [p for p in (chain.exp / "confirm" / "jobs").glob("*/attempts/0/job.json")
                 if json.loads(p.read_text())["state"] == "CANCELLED"]
    assert cancelled, "the cancel came after every confirm job had ended: nothing was cancelled mid-chain"
    again = chain.again
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "probe: nothing left to run" in again.stdout  # the decision job seals the probe and submits the rest
    resubmitted = sum(s["tasks"] for s in chain.steps[len(chain.cancelled_steps):] if s["stage"] == "confirm")
    assert resubmitted == len(cancelled)  # only the cancelled jobs ran again


@pytest.mark.slow
def test_the_chain_ends_with_the_verdict_sealed_and_every_bundle_audits_clean(chain):
    exp, final = chain.exp, chain.final
    assert (final["outcome"], final["after"]) == ("done", "confirm")
    log = (exp / final["log"]).read_text()
    verdict = json.loads((exp / "confirm" / "bundle" / "data" / "verdict.json").read_text())
    assert f"verdict: {verdict['verdict']}" in log and "audit: clean" in log
    for stage in ("probe", "confirm"):
        audit = subprocess.run([sys.executable, "-m", "evidence", "audit", str(exp / stage / "bundle.tar.gz")], cwd=REPO,
                               capture_output=True, text=True, timeout=600)
        assert audit.returncode == 0 and audit.stdout.splitlines()[-1] == "clean", (stage, audit.stdout[-2000:])
    assert "done" in next(ln for ln in chain.status_done.stdout.splitlines() if f"{final['job_id']} (after" in ln)


@pytest.mark.slow
def test_the_bundle_records_the_chain_and_the_registration_came_before_any_job(chain):
    exp = chain.exp
    bundled = json.loads((exp / "confirm" / "bundle" / "data" / "chain.json").read_text())["steps"]
    assert [(s["stage"], s["arrays"], s["decision"]["job_id"]) for s in bundled] == [
        (s["stage"], s["arrays"], s["decision"]["job_id"]) for s in chain.steps]
    assert "overrides" not in json.dumps(bundled) and str(exp) not in json.dumps(bundled)  # no machine path
    records = {stage: {p.parent.name: json.loads(p.read_text()) for p in (exp / stage / "jobs").glob("*/job.json")}
               for stage in ("probe", "confirm")}
    for stage, jobs in records.items():  # each run came from an array its stage's step of the chain recorded
        arrays = {a for s in chain.steps if s["stage"] == stage for a in s["arrays"]}
        assert {r["job_id"].split("_")[0] for r in jobs.values()} <= arrays, stage
    registration = json.loads((exp / "registration.json").read_text())
    registered = datetime.fromisoformat(registration["registered"]).timestamp()
    every = [r for jobs in records.values() for r in jobs.values()]
    assert len(every) == 2 + 6 and registered <= min(map(_started, every))
    assert {r["experiment_sha256"] for r in every} == {registration["spec_sha256"]}
    # the plan each stage's jobs carry is the one the registration bound before the probe ran
    for stage in ("probe", "confirm"):
        assert {r["plan_sha256"] for r in records[stage].values()} == {registration["plans"][stage]["plan_sha256"]}


def test_an_experiment_s_chain_refuses_what_it_cannot_honour_before_anything_is_written(tmp_path):
    for extra, message in ((("cluster.seal_job=true",), "cluster.seal_job=true: an experiment's chain seals each "
                                                         "stage in the decision job after it; drop cluster.seal_job"),
                           ((f"hydra.searchpath=[file://{tmp_path / 'conf'}]",), "wait=false composes the experiment "
                                                                                  "again in each decision job")):
        (tmp_path / "conf").mkdir(exist_ok=True)
        proc = launch_in_process(tmp_path / "exp", *RUN, *extra, multirun=False)
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("proofgrid: error: ") and message in line, line
        assert not (tmp_path / "exp").exists()
    local = launch_in_process(tmp_path / "exp", *RUN[:-2], "wait=false", multirun=False)
    assert local.returncode == 2 and local.stderr.strip() == (
        "proofgrid: error: wait=false needs cluster=slurm: local jobs live only as long as the launcher")
    assert not (tmp_path / "exp").exists()


def test_the_dry_run_of_a_chain_says_how_its_stages_follow_each_other(tmp_path):
    proc = launch_in_process(tmp_path / "exp", *RUN, "dry_run=true", multirun=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("wait=false: the stages run as a chain of Slurm jobs, each stage's array followed (--dependency=afterany) by "
            "a one-CPU decision job (python -m launcher experiment-step <dir> <k>)") in proc.stdout
    assert not (tmp_path / "exp").exists()


def test_status_of_an_experiment_directory_shows_each_stage_s_jobs(tmp_path, capsys):
    """An experiment's directory is no sweep: ``launcher status`` shows each stage that has jobs (it said the
    directory "has no jobs/"); a directory that is neither is still refused in one line."""
    from launcher.entry_points import main

    for stage, job in (("probe", "grpo-1"), ("confirm", "grpo-2")):
        (tmp_path / "exp" / stage / "jobs" / job).mkdir(parents=True)
        (tmp_path / "exp" / stage / "jobs" / job / "job.json").write_text('{"state": "COMPLETED", "exit_code": 0}\n')
    assert main(["status", str(tmp_path / "exp")]) == 0
    out = capsys.readouterr().out
    assert out.index(" probe ") < out.index("grpo-1") < out.index(" confirm ") < out.index("grpo-2")
    assert "chain of Slurm jobs" not in out  # run by a waiting launcher: no chain
    (tmp_path / "other").mkdir()
    assert main(["status", str(tmp_path / "other")]) == 2
    assert capsys.readouterr().err.strip() == (f"proofgrid: error: {tmp_path / 'other'} has no jobs/ directory; is it a "
                                               "sweep directory?")


def test_a_decision_job_asks_for_one_cpu_unless_it_runs_the_probe_s_gradient_check():
    """A decision seals and plans (one CPU, 2G, 30 min); the probe's decision of a spec with a gradient check computes
    both arms' gradients, so it asks for what the profile asks for one job (a GPU site's 16 CPUs, 64G, the A40)."""
    from launcher.experiment.study import compose
    from launcher.slurm.slurm_backend import HELPER_RESOURCES, job_resources

    assert HELPER_RESOURCES == ("--cpus-per-task=1", "--mem=2G", "--time=00:30:00")
    assert job_resources(compose(["cluster=a40_seed000"]).cluster) == (
        "--gres=gpu:NVIDIAA40:1", "--cpus-per-task=16", "--mem=64G", "--time=06:00:00")
    assert job_resources(compose(["cluster=slurm", "cluster.constraint=avx512"]).cluster) == (
        "--cpus-per-task=1", "--mem=4G", "--time=00:30:00", "--constraint=avx512")
