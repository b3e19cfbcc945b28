"""Tampered copies of a bundle the audit must catch (stop 42's adversarial round, helper adv42): figures the
settings say were drawn but are absent, figures in a bundle built without them, a malformed ranks field (once
masking every later run's findings), an accepted run's edited run.json (never judged again before). Each copy is
resealed as a consistent forger would (``tests.sweeps.reseal_bag``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep
from evidence.audit import audit_bundle
from evidence.dataset import load_bundle_data
from evidence.report.sections import render_report
from evidence.seal.bundle import build_bundle, figures_library_version
from tests.sweeps import reseal_bag


@pytest.fixture(scope="module")
def no_figures_bundle(tmp_path_factory) -> Path:
    sweep = make_sweep(tmp_path_factory.mktemp("tampered"))
    return build_bundle(sweep, figures=False).bundle_dir


def _copy(bundle: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(bundle, tmp_path / "bundle"))


def _set_settings(bag: Path, edit) -> None:
    path = bag / "data" / "evidence.json"
    settings = json.loads(path.read_text())
    edit(settings)
    path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def _rerender_report(bag: Path) -> None:
    """What a consistent forger does after editing evidence.json: the report as the audit recomputes it."""
    data = bag / "data"
    (data / "report.md").write_text(render_report(load_bundle_data(data)), encoding="utf-8")


def _linked_figures(bag: Path) -> list[str]:
    return re.findall(r"\(figures/([^)]+)\)", (bag / "data" / "report.md").read_text())


def test_figures_the_settings_say_were_drawn_but_absent_are_a_finding(no_figures_bundle, tmp_path):
    """MEDIUM. evidence.json names this machine's matplotlib as the one that drew the figures, the report links
    10 figures, and data/figures/ does not exist: the audit is clean (check_figures returns before the redrawing
    when the directory is absent). The same holds for a bundle built WITH figures whose figures/ was deleted and
    resealed (also clean at 99ec398), and for any other matplotlib version named. Should: a bundle whose
    evidence.json says figures were drawn holds every figure its report links (one finding per missing file),
    and one that says none were drawn holds no figures/ directory."""
    bag = _copy(no_figures_bundle, tmp_path)
    _set_settings(bag, lambda s: s.__setitem__("figures_matplotlib", figures_library_version()))
    _rerender_report(bag)
    reseal_bag(bag)
    linked = _linked_figures(bag)
    assert linked and not (bag / "data" / "figures").exists()  # the report links figures the bundle lacks
    assert [str(p) for p in audit_bundle(bag)] == [
        f"data/figures: missing, while evidence.json says matplotlib {figures_library_version()} drew the figures "
        "the report links"]


def test_figures_in_a_bundle_built_without_them_are_a_finding(no_figures_bundle, tmp_path):
    """MEDIUM (the reverse). Any well-formed SVG + PNG pairs dropped into data/figures/ of a bundle built without
    figures audit clean: evidence.json has no figures_matplotlib, so nothing is redrawn or compared, and the report
    says "No figure ...: the bundle was built without figures" for each figure that is present. Should: figures in
    a bundle whose evidence.json says none were drawn are a finding (or the report says what they are)."""
    bag = _copy(no_figures_bundle, tmp_path)
    figures = bag / "data" / "figures"
    figures.mkdir()
    svg = ('<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
           '<text x="1" y="9">fabricated</text></svg>')
    png = _tiny_png()
    for name in ("reward", "eval_passk"):
        (figures / f"{name}.svg").write_text(svg)
        (figures / f"{name}.png").write_bytes(png)
    reseal_bag(bag)
    report = (bag / "data" / "report.md").read_text()
    assert "No figure *" in report and "built without figures" in report
    assert [str(p) for p in audit_bundle(bag)] == [
        "data/figures: figures in a bundle built without them (evidence.json names no matplotlib that drew them, "
        "and the report says none was drawn)"]


def _tiny_png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"\x00\xff\xff\xff"  # one white RGB pixel, filter byte 0
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_a_malformed_ranks_field_is_a_finding_and_masks_no_other_runs(no_figures_bundle, tmp_path):
    """LOW-MEDIUM (new with record_judge: at 99ec398 the accepted audit read job.json's ranks only for a run.json
    with rank logs). job.json "ranks": 2 in grpo-42's copy makes ranks_agree raise TypeError inside check_runs:
    the audit says only "data: cannot recompute (TypeError: 'int' object is not iterable)" (no file named) and
    check_runs stops there, so rpp-42's NaN in its metrics log (which check_runs names) is no longer reported.
    Should: a finding naming data/runs/grpo-42/job.json, and the other runs still checked."""
    bag = _copy(no_figures_bundle, tmp_path)
    job = bag / "data" / "runs" / "grpo-42" / "job.json"
    record = json.loads(job.read_text())
    record["ranks"] = 2
    job.write_text(json.dumps(record, indent=2))
    log = bag / "data" / "runs" / "rpp-42" / "metrics.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([lines[0].replace('"train/loss": ', '"train/loss": NaN, "w": ', 1), *lines[1:]]) + "\n")
    reseal_bag(bag)
    reasons = [str(p) for p in audit_bundle(bag)]
    assert not any("cannot recompute (TypeError" in r for r in reasons), reasons[:3]
    assert any(r.startswith("data/runs/grpo-42/job.json: ranks is int 2, not the list") for r in reasons), reasons[:5]
    assert any(r.startswith("data/runs/rpp-42/metrics.jsonl") for r in reasons), reasons[:5]


@pytest.mark.parametrize("field, value", [("status", "failed"), ("steps_completed", 3), ("seed", 43)])
def test_an_accepted_runs_edited_run_json_is_judged_again(no_figures_bundle, tmp_path, field, value):
    """MEDIUM, pre-existing (clean at 99ec398 too; no regression found: 53 tampers of job.json, run.json,
    metrics.jsonl, ledger/ranks fields, command, eval and whole-directory deletions, accepted and rejected, give
    the same findings at 99ec398 and HEAD). An accepted run's carried run.json edited to status "failed",
    steps_completed 3 or seed 43, judged.csv restated and resealed: clean. RECORD_GATES' "run" gate
    (run_completed) has carried=_files(run.json): the audit of a REJECTED job re-checks run.json from the bundle,
    but where=(build, rejected) keeps the audit of an ACCEPTED one from running it. Should: the accepted audit
    re-runs run_completed on the carried run.json (the same for job-identity on job.json)."""
    bag = _copy(no_figures_bundle, tmp_path)
    path = bag / "data" / "runs" / "grpo-42" / "run.json"
    record = json.loads(path.read_text())
    record[field] = value
    path.write_text(json.dumps(record, indent=2))
    reseal_bag(bag)
    reasons = [str(p) for p in audit_bundle(bag)]
    assert any(r.startswith("data/runs/grpo-42/run.json") for r in reasons), reasons[:5]
