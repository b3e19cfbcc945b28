"""No unexpected files: the bundle's layout is stated once (facts/bundle_layout.py); the build writes
nothing outside it and the audit names, in one finding each, every payload file the build never writes,
however the forger restated the manifests and the RO-Crate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import job_dir, make_sweep, share_initial_eval
from evidence import SweepError, audit_bundle
from evidence.__main__ import main
from evidence.audit.archive import MAX_MEMBER_DEPTH, checked_member_filter
from evidence.seal.bundle import refuse_unexpected_files, write_archive
from evidence.seal.layout import unexpected_files
from facts.repo import REPO_ROOT
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
DEEP = MAX_MEMBER_DEPTH - 5  # directories: the deepest a file under a run may be (deeper: refused unextracted)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A sweep sealed by ``python -m evidence build`` (no figures: the layout is what is tested)."""
    sweep = make_sweep(tmp_path_factory.mktemp("layout"))
    done = subprocess.run([sys.executable, "-m", "evidence", "build", str(sweep), "--no-figures"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return sweep


def forged_archive(sweep: Path, tmp_path: Path, plant) -> tuple[Path, list[str]]:
    """The sweep's bag copied, ``plant(data_dir)`` adding files (it returns their bag-relative paths), then
    resealed as a thorough forger does (crate and manifests restated) and packed as the build packs it."""
    bag = Path(shutil.copytree(sweep / "bundle", tmp_path / "bundle"))
    planted = plant(bag / "data")
    reseal_bag(bag)
    archive = tmp_path / "bundle.tar.gz"
    write_archive(bag, archive)
    return archive, planted


def audit_lines(archive: Path, capsys) -> tuple[int, list[str]]:
    code = main(["audit", str(archive)])
    lines = capsys.readouterr().out.splitlines()
    return code, [line for line in lines[1:-1]]  # between the signature's line and the count


def _write(path: Path, text: str = "x\n") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path.as_posix()


def _deep(data: Path) -> list[str]:
    return [_write(data / "runs" / "grpo-42" / Path(*["d"] * DEEP) / "deep.txt", "deep\n")]


def _copy_of_a_job_not_in_the_index(data: Path) -> list[str]:
    shutil.copytree(data / "runs" / "grpo-42", data / "runs" / "grpo-7")
    return sorted(p.as_posix() for p in (data / "runs" / "grpo-7").rglob("*") if p.is_file())


# Each way of adding what the build never writes: a claim beside the tables, extra files in a run's copy,
# a name the layout has in another place, a non-numbered attempt, a file beside the shared evaluations, a
# nested table, a stage that is not an earlier stage, a whole run of a job the index does not list, depth.
PLANTS = {
    "claim": lambda d: [_write(d / "CLAIM.md", "REINFORCE++ wins, p<0.001\n")],
    "run extras": lambda d: [_write(d / "runs" / "grpo-42" / "notes.txt"),
                             _write(d / "runs" / "rpp-1234" / "eval" / "step_000005.jsonl"),  # only initial/final
                             _write(d / "runs" / "rppb-2026" / "run" / "metrics.jsonl")],
    "misplaced name": lambda d: [_write(d / "runs" / "grpo-42" / "index.csv"), _write(d / "tables" / "eval.json")],
    "attempt": lambda d: [_write(d / "runs" / "grpo-42" / "attempts" / "first" / "job.json", "{}\n")],
    "shared eval": lambda d: [_write(d / "initial_eval" / "eval.json", "{}\n")],
    "nested table": lambda d: [_write(d / "tables" / "more" / "stability.csv")],
    "stage": lambda d: [_write(d / "stages" / "confirm" / "notes.md"), _write(d / "stages" / "probe" / "CLAIM.md")],
    "job not in the index": _copy_of_a_job_not_in_the_index,
    "deep": _deep,
}


@pytest.mark.parametrize("plant", PLANTS.values(), ids=PLANTS.keys())
def test_every_file_the_build_never_writes_is_one_finding_naming_it(built, tmp_path, capsys, plant):
    archive, planted = forged_archive(built, tmp_path, plant)
    code, findings = audit_lines(archive, capsys)
    bag_relative = [f"data/{Path(p).relative_to(tmp_path / 'bundle' / 'data').as_posix()}" for p in planted]
    assert code == 1
    # one finding per planted file, each naming it, and nothing else: only the layout check sees the forgery
    assert sorted(line.split(": ", 1)[0] for line in findings) == sorted(bag_relative), findings


def test_the_audit_of_a_forged_archive_through_the_module_names_the_claim_the_extra_file_and_the_deep_one(
        built, tmp_path):
    archive, _ = forged_archive(built, tmp_path, lambda d: PLANTS["claim"](d) + [_write(d / "runs" / "rpp-42" / "x.md")]
                                + _deep(d))
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(archive)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    named = [line.split(": ", 1)[0] for line in done.stdout.splitlines() if line.startswith("data/")]
    assert named == ["data/CLAIM.md", f"data/runs/grpo-42/{'d/' * DEEP}deep.txt", "data/runs/rpp-42/x.md"]
    assert done.stdout.splitlines()[-1] == "3 finding(s)"


def test_the_build_seals_only_files_of_the_layout(built, tmp_path):
    """What the build writes is the layout the audit holds it to: a payload with a file the layout does not
    state is refused before sealing, naming it; the sealed bundle audits clean."""
    stage = Path(shutil.copytree(built / "bundle" / "data", tmp_path / "data"))
    refuse_unexpected_files(stage, None)  # the payload as built: every file is a layout member
    _write(stage / "runs" / "grpo-42" / "extra.json", "{}\n")
    with pytest.raises(SweepError, match=r"the build wrote data/runs/grpo-42/extra\.json: not a file the build "
                                         r"writes .*nothing sealed"):
        refuse_unexpected_files(stage, None)


def test_names_of_a_sweep_that_are_not_the_layouts_are_not_copied(tmp_path, capsys):
    """An earlier attempt that is not numbered, a rank record that is no rank's and a shared evaluation
    directory that is no key: the build leaves them in the sweep and seals a bundle that audits clean."""
    sweep = make_sweep(tmp_path, algos=("grpo",), seeds=(42,))
    job = job_dir(sweep, "grpo", 42)
    _write(job / "attempts" / "old" / "job.json", json.dumps({"state": "FAILED"}) + "\n")
    _write(job / "run" / "ranks" / "rank-x.jsonl", "{}\n")
    _write(job / "notes.log", "REINFORCE++ wins\n")  # a log the job never keeps, and a logs/ no launcher writes
    _write(job / "logs" / "CLAIM.md", "REINFORCE++ wins\n")
    _write(job / "ranks" / "rank3" / "x.log", "x\n")
    assert main(["build", str(sweep), "--no-figures"]) == 0
    data = sweep / "bundle" / "data" / "runs" / "grpo-42"
    assert not (data / "attempts").exists() and not (data / "ranks").exists()
    assert sorted(p.name for p in (data / "logs").iterdir()) == ["runtime.log"]
    capsys.readouterr()
    assert main(["audit", str(sweep / "bundle.tar.gz")]) == 0


@pytest.mark.parametrize("mode", [0o644, 0o755, 0o777, 0o4755, 0o600, 0o444, 0o111, 0o2770])
@pytest.mark.parametrize("kind", [tarfile.REGTYPE, tarfile.DIRTYPE])
def test_the_audits_extraction_filter_sets_what_tarfiles_data_filter_sets(tmp_path, mode, kind):
    """The audit extracts checked members without the data filter's per-member realpath (quadratic in a deep
    tree's depth); modes and owners come out as the data filter leaves them."""
    member = tarfile.TarInfo("bundle/data/x")
    member.type, member.mode, member.uid, member.gid, member.uname, member.gname = kind, mode, 7, 8, "u", "g"
    ours, reference = checked_member_filter(member, str(tmp_path)), tarfile.data_filter(member, str(tmp_path))
    assert (ours.mode, ours.uid, ours.gid, ours.uname, ours.gname) == (
        reference.mode, reference.uid, reference.gid, reference.uname, reference.gname)


def _with_member(sweep: Path, tmp_path: Path, name: str) -> Path:
    """The sweep's sealed archive with one more directory member ``name`` (a header only: nothing to extract)."""
    archive = tmp_path / "bundle.tar.gz"
    with tarfile.open(sweep / "bundle.tar.gz") as src, tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as out:
        for member in src.getmembers():
            out.addfile(member, src.extractfile(member) if member.isfile() else None)
        extra = tarfile.TarInfo(name)
        extra.type = tarfile.DIRTYPE
        out.addfile(extra)
    return archive


def test_a_member_deeper_than_any_bundle_is_one_finding_through_the_module_nothing_extracted(built, tmp_path):
    """A 2,500-level directory member: one finding naming its depth, no traceback (extracting it would exhaust
    Python's recursion), nothing extracted (no content finding); compare refuses it in one line."""
    archive = _with_member(built, tmp_path, "bundle/data/runs/grpo-42/logs/" + "/".join(["d"] * 2500))
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(archive)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "1 finding(s)"
    assert lines[-2].startswith("bundle.tar.gz:bundle/data/runs/grpo-42/logs/d/d/") and lines[-2].endswith(
        f"member 2505 levels deep, above the {MAX_MEMBER_DEPTH}-level limit of a bundle"), lines[-2]
    assert len(lines[-2]) < 400  # the name cut, not 5,000 characters
    done = subprocess.run([sys.executable, "-m", "evidence", "compare", str(built / "bundle.tar.gz"), str(archive)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "levels deep" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("name,reason", [
    ("bundle/data/runs/grpo-42/" + "/".join(["d"] * (MAX_MEMBER_DEPTH - 3)), f"{MAX_MEMBER_DEPTH + 1} levels deep"),
    ("bundle/data/runs/grpo-42/" + "/".join(["x" * 200] * 6), "characters, above the 1024-character limit"),
    ("bundle/data/runs/grpo-42/" + "n" * 300, "300-byte component, above the 255-byte limit"),
])
def test_a_member_name_too_deep_or_too_long_is_refused_before_extraction(built, tmp_path, name, reason):
    findings = audit_bundle(_with_member(built, tmp_path, name))
    assert len(findings) == 1 and reason in findings[0].reason, findings


def test_a_chain_of_too_deep_directories_is_one_finding(built, tmp_path):
    """A 900-level tree packed as the build packs it (a member per directory): one finding, not one per level."""
    bag = Path(shutil.copytree(built / "bundle", tmp_path / "bundle"))
    _write(bag / "data" / "runs" / "grpo-42" / Path(*["d"] * 900) / "deep.txt")
    reseal_bag(bag)
    write_archive(bag, tmp_path / "deep.tar.gz")
    findings = audit_bundle(tmp_path / "deep.tar.gz")
    assert len(findings) == 1 and "levels deep" in findings[0].reason, findings


def test_a_bag_directory_with_a_deep_tree_is_one_finding_for_the_audit_and_compare(built, tmp_path, capsys):
    """Not an archive: a bag directory holding a 2,500-level tree; the audit's and compare's walks (bagit's,
    the layout's, the leak scan's) never meet it: one finding, one line."""
    bag = Path(shutil.copytree(built / "bundle", tmp_path / "bundle"))
    here = bag / "data" / "runs" / "grpo-42" / "logs"
    here.mkdir(exist_ok=True)
    cwd = Path.cwd()
    try:
        os.chdir(here)  # relative steps: the absolute path would pass the system's limit
        for _ in range(2500):
            os.mkdir("d")
            os.chdir("d")
        os.chdir(cwd)
        findings = audit_bundle(bag)
        assert len(findings) == 1 and findings[0].file == "data/runs/grpo-42/logs/" + "d/" * 27 + "d", findings
        assert f"{MAX_MEMBER_DEPTH + 1} levels deep" in findings[0].reason
        capsys.readouterr()
        assert main(["compare", str(built / "bundle"), str(bag)]) == 2
        assert "levels deep" in capsys.readouterr().err
    finally:
        os.chdir(cwd)
        _remove_chain(here / "d")  # pytest's own clean-up (shutil.rmtree) recurses: it would fail on this tree


def _remove_chain(top: Path) -> None:
    """Remove a chain of single directories of any depth, without recursion."""
    if not top.is_dir():
        return
    cwd, names = Path.cwd(), []
    try:
        os.chdir(top)
        while (subdirs := [e.name for e in os.scandir(".") if e.is_dir(follow_symlinks=False)]):
            os.chdir(subdirs[0])
            names.append(subdirs[0])
        for name in reversed(names):
            os.chdir("..")
            os.rmdir(name)
    finally:
        os.chdir(cwd)
    top.rmdir()


def _empty_dirs(data: Path) -> list[str]:
    made = [data / "runs" / "grpo-42" / "REINFORCE++ wins p=0.0001 (replicated)", data / "stages" / "probe"]
    for directory in made:
        directory.mkdir(parents=True)
    return [f"{d.as_posix()}/" for d in made]


def test_every_empty_directory_in_the_payload_is_one_finding_naming_it(built, tmp_path, capsys):
    """Directories the build never creates: empty ones hold no file for the file check to name (B20)."""
    archive, planted = forged_archive(built, tmp_path, _empty_dirs)
    code, findings = audit_lines(archive, capsys)
    bag_relative = [f"data/{Path(p).relative_to(tmp_path / 'bundle' / 'data').as_posix()}/" for p in planted]
    assert code == 1
    assert sorted(line.split(": ", 1)[0] for line in findings) == sorted(bag_relative), findings
    assert all("an empty directory" in line for line in findings)


# B13: files a layout pattern admits (logs/<log>, logs/<rank>/<log>, ranks/<rank>.jsonl, eval/<eval_kind>.jsonl,
# attempts/<attempt>/, eval_subset/<subset12>.json) that this run never had: each one finding naming why.
NEVER_HAD = {
    "claim as a log": (lambda d: [_write(d / "runs" / "rpp-42" / "logs" / "CLAIM.md", "REINFORCE++ wins, p<0.001\n")],
                       "not a file the build writes"),
    "rank of a one-rank run": (lambda d: [_write(d / "runs" / "rpp-42" / "ranks" / "rank7.jsonl", "{}\n")],
                               "a rank the run did not have (world size 1"),
    "rank log of a one-task job": (lambda d: [_write(d / "runs" / "rpp-42" / "logs" / "rank3" / "trainer.log")],
                                   "a rank the job did not have (world size 1"),
    "any name under a rank": (lambda d: [_write(d / "runs" / "rpp-42" / "logs" / "rank3" / "x.log")],
                              "not a file the build writes"),
    "Ray's log without Ray": (lambda d: [_write(d / "runs" / "grpo-42" / "logs" / "ray-start.log", "ray started\n")],
                              "a Ray the job never started"),
    "subset nobody names": (lambda d: [_write(d / "eval_subset" / "0123456789ab.json", "[]\n")],
                            "a subset no run's final evaluation names"),
}


@pytest.mark.parametrize("plant,why", NEVER_HAD.values(), ids=NEVER_HAD.keys())
def test_a_file_the_layout_admits_but_the_run_never_had_is_one_finding_naming_why(built, tmp_path, capsys, plant, why):
    archive, planted = forged_archive(built, tmp_path, plant)
    code, findings = audit_lines(archive, capsys)
    bag_relative = [f"data/{Path(p).relative_to(tmp_path / 'bundle' / 'data').as_posix()}" for p in planted]
    assert code == 1
    assert [line.split(": ", 1)[0] for line in findings] == bag_relative, findings
    assert why in findings[0], findings


def _set(path: Path, **fields) -> None:
    record = json.loads(path.read_text())
    record.update(fields)
    path.write_text(json.dumps(record))


def test_what_a_run_had_admits_its_own_files_and_nothing_more(built, tmp_path):
    """The ranks a run had (run.json's rank_logs, job.json's world_size), Ray's log when its command names a Ray,
    attempts numbered 0, 1, ... each with its record, an initial evaluation's responses only when not shared; in a
    run's copy, an earlier stage's copy and a certificate job's copy alike."""
    data = Path(shutil.copytree(built / "bundle" / "data", tmp_path / "data"))
    run = data / "runs" / "grpo-42"
    _set(run / "run.json", rank_logs=2)
    _set(run / "job.json", world_size=2)
    _set(run / "command.public.json", env={"RAY_ADDRESS": "<RANK0_NODE_ADDR>:6379"})
    admitted = [_write(run / "ranks" / "rank0.jsonl"), _write(run / "ranks" / "rank1.jsonl"),
                _write(run / "logs" / "rank1" / "trainer.log"), _write(run / "logs" / "rank1" / "ray-start.log"),
                _write(run / "logs" / "ray-start.log"),
                _write(run / "attempts" / "0" / "job.json", "{}\n"), _write(run / "attempts" / "0" / "eval.json", "{}\n"),
                _write(run / "attempts" / "1" / "job.json", "{}\n")]
    other = data / "runs" / "rpp-42"
    never = {
        run / "ranks" / "rank2.jsonl": "a rank the run did not have (world size 2: run.json's rank_logs)",
        run / "logs" / "rank2" / "trainer.log": "a rank the job did not have (world size 2: job.json's world_size)",
        run / "logs" / "rank0" / "trainer.log": "rank 0's logs are the job's own",
        other / "attempts" / "1" / "job.json": "without a gap (attempts/ holds 1)",
        data / "runs" / "rppb-42" / "attempts" / "0" / "eval.json": "an attempt without its record",
        data / "stages" / "probe" / "runs" / "rpp-42" / "ranks" / "rank7.jsonl": "a rank the run did not have (world size 1",
        data / "certify" / "rpp-42.rerun" / "logs" / "ray-start.log": "a Ray the job never started",
    }
    shutil.copytree(other, data / "stages" / "probe" / "runs" / "rpp-42")
    for name in ("job.json", "command.public.json"):
        _write(data / "certify" / "rpp-42.rerun" / name, (other / name).read_text())
    for path in never:
        _write(path)
    found = dict(unexpected_files(data))
    assert set(found) == {path.relative_to(data).as_posix() for path in never}, (found, admitted)
    for path, why in never.items():
        assert why in found[path.relative_to(data).as_posix()], (path, found)


def test_a_shared_initial_evaluations_responses_in_a_runs_copy_are_a_finding(tmp_path):
    sweep = make_sweep(tmp_path, algos=("grpo",), seeds=(42,))
    share_initial_eval(sweep, ["grpo-42"])
    assert main(["build", str(sweep), "--no-figures"]) == 0
    data = Path(shutil.copytree(sweep / "bundle" / "data", tmp_path / "data"))
    assert unexpected_files(data) == []
    _write(data / "runs" / "grpo-42" / "eval" / "initial.jsonl", "{}\n")
    [(rel, why)] = unexpected_files(data)
    assert rel == "runs/grpo-42/eval/initial.jsonl" and "an initial evaluation the run did not compute" in why


def test_the_reviewers_unexpected_files_through_the_module_are_three_findings(built, tmp_path):
    """adv B13 as run: a claim as a log, a rank file of a one-rank run, a log of a rank it never had."""
    run = "runs/rpp-42"
    archive, _ = forged_archive(built, tmp_path, lambda d: [_write(d / run / "logs" / "CLAIM.md", "REINFORCE++ wins\n"),
                                                            _write(d / run / "ranks" / "rank7.jsonl", "{}\n"),
                                                            _write(d / run / "logs" / "rank3" / "x.log")])
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(archive)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stdout
    lines = [line for line in done.stdout.splitlines() if line.startswith("data/")]
    assert [line.split(": ", 1)[0] for line in lines] == [f"data/{run}/logs/CLAIM.md", f"data/{run}/logs/rank3/x.log",
                                                         f"data/{run}/ranks/rank7.jsonl"], done.stdout
    assert "a rank the run did not have (world size 1" in lines[2]
    assert done.stdout.splitlines()[-1] == "3 finding(s)"
