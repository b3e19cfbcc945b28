"""The vLLM rollout engine (``trainer.vllm_engine``) on vLLM's real CPU build (the ``vllm`` extra; ``make test``
installs it): one engine started for the whole module (vLLM takes tens of seconds to start on 2 cores), the toy
model's weights, the trainer's own forward as the reference. Every check here would fail on a wrong engine: other
log-probs than the trainer's, a sync that does not reach vLLM, seeds that do not reach the sampler, draws that do
not follow the engine's distribution."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from facts.engines import SYNC_TOLERANCE
from tests.trainer_runs import REPO
from trainer.engine_registry import EngineSettings
from trainer.policy import build_token_batch, load_policy, response_logprobs
from trainer.rollout import AuxDraws, SamplingParams, TorchEngine

pytestmark = pytest.mark.slow  # starts vLLM (tens of seconds)
MODEL = REPO / "trainer" / "assets" / "toy" / "model"
QUESTION = "Question: Tom has 3 apples and buys 4 more. How many apples does Tom have now?\nAnswer:"


@pytest.fixture(scope="module")
def toy():
    pytest.importorskip("vllm", reason="the `vllm` extra (make vllm) is not installed")
    torch.set_num_threads(1)
    model, tokenizer = load_policy(str(MODEL))
    from trainer.vllm_engine import VLLMEngine

    torch.manual_seed(1234)
    before = torch.get_rng_state()
    engine = VLLMEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, EngineSettings())
    assert torch.equal(torch.get_rng_state(), before)  # vLLM's start seeds the globals; the engine puts them back
    return model, tokenizer, engine


def _prompt(tokenizer) -> list[int]:
    return tokenizer(QUESTION, add_special_tokens=False)["input_ids"]


def _trainer_logp(model, prompts, responses, pad_id, temperature=1.0) -> torch.Tensor:
    batch = build_token_batch(prompts, responses, pad_id, "cpu")
    with torch.no_grad():
        return torch.where(batch.response_mask, response_logprobs(model, batch, temperature), 0.0)


def test_the_engine_s_sampling_log_probs_are_the_trainer_s_for_the_tokens_it_sampled(toy):
    model, tokenizer, engine = toy
    prompts, keys = [_prompt(tokenizer)] * 8, list(range(100, 108))
    for temperature in (1.0, 0.7):
        out = engine.generate(prompts, keys, SamplingParams(temperature, 0, 1.0, 24))
        responses = [g.response_ids for g in out.generations]
        expected = _trainer_logp(model, prompts, responses, tokenizer.pad_token_id, temperature)
        assert out.sampler_logp.shape == expected.shape
        assert float((out.sampler_logp - expected).abs().max()) < 1e-4, temperature
        for g in out.generations:  # a finished response ends with the end token; a truncated one has all 24
            assert g.finished == (g.response_ids[-1] == tokenizer.eos_token_id)
            assert g.finished or len(g.response_ids) == 24


def test_each_response_is_its_key_s_sample_whatever_else_shares_the_batch(toy):
    _, tokenizer, engine = toy
    prompt = _prompt(tokenizer)
    sampling = SamplingParams(1.0, 0, 1.0, 16)
    alone = engine.generate([prompt], [7], sampling).generations[0].response_ids
    batch = engine.generate([prompt] * 6, [3, 7, 9, 7, 11, 13], sampling).generations
    assert batch[1].response_ids == alone and batch[3].response_ids == alone  # the same key, the same sample
    assert len({tuple(g.response_ids) for g in batch}) >= 2  # other keys, other samples (K > 1 is not K copies)


def test_a_rerun_with_the_same_keys_is_bit_identical_in_tokens_and_log_probs(toy):
    _, tokenizer, engine = toy
    prompts, keys, sampling = [_prompt(tokenizer)] * 4, [21, 22, 23, 24], SamplingParams(1.0, 0, 1.0, 20)
    states = torch.get_rng_state(), random.getstate()
    first, second = engine.generate(prompts, keys, sampling), engine.generate(prompts, keys, sampling)
    # the trainer's global random states (which a checkpoint saves) are untouched by sampling
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert [g.response_ids for g in first.generations] == [g.response_ids for g in second.generations]
    assert torch.equal(first.sampler_logp, second.sampler_logp)


def test_score_is_the_trainer_s_teacher_forced_log_prob(toy):
    model, tokenizer, engine = toy
    prompts = [_prompt(tokenizer)] * 2
    responses = [tokenizer(" 3 + 4 = 7\n#### 7", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id],
                 tokenizer(" 3 + 5 = 8", add_special_tokens=False)["input_ids"]]
    expected = _trainer_logp(model, prompts, responses, tokenizer.pad_token_id)
    for row, response, want in zip(engine.score(prompts, responses), responses, expected):
        assert len(row) == len(response)
        assert max(abs(a - b) for a, b in zip(row, want.tolist())) < 1e-4


def test_a_weight_sync_reaches_vllm_and_the_check_tells_a_sync_that_did_not_take(toy, tmp_path):
    from trainer.engine_sync import EngineSyncError, check_sync, make_probe
    from trainer.policy import sampler_weights
    from trainer.vllm_engine import VLLMEngine

    model, tokenizer, engine = toy
    probe = make_probe(engine, [_prompt(tokenizer)] * 2, "cpu")
    first = check_sync(engine, model, probe, 0, 0, tmp_path)
    assert first["ok"] and first["max_abs_diff"] <= SYNC_TOLERANCE
    changed = type(model)(model.config)
    torch.manual_seed(5)
    changed.load_state_dict({k: v + 0.02 * torch.randn_like(v) for k, v in model.state_dict().items()})
    with pytest.raises(EngineSyncError, match="weight sync before step 3 did not take"):
        check_sync(engine, changed, probe, 3, 3, tmp_path)  # the engine still holds the toy's weights
    other = VLLMEngine(changed, tokenizer.eos_token_id, tokenizer.pad_token_id, EngineSettings())  # a second view
    assert other.shared is engine.shared  # one vLLM per process
    record = check_sync(other, changed, probe, 4, 4, tmp_path)
    # the trainer's probe log-probs did not move since the previous check (the same weights): the record says that
    # this check could not have told a sync that did not take
    assert record["ok"] and record["policy_moved"] == 0.0 and not record["distinguishable"]
    # The first view takes its own weights back before it samples or scores again.
    record = check_sync(engine, model, probe, 5, 5, tmp_path)
    assert record["ok"] and record["distinguishable"] and record["policy_moved"] > 100 * SYNC_TOLERANCE
    engine.load_weights(sampler_weights(changed))  # a refresh: the trainer's new weights into the view and vLLM
    assert check_sync(engine, changed, probe, 6, 6, tmp_path)["ok"]
    engine.load_weights(sampler_weights(model))
    lines = (tmp_path / "engine_syncs.jsonl").read_text().splitlines()
    assert [json.loads(line)["ok"] for line in lines] == [True, False, True, True, True]


def test_auxiliary_draws_follow_the_engine_s_top_k_distribution_and_match_the_torch_engine_s(toy):
    model, tokenizer, engine = toy
    prompts, keys = [_prompt(tokenizer)] * 2, [31, 32]
    aux = AuxDraws(samples=6, top_k=5)
    out = engine.generate(prompts, keys, SamplingParams(1.0, 0, 1.0, 12), aux)
    responses = [g.response_ids for g in out.generations]
    assert out.aux_ids.shape == (2, out.sampler_logp.shape[1], 6)
    batch = build_token_batch(prompts, responses, tokenizer.pad_token_id, "cpu")
    with torch.no_grad():
        logits = torch.log_softmax(response_logits_of(model, batch), dim=-1)
    for i, response in enumerate(responses):
        for t in range(len(response)):
            top = set(torch.topk(logits[i, t], 5).indices.tolist())
            assert set(out.aux_ids[i, t].tolist()) <= top, (i, t)  # drawn within the top 5 only
    # At the first position both engines see the same distribution (the prompt's), and draw with the same
    # uniforms (the response's auxiliary stream): the same tokens, whatever each then samples.
    torch_out = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id).generate(
        prompts, keys, SamplingParams(1.0, 0, 1.0, 12), aux)
    assert torch_out.aux_ids[:, 0].tolist() == out.aux_ids[:, 0].tolist()


def response_logits_of(model, batch):
    from trainer.policy import response_logits

    return response_logits(model, batch).float()


def test_the_determinism_profile_names_the_engine_its_version_backend_seeds_and_batch_invariance(toy):
    import vllm

    _, _, engine = toy
    profile = engine.profile()
    assert profile["engine"] == "vllm" and profile["version"] == vllm.__version__
    assert "CPU_ATTN" in profile["attention_backend"] and "seed" in profile["seed_handling"]
    assert profile["batch_invariant"] is False and profile["dtype"] == "float32"
    assert torch.get_num_threads() == 1 and math.isfinite(profile["start_s"])
