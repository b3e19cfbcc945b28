"""The job runtime's resource sampler on a real process tree, read against /proc; and its setting's refusal."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.runtime.resource_sampler import ResourceSampler
from tests.sweeps import REPO

HOLD_MIB = 256
CHILD = f"import time; block = bytearray({HOLD_MIB} * 2**20); block[::4096] = b'x' * len(block[::4096]); " \
        "print('ready', flush=True); time.sleep(30)"


def vm_rss_bytes(pid: int) -> int:
    """The kernel's own count, independent of psutil: ``VmRSS`` of /proc/<pid>/status (kB)."""
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_samples_cover_a_child_s_memory_in_increasing_time_and_say_why_no_gpu(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        sampler = ResourceSampler(tmp_path, 0.2).start()
        time.sleep(1.0)
        held = vm_rss_bytes(child.pid)
        record = sampler.stop()
    finally:
        child.kill()
        child.wait()
    samples = [json.loads(line) for line in (tmp_path / "resources.jsonl").read_text().splitlines()]
    assert record["samples"] == len(samples) >= 4 and record["interval_s"] == 0.2
    times = [s["t"] for s in samples]
    assert all(b > a for a, b in zip(times, times[1:]))
    assert all(s["processes"] >= 2 for s in samples)  # this process and its child
    assert held >= HOLD_MIB * 2**20 and all(s["rss_bytes"] >= held for s in samples[1:])
    if record["gpu"].startswith("skipped: "):
        assert all(s["gpus"] is None for s in samples)
    else:  # NVML sees a GPU: each sample has every visible one
        assert all(s["gpus"] and all(g["mem_total_bytes"] >= g["mem_used_bytes"] for g in s["gpus"]) for s in samples)


@pytest.mark.slow  # runs the launcher (its dry run)
def test_a_sample_interval_that_is_not_positive_is_refused_in_one_line_before_anything_runs(tmp_path):
    proc = subprocess.run([sys.executable, "launch.py", "-m", "algo=grpo", "seed=1", "cluster.resource_sample_s=0",
                           "dry_run=true", f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    error = [line for line in (proc.stdout + proc.stderr).splitlines() if "resource_sample_s" in line]
    assert len(error) == 1 and "0" in error[0], proc.stdout + proc.stderr
    assert not (tmp_path / "sweep" / "jobs").exists()
