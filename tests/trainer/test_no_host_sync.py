"""The numerical hot path never synchronises with the host.

Two independent checks: (1) a runtime guard makes ``Tensor.item`` and friends raise while the
functions run, so any hidden host read fails the test; (2) a static check of the modules' source.
A CUDA check under ``torch.cuda.set_sync_debug_mode("error")`` runs where a GPU is visible.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import math

import pytest
import torch

import trainer.algorithms as algorithms
from trainer.algorithms import advantages, kl, masking, normalization, policy_loss

HOST_SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__", "__len__")


@contextlib.contextmanager
def forbid_host_sync(monkeypatch):
    calls = []

    def make_guard(name):
        def guard(self, *args, **kwargs):
            calls.append(name)
            raise AssertionError(f"host synchronisation: Tensor.{name} called in the hot path")
        return guard

    with monkeypatch.context() as m:
        for name in HOST_SYNC_METHODS:
            m.setattr(torch.Tensor, name, make_guard(name))
        yield calls


def _batch():
    torch.manual_seed(0)
    mask = torch.rand(8, 12) < 0.7
    mask[:, 0] = True
    return {
        "values": torch.randn(8, 12, dtype=torch.float64),
        "mask": mask,
        "reward": torch.randint(0, 2, (8,)).double(),
        "logp": -torch.rand(8, 12, dtype=torch.float64),
        "logp_old": -torch.rand(8, 12, dtype=torch.float64),
        "logp_ref": -torch.rand(8, 12, dtype=torch.float64),
    }


def test_guard_really_catches_a_host_read(monkeypatch):
    with forbid_host_sync(monkeypatch), pytest.raises(AssertionError, match="host synchronisation"):
        torch.ones(2).sum().item()


def test_hot_path_runs_under_the_host_sync_guard(monkeypatch):
    b = _batch()
    with forbid_host_sync(monkeypatch) as calls:
        raw = algorithms.group_baseline_advantages(b["reward"], b["mask"], group_size=4)
        normalized, mean, var, count = algorithms.masked_global_normalize(raw, b["mask"])
        _, returns = algorithms.kl_shaped_returns(b["reward"], b["logp_old"], b["logp_ref"], b["mask"], 0.01)
        algorithms.masked_global_normalize(returns, b["mask"])
        algorithms.grpo_advantages(b["reward"], b["mask"], group_size=4)
        token_loss, clip_frac = algorithms.ppo_clip_token_loss(b["logp"], b["logp_old"], normalized, b["mask"])
        for mode in algorithms.LOSS_REDUCTIONS:
            algorithms.reduce_loss(token_loss, b["mask"], mode)
        algorithms.reduce_loss(algorithms.k2_kl(b["logp"], b["logp_ref"], b["mask"]), b["mask"], "response_mean")
    assert calls == []


def test_policy_loss_backward_runs_under_the_host_sync_guard(monkeypatch):
    b = _batch()
    logp = b["logp"].clone().requires_grad_(True)
    normalized, *_ = algorithms.masked_global_normalize(b["values"], b["mask"])
    with forbid_host_sync(monkeypatch) as calls:
        token_loss, _ = algorithms.ppo_clip_token_loss(logp, b["logp_old"], normalized, b["mask"])
        algorithms.reduce_loss(token_loss, b["mask"], "response_mean").backward()
    assert calls == [] and logp.grad is not None


def test_an_empty_global_mask_fails_with_its_message_and_no_host_read(monkeypatch):
    """``fail_on_device`` (the one private-API call, torch._assert_async) raises on the CPU, with the
    normaliser's message, while nothing is read on the host; a non-empty mask passes."""
    empty = torch.zeros(2, 3, dtype=torch.bool)
    with forbid_host_sync(monkeypatch) as calls:
        with pytest.raises(RuntimeError, match=r"the response mask is empty on every rank \(N = 0\)"):
            algorithms.masked_global_normalize(torch.randn(2, 3, dtype=torch.float64), empty)
        normalization.fail_on_device(torch.tensor(True), "never raised")
    assert calls == []
    with pytest.raises(RuntimeError, match="^a message$"):
        normalization.fail_on_device(torch.tensor(False), "a message")


def test_the_private_device_assert_is_called_in_exactly_one_place():
    from tests.sweeps import REPO

    callers = [f"{path.relative_to(REPO)}:{node.lineno}"
               for package in ("trainer", "evidence", "launcher", "facts", "benchmarks")
               for path in sorted((REPO / package).rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.Attribute) and node.attr == "_assert_async"]
    where = inspect.getsourcelines(normalization.fail_on_device)
    assert callers == [f"trainer/algorithms/normalization.py:{where[1] + len(where[0]) - 1}"]


HOT_PATH_MODULES = (normalization, advantages, policy_loss, kl, masking)
FORBIDDEN_CALLS = {"item", "tolist", "cpu", "numpy", "nonzero", "synchronize"}


