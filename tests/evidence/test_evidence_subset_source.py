"""The frozen evaluation subset cut again from the pinned test split (issue 21, B1): a subset whose label,
question, index or length is not the split's first n_prompts rows is named by its first differing row, whatever
digests were rewritten around it; a split not at hand (or with other bytes than the pin) is said, not trusted."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evidence import audit, build_bundle
from evidence.audit.subsets import check_subsets
from evidence.dataset import load_bundle_data
from evidence.subset_source import SubsetSource, check_subset, subset_source
from tests.evidence.sweep_factory import make_sweep
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
    """A synthetic sweep evaluated on the embedded test split's first rows (sweep_factory), its runs pinning it."""
    sweep = make_sweep(tmp_path_factory.mktemp("subsets"), algos=("grpo", "rpp"), seeds=(1, 2), n_steps=4)
    return build_bundle(sweep, figures=False).bundle_dir


def test_a_bundle_whose_subset_is_its_pinned_splits_audits_clean_with_nothing_left_unchecked(built_bundle):
    notes = []
    assert audit(built_bundle, notes=notes) == [] and notes == []


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


def test_runs_pinning_a_split_this_checkout_lacks_audit_with_a_note_naming_the_subset(built_bundle, tmp_path):
    def repin(data: Path) -> None:
        for record in (data / "runs").glob("*/run.json"):
            run = json.loads(record.read_text())
            run["inputs"]["trainer/assets/toy/data/test.parquet"] = "0" * 64
            record.write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")

    notes = []
    audit(_forged(built_bundle, tmp_path, repin), notes=notes)
    assert len(notes) == 1 and notes[0].startswith("eval subset: data/eval_subset/") and notes[0].endswith(
        "not re-derived (trainer/assets/toy/data/test.parquet in this checkout is not the pinned one (sha256 "
        "000000000000…)): its labels are as the bundle states them"), notes
