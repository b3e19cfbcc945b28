"""The bundled incidents.yaml against what the build derives from it (B14): its incidents are incidents.csv's
``incidents.yaml`` rows, its exclusions index.csv's rejections, its resolutions attached to automatic incidents.
An incidents.yaml added to (or edited in) a sealed bundle, resealed, is a finding naming the entry."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep, set_job_fields
from evidence import audit_bundle, build_bundle
from facts.repo import REPO_ROOT
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
HONEST = ("resolutions:\n  - job: rpp-1234\n    kind: scheduler-state\n    resolution: fixed the regex\n"
          "exclusions:\n  - job: grpo-42\n    reason: wrong eval labels\n"
          "incidents:\n  - title: Preflight lacked Ruff\n    evidence: imports passed\n    resolution: reran\n")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """Two bundles of the same sweep shape: one built without incidents.yaml, one with the honest file."""
    built = {}
    for name, text in (("plain", None), ("with", HONEST)):
        sweep = make_sweep(tmp_path_factory.mktemp(name))
        set_job_fields(sweep, "rpp", 1234, state="FAILED", exit_code=2)
        if text:
            (sweep / "incidents.yaml").write_text(text)
        built[name] = build_bundle(sweep, figures=False).bundle_dir
    return built


def test_an_honest_incidents_yaml_audits_clean(bundles):
    assert audit_bundle(bundles["with"]) == []


ADDED = {
    "a user incident": (
        "plain", 'incidents:\n  - title: "Independent replication: rpp wins, p<0.001"\n    evidence: replicated\n'
                 "    resolution: none needed\n",
        "data/incidents.yaml: incident 'Independent replication: rpp wins, p<0.001' (job -, evidence 'replicated', "
        "resolution 'none needed') has no incidents.csv record"),
    "an exclusion of an accepted job": (
        "plain", "exclusions:\n  - job: grpo-1234\n    reason: rationale-form labels\n",
        "data/index.csv: grpo-1234: incidents.yaml excludes it ('rationale-form labels') but index.csv records "
        "accepted=yes"),
    "a resolution of a job without incidents": (
        "plain", "resolutions:\n  - job: grpo-1234\n    resolution: fixed\n",
        "data/incidents.yaml: resolution 'fixed' of grpo-1234 resolves no incident of incidents.csv"),
    "an exclusion removed": (
        "with", HONEST.replace("exclusions:\n  - job: grpo-42\n    reason: wrong eval labels\n", ""),
        "data/index.csv: grpo-42: rejected as "),
    "a user incident reworded": (
        "with", HONEST.replace("resolution: reran", "resolution: nothing to fix"),
        "data/incidents.csv: incident 'Preflight lacked Ruff' (source incidents.yaml) is not in the bundled"),
    "a resolution reworded": (
        "with", HONEST.replace("fixed the regex", "no fault found"),
        "data/incidents.yaml: resolution 'no fault found' of rpp-1234 (scheduler-state) resolves no incident"),
    "not valid": (
        "with", "notes: []\n", "data/incidents.yaml: not a valid incidents file (incidents.yaml: unknown section"),
}


@pytest.mark.parametrize("case", list(ADDED))
def test_an_incidents_yaml_the_tables_do_not_derive_from_is_a_finding_resealed(bundles, tmp_path, case):
    base, text, expected = ADDED[case]
    bag = Path(shutil.copytree(bundles[base], tmp_path / "bundle"))
    (bag / "data" / "incidents.yaml").write_text(text)
    reseal_bag(bag)
    found = [str(p) for p in audit_bundle(bag)]
    assert any(line.startswith(expected) for line in found), found


def test_python_m_evidence_audit_names_an_added_incidents_yaml(bundles, tmp_path):
    bag = Path(shutil.copytree(bundles["plain"], tmp_path / "bundle"))
    base, text, expected = ADDED["an exclusion of an accepted job"]
    (bag / "data" / "incidents.yaml").write_text(text)
    reseal_bag(bag)
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bag)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert any(line.startswith(expected) for line in done.stdout.splitlines()), done.stdout
