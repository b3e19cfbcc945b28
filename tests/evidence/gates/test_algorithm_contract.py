"""The report's algorithm contract comes from what the runs declare (``run.json``'s ``algorithm``),
and the sections about KL placement are chosen by that trait, not by the algorithm's name."""

from __future__ import annotations

import csv
import json

from benchmarks.synthetic_sweep import job_dir, make_sweep
from evidence import audit_bundle, build_bundle

SEEDS = (1, 2)
# What a trainer other than proofgrid's might declare for its GRPO runs (issue 20): its own row.
DECLARED = {"short": "grpo", "name": "grpo", "display_name": "GRPO", "kl_placement": "k1_in_reward",
            "global_normalization": True, "loss_reduction": "token_mean",
            "contract": {"advantage": "group-relative, by the other trainer", "normalization": "by the batch's tokens",
                         "kl_regularization": "k1 shaping in the reward", "loss": "its own"}}


def _rows(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _declare(sweep, arm: str, declared: dict) -> None:
    for seed in SEEDS:
        path = job_dir(sweep, arm, seed) / "run" / "run.json"
        record = json.loads(path.read_text())
        record["algorithm"] = declared
        path.write_text(json.dumps(record))


def test_runs_that_declare_nothing_get_their_algorithms_record(tmp_path):
    sweep = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=SEEDS, n_steps=4)
    tables = build_bundle(sweep, figures=False).bundle_dir / "data" / "tables"
    contract = {r["algo"]: r for r in _rows(tables / "algorithm_contract.csv")}
    assert contract["grpo"]["kl_regularization"] == "separate k2 KL loss"
    assert contract["rpp"]["advantage"] == "terminal reward plus token k1 KL shaping, followed by the reverse return"
    assert {r["arm"] for r in _rows(tables / "k1_activation.csv")} == {"rpp"}


def test_the_contract_row_the_k1_check_and_the_kl_cells_follow_what_the_runs_declare(tmp_path):
    sweep = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=SEEDS, n_steps=4)
    _declare(sweep, "grpo", DECLARED)
    _declare(sweep, "rpp", {**DECLARED, "short": "rpp", "kl_placement": "k2_loss", "global_normalization": False})
    result = build_bundle(sweep, figures=False)
    tables = result.bundle_dir / "data" / "tables"
    contract = {r["algo"]: r for r in _rows(tables / "algorithm_contract.csv")}
    assert (contract["grpo"]["advantage"], contract["grpo"]["normalization"], contract["grpo"]["kl_regularization"]) \
        == ("group-relative, by the other trainer", "by the batch's tokens", "k1 shaping in the reward")
    report = (result.bundle_dir / "data" / "report.md").read_text()
    assert "| GRPO | group-relative, by the other trainer | by the batch's tokens | k1 shaping in the reward |" in report
    # The k1 check covers the arms whose KL sits in the reward, whatever they are called.
    assert {r["arm"] for r in _rows(tables / "k1_activation.csv")} == {"grpo"}
    # rpp logs no KL loss and now declares no KL in the reward: its cells say there is no KL-loss term.
    assert "N/A (no KL-loss term)" in report and "N/A (k1 reward shaping)" not in report
    assert [str(f) for f in audit_bundle(result.bundle_dir)] == []


def test_the_report_names_the_kl_placements_of_the_arms_it_has_and_no_others(tmp_path):
    # A GRPO-only bundle: no arm puts k1 in its reward, so there is no k1 check and no word of REINFORCE++.
    grpo_only = build_bundle(make_sweep(tmp_path / "g", algos=("grpo",), seeds=SEEDS, n_steps=4), figures=False)
    report = (grpo_only.bundle_dir / "data" / "report.md").read_text()
    assert "REINFORCE++" not in report and "k1 activation check" not in report
    assert "GRPO reports an independent k2 term as `train/kl_loss`." in report
    both = build_bundle(make_sweep(tmp_path / "b", algos=("grpo", "rpp"), seeds=SEEDS, n_steps=4), figures=False)
    report = (both.bundle_dir / "data" / "report.md").read_text()
    assert "REINFORCE++ folds its k1 reference term into the return; GRPO reports an independent k2 term" in report
    assert "## k1 activation check (REINFORCE++)" in report
