"""The frozen evaluation subset cut again from the pinned test split (issue 21, B1): a subset whose label,
question, index or length is not the split's first n_prompts rows is named by its first differing row, whatever
digests were rewritten around it; a split not at hand (or with other bytes than the pin) is said, not trusted."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.synthetic_sweep import make_sweep
from evidence import audit_bundle, build_bundle
from evidence.audit.subsets import check_subsets
from evidence.dataset import load_bundle_data
from evidence.evaluation.subset_source import SubsetSource, check_subset, pin_conflict, subset_source
from tests.evidence_cli import evidence_in_process
from tests.sweeps import reseal_bag

QUESTIONS = ["Emma has 10 shells and buys 20 more. How many?", "Jack has 18 marbles, gives 14. Left?",
             "Maria has 20 cookies and buys 18 more. How many?", "Ünïcode: 3 × 4?"]
ANSWERS = ["10 + 20 = 30\n#### 30", "18 - 14 = 4\n#### 4", "#### 38", "12"]  # rationale and scalar labels


def _split(root: Path) -> tuple[str, str]:
    """A GSM8K-shaped test split under ``root`` (question, answer); its relative path and SHA256."""
    path = root / "data" / "test.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"question": QUESTIONS, "answer": ANSWERS}), path)
    return "data/test.parquet", hashlib.sha256(path.read_bytes()).hexdigest()


def _subset(rows) -> bytes:
    # the trainer's form, written out here: compact JSON of [index, question, label], non-ASCII kept
    return json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode()


EXPECTED = [[0, QUESTIONS[0], "30"], [1, QUESTIONS[1], "4"], [2, QUESTIONS[2], "38"]]


def test_the_subset_the_trainer_wrote_agrees_with_its_split(tmp_path):
    rel, digest = _split(tmp_path)
    assert check_subset(_subset(EXPECTED), SubsetSource(rel, digest, 3), tmp_path) == (None, None)


@pytest.mark.parametrize("edit, message", [
    (lambda r: r[2].__setitem__(2, "30"), "row 2: label '30' is not the pinned test split's '38'"),
    (lambda r: r[0].__setitem__(1, "Emma has 99 shells"), "row 0: question 'Emma has 99 shells' is not"),
    (lambda r: r[1].__setitem__(0, 7), "row 1: index 7 is not the pinned test split's 1"),
    (lambda r: r.append([3, QUESTIONS[3], "12"]), "has 4 rows, the evaluation takes the pinned test split's first 3"),
    (lambda r: r.pop(), "has 2 rows, the evaluation takes the pinned test split's first 3"),
    (lambda r: r.reverse(), "row 0: index 2 is not the pinned test split's 0"),
])
def test_a_subset_that_is_not_the_splits_names_its_first_differing_row(tmp_path, edit, message):
    rel, digest = _split(tmp_path)
    rows = json.loads(json.dumps(EXPECTED))
    edit(rows)
    difference, why = check_subset(_subset(rows), SubsetSource(rel, digest, 3), tmp_path)
    assert why is None and difference.startswith(message), difference


def test_another_spelling_of_the_same_rows_is_named_too(tmp_path):
    rel, digest = _split(tmp_path)
    spaced = json.dumps(EXPECTED, ensure_ascii=False).encode()  # the same rows, not the trainer's bytes
    assert check_subset(spaced, SubsetSource(rel, digest, 3), tmp_path)[0] == \
        "its bytes are not the canonical form of the pinned test split's rows"


@pytest.mark.parametrize("source, why", [
    (lambda rel, d: SubsetSource("data/other.parquet", d, 3), "data/other.parquet is not in this checkout"),
    (lambda rel, d: SubsetSource(rel, "0" * 64, 3), "data/test.parquet in this checkout is not the pinned one"),
    (lambda rel, d: SubsetSource("../test.parquet", d, 3), "../test.parquet leaves the repository"),
])
def test_a_split_not_at_hand_is_said_and_never_trusted(tmp_path, source, why):
    rel, digest = _split(tmp_path)
    (tmp_path.parent / "test.parquet").write_bytes((tmp_path / rel).read_bytes())  # outside the root: not read
    difference, reason = check_subset(_subset(EXPECTED), source(rel, digest), tmp_path)
    assert difference is None and reason.startswith(why)


def test_more_rows_than_the_split_has_is_a_difference(tmp_path):
    rel, digest = _split(tmp_path)
    assert check_subset(_subset(EXPECTED), SubsetSource(rel, digest, 9), tmp_path)[0] == \
        "the pinned test split data/test.parquet has fewer than 9 rows"


@pytest.mark.parametrize("record", [
    {}, {"config": {"workload": {"test_path": "t.parquet", "eval": {"n_prompts": 3}}}, "inputs": {}},
    {"config": {"workload": {"test_path": "t.parquet", "eval": {"n_prompts": True}}}, "inputs": {"t.parquet": "a"}},
    {"config": {"workload": {"test_path": "t.parquet", "eval": {"n_prompts": 0}}}, "inputs": {"t.parquet": "a"}},
    ["not", "a", "record"],
])
def test_a_run_record_that_does_not_name_its_split_gives_no_source(record):
    assert subset_source(record) is None


def test_the_source_is_read_from_run_json():
    record = {"config": {"workload": {"test_path": "t.parquet", "eval": {"n_prompts": 3, "k": 4}}},
              "inputs": {"t.parquet": "ab" * 32}}
    assert subset_source(record) == SubsetSource("t.parquet", "ab" * 32, 3)


@pytest.fixture(scope="module")
def built_bundle(tmp_path_factory) -> Path:
    """A synthetic sweep evaluated on the embedded test split's first rows (benchmarks.synthetic_sweep), its runs pinning it."""
    sweep = make_sweep(tmp_path_factory.mktemp("subsets"), algos=("grpo", "rpp"), seeds=(1, 2), n_steps=4)
    return build_bundle(sweep, figures=False).bundle_dir


