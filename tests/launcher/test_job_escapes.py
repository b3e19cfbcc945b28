"""What an external trainer's command cannot do, through ``launch.py`` (issue 33 item 1; the adversary's F2-F6): one
small sweep of a command trainer whose script, per seed, leaves a process that waits for proofgrid's evaluation of its
model to rewrite it (seed 1), leaves a process that forks and exits in a loop (seed 2), or tries the node's other
ports, a signal to a process outside its job, a file in ``/dev`` and one in ``/dev/shm`` (seed 3). Real processes, the kernel's real
Landlock; the script trains nothing (its final model is the initial one) so the sweep costs one evaluation."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from facts import EVAL_RECORD, RUN_RECORD
from facts.processes import process_start_ticks
from launcher.runtime.confine import landlock_abi
from tests.sweeps import CONTRACT_SCRIPT_HEAD, REPO, free_listener, index_rows, job_records, launch

ABI, _ = landlock_abi()

ESCAPING = CONTRACT_SCRIPT_HEAD + """import socket
run = a.output_dir.parent
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if a.seed in (1, 2):  # shed every mark: a new session, an empty environment
    code = f"# {TAG}\\n" + (FORGER if a.seed == 1 else HOPPER)  # the tag first: a command line is recorded cut short
    subprocess.Popen(["env", "-i", "setsid", sys.executable, "-S", "-c", code, str(run), TAG], **quiet)
else:
    def attempt(what, action):
        try:
            action()
            print(f"[escape] {what}: done", flush=True)
        except OSError as exc:
            print(f"[escape] {what}: {exc.strerror}", flush=True)
    attempt("connect to a daemon's port", lambda: socket.create_connection(("127.0.0.1", DAEMON_PORT), timeout=5).close())
    attempt("signal a process outside the job", lambda: os.kill(VICTIM, 15))
    attempt("make a file in /dev", lambda: open(f"/dev/{TAG}", "w").close())
    attempt("leave a file in /dev/shm", lambda: open(f"/dev/shm/{TAG}", "w").close())
    own = socket.socket()
    own.bind(("127.0.0.1", 0)); own.listen()  # a listener of its own (gloo's pairs), reached in the ephemeral range
    attempt("connect to its own listener", lambda: socket.create_connection(own.getsockname(), timeout=5).close())
"""
# Waits for proofgrid's evaluation of the final model, then rewrites every response as correct (the adversary's F2).
FORGER = """import json, sys, time
run, tag = sys.argv[1], sys.argv[2]
until = time.time() + 600
while time.time() < until:
    try:
        record = json.load(open(f"{run}/eval.json"))
        if "final" in record:
            break
    except (OSError, ValueError):
        pass
    time.sleep(0.01)
record["final"]["pass@1"] = 1.0
json.dump(record, open(f"{run}/eval.json", "w"))
open(f"{run}/trainer/forged", "w").write("after the evaluation")
"""
# Forks and exits in a loop for two minutes (each generation lives well under a millisecond), then writes into the
# job after its record (the adversary's F3).
HOPPER = """import os, sys, time
run, tag = sys.argv[1], sys.argv[2]
until = time.time() + 120
while time.time() < until:
    if os.fork() != 0:
        os._exit(0)