@pytest.mark.parametrize("module", HOT_PATH_MODULES, ids=lambda m: m.__name__)
def test_static_no_host_sync_calls(module):
    tree = ast.parse(inspect.getsource(module))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                assert func.attr not in FORBIDDEN_CALLS, f"{module.__name__}:{node.lineno} calls .{func.attr}()"
            if isinstance(func, ast.Name) and func.id in {"bool", "float", "int"}:
                # Allowed only on host values (shapes, Python config), which are Attribute/Subscript
                # of `.shape` or constants; flag anything else for review.
                arg = ast.unparse(node.args[0]) if node.args else ""
                assert "shape" in arg or arg == "", f"{module.__name__}:{node.lineno} {func.id}({arg})"


def test_normaliser_has_no_python_branch_on_values():
    tree = ast.parse(inspect.getsource(normalization.masked_global_normalize))
    branches = [n for n in ast.walk(tree) if isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Assert))]
    assert branches == [], [ast.unparse(b)[:60] for b in branches]
    helper = ast.parse(inspect.getsource(normalization._all_reduce_sum))
    tests = [ast.unparse(n.test) for n in ast.walk(helper) if isinstance(n, ast.If)]
    assert tests == ["group is not None"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a visible CUDA device")
def test_cuda_100_iterations_under_sync_debug_error_mode():
    device = torch.device("cuda")
    b = {k: v.to(device) for k, v in _batch().items()}
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(100):
            raw = algorithms.group_baseline_advantages(b["reward"], b["mask"], group_size=4)
            normalized, *_ = algorithms.masked_global_normalize(raw, b["mask"])
            _, returns = algorithms.kl_shaped_returns(b["reward"], b["logp_old"], b["logp_ref"], b["mask"], 0.01)
            algorithms.masked_global_normalize(returns, b["mask"])
            logp = b["logp"].clone().requires_grad_(True)
            token_loss, _ = algorithms.ppo_clip_token_loss(logp, b["logp_old"], normalized, b["mask"])
            for mode in algorithms.LOSS_REDUCTIONS:
                algorithms.reduce_loss(token_loss, b["mask"], mode).backward(retain_graph=True)
            algorithms.reduce_loss(algorithms.k2_kl(b["logp"], b["logp_ref"], b["mask"]), b["mask"], "response_mean")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@contextlib.contextmanager
def count_host_reads(monkeypatch):
    """Count the device-to-host reads the decode loop makes (``int(tensor)``, ``nonzero``, ``tolist``)."""
    calls = []

    def counting(name):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, **kwargs):
            calls.append(name)
            return original(self, *args, **kwargs)
        return counted

    with monkeypatch.context() as m:
        for name in ("__int__", "nonzero", "tolist"):
            m.setattr(torch.Tensor, name, counting(name))
        yield calls


@pytest.mark.slow  # tens of CPU seconds of toy-model forward passes: not a fast-tier unit
def test_decoding_reads_the_finished_count_once_per_check_interval_with_the_same_responses(monkeypatch):
    """On an accelerator the decode loop reads how many responses finished every ``DONE_CHECK_EVERY``
    tokens (run here on the CPU by setting the engine's interval): about one read per 8 tokens instead of
    one per token, the same responses and widths, and sampler log-probs equal to float32 rounding (rows
    leave the batch at other tokens). The CPU default reads every token."""
    from trainer.inputs import resolve
    from trainer.policy import load_policy
    from trainer.rollout import DONE_CHECK_EVERY, SamplingParams, TorchEngine, done_check_interval

    assert done_check_interval(torch.device("cpu")) == 1 and done_check_interval(torch.device("cuda")) == DONE_CHECK_EVERY > 1
    model, tokenizer = load_policy(str(resolve("trainer/assets/toy/model")))
    texts = ("Question: 2 + 3?\nAnswer:", "Q: 9?\nA:", "Question: what is 12 times 7 minus 4?\nAnswer:")
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts for _ in range(4)]
    keys = list(range(800, 800 + len(prompts)))  # lengths 6 to 33
    sampling = SamplingParams(temperature=1.0, max_new_tokens=120)  # every response finishes first
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    outputs, reads = {}, {}
    for every in (1, DONE_CHECK_EVERY):
        engine.done_check_every = every
        with count_host_reads(monkeypatch) as calls:
            outputs[every] = engine.generate(prompts, keys, sampling)
        reads[every] = calls.count("__int__")
    per_token, sparse = outputs[1], outputs[DONE_CHECK_EVERY]
    longest = max(len(g.response_ids) for g in per_token.generations)
    assert all(g.finished for g in per_token.generations) and longest > 3 * DONE_CHECK_EVERY
    assert reads[1] == longest  # one read per token until the last response ends
    assert reads[DONE_CHECK_EVERY] == math.ceil(longest / DONE_CHECK_EVERY)
    assert sparse.generations == per_token.generations
    assert sparse.sampler_logp.shape == per_token.sampler_logp.shape == (len(prompts), longest)
    torch.testing.assert_close(sparse.sampler_logp, per_token.sampler_logp, rtol=0, atol=1e-5)