def test_a_bundle_whose_subset_is_its_pinned_splits_audits_clean_with_nothing_left_unchecked(built_bundle):
    notes = []
    assert audit_bundle(built_bundle, notes=notes) == [] and notes == []


def _forged(bag: Path, tmp_path: Path, edit) -> Path:
    copy = Path(shutil.copytree(bag, tmp_path / "forged"))
    edit(copy / "data")
    reseal_bag(copy)
    return copy


def test_an_edited_label_in_the_bundle_is_named_against_the_split(built_bundle, tmp_path):
    def relabel(data: Path) -> None:
        (subset,) = (data / "eval_subset").glob("*.json")
        rows = json.loads(subset.read_bytes())
        rows[3][2] = "25"
        subset.write_bytes(_subset(rows))

    findings = [str(f) for f in check_subsets(_forged(built_bundle, tmp_path, relabel) / "data",
                                              load_bundle_data(tmp_path / "forged" / "data"))]
    assert len(findings) == 1 and "run grpo-1: row 3: label '25' is not the pinned test split's '24': " \
        "trainer/assets/toy/data/test.parquet (sha256 f538276ac534…, first 25 rows)" in findings[0], findings


SPLIT, TOY_SHA = "trainer/assets/toy/data/test.parquet", "f538276ac534d6e90dd2871aa9a20509393a4877085d747dba2f765cd338eaa8"


def _repin(test_path: str = SPLIT, digest: str = TOY_SHA, manifest: str | None = "manifests/toy.json",
           workload: str = "toy"):
    """An edit of every run's run.json: its test split named ``test_path``, pinned with ``digest``, copied from
    ``manifest`` (None: the record names none), of ``workload``, as a forger rewrites it around an edited subset."""
    def edit(data: Path) -> None:
        for record in sorted(data.glob("runs/*/run.json")):
            run = json.loads(record.read_text())
            run["workload"] = workload
            del run["inputs"][SPLIT]
            run["inputs"][test_path] = digest
            setting = run["config"]["workload"]
            setting["test_path"] = test_path
            if manifest is None:
                del setting["manifest"]
            else:
                setting["manifest"] = manifest
            record.write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")
    return edit


