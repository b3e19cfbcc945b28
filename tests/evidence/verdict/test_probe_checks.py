"""The probe's declared checks are re-derived, never trusted: the staleness check from the probe runs' logged
``train/sampler_logp_gap`` (the stale arm's mean over the probe steps positive and at least ``min_ratio`` times its
fresh arm's), the gradient check from ``gradient_check.json`` (finite, cosine >= ``min_cosine``). The confirm
stage's build refuses to seal a verdict past a check that fails on that evidence (the launcher stops there), and the
audit recomputes each check, names a recorded value that differs and a check that fails, whatever its record says.
Synthetic experiments (tests/evidence/experiment_stages.py) whose probe runs log the off-policy keys (opt-in); the
expected levels are computed here from the logged values."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep
from evidence import audit_bundle, build_bundle
from evidence.problems import VerdictError
from facts.repo import REPO_ROOT
from tests.evidence.experiment_stages import add_launcher_stages, gradient_record
from tests.experiment_spec import experiment_yaml
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
SEEDS = (1, 2, 3)
SPEC = experiment_yaml(budget={"cpu_hours": 5.0}, probe={
    "steps": 3,
    "gradient_check": {"baseline": "isp", "treatment": "sc", "settings": {"workload.sampler_refresh_every": 1},
                       "min_cosine": 0.9},
    "staleness_check": {"arm": "isp", "settings": {"workload.sampler_refresh_every": 1},
                        "metric": "train/sampler_logp_gap", "min_ratio": 2}})
HONEST_GAPS = {"grpo": 0.04, "grpo-fresh": 0.005, "rppb": 0.03}  # the stale arm 8x its fresh one


def off_policy(gaps: dict[str, float]):
    """Each probe arm's (staleness, sampler log-prob gap) by step: the fresh arm at staleness 0."""
    return lambda arm, seed, step: (0 if arm.endswith("-fresh") else step % 4, round(gaps[arm] + 0.001 * step, 6))


def experiment(root: Path, gaps: dict[str, float] = HONEST_GAPS, cosine: float = 0.97) -> Path:
    """The confirm stage of SPEC beside its probe stage, not built yet."""
    confirm = make_sweep(root, seeds=SEEDS, name="confirm", arms={"grpo": {"algo": "grpo"}, "rppb": {"algo": "rppb"}})
    (confirm / "experiment.yaml").write_text(SPEC, encoding="utf-8")
    add_launcher_stages(confirm, SPEC, off_policy=off_policy(gaps), gradient=gradient_record(cosine))
    return confirm


def mean_gap(metrics: Path) -> float:
    steps = [json.loads(line) for line in metrics.read_text().splitlines()]
    return sum(s["train/sampler_logp_gap"] for s in steps) / len(steps)


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    """The honest experiment's confirm bundle (its probe passes both checks)."""
    return build_bundle(experiment(tmp_path_factory.mktemp("probe-checks")), figures=False).bundle_dir


def test_an_honest_probe_s_checks_recompute_and_the_bundle_audits_clean(honest):
    probe = honest / "data" / "stages" / "probe"
    record = json.loads((probe / "probe.json").read_text())["checks"]
    stale, fresh = (mean_gap(probe / "runs" / f"{arm}-1" / "metrics.jsonl") for arm in ("grpo", "grpo-fresh"))
    assert record["staleness"] == {"metric": "train/sampler_logp_gap", "stale": stale, "fresh": fresh,
                                   "min_ratio": 2.0, "passed": True}
    assert record["gradient"]["cosine"] == 0.97 and record["gradient"]["passed"] is True
    assert audit_bundle(honest) == []


