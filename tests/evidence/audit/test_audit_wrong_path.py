"""Auditing a path that is not a bundle (issue 23, item 2): one line naming the bundle the path is inside,
belongs to or contains (or that none was found), exit 2, nothing read; no finding or error prints a
control character or an undecodable byte of a file's name or content."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import bagit
import pytest

from evidence.__main__ import main

AUDIT = "python -m evidence audit"


@pytest.fixture(scope="module")
def tree(clean_build, tmp_path_factory) -> Path:
    """A sealed sweep, an experiment with two sealed stages, an experiment with an unsealed one, an empty
    directory and a random binary file, side by side under one root (the current directory of the tests)."""
    sweep, result = clean_build
    root = tmp_path_factory.mktemp("tree")
    shutil.copytree(sweep, root / "sweep", ignore=shutil.ignore_patterns("bundle"))
    shutil.copytree(result.bundle_dir, root / "sweep" / "bundle")
    for stage in ("probe", "confirm"):
        (root / "exp" / stage / "jobs").mkdir(parents=True)
        shutil.copy(result.archive, root / "exp" / stage / "bundle.tar.gz")
    (root / "exp" / "experiment.yaml").write_text("name: x\n")
    (root / "fresh" / "probe" / "jobs" / "grpo-1").mkdir(parents=True)
    (root / "fresh" / "experiment.yaml").write_text("name: x\n")
    (root / "empty").mkdir()
    (root / "random.bin").write_bytes(b"\x00\x1b[31m\xff\xfe binary")
    (root / "archives" / "notes" / "sub").mkdir(parents=True)  # gzip tar archives that hold no bag
    (root / "archives" / "notes" / "sub" / "bagit.txt").write_text("a file of that name, not a bag's tag file\n")
    for name, arcname in (("notes.tar.gz", "notes"), ("loose.tgz", "bagit.txt")):
        with tarfile.open(root / "archives" / name, "w:gz") as tar:
            tar.add(root / "archives" / "notes" / ("sub/bagit.txt" if name == "loose.tgz" else ""), arcname=arcname)
    shutil.rmtree(root / "archives" / "notes")
    return root


CASES = {
    "sweep/bundle/data": "sweep/bundle/data is not a bundle: it is inside the bundle sweep/bundle; "
                         f"audit that: {AUDIT} sweep/bundle",
    "sweep/bundle/data/index.csv": "sweep/bundle/data/index.csv is not a bundle: it is inside the bundle "
                                   f"sweep/bundle; audit that: {AUDIT} sweep/bundle",
    "sweep/jobs/grpo-42": "sweep/jobs/grpo-42 is not a bundle: it belongs to the sweep sweep, whose bundle is "
                          f"sweep/bundle.tar.gz; audit that: {AUDIT} sweep/bundle.tar.gz",
    "sweep/jobs/grpo-42/run/checkpoints/step_000010/optimizer.pt": "sweep/jobs/grpo-42/run/checkpoints/step_000010/optimizer.pt is not a bundle: it "
                                                "belongs to the sweep sweep, whose bundle is sweep/bundle.tar.gz; "
                                                f"audit that: {AUDIT} sweep/bundle.tar.gz",
    "sweep/bundle.tar.gz.sha256": "sweep/bundle.tar.gz.sha256 is the SHA256 sidecar of sweep/bundle.tar.gz, not a "
                                  f"bundle; audit that: {AUDIT} sweep/bundle.tar.gz (it checks the sidecar)",
    "exp": "exp is not a bundle: it contains the bundles exp/confirm/bundle.tar.gz, exp/probe/bundle.tar.gz: audit "
           f"one of them (the experiment's is its confirm stage's), e.g. {AUDIT} exp/confirm/bundle.tar.gz",
    "fresh": "fresh is not a bundle and holds none: it contains the sweep(s) fresh/probe, none sealed yet; seal one "
             f"first: python -m evidence build fresh/probe, then {AUDIT} fresh/probe/bundle.tar.gz",
    "fresh/probe/jobs/grpo-1": "fresh/probe/jobs/grpo-1 is not a bundle: it belongs to the sweep fresh/probe, which "
                               "is not sealed yet; seal it first: python -m evidence build fresh/probe, then "
                               f"{AUDIT} fresh/probe/bundle.tar.gz",
    "empty": "empty is not a bundle (a bag directory or its .tar.gz) and holds none within 3 levels; seal a sweep "
             "with python -m evidence build <sweep dir>, then audit its bundle.tar.gz",
    "random.bin": "random.bin is not a bundle (a bag directory or its .tar.gz), and no bundle or sweep contains it; "
                  "audit a sweep's bundle.tar.gz or its bundle/ directory",
    "missing": "missing: no such file or directory",
    "archives/notes.tar.gz": "archives/notes.tar.gz is a gzip tar archive but not a bundle: no directory at its top "
                             "holds a BagIt tag file (bagit.txt); audit a sweep's bundle.tar.gz or its bundle/ directory",
    "archives/loose.tgz": "archives/loose.tgz is a gzip tar archive but not a bundle: no directory at its top holds a "
                          "BagIt tag file (bagit.txt); audit a sweep's bundle.tar.gz or its bundle/ directory",
    "archives": "archives is not a bundle (a bag directory or its .tar.gz) and holds none within 3 levels; seal a "
                "sweep with python -m evidence build <sweep dir>, then audit its bundle.tar.gz",
}


@pytest.mark.parametrize("given", CASES)
def test_a_path_that_is_not_a_bundle_gets_one_line_naming_the_bundle_to_audit(tree, given, capsys, monkeypatch):
    monkeypatch.chdir(tree)
    assert main(["audit", given]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"python -m evidence: error: {CASES[given]}\n"


@pytest.mark.parametrize("sweep", ["sweep", "exp/probe"])
def test_a_sealed_sweep_directory_is_audited_through_its_bundle(tree, sweep, capsys, monkeypatch):
    """Issue 36 section 5: the sweep's bundle is what a reviewer means; the audit says which one it read."""
    monkeypatch.chdir(tree)
    assert main(["audit", sweep]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert err == "" and lines[0] == f"auditing {sweep}/bundle.tar.gz, the bundle of the sweep {sweep}"
    assert lines[-1] == "clean"


@pytest.mark.parametrize("given", ["fresh/probe/jobs/grpo-1", "sweep/jobs/grpo-42", "empty"])
def test_the_console_command_s_refusals_name_its_own_commands(tree, given, capsys, monkeypatch):
    """Run as ``proofgrid audit``, the line names ``proofgrid build`` and ``proofgrid audit``: the commands the user
    types, not the module they run."""
    monkeypatch.chdir(tree)
    assert main(["audit", given], prog="proofgrid") == 2
    expected = CASES[given].replace("python -m evidence ", "proofgrid ")
    assert capsys.readouterr().err == f"proofgrid: error: {expected}\n"
    assert "python -m evidence" not in expected and ("proofgrid build " in expected or "proofgrid audit " in expected)


def test_an_absolute_path_is_answered_with_absolute_paths(tree, capsys):
    assert main(["audit", str(tree / "sweep" / "bundle" / "data")]) == 2
    assert capsys.readouterr().err.endswith(f"audit that: {AUDIT} {tree / 'sweep' / 'bundle'}\n")


def test_the_current_directory_inside_a_bag_names_its_parent(tree, capsys, monkeypatch):
    monkeypatch.chdir(tree / "sweep" / "bundle" / "data")
    assert main(["audit", "."]) == 2
    assert capsys.readouterr().err == f"python -m evidence: error: . is not a bundle: it is inside the bundle ..; " \
                                      f"audit that: {AUDIT} ..\n"


def test_a_directory_of_bundles_names_each_of_them(tree, capsys, monkeypatch):
    monkeypatch.chdir(tree)
    assert main(["audit", "."]) == 2
    assert capsys.readouterr().err == ("python -m evidence: error: . is not a bundle: it contains the bundles "
                                       "exp/confirm/bundle.tar.gz, exp/probe/bundle.tar.gz, sweep/bundle.tar.gz: "
                                       f"audit one of them, e.g. {AUDIT} exp/confirm/bundle.tar.gz\n")


def test_a_tar_gz_that_is_not_a_bundle_through_the_module_and_a_directory_that_cannot_be_read(tree):
    proc = subprocess.run([sys.executable, "-m", "evidence", "audit", "archives/notes.tar.gz"], cwd=tree,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr == f"python -m evidence: error: {CASES['archives/notes.tar.gz']}\n"
    from evidence.audit.locate import is_bag, is_sweep

    unreadable = tree / ("x" * 300)  # its stat raises (name too long), as an unreadable directory's entries do
    assert not is_bag(unreadable) and not is_sweep(unreadable)


def test_no_raw_byte_of_a_name_or_a_content_reaches_the_terminal(tmp_path):
    """Through the module entry point: a path with an escape sequence and an undecodable byte, and a bag
    whose file names and tag values hold them, print as escapes (one line per finding)."""
    odd = os.fsencode(tmp_path) + b"/odd\x1b[2J\xff.bin"
    with open(odd, "wb") as f:
        f.write(b"\x00\x01")
    payload = tmp_path / "bag"
    (payload / "sub").mkdir(parents=True)
    (payload / "sub" / "name\x07.pt").write_bytes(b"\x80\x02binary\x00\x1b]0;title\x07")
    bagit.make_bag(str(payload), {"Source-Commit": "x\x1b[31m"}, checksums=["sha256"])
    for name in (b"/extra\x1b[0m\xfd", b"/data/sub/late\x1b\xfc.pt"):  # undecodable: bagit cannot list them
        with open(os.fsencode(payload) + name, "wb") as f:
            f.write(b"\x00\x9b2J")
    runs = [subprocess.run([sys.executable, "-m", "evidence", "audit", os.fsdecode(path)], capture_output=True,
                           timeout=60) for path in (odd, payload)]
    assert [r.returncode for r in runs] == [2, 1]
    for run in runs:
        text = run.stdout + run.stderr
        assert not any(b < 0x20 and b != 0x0A or b == 0x7F for b in text), text[:400]
        text.decode("utf-8")  # no undecodable byte either
    assert b"odd\\x1b[2J\\udcff.bin is not a bundle" in runs[0].stderr
    assert b"extra\\x1b[0m\\udcfd: extra entry outside the payload" in runs[1].stdout


@pytest.mark.parametrize("given, expected", [
    ("sweep", "sweep is a sweep directory, not a job: validate one of its jobs (sweep/jobs/<job>), or validate and "
              "seal them all: python -m evidence build sweep"),
    ("sweep/bundle", "sweep/bundle is a bundle, not a job: audit it: python -m evidence audit sweep/bundle"),
    ("exp/probe/bundle.tar.gz", "exp/probe/bundle.tar.gz is a bundle, not a job: audit it: python -m evidence audit "
                                "exp/probe/bundle.tar.gz"),
    ("empty", "empty is neither a job directory (with job.json) nor a run directory (with run.json)"),
])
def test_validate_of_a_sweep_a_bundle_or_another_directory_says_what_it_is(tree, given, expected):
    proc = subprocess.run([sys.executable, "-m", "evidence", "validate", given], cwd=tree, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr == f"python -m evidence: error: {expected}\n"
