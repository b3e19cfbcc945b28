"""What holds a job's processes to the job (issue 33): Landlock refuses every write outside the job's roots at its
source, in every process the trainer starts, whatever it sheds; the runtime, their child subreaper, finds every
process of the job by descent and ends them. Real processes, the kernel's real Landlock."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from facts.processes import descendants, process_start_ticks
from launcher.runtime.confine import WriteGuard, landlock_abi
from launcher.runtime.trainer_processes import JobProcesses
from tests.sweeps import free_listener

ABI, NO_LANDLOCK = landlock_abi()
needs_landlock = pytest.mark.skipif(not ABI, reason=f"no Landlock here: {NO_LANDLOCK}")


def _guarded(guard: WriteGuard, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", script], preexec_fn=guard.restrict, capture_output=True, text=True, timeout=60)


@needs_landlock
def test_a_guarded_process_changes_files_only_below_its_roots_and_the_kernels(tmp_path):
    job, out = tmp_path / "job", tmp_path / "elsewhere"
    job.mkdir()
    out.mkdir()
    (out / "kept").write_text("before")
    guard = WriteGuard([job])
    # Each line: a change, then whether the kernel let it happen (0) or refused it.
    attempts = {
        "write inside": f"echo x > {job}/a",
        "make a directory inside": f"mkdir {job}/d",
        "rename inside": f"mv {job}/a {job}/d/b",
        "write /dev/null": "echo x > /dev/null",
        "write /dev/urandom": "echo x > /dev/urandom",
        "write /dev/shm": f"echo x > /dev/shm/{job.parent.name}-guard && rm /dev/shm/{job.parent.name}-guard",
        "make a file in /dev": f"echo x > /dev/{job.parent.name}-guard",  # the node's /dev: only the devices a job needs
        "write outside": f"echo x > {out}/new",
        "append outside": f"echo x >> {out}/kept",
        "truncate outside": f"truncate -s 0 {out}/kept",
        "make a directory outside": f"mkdir {out}/d",
        "link outside": f"ln -s {job}/d/b {out}/link",
        "hard link outside": f"ln {job}/d/b {out}/hard",
        "move out of the job": f"mv {job}/d/b {out}/moved",
        "remove outside": f"rm {out}/kept",
    }
    script = "; ".join(f"{command} 2>/dev/null; echo \"{name}=$?\"" for name, command in attempts.items())
    done = _guarded(guard, script)
    codes = dict(line.split("=") for line in done.stdout.splitlines())
    allowed = {"write inside", "make a directory inside", "rename inside", "write /dev/null", "write /dev/urandom",
               "write /dev/shm"}
    assert {name for name, code in codes.items() if code == "0"} == allowed, codes
    assert sorted(p.name for p in out.iterdir()) == ["kept"] and (out / "kept").read_text() == "before"
    assert (job / "d" / "b").is_file()
    assert not Path(f"/dev/{job.parent.name}-guard").exists()
    assert guard.describe(job) == (f"landlock ABI {ABI}: writes only below <JOB_DIR>, /dev/shm, /proc and to the devices "
                                   "/dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom, /dev/tty, /dev/nvidia*, "
                                   "/dev/infiniband")


@needs_landlock
def test_every_process_the_guarded_one_starts_is_guarded_whatever_it_sheds(tmp_path):
    job, out = tmp_path / "job", tmp_path / "elsewhere"
    job.mkdir()
    out.mkdir()
    guard = WriteGuard([job])
    double_fork = (f"{sys.executable} -c \"import os\nif os.fork() == 0:\n  os.setsid()\n  if os.fork() == 0:\n"
                   f"    open('{out}/forked', 'w').write('x')\n  os._exit(0)\"")
    _guarded(guard, f"env -i setsid sh -c 'echo x > {out}/setsid'; setsid -f sh -c 'echo x > {out}/detached'; "
                    f"nohup sh -c 'echo x > {out}/nohup' >/dev/null 2>&1; {double_fork}; sleep 0.5")
    time.sleep(0.5)
    assert list(out.iterdir()) == []


def test_a_guard_that_cannot_be_built_says_why_and_the_record_says_unguarded(tmp_path):
    guard = WriteGuard([tmp_path / "no-such-job"])
    why = guard.describe(tmp_path)
    if ABI:
        assert why == f"unguarded: cannot open {tmp_path / 'no-such-job'} for its rule (No such file or directory)"
    else:
        assert why == f"unguarded: {NO_LANDLOCK}"
    _guarded(guard, f"echo x > {tmp_path}/written")  # nothing was applied: the write happens
    assert (tmp_path / "written").is_file()


def _wait_for(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def test_an_orphan_that_left_the_jobs_group_session_and_environment_is_found_by_descent_and_ended(tmp_path):
    earlier = subprocess.Popen(["sleep", "60"])  # the runtime's process had it before the job: never the job's
    try:
        processes = JobProcesses()
        assert processes.mechanism == "subreaper"
        # The trainer: starts a sleeper in a new session with a clean environment, through a shell that exits.
        trainer = subprocess.Popen(["sh", "-c", "env -i setsid sh -c 'exec sleep 61' >/dev/null 2>&1 &"])
        assert trainer.wait(timeout=30) == 0
        orphan = _wait_for(lambda: [p for p in processes.alive() if Path(f"/proc/{p}/cmdline").read_bytes()
                                    .startswith(b"sleep\0" + b"61")])
        assert earlier.pid not in processes.alive()
        assert os.getsid(orphan[0]) != os.getsid(0)  # its own session: no group or session kill reaches it
        processes.end({trainer.pid, earlier.pid})
        assert processes.alive() == [] and process_start_ticks(orphan[0]) is None
        assert orphan[0] not in descendants(os.getpid())  # reaped, not a zombie of this process
        assert earlier.poll() is None  # the runtime's own earlier child was left alone
    finally:
        earlier.kill()
        earlier.wait()


# A process that forks and exits in a loop (each generation lives well under a millisecond): no snapshot of the tree
# finds it alive, but every generation passes through the subreaper (adopted, then reaped as it exits); ``argv[2]``:
# each generation also makes itself a new session, so that no group kill reaches the next one.
HOPPER = """import os, sys, time
tag, new_session, until = sys.argv[1], sys.argv[2] == "1", time.time() + float(sys.argv[3])
while time.time() < until:
    if os.fork() != 0:
        os._exit(0)
    if new_session:
        os.setsid()
