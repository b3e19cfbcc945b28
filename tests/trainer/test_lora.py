"""A LoRA policy (``workload.lora``, trainer/lora.py): the merged weights the sampler gets and the adapters'
gradients against float64 references written here, the checkpoint's adapter and base-model record, and the
settings refused in one line. The runs through ``launch.py`` are in tests/test_lora_launch.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.trainer_runs import REPO
from trainer.lora import Lora, LoraError, check_targets, lora_settings
from trainer.policy import adapter_weights, add_lora, load_policy, sampler_weights

TOY = REPO / "trainer" / "assets" / "toy" / "model"
TARGETS = ("q_proj", "v_proj", "down_proj")


def adapted(rank: int = 4, alpha: float = 12.0, targets=TARGETS, seed: int = 0):
    """The toy model with LoRA adapters, each ``B`` set non-zero (at injection it is 0, and the merge trivial)."""
    torch.manual_seed(seed)
    model, _ = load_policy(str(TOY))
    add_lora(model, Lora(rank, alpha, 0.0, tuple(targets)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn_like(p) * 0.05)
    return model


def test_the_sampler_gets_w_plus_alpha_over_r_b_a_in_hugging_face_names():
    rank, alpha = 4, 12.0
    model = adapted(rank, alpha)
    base = {k: v.double() for k, v in load_file(str(TOY / "model.safetensors")).items()}
    adapter = {k: v.double() for k, v in adapter_weights(model).items()}
    merged = sampler_weights(model)
    plain, _ = load_policy(str(TOY))
    assert set(merged) == set(plain.state_dict())  # a plain model of the base architecture loads them
    changed = 0
    for key, value in merged.items():
        module = key.removesuffix(".weight")
        if module.rsplit(".", 1)[-1] in TARGETS:
            expected = base[key] + (alpha / rank) * adapter[f"{module}.lora_B.weight"] @ adapter[f"{module}.lora_A.weight"]
            torch.testing.assert_close(value.double(), expected, atol=1e-6, rtol=1e-6)
            assert not torch.equal(value.double(), base[key])
            changed += 1
        else:  # every weight no adapter touches is the base weight, bit for bit
            assert torch.equal(value, plain.state_dict()[key]), key
    assert changed == 3 * len(TARGETS)  # the toy's three layers


def test_at_injection_the_adapted_policy_is_the_base_model_bit_for_bit():
    torch.manual_seed(3)
    model, _ = load_policy(str(TOY))
    plain = {k: v.clone() for k, v in model.state_dict().items()}
    add_lora(model, Lora(8, 16.0, 0.0, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")))
    merged = sampler_weights(model)
    assert set(merged) == set(plain) and all(torch.equal(merged[k], plain[k]) for k in plain)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)


def test_a_plain_model_with_the_merged_weights_computes_the_adapted_policy():
    model = adapted()
    plain, _ = load_policy(str(TOY))
    plain.load_state_dict(sampler_weights(model))
    ids = torch.tensor([[5, 17, 33, 2, 41, 9, 60]])
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, model(input_ids=ids).logits, atol=2e-5, rtol=1e-5)
    base, _ = load_policy(str(TOY))
    with torch.no_grad():
        assert (base(input_ids=ids).logits - model(input_ids=ids).logits).abs().max() > 1e-3  # the adapters matter


class OneLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(6, 5, bias=False)

    def forward(self, x):
        return self.proj(x)


def test_only_the_adapters_get_gradients_and_they_are_the_float64_formulas():
    """y = W x + s B A x with s = alpha / r and L = sum(C * y): dL/dB = s C^T (X A^T), dL/dA = s B^T C^T X."""
    torch.manual_seed(7)
    layer = OneLayer()
    rank, alpha = 3, 4.5
    add_lora(layer, Lora(rank, alpha, 0.0, ("proj",)))
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn_like(p))
    x, c = torch.randn(4, 6), torch.randn(4, 5)
    (c * layer(x)).sum().backward()
    params = dict(layer.named_parameters())
    w = params["proj.base_layer.weight"]
    a, b = params["proj.lora_A.default.weight"], params["proj.lora_B.default.weight"]
    assert w.grad is None and not w.requires_grad
    s, X, C, A, B = alpha / rank, x.double(), c.double(), a.detach().double(), b.detach().double()
    torch.testing.assert_close(b.grad.double(), s * C.T @ (X @ A.T), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.grad.double(), s * B.T @ C.T @ X, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer(x).double(), X @ w.detach().double().T + s * X @ A.T @ B.T, atol=1e-5, rtol=1e-5)


def test_dropout_acts_in_the_policy_forward_only_never_in_the_merged_weights():
    torch.manual_seed(1)
    layer = OneLayer().eval()  # as a loaded Hugging Face model is
    add_lora(layer, Lora(2, 2.0, 0.5, ("proj",)))
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if ".lora_B." in name:
                p.fill_(1.0)
    x = torch.ones(64, 6)
    plain = OneLayer()
    plain.load_state_dict(sampler_weights(layer))
    with torch.no_grad():
        dropped, merged = layer(x), plain(x)
    assert not torch.allclose(dropped, merged)  # some inputs of the adapters were dropped in training
    assert not layer.training  # the model itself stays in eval mode: only the adapters' dropout acts


def test_lora_settings_fill_the_schema_defaults_and_null_is_full_fine_tuning():
    assert lora_settings({"lora": None}) is None and lora_settings({}) is None
    lora = lora_settings({"lora": {"rank": 32}})
    assert (lora.rank, lora.alpha, lora.dropout, lora.scaling) == (32, 16.0, 0.0, 0.5)
    assert lora.target_modules == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.mark.parametrize("targets, says", [
    (("q_proj", "bogus"), "names 'bogus', a module the model toy lacks (no weight of that name); its Linear layers "
                          "are: down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj"),
    (("mlp",), "names 'mlp', a module the model toy lacks"),
    (("q_norm",), "names 'q_norm', which is not a Linear layer of the model (a norm, the embeddings or the output head)"),
    (("embed_tokens",), "names 'embed_tokens', which is not a Linear layer"),
])
def test_a_target_module_the_model_lacks_is_refused_in_one_line(targets, says):
    with pytest.raises(LoraError) as exc:
        check_targets(Lora(4, 8.0, 0.0, targets), TOY, "toy")
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_dotted_targets_match_as_peft_matches_them():
    check_targets(Lora(4, 8.0, 0.0, ("self_attn.q_proj", "mlp.down_proj")), TOY)


@pytest.mark.parametrize("lora, says", [
    ({"rank": 0}, "setting workload.lora.rank=0 is refused: it must be >= 1"),
    ({"rank": -2}, "setting workload.lora.rank=-2 is refused: it must be >= 1"),
    ({"rank": 2.5}, "setting workload.lora.rank=2.5 is refused: it must be an integer"),
    ({"alpha": 0}, "setting workload.lora.alpha=0 is refused: it must be > 0"),
    ({"alpha": -16}, "setting workload.lora.alpha=-16 is refused: it must be > 0"),
    ({"dropout": 1.0}, "setting workload.lora.dropout=1.0 is refused: it must be >= 0 and < 1"),
    ({"dropout": -0.1}, "setting workload.lora.dropout=-0.1 is refused: it must be >= 0 and < 1"),
    ({"target_modules": []}, "setting workload.lora.target_modules=[] is refused: it must be a list of at least one value"),
    ({"target_modules": "q_proj"}, "setting workload.lora.target_modules='q_proj' is refused: it must be a list"),
    ({"rnk": 8}, "unknown setting workload.lora.rnk; workload.lora has: alpha, dropout, rank, target_modules"),
    (8, "setting workload.lora=8 is refused: it must be a mapping of settings"),
])
def test_a_bad_lora_setting_is_refused_by_the_schema_in_one_line(lora, says):
    from trainer.run_config import RunConfigError, compose, validate

    cfg = compose()
    cfg.workload.lora = lora
    with pytest.raises(RunConfigError) as exc:
        validate(cfg)
    assert str(exc.value).startswith(says) and "\n" not in str(exc.value)


def test_a_checkpoint_holds_the_adapter_beside_the_base_model_digest_and_resumes_only_on_that_base(tmp_path):
    from trainer.checkpoint import AdapterRecord, load_checkpoint, save_checkpoint
    from trainer.run_config import RunConfigError

    model = adapted()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    record = AdapterRecord({"rank": 4}, {"trainer/assets/toy/model/model.safetensors": "a" * 64})
    ckpt = save_checkpoint(tmp_path, 3, model, optimizer, {"config_digest": "x"}, adapter=record)
    saved = load_file(str(ckpt / "model.safetensors"))
    assert set(saved) == set(adapter_weights(model)) and all(".lora_" in k for k in saved)
    assert json.loads((ckpt / "adapter.json").read_text()) == record.as_json()
    fresh = adapted(seed=9)  # other A and B: loading must replace them
    load_checkpoint(ckpt, fresh, torch.optim.AdamW([p for p in fresh.parameters() if p.requires_grad]), record)
    assert all(torch.equal(a, b) for a, b in zip(adapter_weights(fresh).values(), adapter_weights(model).values()))
    other = AdapterRecord({"rank": 4}, {"trainer/assets/toy/model/model.safetensors": "b" * 64})
    with pytest.raises(RunConfigError, match=r"step_000003's adapter was trained on another base model "
                                             r"\(trainer/assets/toy/model/model.safetensors aaaaaaaaaaaa\) than the "
                                             r"pinned one \(trainer/assets/toy/model/model.safetensors bbbbbbbbbbbb\)"):
        load_checkpoint(ckpt, fresh, optimizer, other)
    with pytest.raises(RunConfigError, match="holds a LoRA adapter .* but the run fine-tunes every weight"):
        load_checkpoint(ckpt, fresh, optimizer)