def _audit_cli(bag: Path, *flags: str) -> subprocess.CompletedProcess:
    """``python -m evidence audit`` in this process (tests/evidence_cli.py)."""
    return evidence_in_process("audit", bag, *flags)


FIX = "run.json was edited, or the data set was re-pinned since the run: audit from a checkout of the commit that ran it"


@pytest.mark.parametrize("edit, finding", [
    (_repin(digest="0" * 64), f"run.json pins {SPLIT} with sha256 000000000000…, this checkout's manifests/toy.json "
                              f"with f538276ac534… ({FIX})"),
    (_repin(test_path="trainer/assets/toy/data/test2.parquet"),
     f"run.json's test split trainer/assets/toy/data/test2.parquet is not a file this checkout's manifests/toy.json "
     f"pins ({FIX})"),
    (_repin(digest="0" * 64, manifest="manifests/mine.json"),  # the manifest renamed: the toy one still pins it
     f"run.json pins {SPLIT} with sha256 000000000000…, this checkout's manifests/toy.json with f538276ac534…"),
    (_repin(digest="0" * 64, manifest=None),
     f"run.json pins {SPLIT} with sha256 000000000000…, this checkout's manifests/toy.json with f538276ac534…"),
], ids=["digest", "path", "manifest-renamed", "manifest-dropped"])
def test_a_run_json_whose_split_pin_contradicts_the_checkouts_manifests_is_a_finding(built_bundle, tmp_path, edit,
                                                                                     finding):
    """The N1 class: rewriting run.json's pin turned "the label is not the split's" into "the split is not at
    hand" (a note, audit clean); the pin is held to the checkout's manifests instead."""
    result = _audit_cli(_forged(built_bundle, tmp_path, edit))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if "data/eval_subset/" in line and finding in line]
    assert lines and "run grpo-1" in lines[0] and "not re-derived" not in result.stdout, result.stdout[-3000:]


def test_runs_pinning_a_split_no_manifest_of_this_checkout_knows_are_noted_and_strict_counts_the_note(
        built_bundle, tmp_path):
    forged = _forged(built_bundle, tmp_path, _repin(test_path="data/mine/test.parquet", digest="0" * 64,
                                                    manifest="manifests/mine.json", workload="mine"))
    notes = []
    assert [str(f) for f in check_subsets(forged / "data", load_bundle_data(forged / "data"), notes)] == []
    assert len(notes) == 5 and notes[0].startswith("eval subset: data/eval_subset/") and notes[0].endswith(
        "not re-derived (data/mine/test.parquet is not in this checkout): its labels are as the bundle states "
        "them"), notes
    assert notes[1:] == [f"eval setting: data/runs/{job}/run.json not checked (its workload 'mine' is not in this "
                         "checkout's conf/workload/): its test split and prompt count are as it states them"
                         for job in ("grpo-1", "grpo-2", "rpp-1", "rpp-2")], notes
    lenient, strict = _audit_cli(forged), _audit_cli(forged, "--strict")
    assert notes[0] in lenient.stdout and notes[0] in strict.stdout
    assert strict.returncode == 1 and strict.stdout.rstrip().endswith("not re-derived (--strict)"), strict.stdout
    # without --strict only the note (and whatever else the edit broke) is said, never a subset finding
    assert "data/eval_subset/" not in "".join(line for line in lenient.stdout.splitlines() if "not re-derived" not in line)


def test_a_clean_bundle_is_clean_under_strict_too(built_bundle):
    result = _audit_cli(built_bundle, "--strict")
    assert result.returncode == 0 and result.stdout.rstrip().endswith("clean"), result.stdout[-2000:]


