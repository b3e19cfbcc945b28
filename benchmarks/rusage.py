"""``python -m benchmarks.rusage OUT CMD ...``: run CMD and write its wall s, CPU s and peak resident MiB to OUT.

A process of its own, small (standard library only), between the benchmark and the command: a
child's peak resident size (``ru_maxrss``) counts the pages of the process it was forked from, so a
command forked straight from the benchmark (which imports torch) would report the benchmark's size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main() -> int:
    out, cmd = sys.argv[1], sys.argv[2:]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    with open(out, "w") as f:
        json.dump({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mib": usage.ru_maxrss / 1024}, f)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
