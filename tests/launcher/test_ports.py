"""Port blocks: atomic claims across processes, skipping taken ports, release on kill."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.ports import (
    BLOCK_SIZE,
    DEFAULT_BASE,
    NAMED_PORTS,
    PortLockError,
    chunk_lock_names,
    claim_port_block,
    layout,
    port_base,
)

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


# A claimer holds its block until its stdin is closed: every claim is held until the test has read them all.
CLAIM_SCRIPT = """
import sys
from launcher.ports import claim_port_block
b = claim_port_block(sys.argv[1], int(sys.argv[2]))
print(getattr(b, sys.argv[3]), flush=True)
sys.stdin.read()
"""


def _claimers(tmp_path: Path, n: int, base: int = BASE, field: str = "index", env=None) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", CLAIM_SCRIPT, str(tmp_path), str(base), field],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) for _ in range(n)]


def _release(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.stdin.close()
    for p in procs:
        p.wait(timeout=60)


def test_simultaneous_claims_from_many_processes_never_share_a_block(tmp_path):
    procs = _claimers(tmp_path, 6)
    indices = [int(p.stdout.readline()) for p in procs]  # all six held at once
    _release(procs)
    assert len(set(indices)) == 6, indices


def test_a_killed_job_releases_its_block(tmp_path):
    (holder,) = _claimers(tmp_path, 1)
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


def test_a_listener_on_its_way_out_is_not_a_leftover_and_one_that_stays_is():
    """A job's leftover check gives listeners a moment to close (a killed raylet's memory goes before
    its sockets do): a process that closes its listener within the grace is not reported; one that
    keeps listening is, once the grace is over."""
    import time

    from launcher.runtime.trainer_processes import still_listening

    port = BASE + 720
    closing = subprocess.Popen([sys.executable, "-c", (
        "import socket, sys, time\n"
        f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port}))\n"
        "s.listen(); print('up', flush=True); time.sleep(1.0)\n")], stdout=subprocess.PIPE, text=True)
    assert closing.stdout.readline() == "up\n"
    try:
        assert still_listening(range(port, port + 1), grace_s=20.0) == []
    finally:
        closing.wait(timeout=30)
    staying = socket.socket()
    staying.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    staying.bind(("127.0.0.1", port + 1))
    staying.listen()
    try:
        started = time.monotonic()
        assert still_listening(range(port, port + 2), grace_s=0.5) == [port + 1]
        assert time.monotonic() - started >= 0.5
    finally:
        staying.close()


def test_blocks_from_different_bases_that_overlap_are_never_held_twice(tmp_path):
    """Locks are named by absolute port range: a base shifted by half a block still collides."""
    held = []
    for base in (BASE, BASE + BLOCK_SIZE // 2, BASE + 1, BASE - 7):
        block = claim_port_block(tmp_path, base, max_blocks=8)
        held.append(block)
    try:
        spans = sorted((b.start, b.start + BLOCK_SIZE - 1) for b in held)
        assert all(hi < next_lo for (_, hi), (next_lo, _) in zip(spans, spans[1:])), spans
    finally:
        for b in held:
            b.release()


def test_processes_with_different_bases_and_tmpdirs_never_share_a_port(tmp_path):
    procs = []
    for i, base in enumerate((BASE, BASE + 16, BASE + 40)):
        tmp = tmp_path / f"tmp{i}"
        tmp.mkdir()
        procs += _claimers(tmp_path / "locks", 1, base, "start", env={**os.environ, "TMPDIR": str(tmp)})
    starts = sorted(int(p.stdout.readline()) for p in procs)  # all three held at once
    _release(procs)
    assert all(b - a >= BLOCK_SIZE for a, b in zip(starts, starts[1:])), starts


def test_the_default_lock_dir_is_per_user_and_the_same_whatever_tmpdir_says(tmp_path):
    code = "from launcher.ports import default_lock_dir; print(default_lock_dir())"
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "TMPDIR": str(d)}).stdout.strip()
            for d in (tmp_path, tmp_path / "x", "/tmp")}
    (one,) = seen
    assert str(tmp_path) not in one and one.endswith(f"proofgrid-ports-{os.getuid()}")


def test_a_fresh_lock_dir_is_0700_and_lock_files_0600(tmp_path):
    lock_dir = tmp_path / "fresh"
    with claim_port_block(lock_dir, BASE):
        assert stat.S_IMODE(lock_dir.stat().st_mode) == 0o700
        modes = {stat.S_IMODE(p.stat().st_mode) for p in lock_dir.iterdir()}
    assert modes == {0o600}


@pytest.mark.parametrize("target_kind", ["victim file", "missing file", "directory"])
def test_a_symlink_planted_in_the_lock_dir_is_refused_and_its_target_untouched(tmp_path, target_kind):
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    target = tmp_path / "victim"
    if target_kind == "victim file":
        target.write_text("precious\n")
        target.chmod(0o640)
    elif target_kind == "directory":
        target.mkdir()
    for name in chunk_lock_names(BASE):
        (lock_dir / name).symlink_to(target)
    with pytest.raises(PortLockError, match="remove it"):
        claim_port_block(lock_dir, BASE, max_blocks=1)
    if target_kind == "victim file":
        assert target.read_text() == "precious\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    elif target_kind == "missing file":
        assert not target.exists()  # O_NOFOLLOW: nothing was created through the link


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o755, 0o770])
def test_a_lock_dir_others_can_reach_is_refused_and_never_chmodded(tmp_path, mode):
    lock_dir = tmp_path / "shared"
    lock_dir.mkdir()
    lock_dir.chmod(mode)
    with pytest.raises(PortLockError, match="0700"):
        claim_port_block(lock_dir, BASE)
    assert stat.S_IMODE(lock_dir.stat().st_mode) == mode


def test_a_lock_dir_that_is_a_symlink_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(PortLockError, match="not a plain directory"):
        claim_port_block(tmp_path / "link", BASE)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a file to another user")
def test_lock_files_and_dirs_of_another_user_are_refused(tmp_path):
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    (foreign := lock_dir / chunk_lock_names(BASE)[0]).write_text("")
    os.chown(foreign, 4242, 4242)
    with pytest.raises(PortLockError, match="not a regular file of yours"):
        claim_port_block(lock_dir, BASE, max_blocks=1)
    os.chown(lock_dir, 4242, 4242)
    with pytest.raises(PortLockError, match="uid 4242"):
        claim_port_block(lock_dir, BASE, max_blocks=1)


@pytest.mark.parametrize("value", ["abc", "", " ", "-1", "80", "1023", "65000", "2e4", "020000", "20000.0",
                                   "0x4e20", "２００００"])
def test_a_bad_port_base_is_one_clear_error(value):
    with pytest.raises(PortLockError, match="PROOFGRID_PORT_BASE") as info:
        port_base({"PROOFGRID_PORT_BASE": value})
    assert "\n" not in str(info.value)


def test_a_good_port_base_is_read():
    assert port_base({"PROOFGRID_PORT_BASE": "23000"}) == 23000
    assert port_base({}) == DEFAULT_BASE