def _manifest(root: Path, name: str, pins: dict[str, str]) -> None:
    (root / "manifests").mkdir(exist_ok=True)
    (root / "manifests" / name).write_text(json.dumps(
        {"workload": name[:-5], "files": [{"path": p, "size": 1, "sha256": d} for p, d in pins.items()]}))


@pytest.mark.parametrize("source, conflict", [
    (SubsetSource("data/test.parquet", "a" * 64, 3, "manifests/w.json"), None),
    (SubsetSource("data/test.parquet", "b" * 64, 3, "manifests/w.json"),
     "run.json pins data/test.parquet with sha256 bbbbbbbbbbbb…, this checkout's manifests/w.json with aaaaaaaaaaaa…"),
    (SubsetSource("data/other.parquet", "a" * 64, 3, "manifests/w.json"),
     "run.json's test split data/other.parquet is not a file this checkout's manifests/w.json pins"),
    (SubsetSource("data/test.parquet", "b" * 64, 3, None),
     "run.json pins data/test.parquet with sha256 bbbbbbbbbbbb…, this checkout's manifests/w.json with aaaaaaaaaaaa…"),
    (SubsetSource("data/test.parquet", "c" * 64, 3, "manifests/x.json"), None),  # the run's own manifest agrees
    (SubsetSource("data/else.parquet", "b" * 64, 3, "manifests/gone.json"), None),  # nothing here knows it
    (SubsetSource("data/test.parquet", "b" * 64, 3, "manifests/broken.json"),  # an unreadable one pins nothing
     "run.json pins data/test.parquet with sha256 bbbbbbbbbbbb…, this checkout's manifests/w.json with aaaaaaaaaaaa…"),
])
def test_the_pin_is_held_to_the_checkouts_manifests(tmp_path, source, conflict):
    _manifest(tmp_path, "w.json", {"data/test.parquet": "a" * 64, "model/m.safetensors": "d" * 64})
    _manifest(tmp_path, "x.json", {"data/test.parquet": "c" * 64})  # sorted after w.json
    (tmp_path / "manifests" / "broken.json").write_text("{not json")
    found = pin_conflict(source, tmp_path)
    assert (found if found is None or conflict is None else found[:len(conflict)]) == conflict, found


TRAIN, TRAIN_SHA = "trainer/assets/toy/data/train.parquet", \
    "ee605d7ffbb36da5c8e76d89c18f57b3ac7c5dbc03123a03cde918e6b0532ec4"


def _set_n_prompts(n: int):
    def edit(data: Path) -> None:
        for record in sorted(data.glob("runs/*/run.json")):
            run = json.loads(record.read_text())
            run["config"]["workload"]["eval"]["n_prompts"] = n
            record.write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")
    return edit


@pytest.mark.parametrize("edit, finding", [
    (_repin(test_path=TRAIN, digest=TRAIN_SHA),  # another pinned file of the same manifest, its true bytes
     f"run.json evaluates on {TRAIN}, the workload's test split is {SPLIT} (conf/workload/toy.yaml with the "
     "command's overrides)"),
    (_repin(test_path=TRAIN, digest=TRAIN_SHA, manifest=None), f"run.json evaluates on {TRAIN}"),
    (_set_n_prompts(24),  # the hardest last prompt dropped
     "run.json evaluates on 24 prompts, the workload's eval.n_prompts is 25 (conf/workload/toy.yaml with the "
     "command's overrides)"),
], ids=["train-split", "train-split-no-manifest", "fewer-prompts"])
def test_a_run_json_evaluating_on_what_its_workload_and_command_did_not_declare_is_a_finding(built_bundle, tmp_path,
                                                                                           edit, finding):
    forged = _forged(built_bundle, tmp_path, edit)
    notes = []
    found = [str(f) for f in audit_bundle(forged, notes=notes)]
    assert [f for f in found if f.startswith("data/runs/grpo-1/run.json") and finding in f], found
    assert not [n for n in notes if n.startswith("eval subset")], notes