open(f"{run}/trainer/late-hop", "w").write("after the job")
"""


def _tagged(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if tag.encode() in (entry / "cmdline").read_bytes() and process_start_ticks(int(entry.name)):
                    found.append(int(entry.name))
    return found


def _listener(ports: range) -> tuple[socket.socket, int]:
    return free_listener(ports) or pytest.skip(f"no free port in {ports}")


@pytest.fixture(scope="module")
def escapes(tmp_path_factory):
    """The sweep (seeds 1-3), a daemon's listener outside every job's ports and a process outside the job."""
    root = tmp_path_factory.mktemp("escapes")
    tag = f"pg-escape-{root.name}"
    daemon, port = _listener(range(16900, 17000))  # neither a job's block (20000 up) nor the ephemeral range
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", tag], start_new_session=True)
    script = root / "escaping_train.py"
    script.write_text(f"TAG = {tag!r}\nDAEMON_PORT = {port}\nVICTIM = {victim.pid}\nFORGER = {FORGER!r}\n"
                      f"HOPPER = {HOPPER!r}\n" + ESCAPING)
    (root / "conf" / "trainer").mkdir(parents=True)
    spec = (REPO / "conf" / "trainer" / "command.yaml").read_text().replace("name: command", "name: escape")
    (root / "conf" / "trainer" / "escape.yaml").write_text(spec.replace('"{repo}/examples/trainers/reinforce.py"',
                                                                        f'"{script}"'))
    sweep = root / "s"
    try:
        proc = launch(sweep, "-cd", str(root / "conf"), "trainer=escape", "seed=1,2,3", "workload.n_updates=2",
                      "workload.eval.n_prompts=4", timeout=900)
        time.sleep(1)  # a process that outlived its job would be alive now
        survivors = [pid for pid in _tagged(tag) if pid != victim.pid]
        try:
            daemon.accept()[0].close()
            reached = True
        except BlockingIOError:
            reached = False
        yield {"sweep": sweep, "proc": proc, "records": job_records(sweep), "survivors": survivors, "tag": tag,
               "victim_alive": victim.poll() is None, "daemon_reached": reached}
    finally:
        for pid in _tagged(tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        victim.wait()
        daemon.close()
        for left in (f"/dev/{tag}", f"/dev/shm/{tag}"):
            with contextlib.suppress(OSError):
                os.unlink(left)


def _left_running(escapes: dict, job: str) -> list[dict]:
    run = escapes["sweep"] / "jobs" / job / "run"
    return json.loads((run / RUN_RECORD).read_text())["trainer"].get("left_running", [])


@pytest.mark.slow
def test_a_process_the_command_leaves_is_ended_before_proofgrids_evaluation_and_rejects_the_job(escapes):
    record = escapes["records"]["reinforce-escape-1"]
    assert record["state"] == "FAILED", record
    assert "the trainer's command left 1 process(es) running after it exited, ended before proofgrid's evaluation" \
        in record["failure"], record["failure"]
    assert [escapes["tag"] in item["cmd"] for item in _left_running(escapes, "reinforce-escape-1")] == [True]
    run = escapes["sweep"] / "jobs" / "reinforce-escape-1" / "run"
    assert not (run / EVAL_RECORD).exists() and not (run / "trainer" / "forged").exists()
    assert index_rows(escapes["sweep"])["reinforce-escape-1"]["accepted"] == "no"


@pytest.mark.slow
def test_a_process_that_forks_and_exits_in_a_loop_is_ended_and_rejects_the_job(escapes):
    record = escapes["records"]["reinforce-escape-2"]
    assert record["state"] == "FAILED" and "left" in record["failure"], record
    assert escapes["survivors"] == []  # nothing of the job outlived it (the hopper would hop for two minutes)
    assert not (escapes["sweep"] / "jobs" / "reinforce-escape-2" / "run" / "trainer" / "late-hop").exists()
    assert index_rows(escapes["sweep"])["reinforce-escape-2"]["accepted"] == "no"


@pytest.mark.slow
@pytest.mark.skipif(ABI < 6, reason=f"TCP rules need Landlock ABI 4, scopes ABI 6; this kernel has {ABI}")
def test_a_job_reaches_no_other_port_signals_no_other_process_and_makes_no_file_in_dev(escapes):
    record = escapes["records"]["reinforce-escape-3"]
    log = (escapes["sweep"] / "jobs" / "reinforce-escape-3" / "trainer.log").read_text()
    said = [line.removeprefix("[escape] ") for line in log.splitlines() if line.startswith("[escape] ")]
    assert said == ["connect to a daemon's port: Permission denied",
                    "signal a process outside the job: Operation not permitted",
                    "make a file in /dev: Permission denied", "leave a file in /dev/shm: done",
                    "connect to its own listener: done"], log[-3000:]
    assert escapes["victim_alive"] and not escapes["daemon_reached"]
    assert not Path(f"/dev/{escapes['tag']}").exists()
    assert escapes["tag"] in record["dev_shm_left"], record  # noted: shared memory outlives the job
    assert record["state"] == "COMPLETED" and index_rows(escapes["sweep"])["reinforce-escape-3"]["accepted"] == "yes"
    run = escapes["sweep"] / "jobs" / "reinforce-escape-3" / "run"
    assert record["run_outputs_sha256"][EVAL_RECORD] == hashlib.sha256((run / EVAL_RECORD).read_bytes()).hexdigest()
    assert sorted(record["run_outputs_sha256"]) == ["eval.json", "eval/final.jsonl", "metrics.jsonl", "run.json"]
    guard = record["guard"]
    assert guard["network"].startswith(f"landlock ABI {ABI}: TCP bind and connect only to the job's port block"), guard
    assert guard["scopes"] == f"landlock ABI {ABI}: signals and abstract unix sockets only within the job", guard


@pytest.mark.slow
@pytest.mark.parametrize(("what", "edit", "says"), [
    ("eval.json, rewritten to the same values", lambda run: (run / EVAL_RECORD).write_text(
        json.dumps(json.loads((run / EVAL_RECORD).read_text()), indent=3)), "run/eval.json: changed after the job ended"),
    ("a response file, its lines written again", lambda run: (run / "eval" / "final.jsonl").write_text("".join(
        json.dumps(json.loads(line), separators=(",", ":")) + "\n"
        for line in (run / "eval" / "final.jsonl").read_text().splitlines())),
     "run/eval/final.jsonl: changed after the job ended"),
    ("a response file planted", lambda run: shutil.copyfile(run / "eval" / "final.jsonl", run / "eval" / "step_1.jsonl"),
     "run/eval/step_1.jsonl: appeared after the job ended"),
])
def test_a_run_record_that_changed_after_the_job_ended_rejects_the_job_naming_the_file(escapes, tmp_path, what, edit,
                                                                                       says):
    """What the runtime hashed once nothing of the job ran (job.json's run_outputs_sha256) is what the evidence
    judges: a write by something that outlived the job, or a hand edit, rejects the job at the build, and the
    bundle's audit says the rejection rests on that record (issue 33 item 1: seal what was judged)."""
    copy = Path(shutil.copytree(escapes["sweep"], tmp_path / "sweep", symlinks=True,
                                ignore=shutil.ignore_patterns("bundle", "bundle.tar.gz*", "*.lock")))
    edit(copy / "jobs" / "reinforce-escape-3" / "run")
    build = subprocess.run([sys.executable, "-m", "evidence", "build", "--no-figures", str(copy)], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    row = index_rows(copy)["reinforce-escape-3"]
    assert row["accepted"] == "no" and says in row["reason"] and "run_outputs_sha256" in row["reason"], (what, row)
    audit = subprocess.run([sys.executable, "-m", "evidence", "audit", str(copy / "bundle")], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert "rejection: reinforce-escape-3 is rejected" in audit.stdout + audit.stderr, audit.stdout[-3000:]
    assert "outputs" in audit.stdout + audit.stderr and "a valid run left out" not in audit.stdout, audit.stdout[-3000:]


@pytest.mark.parametrize(("ports", "says"), [
    ("[5000,70000]", "cluster.job_ports=[5000, 70000]: 70000 is not a TCP port (1-65535)"),
    ("[0]", "cluster.job_ports=[0]: 0 is not a TCP port (1-65535)"),
    ("[x]", "setting cluster.job_ports=['x'] is refused"),
])
def test_a_declared_port_that_is_no_port_is_refused_in_one_line_before_anything_runs(tmp_path, ports, says):
    proc = launch(tmp_path / "s", "algo=grpo", "seed=1", f"cluster.job_ports={ports}", "dry_run=true", timeout=300)
    assert proc.returncode != 0 and says in proc.stderr + proc.stdout, proc.stderr[-2000:]
    assert not (tmp_path / "s" / "jobs").exists()
