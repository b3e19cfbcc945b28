"""The rollout engine's lean Qwen3 decoder and its counter-based sampling streams.

References are written here: the HF model's own forward over each unpadded sequence (no cache), a
float64 Gumbel-max sampler, and SplitMix64 in Python integers. A wrong cache slot, position id, pad
mask, weight concatenation or hash constant changes the numbers."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from trainer.decoding import HFDecoder, LeanQwen3, make_decoder
from trainer.inputs import resolve
from trainer.policy import load_policy
from trainer.rollout import (
    AuxDraws,
    SamplingParams,
    TorchEngine,
    draw_aux,
    gumbel_noise,
    left_pad,
    uniform_draws,
)

TEXTS = ("Question: 2 + 3?\nAnswer:", "Question: what is 12 times 7 minus 4?\nAnswer:", "Q: 9?",
         "Question: a train leaves at 3 and arrives at 5; how long?\nAnswer:")


@pytest.fixture(scope="module")
def toy():
    model, tokenizer = load_policy(str(resolve("trainer/assets/toy/model")))
    return model.eval(), tokenizer


def prompts_of(tokenizer) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]


def hf_logits(model, sequence: list[int]) -> torch.Tensor:
    """The model's own forward over one unpadded sequence, no cache: logits at every position."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([sequence])).logits[0]


def test_lean_logits_equal_the_models_own_forward_in_float64_across_prompt_lengths_and_decode_steps(toy):
    model, tokenizer = toy
    model = load_policy(str(resolve("trainer/assets/toy/model")))[0].double().eval()
    prompts = prompts_of(tokenizer)
    assert len({len(p) for p in prompts}) == len(prompts)  # every row has a different amount of left padding
    steps = 7
    appended = torch.randint(2, 99, (len(prompts), steps), generator=torch.Generator().manual_seed(5))
    lean = LeanQwen3(model)
    ids, attn = left_pad(prompts, tokenizer.pad_token_id, "cpu")
    with torch.no_grad():
        logits, cache, positions = lean.prefill(ids, attn, steps)
        produced = [logits]
        for t in range(steps - 1):
            produced.append(lean.step(appended[:, t], positions, cache))
            positions = positions + 1
    produced = torch.stack(produced, dim=1)
    assert produced.dtype == torch.float64
    for i, prompt in enumerate(prompts):
        expected = hf_logits(model, prompt + appended[i, : steps - 1].tolist())[len(prompt) - 1:]
        torch.testing.assert_close(produced[i], expected, rtol=0, atol=1e-10)


def test_lean_logits_after_dropping_rows_from_the_cache_still_equal_the_models_forward(toy):
    model, tokenizer = toy
    model = load_policy(str(resolve("trainer/assets/toy/model")))[0].double().eval()
    prompts = prompts_of(tokenizer)
    lean = LeanQwen3(model)
    ids, attn = left_pad(prompts, tokenizer.pad_token_id, "cpu")
    first, second = [11, 12, 13, 14], [21, 22, 23, 24]
    keep = torch.tensor([3, 1])
    with torch.no_grad():
        _, cache, positions = lean.prefill(ids, attn, 3)
        lean.step(torch.tensor(first), positions, cache)
        cache = cache.select(keep)
        logits = lean.step(torch.tensor(second)[keep], positions[keep] + 1, cache)
    for row, i in enumerate(keep.tolist()):
        expected = hf_logits(model, prompts[i] + [first[i], second[i]])[-1]
        torch.testing.assert_close(logits[row], expected, rtol=0, atol=1e-10)


def test_greedy_tokens_of_the_lean_path_equal_the_hf_path_in_float32(toy):
    model, tokenizer = toy
    prompts = [p for p in prompts_of(tokenizer) for _ in range(2)]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    lean = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    plain = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    plain.decoder = HFDecoder(plain.model)
    assert isinstance(lean.decoder, LeanQwen3)
    keys = list(range(len(prompts)))
    a, b = lean.generate(prompts, keys, greedy), plain.generate(prompts, keys, greedy)
    assert [g.response_ids for g in a.generations] == [g.response_ids for g in b.generations]
    assert any(len(g.response_ids) > 3 for g in a.generations)
    torch.testing.assert_close(a.sampler_logp, b.sampler_logp, rtol=0, atol=1e-5)


def test_sampler_log_probs_equal_the_models_forward_and_reruns_are_bit_identical(toy):
    model, tokenizer = toy
    prompts = [p for p in prompts_of(tokenizer) for _ in range(4)]
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    sampling = SamplingParams(temperature=0.7, max_new_tokens=16)
    keys = [1000 + 7 * i for i in range(len(prompts))]
    out = engine.generate(prompts, keys, sampling)
    again = engine.generate(prompts, keys, sampling)
    assert out.generations == again.generations and torch.equal(out.sampler_logp, again.sampler_logp)
    lengths = [len(g.response_ids) for g in out.generations]
    assert len(set(lengths)) > 1  # rows finish at different times: the batch shrinks mid-generation
    for i, (prompt, gen) in enumerate(zip(prompts, out.generations)):
        logits = hf_logits(model, prompt + gen.response_ids)[len(prompt) - 1: -1].double() / 0.7
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(gen.response_ids)[:, None])[:, 0]
        torch.testing.assert_close(out.sampler_logp[i, : lengths[i]].double(), expected, rtol=0, atol=1e-5)
        assert not out.sampler_logp[i, lengths[i]:].any()  # nothing after a response's end