@pytest.mark.parametrize("argv, source, difference", [
    (["workload=toy", "workload.eval.n_prompts=24"], SubsetSource(SPLIT, TOY_SHA, 24), None),
    (["workload=toy", "+workload.eval.n_prompts=24"], SubsetSource(SPLIT, TOY_SHA, 24), None),
    (["workload=toy", "++workload.eval.n_prompts=24"], SubsetSource(SPLIT, TOY_SHA, 24), None),
    (["workload=toy"], SubsetSource(SPLIT, TOY_SHA, 64), None),  # the workload's own 64
    (["workload=toy"], SubsetSource(f"./{SPLIT}", TOY_SHA, 64), None),  # the same file, spelled otherwise
    (["workload=toy"], SubsetSource(SPLIT, TOY_SHA, 24), "run.json evaluates on 24 prompts, the workload's "
                                                         "eval.n_prompts is 64"),
    (None, SubsetSource(TRAIN, TRAIN_SHA, 64), f"run.json evaluates on {TRAIN}, the workload's test split is {SPLIT}"),
    (["workload.test_path=data/mine.parquet"], SubsetSource("data/mine.parquet", "0" * 64, 64), None),
])
def test_the_split_and_its_rows_are_what_the_workload_and_the_command_declare(argv, source, difference):
    from evidence.evaluation.subset_source import declared_difference

    found, unchecked = declared_difference(source, {"workload": "toy"}, ["python", "-m", "trainer", *(argv or [])])
    assert unchecked is None
    assert (found if found is None or difference is None else found[:len(difference)]) == difference, found


def test_a_workload_the_checkout_does_not_have_is_said_and_another_trainers_command_is_not_read():
    from evidence.evaluation.subset_source import declared_difference

    for name in ("mine", "../toy", "", None):
        found, unchecked = declared_difference(SubsetSource(TRAIN, TRAIN_SHA, 3), {"workload": name},
                                               ["python", "-m", "trainer", "workload.eval.n_prompts=3"])
        assert found is None and unchecked == f"its workload {name!r} is not in this checkout's conf/workload/"
    external = ["python", "-m", "trainer.external", "--job-spec", "<JOB_DIR>/spec.json"]
    trl_run = {"workload": "toy", "trainer": {"name": "trl", "command": ["python", "-m", "trl_adapter"]}}
    assert declared_difference(SubsetSource(TRAIN, TRAIN_SHA, 3), trl_run, external) == (None, None)


@pytest.mark.parametrize("argv", [
    ["python", "-m", "trainer.external", "--job-spec", "<JOB_DIR>/spec.json"], [], None,
    ["python", "trainer/__main__.py", "workload.eval.n_prompts=3"], ["python", "-mtrainer"],
])
def test_a_proofgrid_run_whose_command_is_not_python_m_trainer_declares_nothing(argv):
    """A forger switching the command to another form to skip the check (round 2's D3-D7): run.json names no other
    trainer, so its command must be proofgrid's."""
    from evidence.evaluation.subset_source import declared_difference

    for run in ({"workload": "toy"}, {"workload": "toy", "trainer": {"name": "proofgrid"}}):
        found, unchecked = declared_difference(SubsetSource(SPLIT, TOY_SHA, 3), run, argv)
        assert unchecked is None and found.startswith("run.json is proofgrid's trainer's (it names no other "
                                                      "trainer), but its command does not run python -m trainer")


@pytest.mark.parametrize("spelled", ["./data/test.parquet", "data//test.parquet", "data/./test.parquet"])
def test_a_split_spelled_otherwise_is_held_to_the_same_pin(tmp_path, spelled):
    _manifest(tmp_path, "w.json", {"data/test.parquet": "a" * 64})
    assert pin_conflict(SubsetSource(spelled, "b" * 64, 3, None), tmp_path).startswith(
        f"run.json pins {spelled} with sha256 bbbbbbbbbbbb…, this checkout's manifests/w.json with aaaaaaaaaaaa…")
