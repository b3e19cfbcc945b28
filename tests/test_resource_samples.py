"""Each job's runtime samples its process tree (and GPUs where NVML sees one) into resources.jsonl; the
bundle keeps the samples, the report states the peaks per arm and draws them, the audit checks them.

One real sweep through ``launch.py`` (two arms, one seed, the toy workload cut to two steps), with
evaluations during training on: each job's TensorBoard also carries the sweep's shared initial
evaluation at step 0 and the hparams of its arm.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from evidence import audit_bundle
from evidence.gates.tensorboard_log import read_hparams, read_scalars
from facts.metrics import eval_tag
from tests.sweeps import launch, reseal_bag

pytestmark = pytest.mark.slow

ARMS = ("grpo", "rpp")
SWEEP = ("algo=grpo,rpp", "seed=5", "workload.n_updates=2", "workload.checkpoint_every=2", "workload.eval.n_prompts=4",
         "workload.eval.k=2", "workload.eval.every=1", "cluster.resource_sample_s=0.5", "figures=true")
GIB = 2**30


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("resources") / "sweep"
    proc = launch(sweep_dir, *SWEEP, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sweep_dir


def samples_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def table(path: Path) -> dict[str, dict]:
    with open(path, newline="") as f:
        return {row["arm"]: row for row in csv.DictReader(f)}


def test_every_job_samples_its_process_tree_and_says_why_no_gpu_was_sampled(sweep):
    for arm in ARMS:
        job = sweep / "jobs" / f"{arm}-5"
        samples = samples_of(job / "resources.jsonl")
        record = json.loads((job / "job.json").read_text())
        times = [s["t"] for s in samples]
        assert times == sorted(times) and len(set(times)) == len(times)
        assert len(samples) >= 4 and record["resource_sampling"]["samples"] == len(samples)
        assert record["resource_sampling"]["interval_s"] == 0.5
        assert max(s["processes"] for s in samples) >= 2  # the runtime and its trainer
        assert max(s["rss_bytes"] for s in samples) > 100 * 2**20  # torch and the toy model are loaded
        assert any(s["cpu_percent"] > 0 for s in samples)
        if shutil.which("nvidia-smi") is None:  # on the CPU the GPU part is skipped, and the record says why
            assert all(s["gpus"] is None for s in samples)
            assert record["resource_sampling"]["gpu"].startswith("skipped: ")


def test_the_bundle_keeps_the_samples_and_the_report_states_each_arm_s_peaks(sweep):
    data = sweep / "bundle" / "data"
    peaks = table(data / "tables" / "resource_peaks.csv")
    report = (data / "report.md").read_text()
    assert "## Resources" in report and "figures/resources.svg" in report
    assert (data / "figures" / "resources.svg").stat().st_size > 0
    for arm in ARMS:
        bundled = samples_of(data / "runs" / f"{arm}-5" / "resources.jsonl")
        assert bundled == samples_of(sweep / "jobs" / f"{arm}-5" / "resources.jsonl")
        # Independent reference: the peaks straight from the job's samples.
        cpu, rss = max(s["cpu_percent"] for s in bundled), max(s["rss_bytes"] for s in bundled) / GIB
        assert float(peaks[arm]["peak_cpu_percent"]) == cpu and float(peaks[arm]["peak_rss_gib"]) == rss
        assert int(peaks[arm]["n_samples"]) == len(bundled)
        name = {"grpo": "GRPO", "rpp": "REINFORCE++"}[arm]
        assert f"| {name} | 1 | {len(bundled)} | {cpu:.0f} | {rss:.2f} |" in report
    if shutil.which("nvidia-smi") is None:  # on the CPU the report says why no GPU was sampled, and shows none
        why = json.loads((sweep / "jobs" / f"{ARMS[0]}-5" / "job.json").read_text())["resource_sampling"]["gpu"]
        assert f"GPU samples: {why}." in report.splitlines()
        assert all(row["peak_gpu_util_percent"] in ("", None) for row in peaks.values()), peaks
    assert audit_bundle(sweep / "bundle.tar.gz") == []


def reseal(bag: Path) -> None:
    reseal_bag(bag)  # the crate restated too: only the content checks may notice the edit


def test_the_audit_finds_missing_or_reordered_samples_and_a_peak_that_does_not_recompute(sweep, tmp_path):
    bag = Path(shutil.copytree(sweep / "bundle", tmp_path / "bundle"))
    runs = bag / "data" / "runs"
    (runs / "grpo-5" / "resources.jsonl").unlink()
    lines = (runs / "rpp-5" / "resources.jsonl").read_text().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    (runs / "rpp-5" / "resources.jsonl").write_text("\n".join(lines) + "\n")
    reseal(bag)
    found = [str(p) for p in audit_bundle(bag)]
    assert any("data/runs/grpo-5/resources.jsonl" in f and "missing" in f for f in found), found
    assert any("data/runs/rpp-5/resources.jsonl" in f and "do not increase: sample 3" in f for f in found), found
    assert any("tables/resource_peaks.csv" in f for f in found), found  # grpo's peaks now come from no sample


def test_a_peak_edited_in_the_report_does_not_recompute(sweep, tmp_path):
    bag = Path(shutil.copytree(sweep / "bundle", tmp_path / "bundle"))
    report = bag / "data" / "report.md"
    lines = report.read_text().split("\n")
    section = lines.index("## Resources")
    number = next(i for i, line in enumerate(lines) if i > section and line.startswith("| REINFORCE++ | 1 |"))
    cells = lines[number].split(" | ")
    cells[4] = f"{float(cells[4]) * 2:.2f}"  # the peak RSS, doubled
    lines[number] = " | ".join(cells)
    report.write_text("\n".join(lines))
    reseal(bag)
    found = [str(p) for p in audit_bundle(bag)]
    assert found and all("data/report.md" in f and f"line {number + 1}" in f for f in found), found


def test_each_job_s_tensorboard_has_the_shared_initial_eval_at_step_0_and_its_arm_s_hparams(sweep):
    shared = [json.loads(p.read_text())["initial"] for p in (sweep / "initial_eval").glob("*/eval.json")]
    assert len(shared) == 1  # computed once for both jobs
    for arm in ARMS:
        run = sweep / "jobs" / f"{arm}-5" / "run"
        evaluation = json.loads((run / "eval.json").read_text())
        assert evaluation["initial"]["shared"]["path"].startswith("initial_eval/")
        line = read_scalars(run / "tensorboard").values(eval_tag("pass@1"))
        assert sorted(line) == [0, 1, 2]
        assert line[0] == pytest.approx(shared[0]["pass@1"]) and line[2] == pytest.approx(evaluation["final"]["pass@1"])
        hparams = read_hparams(run / "tensorboard")
        overrides = json.loads((run.parent / "job.json").read_text())["arm_overrides"]
        assert overrides["algo"] == arm
        assert hparams["arm"] == arm and hparams["seed"] == 5.0 and hparams["workload.eval.every"] == 1.0
        assert hparams["arm_overrides"] == ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
