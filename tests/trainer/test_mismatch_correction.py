"""Training–inference mismatch corrections (``trainer.algorithms.correction``): truncated and masked importance
sampling against float64 references written from their formulas, with NaN/Inf in masked slots, and their effect on
the reduced policy loss and its gradient."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algorithms import AlgoConfig, ppo_clip_token_loss, reduce_loss
from trainer.algorithms.correction import corrected_loss_inputs, masked_is_keep, truncated_is_weights

F64 = torch.float64
MASK = [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
# The trainer's log-probs and the engine's: row 0 agrees but for one token, row 1 far apart, row 2 close.
LOGP_OLD = [[-0.5, -1.0, -0.2, 0.0], [-2.0, -0.1, 0.0, 0.0], [-0.3, -0.3, -0.9, -1.2]]
LOGP_SAMPLER = [[-0.5, -1.9, -0.2, 0.0], [-0.4, -0.6, 0.0, 0.0], [-0.31, -0.28, -0.95, -1.1]]
ADV = [[1.0] * 4, [-0.5] * 4, [0.25] * 4]


def _sentinel(values, sentinel):
    out = torch.tensor(values, dtype=F64)
    out[~torch.tensor(MASK, dtype=torch.bool)] = sentinel
    return out


def _ratios():
    """exp(logp_old - logp_sampler) per token, float64 from the lists (Python floats, not the code under test)."""
    return [[math.exp(a - b) for a, b in zip(ra, rb)] for ra, rb in zip(LOGP_OLD, LOGP_SAMPLER)]


@pytest.mark.parametrize("sentinel", [0.0, float("nan"), float("inf")])
@pytest.mark.parametrize("cap", [1.0, 1.5, 3.0])
def test_truncated_is_weights_are_the_ratio_capped_at_c_on_valid_tokens_and_0_elsewhere(sentinel, cap):
    expected = [[min(r, cap) if m else 0.0 for r, m in zip(rr, mm)] for rr, mm in zip(_ratios(), MASK)]
    got = truncated_is_weights(_sentinel(LOGP_OLD, sentinel), _sentinel(LOGP_SAMPLER, -sentinel),
                               torch.tensor(MASK), cap)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("sentinel", [0.0, float("nan")])
@pytest.mark.parametrize("bound", [1.1, 2.0, 10.0])
def test_masked_is_keeps_a_token_whose_ratio_lies_within_one_over_c_and_c(sentinel, bound):
    expected = [[bool(m) and 1 / bound <= r <= bound for r, m in zip(rr, mm)] for rr, mm in zip(_ratios(), MASK)]
    got = masked_is_keep(_sentinel(LOGP_OLD, sentinel), _sentinel(LOGP_SAMPLER, sentinel), torch.tensor(MASK), bound)
    assert got.tolist() == expected


@pytest.mark.parametrize("bound", [1.05, 1.3, 2.0, 5.0])
def test_sequence_level_masked_is_drops_a_response_whose_sequence_ratio_leaves_the_bound(bound):
    expected = []
    for ra, rb, mm in zip(LOGP_OLD, LOGP_SAMPLER, MASK):
        ratio = math.exp(sum(a - b for a, b, m in zip(ra, rb, mm) if m))  # the product of the token ratios
        keep = 1 / bound <= ratio <= bound
        expected.append([bool(m) and keep for m in mm])
    got = masked_is_keep(_sentinel(LOGP_OLD, float("nan")), _sentinel(LOGP_SAMPLER, 0.0), torch.tensor(MASK), bound,
                         "sequence")
    assert got.tolist() == expected


def _reference_loss(cfg: AlgoConfig, logp: list[list[float]]) -> float:
    """GRPO's response-mean PPO-clip loss with the corrections, in float64 Python from the formulas."""
    ratios = _ratios()
    per_response = []
    for i, mm in enumerate(MASK):
        seq = math.exp(sum(LOGP_OLD[i][t] - LOGP_SAMPLER[i][t] for t in range(4) if mm[t]))
        terms = []
        for t in range(4):
            if not mm[t]:
                continue
            if cfg.mis_bound is not None:
                r = seq if cfg.mis_level == "sequence" else ratios[i][t]
                if not 1 / cfg.mis_bound <= r <= cfg.mis_bound:
                    continue
            rho = math.exp(logp[i][t] - LOGP_OLD[i][t])
            a = ADV[i][t]
            token = -min(rho * a, min(max(rho, 0.8), 1.2) * a)
            if cfg.tis_cap is not None:
                token *= min(ratios[i][t], cfg.tis_cap)
            terms.append(token)
        per_response.append(sum(terms) / len(terms) if terms else 0.0)
    return sum(per_response) / len(MASK)


@pytest.mark.parametrize("settings", [{}, {"tis_cap": 1.2}, {"mis_bound": 1.5}, {"mis_bound": 1.5, "mis_level": "sequence"},
                                      {"tis_cap": 2.0, "mis_bound": 3.0}])
def test_the_corrected_policy_loss_and_its_gradient_match_the_float64_reference(settings):
    cfg = AlgoConfig(estimator="grpo", n_samples_per_prompt=3, **settings)
    logp_values = [[v + 0.05 * (i - t) for t, v in enumerate(row)] for i, row in enumerate(LOGP_OLD)]
    logp = torch.tensor(logp_values, dtype=F64, requires_grad=True)
    mask = torch.tensor(MASK, dtype=torch.bool)
    old, sampler, adv = (torch.tensor(x, dtype=F64) for x in (LOGP_OLD, LOGP_SAMPLER, ADV))
    token, _ = ppo_clip_token_loss(logp, old, adv, mask)
    token, pg_mask = corrected_loss_inputs(token, mask, old, sampler, cfg)
    loss = reduce_loss(token, pg_mask, "response_mean")
    loss.backward()
    assert loss.item() == pytest.approx(_reference_loss(cfg, logp_values), abs=1e-12)
    for i in range(3):  # central differences of the reference, one valid token at a time
        for t in range(4):
            if not MASK[i][t]:
                assert logp.grad[i, t].item() == 0.0
                continue
            h = 1e-6
            up = [row[:] for row in logp_values]
            down = [row[:] for row in logp_values]
            up[i][t] += h
            down[i][t] -= h
            numeric = (_reference_loss(cfg, up) - _reference_loss(cfg, down)) / (2 * h)
            assert logp.grad[i, t].item() == pytest.approx(numeric, abs=1e-7), (settings, i, t)


def test_without_a_correction_the_loss_inputs_are_returned_unchanged():
    cfg = AlgoConfig(estimator="grpo", n_samples_per_prompt=3)
    token, mask = torch.ones(3, 4), torch.tensor(MASK, dtype=torch.bool)
    got_token, got_mask = corrected_loss_inputs(token, mask, torch.zeros(3, 4), torch.ones(3, 4), cfg)
    assert got_token is token and got_mask is mask
