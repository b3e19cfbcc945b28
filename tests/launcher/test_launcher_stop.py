"""What a signal to the local launcher does to its running jobs, on real processes: it says at once
what it is doing, gives each job SIGTERM and a grace period, and a second signal kills them all now."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from tests.sweeps import REPO

# Two jobs that ignore SIGTERM (a trainer deep in a long step): only SIGKILL ends them.
SCRIPT = textwrap.dedent('''
    import os, subprocess, sys, tempfile, time
    from launcher.local.local_backend import stop_jobs
    ready = tempfile.mkdtemp()
    jobs = {f"job{i}": subprocess.Popen(["bash", "-c", f"trap '' TERM; touch {ready}/{i}; sleep 300 & wait; sleep 300"],
                                        start_new_session=True) for i in range(2)}
    while len(os.listdir(ready)) < 2:  # both ignore SIGTERM from here on
        time.sleep(0.05)
    print(" ".join(str(p.pid) for p in jobs.values()), flush=True)
    stop_jobs(jobs, grace_s=float(sys.argv[1]))
    print("returncodes", [p.returncode for p in jobs.values()], flush=True)
''')


def _run(grace_s: float, second_signal: bool) -> tuple[str, str, float]:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(grace_s)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()  # the jobs are up
    time.sleep(0.5)  # stop_jobs is waiting out the grace period
    t0 = time.monotonic()
    if second_signal:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return out, err, time.monotonic() - t0


def test_a_second_signal_kills_the_jobs_at_once():
    out, err, took = _run(grace_s=60, second_signal=True)
    assert "stopping 2 running job(s) at their next step, up to 60 s (Ctrl-C again to kill them now)" in err, err
    assert "killing them now (job0, job1; each restarts from its last checkpoint on the next run)" in err, err
    assert took < 20, took
    assert f"returncodes [{-signal.SIGKILL}, {-signal.SIGKILL}]" in out, out


def test_jobs_that_outlive_the_grace_period_are_killed():
    out, err, took = _run(grace_s=2, second_signal=False)
    assert "killing them now" not in err and took < 20, (err, took)
    # the grace's end is said, with the jobs it kills: a silent SIGKILL would read as a crash
    assert ("2 s passed: killing the job(s) still running (job0, job1; each restarts from its last checkpoint "
            "on the next run)") in err, err
    assert f"returncodes [{-signal.SIGKILL}, {-signal.SIGKILL}]" in out, out
