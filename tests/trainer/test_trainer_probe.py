"""``python -m trainer.gradient_probe``: two arms' gradients on one staleness-0 batch (an experiment probe's check)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from trainer.gradient_probe import flat_cosine, main


def test_flat_cosine_matches_a_float64_reference():
    a, b = torch.tensor([1.0, 2.0, -2.0]), torch.tensor([2.0, 0.0, 1.0])
    assert flat_cosine(a, b) == pytest.approx((2 + 0 - 2) / (3 * math.sqrt(5)), abs=1e-15)
    assert flat_cosine(a, 3 * a) == pytest.approx(1.0, abs=1e-12)
    assert flat_cosine(a, torch.zeros(3)) == 0.0


@pytest.mark.slow
def test_gradient_check_agrees_for_one_loss_and_only_nearly_for_score_centering(tmp_path):
    """At staleness 0 the IS-PG gradient is the on-policy -A grad logp: the same arm twice agrees exactly;
    score centering adds a zero-mean auxiliary term, so it agrees closely but not exactly."""
    shared = ["workload.sampler_refresh_every=1", "seed=1"]
    same, near = tmp_path / "same.json", tmp_path / "near.json"
    assert main(["--out", str(same), "--baseline", "algo=is_pg", "--treatment", "algo=is_pg", *shared]) == 0
    assert main(["--out", str(near), "--baseline", "algo=is_pg", "--treatment", "algo=score_centering", *shared]) == 0
    same, near = json.loads(same.read_text()), json.loads(near.read_text())
    assert same["cosine"] == pytest.approx(1.0, abs=1e-12) and same["relative_difference"] == 0.0
    assert same["finite"] and same["baseline"]["grad_norm"] > 0
    assert 0.9 < near["cosine"] < 1.0 - 1e-6 and near["relative_difference"] > 0
    assert near["baseline"]["grad_norm"] == pytest.approx(same["baseline"]["grad_norm"], rel=1e-12)  # one batch