def test_python_m_evidence_build_refuses_a_verdict_past_a_staleness_check_the_runs_fail(tmp_path):
    """The fresh arm's gap is as large as the stale one's: staleness has no effect, the launcher would have
    stopped; the build names the check, both levels and the file, and seals nothing."""
    confirm = experiment(tmp_path, gaps={**HONEST_GAPS, "grpo-fresh": 0.03})
    stale, fresh = (mean_gap(tmp_path / "probe" / "jobs" / f"{arm}-1" / "run" / "metrics.jsonl")
                    for arm in ("grpo", "grpo-fresh"))
    done = subprocess.run([sys.executable, "-m", "evidence", "build", str(confirm), "--no-figures"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"python -m evidence: error: the probe's staleness check: mean train/sampler_logp_gap of isp over the probe "
        f"steps, stale {stale!r} vs fresh {fresh!r}, needs a positive stale mean at least 2x the fresh one "
        "(stages/probe/steps.csv); the launcher stops an experiment at a failed probe check: nothing sealed"], done.stderr
    assert not (confirm / "bundle").exists() and not (confirm / "bundle.tar.gz").exists()


def test_the_build_refuses_a_verdict_past_a_gradient_check_that_fails(tmp_path):
    confirm = experiment(tmp_path, cosine=0.42)
    with pytest.raises(VerdictError, match=r"^the probe's gradient check: sc vs isp at staleness 0 has cosine 0\.42 "
                                           r"\(finite True\), needs finite gradients with cosine >= 0\.9 "
                                           r"\(stages/probe/gradient_check\.json\)"):
        build_bundle(confirm, figures=False)


def _forge(bag: Path, tmp_path: Path, edit) -> Path:
    copy = Path(shutil.copytree(bag, tmp_path / "forged"))
    edit(copy / "data" / "stages" / "probe")
    reseal_bag(copy)
    return copy


def _edit_json(path: Path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def _raise_fresh_gap(probe: Path, gap: float) -> float:
    """The fresh arm's logged gap set to ``gap`` at every step, in its metrics log and steps.csv; its new mean."""
    metrics = probe / "runs" / "grpo-fresh-1" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    for row in rows:
        row["train/sampler_logp_gap"] = gap
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with open(probe / "steps.csv", newline="") as f:
        reader = csv.DictReader(f)
        columns, table = reader.fieldnames, list(reader)
    for row in table:
        if row["arm"] == "grpo-fresh":
            row["train/sampler_logp_gap"] = repr(gap)
    with open(probe / "steps.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    return mean_gap(metrics)


def test_edited_logged_gaps_under_a_record_still_saying_passed_are_findings_naming_the_values(honest, tmp_path):
    """The fresh arm's logged gaps raised (metrics log and steps.csv agree) under the record's passing levels: the
    recorded fresh level and verdict differ from the recomputation, and the check fails on the runs."""
    recorded = json.loads((honest / "data" / "stages" / "probe" / "probe.json").read_text())["checks"]["staleness"]
    fresh = {}
    bag = _forge(honest, tmp_path, lambda probe: fresh.setdefault("value", _raise_fresh_gap(probe, 0.05)))
    findings = [str(f) for f in audit_bundle(bag)]
    where = "data/stages/probe/probe.json"
    assert (f"{where}: checks.staleness.fresh: recorded {recorded['fresh']!r}, recomputed {fresh['value']!r}"
            in findings), findings
    assert f"{where}: checks.staleness.passed: recorded True, recomputed False" in findings, findings
    assert (f"data/stages/probe/steps.csv: staleness check: mean train/sampler_logp_gap of isp over the probe steps, "
            f"stale {recorded['stale']!r} vs fresh {fresh['value']!r}, needs a positive stale mean at least 2x the "
            "fresh one: the check fails on the probe's own evidence, and the launcher stops an experiment here"
            ) in findings, findings


def _failed_gradient(probe: Path, passed: bool) -> None:
    """gradient_check.json's cosine 0.42 (a treatment loss that disagrees), probe.json's record restated with it,
    its verdict ``passed`` (the honest False, or flipped to True)."""
    _edit_json(probe / "gradient_check.json", lambda record: record.update(cosine=0.42))
    _edit_json(probe / "probe.json", lambda record: record["checks"]["gradient"].update(cosine=0.42, passed=passed))


FAILED_GRADIENT = ("data/stages/probe/gradient_check.json: gradient check: sc vs isp at staleness 0 has cosine 0.42 "
                   "(finite True), needs finite gradients with cosine >= 0.9: the check fails on the probe's own "
                   "evidence, and the launcher stops an experiment here")


def test_a_failed_gradient_check_flipped_to_passed_is_a_finding(honest, tmp_path):
    findings = [str(f) for f in audit_bundle(_forge(honest, tmp_path, lambda probe: _failed_gradient(probe, True)))]
    assert ("data/stages/probe/probe.json: checks.gradient: passed True at min_cosine 0.9; recomputed False at 0.9"
            in findings), findings
    assert FAILED_GRADIENT in findings, findings


def test_python_m_evidence_audit_flags_a_failed_check_sealed_past_even_when_its_record_says_so(honest, tmp_path):
    """The record is honest (passed: false) and recomputes; the verdict was sealed past it all the same."""
    bag = _forge(honest, tmp_path, lambda probe: _failed_gradient(probe, False))
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bag)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert FAILED_GRADIENT in lines, lines
    assert not any("checks.gradient" in line for line in lines), lines  # the record itself recomputes