"""


def _with_tag(tag: str) -> list[int]:
    """Live processes whose command line carries ``tag``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag.encode() in (entry / "cmdline").read_bytes() and process_start_ticks(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("new_session", [False, True], ids=["one-group", "a-session-per-generation"])
def test_a_process_that_forks_and_exits_in_a_loop_is_ended_and_the_end_says_it_took_rounds(new_session):
    tag = f"pg-hopper-{os.getpid()}-{int(new_session)}"
    processes = JobProcesses()
    try:
        subprocess.run(["env", "-i", "setsid", "-f", sys.executable, "-S", "-c", HOPPER, tag, str(int(new_session)),
                        "60"], check=True, timeout=30)
        _wait_for(lambda: processes.reap(set()) > 0)  # hopping: its generations pass through the subreaper
        ending = processes.end(set())
        assert ending["quiet"] and ending["rounds"] >= 1 and ending["reaped"] >= 1, ending
        time.sleep(0.5)
        assert _with_tag(tag) == []  # nothing of it is left, anywhere
    finally:
        for pid in _with_tag(tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


def _free_port(ports: range) -> tuple[socket.socket, int]:
    """A listener on the first free port of ``ports`` (outside the kernel's ephemeral range and any job's block)."""
    return free_listener(ports) or pytest.skip(f"no free port in {ports}")


@pytest.mark.skipif(ABI < 6, reason=f"TCP rules need Landlock ABI 4, scopes ABI 6; this kernel has {ABI}")
def test_a_guarded_process_reaches_only_its_jobs_ports_and_signals_only_its_job(tmp_path):
    """A scheduler's daemon (slurmctld), a tracking server or another job's block is a TCP port outside the job's
    own; a sibling job or the launcher is a process outside its Landlock domain (issue 33: a job submitted work
    outside every guard, and killed processes of the user)."""
    job = tmp_path / "job"
    job.mkdir()
    block = range(19800, 19864)
    outside, port = _free_port(range(16900, 17000))  # a daemon's port: neither the job's block nor ephemeral
    own, own_port = _free_port(block)
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    guard = WriteGuard([job], block)
    code = (f"import os, socket\n"
            f"def connect(port):\n"
            f"    try:\n        socket.create_connection(('127.0.0.1', port), timeout=5).close(); return 'ok'\n"
            f"    except OSError as exc:\n        return exc.strerror\n"
            f"mine = socket.socket(); mine.bind(('127.0.0.1', 0)); mine.listen()\n"  # a listener of its own (gloo's)
            f"print('daemon', connect({port}))\nprint('block', connect({own_port}))\n"
            f"print('ephemeral', connect(mine.getsockname()[1]))\n"
            f"try:\n    socket.socket().bind(('127.0.0.1', {port + 1})); print('bind outside ok')\n"
            f"except OSError as exc:\n    print('bind outside', exc.strerror)\n"
            f"try:\n    os.kill({victim.pid}, 15); print('kill ok')\n"
            f"except OSError as exc:\n    print('kill', exc.strerror)\n"
            f"child = os.fork()\nif child == 0:\n    os._exit(0)\nos.waitpid(child, 0)\n")  # its own: signalled
    try:
        done = subprocess.run([sys.executable, "-c", code], preexec_fn=guard.restrict, capture_output=True, text=True,
                              timeout=60)
        said = dict(line.split(" ", 1) for line in done.stdout.splitlines())
        assert said == {"daemon": "Permission denied", "block": "ok", "ephemeral": "ok",
                        "bind": "outside Permission denied", "kill": "Operation not permitted"}, done.stdout + done.stderr
        assert victim.poll() is None
        assert guard.describe_network() == (f"landlock ABI {ABI}: TCP bind and connect only to the job's port block "
                                            f"(64 ports), the kernel's ephemeral range {guard.ephemeral.start}-"
                                            f"{guard.ephemeral.stop - 1}")
        assert guard.describe_scopes() == f"landlock ABI {ABI}: signals and abstract unix sockets only within the job"
    finally:
        victim.kill()
        victim.wait()
        outside.close()
        own.close()


@pytest.mark.skipif(ABI < 4, reason=f"TCP rules need Landlock ABI 4; this kernel has {ABI}")
def test_a_declared_port_is_reachable_and_the_guard_names_it(tmp_path):
    """``cluster.job_ports``: a site's server a job must reach (a tracking server) is declared, not guessed."""
    daemon, port = _free_port(range(16900, 17000))
    guard = WriteGuard([tmp_path], range(19800, 19864), (port,))
    try:
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5).close(); print('ok')"
        done = subprocess.run([sys.executable, "-c", code], preexec_fn=guard.restrict, capture_output=True, text=True,
                              timeout=60)
        assert done.stdout == "ok\n", done.stderr
        assert guard.describe_network().endswith(f", the declared ports {port}")
    finally:
        daemon.close()
