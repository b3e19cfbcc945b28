"""``evidence.load(path)``: a sweep's or a bundle's results as pyarrow tables, checked against the job
files and the bundle's CSV files read here with the csv module."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import evidence
from benchmarks.synthetic_sweep import make_sweep
from facts.repo import REPO_ROOT

REPO = REPO_ROOT


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A 2 x 2 sweep with one rejected job (grpo-2: a non-finite gradient norm), built without figures."""
    sweep = make_sweep(tmp_path_factory.mktemp("load"), algos=("grpo", "rpp"), seeds=(1, 2))
    log = sweep / "jobs" / "grpo-2" / "run" / "metrics.jsonl"
    log.write_text(log.read_text().replace('"train/grad_norm": ', '"train/grad_norm": Infinity, "z": ', 1))
    unbuilt = Path(tmp_path_factory.mktemp("unbuilt")) / "sweep"
    subprocess.run(["cp", "-r", str(sweep), str(unbuilt)], check=True)
    evidence.build_bundle(sweep, figures=False)
    return sweep, unbuilt


def test_load_gives_every_accepted_step_of_every_job_as_its_metrics_log_has_it(built):
    sweep, _ = built
    results = evidence.load(sweep / "bundle.tar.gz")
    assert isinstance(results.steps, pa.Table) and results.name == "sweep/bundle.tar.gz"
    assert results.steps.column_names[:4] == ["arm", "algo", "seed", "step"]
    by_run = {}
    for row in results.steps.to_pylist():
        by_run.setdefault((row["arm"], row["seed"]), []).append(row)
    assert sorted(by_run) == [("grpo", 1), ("rpp", 1), ("rpp", 2)]  # the rejected grpo-2 is left out
    for (arm, seed), rows in by_run.items():
        logged = jsonl(sweep / "jobs" / f"{arm}-{seed}" / "run" / "metrics.jsonl")
        assert [r["step"] for r in rows] == [r["step"] for r in logged]
        for got, want in zip(rows, logged):
            assert got["train/loss"] == want["train/loss"] and got["rollout/raw_reward"] == want["rollout/raw_reward"]
    assert results.steps.schema.field("train/loss").type == pa.float64()
    assert results.steps.schema.field("seed").type == pa.int64()


def test_load_reads_the_index_evaluations_and_every_table_of_the_bundle(built):
    sweep, _ = built
    data = sweep / "bundle" / "data"
    results = evidence.load(sweep / "bundle")
    index = {r["job"]: r for r in results.index.to_pylist()}
    assert {job: row["accepted"] for job, row in index.items()} == {
        r["job"]: r["accepted"] for r in csv_rows(data / "index.csv")}
    assert index["grpo-2"]["accepted"] == "no" and "non-finite" in index["grpo-2"]["reason"]
    evals = {(r["arm"], r["seed"], r["kind"]): r for r in results.evaluations.to_pylist()}
    assert len(evals) == 6  # 3 accepted runs x (initial, final)
    final = json.loads((sweep / "jobs" / "rpp-2" / "run" / "eval.json").read_text())["final"]
    assert evals[("rpp", 2, "final")]["pass@1"] == final["pass@1"]
    tables = {p.stem for p in (data / "tables").glob("*.csv")}
    assert set(results.tables) == tables and "eval_aggregate" in tables
    for name in tables:
        assert results.tables[name].num_rows == len(csv_rows(data / "tables" / f"{name}.csv")), name
    aggregate = {(r["arm"], r["checkpoint"]): r for r in csv_rows(data / "tables" / "eval_aggregate.csv")}
    loaded = {(r["arm"], r["checkpoint"]): r for r in results.tables["eval_aggregate"].to_pylist()}
    assert loaded[("rpp", "final")]["pass@1_mean"] == float(aggregate[("rpp", "final")]["pass@1_mean"])
    assert results.incidents.num_rows == len(csv_rows(data / "incidents.csv")) >= 1
    assert results.sweep["seeds"] == [1, 2]


def test_a_sweep_without_a_bundle_loads_the_same_runs_in_memory_and_writes_nothing(built):
    sweep, unbuilt = built
    before = sorted(p.relative_to(unbuilt) for p in unbuilt.rglob("*"))
    in_memory, sealed = evidence.load(unbuilt), evidence.load(sweep / "bundle.tar.gz")
    assert sorted(p.relative_to(unbuilt) for p in unbuilt.rglob("*")) == before
    assert in_memory.name == "sweep"
    columns = ["arm", "seed", "step", "train/loss", "train/grad_norm", "rollout/raw_reward"]
    assert in_memory.steps.select(columns).to_pylist() == sealed.steps.select(columns).to_pylist()
    assert [(r["job"], r["accepted"]) for r in in_memory.index.to_pylist()] == [
        (r["job"], r["accepted"]) for r in sealed.index.to_pylist()]
    for name in ("eval_aggregate", "stability", "resolved_config"):
        assert in_memory.tables[name].num_rows == sealed.tables[name].num_rows, name
    assert in_memory.incidents.column("kind").to_pylist() == sealed.incidents.column("kind").to_pylist()


def test_to_pandas_gives_a_frame_and_without_pandas_one_line_saying_how_to_install_it(built):
    sweep, _ = built
    pytest.importorskip("pandas")
    frame = evidence.load(sweep / "bundle").to_pandas("steps")
    assert len(frame) == 30 and list(frame.columns[:4]) == ["arm", "algo", "seed", "step"]
    probe = ("import sys; sys.modules['pandas'] = None\n"  # pandas absent, as in an install without it
             "import evidence\n"
             f"results = evidence.load({str(sweep / 'bundle')!r})\n"
             "print(results.steps.num_rows)\n"
             "try:\n    results.to_pandas('steps')\nexcept evidence.EvidenceError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["30", "to_pandas needs pandas, which is not installed: pip install pandas"]


def test_load_of_a_path_that_is_no_evidence_is_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(evidence.LoadError, match=r"notes.txt: not a sweep directory \(sweep.json\)"):
        evidence.load(tmp_path / "notes.txt")
    with pytest.raises(evidence.LoadError, match="missing: no such file or directory"):
        evidence.load(tmp_path / "missing")
    other = make_sweep(tmp_path, algos=("grpo",), seeds=(1,), name="s")
    assert evidence.load(other).steps.num_rows == 10


def test_to_pandas_of_an_unknown_name_is_one_line_naming_each_known_table_once(built):
    sweep, _ = built
    pytest.importorskip("pandas")
    results = evidence.load(sweep / "bundle")
    with pytest.raises(evidence.EvidenceError) as caught:
        results.to_pandas("stepz")
    message = str(caught.value)
    assert message.startswith("no table 'stepz'; known: index, steps, evaluations, incidents, "), message
    known = message.split("known: ", 1)[1].split(", ")
    assert len(known) == len(set(known)) and set(results.tables) <= set(known), known
