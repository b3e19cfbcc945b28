"""Issue 32, section 4: an experiment's arm names label every table, an external trainer's arm is described by the
algorithm its trainer declares, rliable's refusals are one sentence, GRPO's flat policy-gradient loss is explained,
and every figure comes as PNG beside SVG, which the audit checks like the SVGs (and the leak scans read as a PNG)."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep, write_json
from evidence import audit_bundle
from evidence.report.png import PNGError, chunks, document_text
from evidence.seal.bundle import build_bundle
from tests.evidence.experiment_stages import add_launcher_stages
from tests.sweeps import reseal_bag

SPEC = """\
title: per-example against token-mean loss reduction
hypothesis: token_mean reaches at least 4 points more eval pass@1 than per_example
arms:
  per_example: {algo: grpo, algo.loss_reduction: response_mean}
  token_mean: {algo: grpo, algo.loss_reduction: token_mean}
seeds: [1, 2, 3]
criterion:
  metric: eval/pass@1
  at: final
  baseline: per_example
  treatment: token_mean
  threshold_points: 4
"""
LABELS = {"grpo-loss_reduction_response_mean": {"algo": "grpo", "algo.loss_reduction": "response_mean"},
          "grpo-loss_reduction_token_mean": {"algo": "grpo", "algo.loss_reduction": "token_mean"}}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    """An experiment's confirm sweep whose arms the launcher labelled by their overrides, built with its spec."""
    sweep = make_sweep(tmp_path_factory.mktemp("names"), algos=("grpo",), seeds=(1, 2, 3), name="confirm",
                       arms=LABELS)
    (sweep / "experiment.yaml").write_text(SPEC, encoding="utf-8")
    add_launcher_stages(sweep, SPEC)
    build_bundle(sweep, figures=False)
    return sweep / "bundle" / "data"


def test_an_experiments_arm_names_are_the_labels_of_every_table(experiment):
    report = (experiment / "report.md").read_text()
    assert report.splitlines()[0] == "# toy: per_example, token_mean"
    headline = report.splitlines()[2]  # the arms' runs tie here (one algo, one seed's draw): what is missing
    assert headline.startswith("On eval pass@1, token_mean − per_example has tied evaluations")
    tables = report.split("\n## ")
    named = [t for t in tables if t.startswith(("Training stability", "Length, truncation", "Fixed-subset evaluation",
                                                 "Paired differences", "Resources", "Evaluation noise"))]
    assert len(named) == 6
    for section in named:
        rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Metric")]
        body = [r for r in rows[2:] if "grpo-loss" in r.split(" | ")[0] or "grpo-loss" in r.split(" | ")[1:2][0]]
        assert not body, section.splitlines()[0]
        assert any("per_example" in r or "token_mean" in r for r in rows), section.splitlines()[0]
    assert "| token_mean − per_example |" in report
    jobs = report.split("## Scope and evidence boundary", 1)[1].split("\n## ", 1)[0]
    assert "| per_example | 1 |" in jobs  # the jobs table too (the scope's arm list keeps the labels it maps)


def test_the_csvs_keep_the_sweeps_labels(experiment):
    text = (experiment / "tables" / "eval_aggregate.csv").read_text()
    assert "grpo-loss_reduction_token_mean" in text and "token_mean," not in text.split("\n", 1)[0]


def declared_sweep(root: Path) -> Path:
    """A proofgrid GRPO arm beside a lab's REINFORCE script run as trainer=command (its configured algo: grpo), whose
    runs declare, as trainer.external writes them, the algorithm the spec names."""
    arms = {"grpo": {"algo": "grpo"}, "reinforce-command": {"algo": "grpo", "trainer": "command"}}
    sweep = make_sweep(root, algos=("grpo",), seeds=(1, 2, 3), arms=arms)
    for run in sorted(sweep.glob("jobs/reinforce-command-*/run/run.json")):
        record = json.loads(run.read_text())
        record["algorithm"] = {
            "short": "grpo", "name": "grpo", "display_name": "REINFORCE", "kl_placement": "none",
            "global_normalization": False, "trainer": "command", "declared_by": "the trainer spec",
            "contract": {"advantage": "reward minus its prompt group's mean (no std scaling)",
                         "normalization": "per-response token mean, then the batch mean", "kl_regularization": "none",
                         "loss": "REINFORCE (no ratio, no clipping)"}}
        write_json(run, record)
    return sweep


def test_an_arm_whose_trainer_declares_its_algorithm_is_described_by_it(tmp_path):
    data = build_bundle(declared_sweep(tmp_path), figures=False).bundle_dir / "data"
    report = (data / "report.md").read_text()
    assert "- Algorithms: GRPO, REINFORCE" in report and "| Algorithms | GRPO, REINFORCE |" in report
    assert "| reinforce-command | command | REINFORCE | reward minus its prompt group's mean" in report
    contract = (data / "tables" / "algorithm_contract.csv").read_text()
    assert "reinforce-command,command,grpo,REINFORCE," in contract


