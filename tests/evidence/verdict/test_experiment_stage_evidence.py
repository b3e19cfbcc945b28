"""An experiment bundle's stage evidence is checked, not trusted: the stages its spec runs are there, and
the probe's record (seconds per step, peak memory, the plan's cost against the budget) recomputes from
the probe's own runs and the later stages' records. Forgeries are resealed as a thorough forger does
(``tests.sweeps.reseal_bag``) and audited through ``python -m evidence audit``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep
from evidence import build_bundle
from facts.repo import REPO_ROOT
from tests.evidence.experiment_stages import CPUS, add_launcher_stages
from tests.evidence_cli import evidence_in_process
from tests.experiment_spec import experiment_yaml
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
SEEDS = (1, 2, 3)
SPEC = experiment_yaml(budget={"cpu_hours": 5.0})


@pytest.fixture(scope="module")
def experiment_bag(tmp_path_factory) -> Path:
    """A confirm bundle with the probe stage and the registration link the launcher leaves; audits clean."""
    root = tmp_path_factory.mktemp("exp")
    confirm = make_sweep(root, seeds=SEEDS, name="confirm", arms={"grpo": {"algo": "grpo"}, "rppb": {"algo": "rppb"}})
    (confirm / "experiment.yaml").write_text(SPEC, encoding="utf-8")
    add_launcher_stages(confirm, SPEC)
    return build_bundle(confirm, figures=False).bundle_dir


def audit_cli(bag: Path) -> tuple[int, list[str]]:
    """``python -m evidence audit`` in this process (tests/evidence_cli.py; the loosened-spec test builds as a process)."""
    proc = evidence_in_process("audit", bag)
    return proc.returncode, proc.stdout.splitlines()


def forged(bag: Path, tmp_path: Path, edit) -> Path:
    copy = Path(shutil.copytree(bag, tmp_path / "forged"))
    edit(copy / "data")
    reseal_bag(copy)
    return copy


def test_the_honest_experiment_bundle_audits_clean(experiment_bag):
    code, lines = audit_cli(experiment_bag)
    assert code == 0, lines
    record = json.loads((experiment_bag / "data" / "stages" / "probe" / "probe.json").read_text())
    # 6 confirm runs x 10 steps at the slower arm's s/step x 2 CPUs, by hand
    step_s = max(a["step_s"] for a in record["arms"].values())
    assert record["budget"]["cpu_hours"] == pytest.approx(60 * step_s * CPUS / 3600, rel=1e-12)


def test_the_probe_stage_s_own_bundle_carries_its_spec_and_audits_clean(experiment_bag):
    """Issue 33 item 8: the probe's records name the registered spec, and its own bundle carries it (no verdict), so
    it audits clean on its own as the confirm stage's does; the confirm bundle's copy of it holds the same spec."""
    from evidence import audit_bundle

    probe = experiment_bag.parent.parent / "probe" / "bundle"
    assert (probe / "data" / "experiment.yaml").read_text() == SPEC and not (probe / "data" / "verdict.json").exists()
    assert "## Verdict" not in (probe / "data" / "report.md").read_text()
    assert audit_bundle(probe) == []
    assert (experiment_bag / "data" / "stages" / "probe" / "experiment.yaml").read_text() == SPEC


def test_a_probe_bundle_that_carries_a_verdict_or_another_spec_is_a_finding(experiment_bag, tmp_path):
    from evidence import audit_bundle

    probe = Path(shutil.copytree(experiment_bag.parent.parent / "probe" / "bundle", tmp_path / "probe"))
    shutil.copyfile(experiment_bag / "data" / "verdict.json", probe / "data" / "verdict.json")
    reseal_bag(probe)
    assert any(f"{p.file}: {p.detail()}" == "data/verdict.json: present in the probe stage's bundle: only the confirm "
               "stage's carries a verdict" for p in audit_bundle(probe))
    loosened = forged(experiment_bag, tmp_path, lambda data: (data / "stages" / "probe" / "experiment.yaml").write_text(
        SPEC.replace("threshold_points: 4", "threshold_points: 1")))
    _, lines = audit_cli(loosened)
    assert "data/stages/probe/experiment.yaml: differs from data/experiment.yaml: the stage ran under another spec" \
        in lines, lines


def test_a_spec_planned_seed_missing_from_the_confirm_bundle_is_a_finding(experiment_bag, tmp_path):
    """The pre-registered spec plans every arm over its seeds: a seed's run deleted from the bundle (its index row and
    copy, everything the bundle says of it) is a finding naming the spec arm and the seed."""
    from evidence import audit_bundle

    def drop(data: Path) -> None:
        shutil.rmtree(data / "runs" / "rppb-2")
        rows = (data / "index.csv").read_text().splitlines()
        (data / "index.csv").write_text("\n".join(r for r in rows if not r.startswith("rppb-2,")) + "\n")

    bag = forged(experiment_bag, tmp_path, drop)
    found = [f"{p.file}: {p.detail()}" for p in audit_bundle(bag)]
    assert "data/index.csv: spec arm sc: seed(s) [2] of the spec's seeds [1, 2, 3] have no run in this bundle (planned " \
           "by the pre-registered spec; never run, or removed)" in found, found


@pytest.mark.parametrize("gone", ["stages", "stages/probe", "stages/probe/probe.json"])
def test_deleted_stage_evidence_resealed_is_a_finding(experiment_bag, tmp_path, gone):
    def delete(data: Path) -> None:
        target = data / gone
        shutil.rmtree(target) if target.is_dir() else target.unlink()

    code, lines = audit_cli(forged(experiment_bag, tmp_path, delete))
    assert code == 1
    if gone == "stages/probe/probe.json":
        assert any(line.startswith("data/stages/probe/probe.json: ") for line in lines), lines
    else:
        assert any(line.startswith("data/stages/probe: missing: an experiment's bundle carries its probe stage")
                   for line in lines), lines


def test_a_probe_record_edited_to_a_slow_step_and_an_over_budget_plan_does_not_pass(experiment_bag, tmp_path):
    honest = json.loads((experiment_bag / "data" / "stages" / "probe" / "probe.json").read_text())

    def edit(data: Path) -> None:
        path = data / "stages" / "probe" / "probe.json"
        record = json.loads(path.read_text())
        record["arms"]["rppb"]["step_s"] = 9999.0
        record["budget"].update(step_s=9999.0, cpu_hours=99.0)
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

    code, lines = audit_cli(forged(experiment_bag, tmp_path, edit))
    assert code == 1
    step_s = honest["arms"]["rppb"]["step_s"]
    assert any(line.startswith(f"data/stages/probe/probe.json: arms.rppb.step_s: recorded 9999.0, recomputed "
                               f"{step_s!r} from the probe's runs") for line in lines), lines
    assert any(line.startswith("data/stages/probe/probe.json: budget.cpu_hours: recorded 99.0, recomputed ")
               for line in lines), lines


def test_a_plan_over_the_spec_budget_is_a_finding_even_when_the_record_agrees(experiment_bag, tmp_path):
    """The probe's runs were slow (their metrics say 700 s/step); the record and the spec's digest are
    restated to agree with them: the plan, recomputed, is over the budget the launcher stops at."""
    import hashlib

    def edit(data: Path) -> None:
        probe = data / "stages" / "probe"
        for path in [*probe.glob("runs/*/metrics.jsonl")]:
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            for row in rows:
                row["perf/step_s"] = 700.0
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        header, *rows = (probe / "steps.csv").read_text().splitlines()
        column = header.split(",").index("perf/step_s")
        rows = [",".join("700.0" if i == column else c for i, c in enumerate(r.split(","))) for r in rows]
        (probe / "steps.csv").write_text("\n".join([header, *rows]) + "\n")
        record = json.loads((probe / "probe.json").read_text())
        for arm in record["arms"].values():
            arm["step_s"] = 700.0
        record["budget"].update(step_s=700.0, cpu_hours=60 * 700.0 * CPUS / 3600, gpu_hours=60 * 700.0 / 3600,
                                longest_run_minutes=10 * 700.0 / 60)
        (probe / "probe.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        assert hashlib.sha256((data / "experiment.yaml").read_bytes()).hexdigest()  # the spec is unchanged

    code, lines = audit_cli(forged(experiment_bag, tmp_path, edit))
    assert code == 1
    assert any(line.startswith("data/stages/probe/probe.json: the plan needs 23.33 (cpu hours) at the probe's 700 "
                               "s/step, over the spec's budget.cpu_hours of 5") for line in lines), lines


def test_a_tuned_experiment_without_its_tuning_stage_is_a_finding(tmp_path):
    spec = SPEC + "tuning: {setting: workload.lr, values: [1e-5, 4e-5], metric: rollout/raw_reward, at: last_k, " \
                  "last_k: 3, on_edge: provisional}\n"
    confirm = make_sweep(tmp_path, seeds=SEEDS, name="confirm",
                         arms={"grpo-lr1e-5": {"algo": "grpo", "workload.lr": "1e-5"},
                               "rppb-lr4e-5": {"algo": "rppb", "workload.lr": "4e-5"}})
    (confirm / "experiment.yaml").write_text(spec, encoding="utf-8")
    add_launcher_stages(confirm, spec, tuning_steps=10)
    bag = build_bundle(confirm, figures=False).bundle_dir
    code, lines = audit_cli(bag)
    assert code == 1
    assert ("data/stages/tuning: missing: the spec tunes, and the verdict's selection is recomputed from this stage"
            in lines), lines


def test_an_experiment_bundle_without_its_pre_registration_link_is_a_finding(experiment_bag, tmp_path):
    def drop(data: Path) -> None:
        record = json.loads((data / "sweep.json").read_text())
        del record["experiment_sha256"]
        (data / "sweep.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

    code, lines = audit_cli(forged(experiment_bag, tmp_path, drop))
    assert code == 1
    assert ("data/sweep.json: no experiment_sha256: an experiment's bundle carries the pre-registration link of its "
            "spec (the launcher records it in the confirm stage's sweep.json)") in lines, lines


def _forge_verdict_value(bag: Path, tmp_path: Path, value: float) -> tuple[Path, float]:
    """verdict.json's first treatment value replaced (in the criterion's points), resealed; returns the honest one."""
    honest = json.loads((bag / "data" / "verdict.json").read_text())["per_seed"][0]["treatment"]

    def edit(data: Path) -> None:
        record = json.loads((data / "verdict.json").read_text())
        record["per_seed"][0]["treatment"] = value
        (data / "verdict.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

    return forged(bag, tmp_path, edit), honest


@pytest.mark.parametrize(("value", "reason"), [
    (46.33, "46.33 points: pass@1 0.4633 is not a whole multiple of 1/100 (1 / (n_prompts x C(k, 1))): no 25 prompts "
            "x 4 samples give it"),
    (150.0, "150.0 points: pass@1 1.5 is outside [0, 1]: it is a share of the responses"),
    (-3.0, "-3.0 points: pass@1 -0.03 is outside [0, 1]: it is a share of the responses"),
], ids=["off-lattice", "above-one", "negative"])
def test_an_impossible_per_run_value_in_the_verdict_is_a_statistics_finding_naming_the_field(experiment_bag, tmp_path,
                                                                                            value, reason):
    from evidence import audit_bundle

    bag, honest = _forge_verdict_value(experiment_bag, tmp_path, value)
    findings = [str(f) for f in audit_bundle(bag)]
    assert f"data/verdict.json: per_seed[0].treatment (rppb-1 final): {reason}" in findings, findings
    assert (f"data/verdict.json: does not recompute: per_seed[0].treatment: recorded {value!r}, recomputed "
            f"{honest!r}") in findings, findings


def test_a_possible_but_wrong_verdict_value_is_the_recomputation_s_finding_only(experiment_bag, tmp_path):
    from evidence import audit_bundle

    honest = json.loads((experiment_bag / "data" / "verdict.json").read_text())["per_seed"][0]["treatment"]
    bag, _ = _forge_verdict_value(experiment_bag, tmp_path, honest + 1.0 if honest < 100 else honest - 1.0)
    findings = [str(f) for f in audit_bundle(bag)]
    assert not any("per_seed[0].treatment (" in f for f in findings), findings  # one more correct of 100: possible
    assert any(f.startswith("data/verdict.json: does not recompute: per_seed[0].treatment: recorded ")
               for f in findings), findings


def test_python_m_evidence_audit_names_an_off_lattice_verdict_value(experiment_bag, tmp_path):
    bag, _ = _forge_verdict_value(experiment_bag, tmp_path, 46.33)
    code, lines = audit_cli(bag)
    assert code == 1
    assert ("data/verdict.json: per_seed[0].treatment (rppb-1 final): 46.33 points: pass@1 0.4633 is not a whole "
            "multiple of 1/100 (1 / (n_prompts x C(k, 1))): no 25 prompts x 4 samples give it") in lines, lines


# ---- the pre-registration digest in every run's own records (a criterion loosened after the results) -----------

LOOSENED = SPEC.replace("threshold_points: 4", "threshold_points: 0")


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def test_a_criterion_loosened_after_the_results_with_sweep_json_recomputed_is_a_finding_per_run_record(
        experiment_bag, tmp_path):
    """The forger of B6: the confirm stage's spec loosened after the results, sweep.json's experiment_sha256
    recomputed, the bundle rebuilt by ``python -m evidence build`` and audited through ``python -m evidence audit``:
    the spec and sweep.json agree, but every run's job.json and the probe's records still carry the registered digest."""
    exp = Path(shutil.copytree(experiment_bag.parents[1], tmp_path / "exp", symlinks=True))
    confirm = exp / "confirm"
    shutil.rmtree(confirm / "bundle")
    for archive in confirm.glob("bundle.tar.gz*"):
        archive.unlink()
    (confirm / "experiment.yaml").write_text(LOOSENED, encoding="utf-8")
    record = json.loads((confirm / "sweep.json").read_text())
    record["experiment_sha256"] = _sha256(LOOSENED)
    (confirm / "sweep.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    build = subprocess.run([sys.executable, "-m", "evidence", "build", str(confirm)], cwd=REPO, capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    code, lines = audit_cli(confirm / "bundle.tar.gz")
    assert code == 1, lines
    registered, loosened = _sha256(SPEC)[:12], _sha256(LOOSENED)[:12]
    differs = (f"experiment_sha256 {registered} differs from the SHA256 of data/experiment.yaml, {loosened}: this "
               "record was written under another spec (one changed after its runs)")
    expected = [f"data/runs/{algo}-{seed}/job.json" for algo in ("grpo", "rppb") for seed in SEEDS] + [
        "data/stages/probe/probe.json", *(f"data/stages/probe/runs/{algo}-1/job.json" for algo in ("grpo", "rppb")),
        "data/stages/probe/sweep.json"]
    for file in expected:
        assert f"{file}: {differs}" in lines, (file, lines)
    assert not any(line.startswith(("data/experiment.yaml:", "data/sweep.json:")) for line in lines), lines


def _restated(bag: Path, tmp_path: Path, file: str, value) -> list[str]:
    """The audit's findings of ``bag`` with ``data/<file>``'s experiment_sha256 set to ``value`` (None: dropped)."""
    from evidence import audit_bundle

    def edit(data: Path) -> None:
        record = json.loads((data / file).read_text())
        record.pop("experiment_sha256")
        if value is not None:
            record["experiment_sha256"] = value
        (data / file).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

    return [str(f) for f in audit_bundle(forged(bag, tmp_path, edit))]


@pytest.mark.parametrize("file", ["runs/rppb-2/job.json", "stages/probe/runs/grpo-1/job.json",
                                  "stages/probe/probe.json", "stages/probe/sweep.json"])
def test_one_record_carrying_another_spec_s_digest_is_a_finding_naming_it_and_both_digests(experiment_bag, tmp_path,
                                                                                             file):
    other = _sha256(LOOSENED)
    findings = _restated(experiment_bag, tmp_path, file, other)
    assert findings == [f"data/{file}: experiment_sha256 {other[:12]} differs from the SHA256 of data/experiment.yaml, "
                        f"{_sha256(SPEC)[:12]}: this record was written under another spec (one changed after its "
                        "runs)"], findings


@pytest.mark.parametrize("file", ["runs/grpo-1/job.json", "stages/probe/runs/rppb-1/job.json", "stages/probe/probe.json"])
def test_a_record_missing_the_digest_is_a_finding(experiment_bag, tmp_path, file):
    findings = _restated(experiment_bag, tmp_path, file, None)
    assert findings == [f"data/{file}: no experiment_sha256: the launcher records the pre-registered spec's SHA256 "
                        f"({_sha256(SPEC)[:12]}, data/experiment.yaml's) in every run's and stage's records before its "
                        "results exist"], findings



def test_an_experiment_bundle_stripped_of_its_spec_and_verdict_is_a_finding_per_record_naming_the_spec(
        experiment_bag, tmp_path):
    """Removing the spec and its verdict does not make the runs a plain sweep's: each record the launcher wrote
    before the results still names the spec they were planned under."""
    from evidence import audit_bundle

    def strip(data: Path) -> None:
        (data / "experiment.yaml").unlink()
        (data / "verdict.json").unlink()

    findings = [str(f) for f in audit_bundle(forged(experiment_bag, tmp_path, strip))]
    digest = _sha256(SPEC)[:12]
    stripped = [f for f in findings if "planned under an experiment's spec" in f]
    assert {f.split(":")[0] for f in stripped} >= {"data/sweep.json", "data/runs/grpo-1/job.json",
                                                   "data/runs/rppb-2/job.json", "data/stages/probe/probe.json"}
    assert all(f.endswith(f"experiment_sha256 {digest}: planned under an experiment's spec, but the bundle has no "
                          "data/experiment.yaml (the spec and its verdict were removed)") for f in stripped), stripped
