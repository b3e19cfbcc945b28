"""Port blocks: atomic claims across processes, skipping taken ports, release on kill."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.ports import BLOCK_SIZE, NAMED_PORTS, claim_port_block, layout

BASE = 24000  # a range of our own, away from Ray/Slurm defaults


def test_layout_puts_every_named_port_and_the_worker_range_inside_the_block():
    ports, (lo, hi) = layout(2, BASE)
    start = BASE + 2 * BLOCK_SIZE
    assert sorted(ports.values()) == list(range(start, start + len(NAMED_PORTS)))
    assert (lo, hi) == (start + len(NAMED_PORTS), start + BLOCK_SIZE - 1)
    assert set(ports) >= {"ray_gcs", "ray_client_server", "ray_dashboard", "master_port", "sglang_server"}


def test_two_claims_in_one_process_get_different_blocks(tmp_path):
    with claim_port_block(tmp_path, BASE) as a, claim_port_block(tmp_path, BASE) as b:
        assert a.index != b.index
    with claim_port_block(tmp_path, BASE) as c:
        assert c.index == 0  # released blocks are reused


CLAIM_SCRIPT = """
import sys, time
from launcher.ports import claim_port_block
b = claim_port_block(sys.argv[1], int(sys.argv[2]))
print(b.index, flush=True)
time.sleep(float(sys.argv[3]))
"""


def _claimers(tmp_path: Path, n: int, hold_s: float) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", CLAIM_SCRIPT, str(tmp_path), str(BASE), str(hold_s)],
                             stdout=subprocess.PIPE, text=True) for _ in range(n)]


def test_simultaneous_claims_from_many_processes_never_share_a_block(tmp_path):
    procs = _claimers(tmp_path, 6, 3.0)
    indices = [int(p.stdout.readline()) for p in procs]
    for p in procs:
        p.wait()
    assert len(set(indices)) == 6, indices


def test_a_killed_job_releases_its_block(tmp_path):
    (holder,) = _claimers(tmp_path, 1, 60.0)
    held = int(holder.stdout.readline())
    with claim_port_block(tmp_path, BASE) as other:
        assert other.index != held
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with claim_port_block(tmp_path, BASE) as again:
        assert again.index == held


def test_a_port_taken_by_another_process_moves_the_job_to_another_block(tmp_path):
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", BASE + 5))  # a port inside block 0
    squatter.listen()
    try:
        with claim_port_block(tmp_path, BASE) as block:
            assert block.index == 1
            assert all(p >= BASE + BLOCK_SIZE for p in block.ports.values())
    finally:
        squatter.close()


def test_exhausted_range_is_a_clear_error(tmp_path):
    with claim_port_block(tmp_path, BASE, max_blocks=1), pytest.raises(RuntimeError, match="PROOFGRID_PORT_BASE"):
        claim_port_block(tmp_path, BASE, max_blocks=1)


def test_blocks_never_overlap_the_ephemeral_range(tmp_path):
    from launcher.ports import ephemeral_range

    low, _ = ephemeral_range()
    base = low - BLOCK_SIZE  # block 0 ends just below the range; block 1 would overlap it
    with claim_port_block(tmp_path, base, max_blocks=4) as first:
        assert first.start + BLOCK_SIZE - 1 < low
        with pytest.raises(RuntimeError, match="ephemeral"):
            claim_port_block(tmp_path, base, max_blocks=4)


def test_listening_ports_sees_listeners_only():
    from launcher.ports import listening_ports

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", BASE + 700))
    assert listening_ports(range(BASE + 700, BASE + 701)) == []  # bound, not listening
    server.listen()
    try:
        assert listening_ports(range(BASE + 690, BASE + 710)) == [BASE + 700]
    finally:
        server.close()