def test_refused_rliable_measures_are_one_sentence_not_a_row_each(clean_build):
    _, result = clean_build
    report = (result.bundle_dir / "data" / "report.md").read_text()
    section = report.split("## Robust measures (rliable)", 1)[1].split("\n## ", 1)[0]
    assert "refused (" not in section and "| Measure |" not in section
    assert ("Refused here for every measure: an arm has 3 accepted run(s); run at least 4 seeds per arm to have them "
            "(table `robust_measures` lists each).") in section
    rows = (result.bundle_dir / "data" / "tables" / "robust_measures.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * (3 + 3) and all(r.endswith("n=3 < 4") for r in rows[1:])


def test_grpos_flat_policy_gradient_loss_is_explained_where_the_data_show_it(tmp_path, clean_build):
    sweep = make_sweep(tmp_path, algos=("grpo", "rpp"))
    for metrics in sorted(sweep.glob("jobs/grpo-*/run/metrics.jsonl")):  # a real GRPO run's float32 zeros
        lines = [json.loads(line) for line in metrics.read_text().splitlines()]
        for i, record in enumerate(lines):
            record["train/pg_loss"] = (-1.4e-8, 0.0, -3.7e-8)[i % 3]
        metrics.write_text("".join(json.dumps(r) + "\n" for r in lines))
    report = (build_bundle(sweep, figures=False).bundle_dir / "data" / "report.md").read_text()
    note = next(line for line in report.splitlines() if line.startswith("- `train/pg_loss` of "))
    assert note.startswith("- `train/pg_loss` of GRPO is 0 at every step by construction here (|value| ≤ 1e-05")
    assert "on policy, so the probability ratio is 1" in note and "centred within each prompt's group" in note
    _, result = clean_build  # pg_loss that moves: no such note
    assert "`train/pg_loss` of" not in (result.bundle_dir / "data" / "report.md").read_text()


# ---- PNG beside SVG ----------------------------------------------------------------------------------------

def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def test_every_figure_is_an_svg_with_a_png_beside_it_of_pixels_only(clean_build_with_figures):
    _, result = clean_build_with_figures
    figures = result.bundle_dir / "data" / "figures"
    svgs, pngs = {p.stem for p in figures.glob("*.svg")}, {p.stem for p in figures.glob("*.png")}
    assert svgs == pngs and "eval_passk" in pngs and "resources" in pngs
    for png in sorted(figures.glob("*.png")):
        kinds = [kind for kind, _ in chunks(png.read_bytes())]  # parsed by the reader, CRCs checked
        assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and not {b"tEXt", b"zTXt", b"iTXt"} & set(kinds)
        width, height = struct.unpack(">II", chunks(png.read_bytes())[0][1][:8])
        assert width >= 1000 and height >= 400, png.name  # 200 dpi: slide-sized
    report = (result.bundle_dir / "data" / "report.md").read_text()
    assert "each also as a PNG beside it (`<figure>.png`, for slides)" in report


@pytest.mark.parametrize("forge, says", [
    (lambda png: png.unlink(), "data/figures/reward.svg: has no reward.png beside it"),
    (lambda png: png.write_bytes(png.read_bytes()[:-12] + _chunk(b"tEXt", b"Comment\0/home/alice/run")
                                 + _chunk(b"IEND", b"")),
     "data/figures/reward.png: not a figure's PNG: carries text chunks (tEXt): a figure is pixels only"),
    (lambda png: png.write_bytes(png.read_bytes()[:40] + bytes([png.read_bytes()[40] ^ 1]) + png.read_bytes()[41:]),
     "data/figures/reward.png: not a figure's PNG: chunk"),
    (lambda png: png.write_bytes(b"<svg/>"), "data/figures/reward.png: not a figure's PNG: not a PNG"),
])
def test_the_audit_checks_each_png_like_the_svgs(figures_bundle_copy, forge, says):
    forge(figures_bundle_copy / "data" / "figures" / "reward.png")
    reseal_bag(figures_bundle_copy)
    reasons = [str(f) for f in audit_bundle(figures_bundle_copy)]
    assert any(r.startswith(says) for r in reasons), reasons


def test_a_png_redrawn_differently_is_a_finding(figures_bundle_copy):
    png = figures_bundle_copy / "data" / "figures" / "reward.png"
    png.write_bytes((figures_bundle_copy / "data" / "figures" / "grad_norm.png").read_bytes())
    reseal_bag(figures_bundle_copy)
    reasons = [str(f) for f in audit_bundle(figures_bundle_copy)]
    assert "data/figures/reward.png: differs from the figure redrawn from steps.csv / eval.csv" in reasons


def test_the_leak_scans_read_a_pngs_text_not_its_pixels():
    pixels = zlib.compress(b"/home/alice/secret " * 50)  # compressed: its bytes are not the words
    png = (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
           + _chunk(b"IDAT", pixels) + _chunk(b"tEXt", b"Author\0alice@example.org") + _chunk(b"IEND", b""))
    assert document_text("figures/a.png", png) == "Author: alice@example.org"
    assert document_text("figures/a.svg", b"<svg>x</svg>") == "<svg>x</svg>"
    assert document_text("figures/b.png", b"/home/alice not a png") == "/home/alice not a png"  # read as text
    with pytest.raises(PNGError, match="its CRC does not match"):
        chunks(png[:-5] + b"\x00" + png[-4:])


def test_an_arm_with_enough_runs_keeps_its_rows_and_the_refused_ones_are_counted_in_the_sentence(tmp_path):
    sweep = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=(1, 2, 3, 4))
    metrics = sweep / "jobs" / "rpp-4" / "run" / "metrics.jsonl"  # one rpp run rejected: 3 runs against 4
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:-1]))
    report = (build_bundle(sweep, figures=False).bundle_dir / "data" / "report.md").read_text()
    section = report.split("## Robust measures (rliable)", 1)[1].split("\n## ", 1)[0]
    # per metric: GRPO's IQM computed; REINFORCE++'s IQM and the pair's probability of improvement refused
    assert ("Refused here for 6 of the 9 measures: an arm has 3 accepted run(s); run at least 4 seeds per arm to "
            "have them (table `robust_measures` lists each).") in section
    rows = [line for line in section.splitlines() if line.startswith("| ") and "Measure" not in line]
    assert len(rows) == 3 and all("| IQM | GRPO | 4 |" in r for r in rows) and "refused" not in section
