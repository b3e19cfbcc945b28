"""The trainer's own log line of its evaluations (facts.metrics.eval_line in logs/trainer.log) against the
run's eval.json (B1, the cheap half): a forged summary the trainer did not log is a finding naming the line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import job_dir, make_sweep
from evidence import audit_bundle, build_bundle
from facts.metrics import eval_line, parse_eval_line
from facts.repo import REPO_ROOT
from tests.sweeps import reseal_bag

REPO = REPO_ROOT


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    sweep = make_sweep(tmp_path_factory.mktemp("evalline"))
    for job in sorted(p for p in (sweep / "jobs").iterdir() if p.is_dir()):
        algo, seed = job.name.rsplit("-", 1)
        summary = json.loads((job_dir(sweep, algo, int(seed)) / "run" / "eval.json").read_text())
        (job_dir(sweep, algo, int(seed)) / "trainer.log").write_text("2026-01-15 10:00:00,000 trainer INFO starting\n"
                                                                 f"2026-01-15 10:05:00,000 trainer INFO "
                                                                 f"{eval_line(summary['initial'], summary['final'])}\n")
    return build_bundle(sweep, figures=False).bundle_dir


def test_the_line_round_trips_and_an_honest_bundle_audits_clean(bundle):
    line = (bundle / "data" / "runs" / "rpp-42" / "logs" / "trainer.log").read_text().splitlines()[1]
    checkpoint, final, initial = parse_eval_line(line)
    assert "pass@1" in final and "pass@1" in initial
    assert audit_bundle(bundle) == []


def test_python_m_evidence_audit_names_a_summary_the_trainer_did_not_log(bundle, tmp_path):
    bag = Path(shutil.copytree(bundle, tmp_path / "bundle"))
    log = bag / "data" / "runs" / "rpp-42" / "logs" / "trainer.log"
    lines = log.read_text().splitlines()
    _, final, _ = parse_eval_line(lines[1])
    lines[1] = lines[1].replace(f"pass@1={final['pass@1']}", "pass@1=0.9999", 1)
    log.write_text("\n".join(lines) + "\n")
    reseal_bag(bag)
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bag)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (f"data/runs/rpp-42/logs/trainer.log: line 2: the trainer logged final pass@1=0.9999, eval.json states "
            f"{final['pass@1']}") in done.stdout.splitlines(), done.stdout
