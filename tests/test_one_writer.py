"""One writer of a sweep's evidence at a time: the launcher (its whole run and its seal), ``python -m evidence
build``, ``python -m launcher seal`` and ``python -m evidence sign`` of the sweep's archive share the sweep's
lock; a second writer is refused in one line naming the holder and what to do, and writes nothing; a seal
that did not complete never exits 0. Every case runs real concurrent processes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep
from evidence import audit_bundle
from evidence.seal.bundle import SweepError, bag_files, write_archive
from facts.files import SWEEP_LOCK
from tests.sweeps import REPO, wait_for

HOLD = """
import sys
from pathlib import Path
from {module} import sweep_lock
{enter}
print("held", flush=True)
sys.stdin.read()
"""
# The holders a second writer meets: a launcher (its lock, as launch.py takes it) and an evidence build.
HOLDERS = {
    "launcher": ("launcher.directory_locks", "held = sweep_lock(Path({sweep!r})); held.__enter__()", "a launcher"),
    "build": ("facts.locks", "held = sweep_lock(Path({sweep!r}), 'build'); held.__enter__()", "python -m evidence build"),
}


def _files(sweep: Path) -> dict[str, str]:
    """Every file of the sweep and its SHA256, but the lock file (whose holder's line changes with the holder)."""
    return {p.relative_to(sweep).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sweep.rglob("*") if p.is_file() and p.name != SWEEP_LOCK}


@pytest.fixture(scope="module")
def sealed(tmp_path_factory) -> Path:
    sweep = make_sweep(tmp_path_factory.mktemp("writers"), algos=("grpo", "rpp"), seeds=(1, 2))
    done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return sweep


def _holder(kind: str, sweep: Path) -> subprocess.Popen:
    module, enter, _ = HOLDERS[kind]
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(module=module, enter=enter.format(sweep=str(sweep)))],
                            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


WRITERS = {
    "build": lambda sweep: [sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"],
    "launcher seal": lambda sweep: [sys.executable, "-m", "launcher", "seal", str(sweep)],
    "sign": lambda sweep: [sys.executable, "-m", "evidence", "sign", str(sweep / "bundle.tar.gz"), "--key",
                           str(_signing_key(sweep.parent / "key"))],
}


def _signing_key(path: Path) -> Path:
    """A real private key: sign refuses a bad key before it looks at the lock, so the lock alone must refuse."""
    from evidence.seal.signing import generate_key

    if not path.is_file():
        generate_key(path)
    return path


@pytest.mark.parametrize("holder", HOLDERS)
@pytest.mark.parametrize("writer", WRITERS)
def test_a_second_writer_is_refused_in_one_line_naming_the_holder_and_writes_nothing(sealed, holder, writer):
    before = _files(sealed)
    proc = _holder(holder, sealed)
    try:
        done = subprocess.run(WRITERS[writer](sealed), cwd=REPO, capture_output=True, text=True, timeout=120)
    finally:
        proc.communicate("", timeout=30)  # the holder lets go
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert f"held by {HOLDERS[holder][2]} (pid {proc.pid}" in lines[0] or (
        holder == "launcher" and f"another launcher (pid {proc.pid}) is running in {sealed}" in lines[0]), lines
    assert "wait for it to end" in lines[0]
    assert _files(sealed) == before  # nothing written: no staging directory, the bundle and its archive as they were


def test_an_archive_that_is_not_the_sealed_bag_is_refused_and_replaces_nothing(sealed, tmp_path):
    bag = Path(shutil.copytree(sealed / "bundle", tmp_path / "bundle"))
    archive = tmp_path / "bundle.tar.gz"
    archive.write_bytes(b"the archive before")
    expected = bag_files(bag)
    (bag / "data" / "index.csv").unlink()  # a bag cut short after it was sealed
    with pytest.raises(SweepError, match=r"bundle/ changed after it was sealed \(1 file\(s\) differ, e\.g\. "
                                         r"data/index\.csv\); nothing archived"):
        write_archive(bag, archive, expected=expected)
    assert archive.read_bytes() == b"the archive before"


@pytest.mark.slow
def test_a_build_while_the_launcher_runs_and_seals_the_sweep_is_refused_and_the_launchers_seal_holds(tmp_path):
    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "launch.py", "-m", "algo=grpo", "seed=1", "workload.n_updates=2",
           "workload.eval.n_prompts=2", f"hydra.sweep.dir={sweep_dir}"]
    launcher = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PROOFGRID_PORT_BASE": "24600"})
    try:
        wait_for(lambda: (sweep_dir / "jobs" / "grpo-1" / "job.json").is_file(), 300, "the job to start")
        done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep_dir)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        out, err = launcher.communicate(timeout=900)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert f"held by a launcher (pid {launcher.pid}" in lines[0] and "python -m launcher status" in lines[0]
    assert launcher.returncode == 0, err[-3000:]
    assert "audit: clean" in out
    assert json.loads((sweep_dir / "jobs" / "grpo-1" / "job.json").read_text())["state"] == "COMPLETED"
    assert audit_bundle(sweep_dir / "bundle.tar.gz") == []
