"""A LoRA policy (``workload.lora``) through the entry points: ``launch.py`` trains one on proofgrid's trainer (it
learns; its rerun and its stop-and-resume reproduce it bit for bit, a lagging sampler included) and on TRL (only the
targeted layers change); two gloo ranks give one rank's numbers; every bad setting is one line before anything runs;
the audit (``python -m evidence audit``, inside the launch) is clean."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.launch_in_process import launch_in_process
from tests.sweeps import REPO, launch
from tests.trainer_runs import read_metrics, train_in_process
from trainer.adapters.trl_grpo import FINAL_MODEL_DIR, RUN_RECORD, Refused, parser, plan

LORA = "workload.lora={rank:8,alpha:16}"
# 16 steps at LoRA's learning rate (40x full fine-tuning's: the head_dim-32 toy gains 3.9 points at 10x), the sampler refreshed every 2 steps: the resume
# certificate stops before step 1 + 2 mod 15 = 3, when the sampler holds step 2's weights (it lags).
LEARNS = ("algo=grpo", LORA, "workload.lr=4e-3", "workload.sampler_refresh_every=2", "seed=2", "workload.n_updates=16",
          "workload.eval.n_prompts=32", "certify=true")
TOY_MODEL = REPO / "trainer" / "assets" / "toy" / "model"


@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("lora") / "sweep"
    proc = launch(sweep, *LEARNS, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sweep, proc


def test_a_lora_policy_learns_on_the_toy_and_the_audit_is_clean(certified):
    sweep, proc = certified
    assert "evidence: 1/1 jobs accepted, 0 incident(s)" in proc.stdout and "audit: clean" in proc.stdout
    ev = json.loads((sweep / "jobs" / "grpo-2" / "run" / "eval.json").read_text())
    # Measured: pass@1 0.320 at the initial checkpoint (the base model), 0.445 after 16 steps (0.359 at 1e-3).
    assert ev["final"]["pass@1"] - ev["initial"]["pass@1"] >= 0.05, (ev["initial"]["pass@1"], ev["final"]["pass@1"])
    config = json.loads((sweep / "jobs" / "grpo-2" / "run" / "run.json").read_text())["config"]["workload"]["lora"]
    assert config == {"rank": 8, "alpha": 16}


def test_its_rerun_and_its_stop_and_resume_reproduce_it_bit_for_bit(certified):
    sweep, proc = certified
    assert "reproducibility certificates: 2/2 reproduced (exact, tolerance 0 on cpu" in proc.stdout
    certs = {c["certificate_job"]: c for c in
             json.loads((sweep / "bundle" / "data" / "certificates.json").read_text())["certificates"]}
    for kind in ("rerun", "resume"):
        cert = certs[f"grpo-2.{kind}"]
        assert cert["reproduced"] and all(check["ok"] for check in cert["checks"].values()), cert
        assert cert["checks"]["metrics"]["steps"] == 16
        assert cert["checks"]["checkpoint"]["original_sha256"] == cert["checks"]["checkpoint"]["copy_sha256"]
    resume = sweep / "certify" / "grpo-2.resume"
    assert json.loads((resume / "run" / "run.json").read_text())["resumed_from"] == {"checkpoint": "step_000003",
                                                                                    "step": 3}
    assert "stopping before step 3 of 16" in (resume / "trainer.log").read_text()
    staleness = [r["train/staleness"] for r in read_metrics(resume / "run")]
    assert staleness[3] == 1.0  # the resumed run's first step sampled from the saved, lagging sampler


def test_the_checkpoint_holds_the_adapter_alone_beside_the_base_models_digests(certified):
    sweep, _ = certified
    ckpt = sweep / "jobs" / "grpo-2" / "run" / "checkpoints" / "step_000016"
    weights = load_file(str(ckpt / "model.safetensors"))
    assert weights and all(".lora_A." in k or ".lora_B." in k for k in weights)
    assert len(weights) == 2 * 7 * 3  # A and B of 7 projections in each of the toy's 3 layers
    record = json.loads((ckpt / "adapter.json").read_text())
    pins = {f["path"]: f["sha256"] for f in json.loads((REPO / "manifests" / "toy.json").read_text())["files"]}
    assert record["base_model"] == {p: d for p, d in pins.items() if p.startswith("trainer/assets/toy/model/")}
    assert record["lora"] == {"rank": 8, "alpha": 16.0, "dropout": 0.0, "target_modules": [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}


@pytest.mark.distributed
def test_two_gloo_ranks_give_one_ranks_numbers(tmp_path):
    common = ("algo=grpo", LORA, "workload.lr=4e-3", "seed=5", "workload.n_updates=2", "workload.eval.n_prompts=2")
    train_in_process(tmp_path / "dp1", *common, "dp_size=1")
    train_in_process(tmp_path / "dp2", *common, "dp_size=2")  # its two ranks are processes of their own
    keys = ("rollout/raw_reward", "rollout/valid_tokens", "rollout/adv_norm_std", "train/loss", "train/pg_loss",
            "train/grad_norm", "train/ppo_kl", "train/kl_loss")
    m1, m2 = read_metrics(tmp_path / "dp1"), read_metrics(tmp_path / "dp2")
    assert len(m1) == len(m2) == 2
    for a, b in zip(m1, m2):
        for key in keys:  # a mean-instead-of-sum all-reduce of the adapters' gradients would halve grad_norm
            assert a[key] == pytest.approx(b[key], abs=1e-5, rel=1e-4), key
    # Rank 0 saves the adapter alone, as one rank does. (Its values are not compared: AdamW's first steps move a
    # weight by about lr x sign(gradient), so float32 rounding in the two ranks' sum can flip a near-zero one.)
    one, two = (load_file(str(tmp_path / d / "checkpoints" / "step_000002" / "model.safetensors")) for d in ("dp1", "dp2"))
    assert set(one) == set(two) and all(".lora_" in k for k in one)


@pytest.mark.slow
def test_trl_trains_the_same_lora_setting_and_only_the_targeted_layers_change(tmp_path):
    sweep = tmp_path / "trl"
    proc = launch(sweep, "trainer=trl", "workload.lora={rank:4,alpha:8,target_modules:[q_proj,v_proj]}",
                  "workload.n_updates=2", "workload.eval.n_prompts=4", "seed=1", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "evidence: 1/1 jobs accepted" in proc.stdout and "audit: clean" in proc.stdout
    trainer = sweep / "jobs" / "grpo-trl-1" / "run" / "trainer"
    record = json.loads((trainer / RUN_RECORD).read_text())
    assert record["peft_config"] == {"r": 4, "lora_alpha": 8.0, "lora_dropout": 0.0,
                                     "target_modules": ["q_proj", "v_proj"], "bias": "none"}
    final, base = load_file(str(trainer / FINAL_MODEL_DIR / "model.safetensors")), load_file(str(TOY_MODEL / "model.safetensors"))
    assert set(final) == set(base)  # merged: a plain model directory, no adapter tensors
    changed = sorted(k for k in base if not torch.equal(final[k], base[k]))
    assert changed == [f"model.layers.{i}.self_attn.{m}.weight" for i in range(3) for m in ("q_proj", "v_proj")]


def _toy_grpo(*changes: str) -> list[str]:
    return ["--output-dir", "unused", "--seed", "1", "--steps", "3", "--model-dir", "m", "--train", "t", "--algo",
            "grpo", "--loss-reduction", "response_mean", "--kl-coef", "0.01", "--lr", "1e-4", "--prompts-per-step",
            "4", "--responses-per-prompt", "8", "--max-response-len", "48", *changes]


def test_the_trl_adapter_maps_workload_lora_onto_peft_config_or_refuses_in_one_line():
    lora = ("--lora-rank", "32", "--lora-alpha", "64", "--lora-dropout", "0.0", "--lora-target-modules", "q_proj",
            "v_proj")
    assert plan(parser().parse_args(_toy_grpo(*lora))).peft_config == {
        "r": 32, "lora_alpha": 64.0, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "bias": "none"}
    assert plan(parser().parse_args(_toy_grpo())).peft_config is None
    with pytest.raises(Refused, match=r"workload.lora.dropout=0.1: TRL's disable_dropout=True .* set "
                                      r"workload.lora.dropout=0$"):
        plan(parser().parse_args(_toy_grpo(*lora[:4], "--lora-dropout", "0.1", *lora[6:])))
    with pytest.raises(Refused, match="a LoRA policy needs --lora-alpha too"):
        plan(parser().parse_args(_toy_grpo("--lora-rank", "8", "--lora-target-modules", "q_proj")))


@pytest.mark.parametrize("overrides, says", [
    (("workload.lora={rank:0}",), "job grpo: setting workload.lora.rank=0 is refused: it must be >= 1"),
    (("workload.lora={alpha:0}",), "job grpo: setting workload.lora.alpha=0 is refused: it must be > 0"),
    (("workload.lora={alpha:-2.5}",), "setting workload.lora.alpha=-2.5 is refused: it must be > 0"),
    (("workload.lora={dropout:1}",), "setting workload.lora.dropout=1 is refused: it must be >= 0 and < 1"),
    (("workload.lora={dropout:-0.5}",), "setting workload.lora.dropout=-0.5 is refused: it must be >= 0 and < 1"),
    (("workload.lora={target_modules:[q_proj,attn]}",),
     "workload toy: setting workload.lora.target_modules names 'attn', a module the model trainer/assets/toy/model "
     "lacks (no weight of that name); its Linear layers are: down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, "
     "v_proj"),
    (("workload.lora={target_modules:[input_layernorm]}",), "names 'input_layernorm', which is not a Linear layer"),
    (("workload.lora.rank=8",), "unknown setting 'workload.lora.rank': workload.lora is null (off); add the setting "
                                "with +workload.lora.rank=8, or set the whole group with workload.lora={rank:8}"),
    (("+workload.lora.rnk=8",), "unknown setting 'workload.lora.rnk'; workload.lora (null: off) takes: alpha, "
                                "dropout, rank, target_modules"),
    (("trainer=trl", "workload.lora={dropout:0.05}"), "trainer trl refuses it: workload.lora.dropout=0.05"),
    (("+workload.lora.rank=4",), None),
])
def test_a_bad_lora_setting_is_one_line_before_anything_runs(tmp_path, overrides, says):
    proc = launch_in_process(tmp_path / "s", *overrides, "dry_run=true")
    if says is None:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stdout[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("proofgrid: error: ") and says in line, line
    assert not (tmp_path / "s" / "jobs").exists()  # nothing planned, nothing ran


@pytest.mark.slow
def test_the_probes_gradient_check_differentiates_the_weights_the_run_trains(tmp_path):
    """At step 0 a LoRA policy is the base model, so the batch is the same as full fine-tuning's; only the weights
    the gradient is taken over differ (the adapters' alone), and with them its norm."""
    from trainer.gradient_probe import main

    shared = ["workload.sampler_refresh_every=1", "seed=1", "workload.prompts_per_step=2", "workload.global_batch_size=16"]
    norms = {}
    for name, extra in (("full", []), ("lora", [LORA])):
        out = tmp_path / f"{name}.json"
        assert main(["--out", str(out), "--baseline", "algo=is_pg", "--treatment", "algo=score_centering", *shared,
                     *extra]) == 0
        record = json.loads(out.read_text())
        assert record["finite"] and 0.9 < record["cosine"] < 1.0 - 1e-6
        norms[name] = (record["responses"], record["valid_tokens"], record["baseline"]["grad_norm"])
    assert norms["full"][:2] == norms["lora"][:2]  # one batch
    assert norms["lora"][2] > 0 and norms["lora"][2] != pytest.approx(norms["full"][2], rel=1e-3)
