"""Teacher-forced log-probs and sampled rollouts that run each group's shared prompt once.

References are computed here, in float64, one response at a time, unpadded and without a KV cache:
a wrong cache row, position id or pad mask in the shared-prompt paths changes the numbers. The toy
model is a Qwen3, so ``response_logprobs`` takes the packed path; it is also checked against the
model's own two-call forward (values and gradients to 1e-10 in float64)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trainer.inputs import resolve
from trainer.policy import (
    build_token_batch,
    forward_response_logits,
    load_policy,
    packed_input_index,
    packed_response_logits,
    response_logprobs,
)
from trainer.rollout import SamplingParams, make_engine


@pytest.fixture(scope="module")
def model_and_tokenizer():
    torch.manual_seed(0)
    model, tokenizer = load_policy(str(resolve("trainer/assets/toy/model")))
    return model.double().eval(), tokenizer


def groups(tokenizer, k: int = 3):
    texts = ("Question: 2 + 3?\nAnswer:", "Question: what is 12 times 7 minus 4?\nAnswer:", "Question: 9?\nAnswer:")
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    gen = torch.Generator().manual_seed(3)
    responses = [torch.randint(2, 99, (int(torch.randint(1, 12, (), generator=gen)),), generator=gen).tolist()
                 for _ in range(len(prompts) * k)]
    return [p for p in prompts for _ in range(k)], responses


def reference_logprobs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """float64 log pi(response_t | prompt, response_<t) from one unpadded full forward."""
    logits = model(input_ids=torch.tensor([prompt + response])).logits[0].double()
    return torch.log_softmax(logits[len(prompt) - 1: len(prompt) - 1 + len(response)], -1).gather(
        -1, torch.tensor(response)[:, None])[:, 0]


def test_shared_prompt_log_probs_and_gradients_equal_an_unpadded_forward_per_response(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompts, responses = groups(tokenizer)
    batch = build_token_batch(prompts, responses, tokenizer.pad_token_id, "cpu")
    assert batch.prompt_ids.shape[0] == 3 and batch.response_ids.shape[0] == 9  # each prompt held once
    params = list(model.parameters())
    for rows in (slice(0, 9), slice(3, 6)):  # the whole batch and a PPO mini-batch
        part = batch.rows(rows)
        mask = part.response_mask
        logp = response_logprobs(model, part).double()
        ref = [reference_logprobs(model, p, r) for p, r in zip(prompts[rows], responses[rows])]
        for i, expected in enumerate(ref):
            # Qwen3's RMSNorm normalises in float32 even in a float64 model (both paths do): agreement to float32
            # rounding of log-probs down to about -20 (the head-dim-32 toy reaches 1.0e-6 there, 6e-8 relative)
            torch.testing.assert_close(logp[i, : len(expected)], expected, rtol=1e-7, atol=1e-6)
        grads = torch.autograd.grad(logp[mask].sum(), params, allow_unused=True)
        ref_grads = torch.autograd.grad(torch.cat(ref).sum(), params, allow_unused=True)
        for g, r in zip(grads, ref_grads):
            if r is None:
                assert g is None or not g.any()
            else:
                torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def test_tokens_in_masked_response_slots_change_no_valid_log_prob(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompts, responses = groups(tokenizer)
    batch = build_token_batch(prompts, responses, tokenizer.pad_token_id, "cpu")
    scrambled = torch.where(batch.response_mask, batch.response_ids, torch.full_like(batch.response_ids, 57))
    other = dataclasses.replace(batch, response_ids=scrambled)
    with torch.no_grad():
        a, b = response_logprobs(model, batch), response_logprobs(model, other)
    assert torch.equal(a[batch.response_mask], b[batch.response_mask])


def test_a_sampled_response_and_its_sampler_log_probs_do_not_depend_on_the_other_groups(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompts, _ = groups(tokenizer)
    engine = make_engine("torch", model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12)
    keys = list(range(100, 100 + len(prompts)))
    together = engine.generate(prompts, keys, sampling)
    alone = engine.generate(prompts[3:6], keys[3:6], sampling)  # the long prompt's group by itself
    for i in range(3):
        assert together.generations[3 + i] == alone.generations[i]
    for i, (prompt, gen) in enumerate(zip(prompts, together.generations)):
        expected = reference_logprobs(model, prompt, gen.response_ids)
        torch.testing.assert_close(together.sampler_logp[i, : len(expected)].double(), expected, rtol=0, atol=1e-5)


def test_packed_logits_and_gradients_equal_the_models_own_forward_in_float64(model_and_tokenizer):
    """The packed Qwen3 path against the generic two-call forward, on ragged responses (lengths 1 to 11,
    so some rows are mostly padding) and on a batch whose responses are all one token long."""
    model, tokenizer = model_and_tokenizer
    prompts, responses = groups(tokenizer)
    assert min(map(len, responses)) < 3 < max(map(len, responses))
    params = list(model.parameters())
    for resp in (responses, [r[:1] for r in responses]):
        batch = build_token_batch(prompts, resp, tokenizer.pad_token_id, "cpu")
        mask = batch.response_mask
        packed = packed_response_logits(model, batch)
        generic = forward_response_logits(model, batch)
        assert packed.dtype == torch.float64 and packed.shape == generic.shape
        torch.testing.assert_close(packed[mask], generic[mask], rtol=0, atol=1e-10)
        assert not packed[~mask].any()  # padding slots carry zeros, not another row's numbers
        weights = torch.randn(packed.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        grads = torch.autograd.grad((packed[mask] * weights[mask]).sum(), params, allow_unused=True)
        expected = torch.autograd.grad((generic[mask] * weights[mask]).sum(), params, allow_unused=True)
        for g, e in zip(grads, expected):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-10)


def test_the_packed_index_lists_every_input_that_predicts_a_valid_token_in_order(model_and_tokenizer):
    """Input t of response r (flat r * (T - 1) + t) is run when token t + 1 is valid: t < L_r - 1,
    on ragged lengths including 1 (no input) and on a batch of one-token responses."""
    _, tokenizer = model_and_tokenizer
    prompts, responses = groups(tokenizer)
    assert 1 in map(len, responses)
    for resp in (responses, [r[:1] for r in responses]):
        batch = build_token_batch(prompts, resp, tokenizer.pad_token_id, "cpu")
        steps = max(batch.response_ids.shape[1] - 1, 1)
        expected = [r * steps + t for r, tokens in enumerate(resp) for t in range(len(tokens) - 1)]
        index = packed_input_index(batch)
        assert index.dtype == torch.long and index.tolist() == expected


@pytest.mark.slow  # tens of CPU seconds of toy-model forward passes: not a fast-tier unit
def test_a_mini_batch_s_log_probs_equal_the_whole_batch_s_rows_to_float32_rounding():
    """A PPO mini-batch's numbers must not depend on how the batch is cut beyond float32 rounding (the
    trainer's dtype), on every slice: ones that start, end and straddle prompt groups, single rows.

    Not bit for bit: which kernel a BLAS takes depends on a product's row count, so on an AVX-512 MKL
    build a slice of a dozen packed tokens or fewer moves the last 1-5 ulps (measured: at most 4.3e-6 on
    values near -10), while on an AVX2 one every slice tried was exact. The bound below is 8 ulps of the
    largest magnitude. A mini-batch keeps every prompt all the same (``TokenBatch.rows``): it keeps the
    prompt-side products the whole batch's shape, so runs keep their numbers from one version to the next."""
    model, tokenizer = load_policy(str(resolve("trainer/assets/toy/model")))
    model.eval()
    prompts, responses = groups(tokenizer)
    batch = build_token_batch(prompts, responses, tokenizer.pad_token_id, "cpu")
    with torch.no_grad():
        whole = response_logprobs(model, batch)
        for start in range(len(responses)):
            for stop in range(start + 1, len(responses) + 1):
                rows = slice(start, stop)
                part = response_logprobs(model, batch.rows(rows))
                mask = batch.response_mask[rows]
                expected = whole[rows][mask]
                assert part.dtype == torch.float32 and part.shape == whole[rows].shape, rows
                bound = 8 * torch.finfo(torch.float32).eps * float(expected.abs().max())
                assert float((part[mask] - expected).abs().max()) <= bound, rows
