"""launcher.local.local_backend.wait_for_an_exit: a job's slot is refilled when the job ends, not at the next look."""

import subprocess
import time

from launcher.local.local_backend import wait_for_an_exit


def test_the_wait_ends_when_one_process_exits_and_lasts_its_timeout_when_none_does():
    long = subprocess.Popen(["sleep", "60"])
    try:
        short = subprocess.Popen(["sleep", "0.3"])
        started = time.monotonic()
        wait_for_an_exit([long, short], 30)
        assert time.monotonic() - started < 20 and short.poll() == 0  # the short one's end, far before 30 s
        started = time.monotonic()
        wait_for_an_exit([long], 0.5)
        assert 0.4 < time.monotonic() - started < 20 and long.poll() is None
        wait_for_an_exit([short], 30)  # reaped already: nothing to wait for
        assert time.monotonic() - started < 20
    finally:
        long.kill()
        long.wait()