def splitmix64_reference(x: int) -> int:
    """SplitMix64's output function on Python integers modulo 2^64 (Vigna's constants)."""
    mask = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def test_uniform_draws_equal_the_splitmix64_formula_and_depend_only_on_their_own_seed():
    seeds = [0, 1, 12345, (1 << 63) - 1]
    step, width = 5, 6
    draws = uniform_draws(torch.tensor(seeds), step, width)[:, 0]
    golden = 0x9E3779B97F4A7C15
    for i, seed in enumerate(seeds):
        token_key = splitmix64_reference((seed + step * golden) % (1 << 64))
        for j in range(width):
            bits = splitmix64_reference((token_key + j * golden) % (1 << 64)) >> 41
            assert draws[i, j].item() == (bits + 0.5) / 2 ** 23
    assert torch.equal(uniform_draws(torch.tensor(seeds[2:3]), step, width)[:, 0], draws[2:3])
    block = uniform_draws(torch.tensor(seeds), step - 2, width, steps=4)  # tokens 3..6 at once
    assert torch.equal(block[:, 2], draws)
    assert float(draws.min()) > 0.0 and float(draws.max()) < 1.0
    extreme = uniform_draws(torch.arange(100), 0, 100_000)  # 1e7 draws reach both ends: neither rounds to 0 or 1
    assert float(extreme.max()) == 1 - 2 ** -24 and float(extreme.min()) == 2 ** -24


def test_sampled_tokens_follow_the_softmax_of_the_scaled_logits():
    """Gumbel-max over the counter streams: token frequencies over many rows match a float64 softmax."""
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
    engine = TorchEngine.__new__(TorchEngine)
    rows = 20000
    sampling = SamplingParams(temperature=0.8)
    picked = engine._sample(logits.expand(rows, -1), gumbel_noise(torch.arange(rows), 3, 5, 1)[:, 0], sampling)
    freq = torch.bincount(picked, minlength=5).double() / rows
    expected = torch.softmax(logits.double() / 0.8, -1)
    assert (freq - expected).abs().max() < 4 * math.sqrt(0.25 / rows)


def test_a_key_outside_63_bits_is_refused_with_the_fix(toy):
    model, tokenizer = toy
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    with pytest.raises(ValueError, match=r"outside \[0, 2\*\*63\); derive keys with trainer.data.mix_seed"):
        engine.generate([[5, 6]], [-1], SamplingParams(max_new_tokens=2))


def test_a_model_that_is_not_qwen3_falls_back_to_the_hf_forward_and_says_why(toy, caplog):
    model, tokenizer = toy
    other = load_policy(str(resolve("trainer/assets/toy/model")))[0]
    other.config.model_type = "llama"
    decoder, reason = make_decoder(other)
    assert isinstance(decoder, HFDecoder) and "'llama' is not qwen3" in reason
    with caplog.at_level(logging.INFO, logger="trainer.rollout"):
        engine = TorchEngine(other, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert "no lean path: model type 'llama' is not qwen3" in caplog.text
    out = engine.generate(prompts_of(tokenizer)[:2], [1, 2], SamplingParams(max_new_tokens=4))
    assert len(out.generations) == 2


def test_first_tokens_of_many_responses_to_one_prompt_follow_the_models_softmax(toy):
    """Engine-level: prefill, cache gather and per-row noise together draw from softmax(logits / T)."""
    model, tokenizer = toy
    prompt = prompts_of(tokenizer)[1]
    rows, temperature = 6000, 1.3
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    out = engine.generate([prompt] * rows, list(range(rows)), SamplingParams(temperature=temperature, max_new_tokens=1))
    first = torch.tensor([g.response_ids[0] for g in out.generations])
    freq = torch.bincount(first, minlength=model.config.vocab_size).double() / rows
    expected = torch.softmax(hf_logits(model, prompt)[-1].double() / temperature, -1)
    assert float(expected.max()) < 0.9  # a distribution worth testing, not one dominant token
    assert (freq - expected).abs().max() < 4 * math.sqrt(0.25 / rows)


def test_auxiliary_draws_follow_the_top_k_renormalised_softmax_from_their_own_streams():
    log_probs = torch.log_softmax(torch.tensor([1.5, 0.2, -0.3, 0.9, -2.0, 0.0], dtype=torch.float64), -1)
    rows, aux = 4000, AuxDraws(samples=4, top_k=3)
    seeds = torch.arange(rows)
    drawn = draw_aux(log_probs.expand(rows, -1), aux, seeds, step=2)
    assert drawn.shape == (rows, 4)
    top = torch.topk(log_probs, 3)
    expected = torch.zeros(6, dtype=torch.float64).index_copy(0, top.indices, torch.softmax(top.values, -1))
    freq = torch.bincount(drawn.reshape(-1), minlength=6).double() / drawn.numel()
    assert (freq - expected).abs().max() < 4 * math.sqrt(0.25 / drawn.numel())
    assert torch.equal(draw_aux(log_probs.expand(2, -1), aux, seeds[7:9], step=2), drawn[7:9])  # own stream only
    assert not torch.equal(draw_aux(log_probs.expand(rows, -1), aux, seeds, step=3), drawn)  # a new token, new draws
