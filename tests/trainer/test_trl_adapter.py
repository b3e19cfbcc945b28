"""TRL's GRPOTrainer through ``python -m trainer.adapters.trl_grpo`` as the harness will run it: the settings
mapped or refused in one line, every step in TensorBoard, a loadable final model directory, one seed one
run, and a time-limit signal that checkpoints and exits 75 with a resume that continues bit-identically."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.gates.tensorboard_log import read_scalars
from facts.repo import REPO_ROOT
from trainer.adapters.trl_grpo import (
    CHECKPOINTS_DIR,
    FINAL_MODEL_DIR,
    RUN_RECORD,
    TENSORBOARD_DIR,
    Refused,
    parser,
    plan,
)
from trainer.preemption import CHECKPOINT_SIGNALS, EXIT_CHECKPOINTED

REPO = REPO_ROOT
TOY_MODEL = "trainer/assets/toy/model"
NO_TRL = importlib.util.find_spec("trl") is None  # not imported here: 5 s that the fast tier need not pay
# `make test` installs TRL (the Makefile's `trl` target): a missing TRL there is a broken install, not a skip.
needs_trl = pytest.mark.usefixtures("trl_installed")


@pytest.fixture(scope="session")
def trl_installed() -> None:
    if NO_TRL:
        pytest.fail("TRL is not installed: `make trl` (the pinned trl extra; make test installs it)")
STEPS = 4
# The toy workload and algo=grpo, as the harness fills the placeholders ({workload.lr}, {algo.clip_low}, ...).
TOY_GRPO = ("--model-dir", TOY_MODEL, "--train", "trainer/assets/toy/data/train.parquet", "--manifest",
            "manifests/toy.json", "--algo", "grpo", "--loss-reduction", "response_mean", "--std-normalize", "True",
            "--use-kl-loss", "True", "--kl-coef", "0.01", "--kl-loss-type", "k2", "--clip-low", "0.2",
            "--clip-high", "0.2", "--lr", "1e-4", "--prompts-per-step", "4", "--responses-per-prompt", "8",
            "--max-response-len", "48", "--temperature", "1.0", "--top-k", "0", "--top-p", "1.0",
            "--adam-betas", "0.9", "0.999", "--adam-eps", "1e-8", "--weight-decay", "0.0", "--max-grad-norm", "1.0",
            "--num-threads", "1")
# TRL's per-step tags (transformers prefixes train/) that a trainer spec maps onto proofgrid's metrics.
MAPPED_TAGS = ("train/loss", "train/reward", "train/grad_norm", "train/completions/mean_length",
               "train/completions/clipped_ratio", "train/kl", "train/clip_ratio/region_mean",
               "train/frac_reward_zero_std", "train/entropy", "train/step_time")
# Written once per train() call (a stopped and resumed run has two), or a wall time: not per-step results.
NOT_PER_STEP = {"train/step_time", "train/train_runtime", "train/train_samples_per_second",
                "train/train_steps_per_second", "train/train_loss", "train/total_flos", "train/epoch"}


def adapter_cmd(out: Path, seed: int = 7, *extra: str) -> list[str]:
    return [sys.executable, "-m", "trainer.adapters.trl_grpo", "--output-dir", str(out), "--seed", str(seed),
            "--steps", str(STEPS), "--save-steps", "2", *TOY_GRPO, *extra]


def run_adapter(out: Path, *extra: str, seed: int = 7) -> subprocess.CompletedProcess:
    return subprocess.run(adapter_cmd(out, seed, *extra), cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONNOUSERSITE": "1"})


def per_step(directory: Path) -> dict[str, list[tuple[int, float]]]:
    log = read_scalars(directory / TENSORBOARD_DIR)
    assert log.problems == [], log.problems
    return {tag: [(p.step, p.value) for p in log.points(tag)] for tag in log.tags if tag not in NOT_PER_STEP}


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("trl") / "first"
    return out, run_adapter(out)


@contextlib.contextmanager
def _started_like_the_runtime(out: Path):
    """The adapter as the job runtime starts a trainer: own process group, warning signals blocked
    (held until its handler is set), so a warning sent at once is the time-limit warning of step 1."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, CHECKPOINT_SIGNALS)
    try:
        proc = subprocess.Popen(adapter_cmd(out), cwd=REPO, env={**os.environ, "PYTHONNOUSERSITE": "1"},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def stopped_then_resumed(tmp_path_factory):
    out = tmp_path_factory.mktemp("trl") / "resumed"
    with _started_like_the_runtime(out) as proc:
        proc.send_signal(signal.SIGUSR2)
        stopped_output, _ = proc.communicate(timeout=300)
    stopped = (proc.returncode, stopped_output, sorted(p.name for p in (out / CHECKPOINTS_DIR).glob("checkpoint-*")),
               json.loads((out / RUN_RECORD).read_text()))
    return out, stopped, run_adapter(out)


def toy_grpo(*changes: str) -> list[str]:
    return ["--output-dir", "unused", "--seed", "1", "--steps", "3", *TOY_GRPO, *changes]


def test_algo_grpo_maps_onto_grpo_config_as_the_table_says():
    p = plan(parser().parse_args(toy_grpo()))
    expected = dict(
        seed=1, data_seed=1, max_steps=3, per_device_train_batch_size=32, num_generations=8,
        gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1, max_completion_length=48,
        temperature=1.0, top_k=0, top_p=1.0, learning_rate=1e-4, lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=1.0,
        epsilon=0.2, epsilon_high=0.2, beta=0.01, use_bias_correction_kl=True, loss_type="grpo",
        scale_rewards="group", importance_sampling_level="token", shuffle_dataset=False,
        save_strategy="steps", save_steps=25, use_cpu=True, bf16=False, fp16=False, logging_steps=1,
        report_to="tensorboard", disable_tqdm=True, activation_checkpointing=False, disable_dropout=True,
        log_completions=False, dataloader_num_workers=0)
    assert p.grpo_config == expected
    assert p.sources == {"loss_type": "algo.loss_reduction=response_mean",
                         "scale_rewards": "algo.grpo_std_normalize=true"}


def test_token_mean_is_dapo_no_std_is_none_and_trl_options_override_with_their_source():
    assert plan(parser().parse_args(toy_grpo("--loss-reduction", "token_mean"))).grpo_config["loss_type"] == "dapo"
    assert plan(parser().parse_args(toy_grpo("--std-normalize", "false"))).grpo_config["scale_rewards"] == "none"
    p = plan(parser().parse_args(toy_grpo("--loss-type", "dapo", "--scale-rewards", "batch",
                                          "--trl", "cache_implementation=static", "full_determinism=true")))
    assert (p.grpo_config["loss_type"], p.grpo_config["scale_rewards"]) == ("dapo", "batch")
    assert (p.grpo_config["cache_implementation"], p.grpo_config["full_determinism"]) == ("static", True)
    assert p.sources == {"loss_type": "TRL option loss_type", "scale_rewards": "TRL option scale_rewards",
                         "cache_implementation": "TRL option", "full_determinism": "TRL option"}
    assert plan(parser().parse_args(toy_grpo("--use-kl-loss", "false"))).grpo_config["beta"] == 0.0


def test_gspo_is_the_sequence_ratio_and_sapo_its_gate_temperatures():
    gspo = plan(parser().parse_args(toy_grpo("--algo", "gspo", "--kl-coef", "0")))
    assert (gspo.grpo_config["importance_sampling_level"], gspo.grpo_config["loss_type"]) == ("sequence", "grpo")
    sapo = plan(parser().parse_args(toy_grpo("--algo", "sapo", "--tau-pos", "1.0", "--tau-neg", "1.05")))
    assert (sapo.grpo_config["loss_type"], sapo.grpo_config["sapo_temperature_pos"],
            sapo.grpo_config["sapo_temperature_neg"]) == ("sapo", 1.0, 1.05)


@pytest.mark.parametrize(("changes", "says"), [
    (("--algo", "rpp"), "algo=rpp cannot run on TRL: REINFORCE++"),
    (("--algo", "rppb"), "algo=rppb cannot run on TRL: REINFORCE++-baseline normalises"),
    (("--algo", "dapo"), "algo=dapo cannot run on TRL: TRL's GRPOTrainer has no dynamic sampling"),
    (("--loss-reduction", "sum"), "algo=grpo with loss_reduction=sum has no TRL loss_type (TRL has no summed loss"),
    (("--loss-type", "sapo"), "TRL's loss_type=sapo computes the SAPO loss, not algo=grpo's clipped surrogate"),
    (("--loss-type", "grpoo"), "loss_type=grpoo is not one of TRL's"),
    (("--kl-loss-type", "k1"), "kl_loss_type=k1 has no TRL equivalent"),
    (("--algo", "gspo"), "algo=gspo with a KL loss"),
    (("--algo", "sapo"), "algo=sapo needs its gate temperatures"),
    (("--ppo-epochs", "2"), "workload.ppo_epochs=2: the TRL adapter runs one on-policy update per rollout batch"),
    (("--responses-per-prompt", "1"), "workload.n_samples_per_prompt=1: TRL's GRPO needs at least 2 responses"),
    (("--trl", "beta=0.1"), "TRL option beta is set from proofgrid's settings here"),
    (("--use-vllm", "true"), "trainer.use_vllm=true: TRL's colocated vLLM syncs weights with vLLM's in-place"),
    (("--trl", "use_vllm=true"), "TRL option use_vllm is set from proofgrid's settings here"),
])
def test_a_setting_trl_cannot_honour_is_refused_in_one_line(changes, says):
    with pytest.raises(Refused, match="^" + re.escape(says)):
        plan(parser().parse_args(toy_grpo(*changes)))


# GRPOConfig fields that change a setting proofgrid records (sampling, optimizer) or the loss/reward contract: not
# passed through (adv-trust F12), whatever their value; each with a YAML value TRL would take.
CONTRACT_CHANGING = ['generation_kwargs={"temperature": 0.3, "do_sample": false}', "optim=sgd", "optim_args=momentum=0.9",
                     "top_entropy_quantile=0.2", "delta=2.0", "mask_truncated_completions=true", "reward_weights=[2.0]",
                     "repetition_penalty=1.5", "min_p=0.5", "entropy_coef=0.01", "use_adaptive_entropy=true",
                     "cast_lm_head_to_fp32=true", "off_policy_mask_threshold=0.5", "multi_objective_aggregation=x",
                     "vespo_k_pos=1.0", "sync_ref_model=true", "ref_model_mixup_alpha=0.9", "use_liger_kernel=true",
                     "lr_scheduler_kwargs={}", "label_smoothing_factor=0.1", "torch_compile=true",
                     "chat_template_kwargs={}", "trust_remote_code=true", "logging_nan_inf_filter=false",
                     "save_only_model=true", "mask_truncated_completion=true"]


@pytest.mark.parametrize("field", CONTRACT_CHANGING, ids=lambda f: f.split("=")[0])
def test_a_pass_through_field_that_is_not_on_the_allow_list_is_refused_naming_the_allowed_ones(field):
    from trainer.adapters.trl_grpo import PASS_THROUGH_FIELDS

    with pytest.raises(Refused) as err:
        plan(parser().parse_args(toy_grpo("--trl", field)))
    key = field.split("=")[0]
    assert str(err.value) == (f"TRL option {key} is not passed through: it may change the settings proofgrid records "
                              f"or the loss/reward contract; the fields passed through are "
                              f"{', '.join(PASS_THROUGH_FIELDS)}")


def test_every_field_passed_through_is_in_the_declaration_and_its_contract_row():
    from trainer.adapters.trl_grpo import declaration

    plain = declaration(plan(parser().parse_args(toy_grpo())), "grpo")
    assert plain["trl_options"] == {} and "passed through" not in plain["contract"]["loss"]
    passed = declaration(plan(parser().parse_args(toy_grpo("--trl", "pad_to_multiple_of=8", "log_level=info",
                                                           "torch_empty_cache_steps=2"))), "grpo")
    assert passed["trl_options"] == {"pad_to_multiple_of": 8, "log_level": "info", "torch_empty_cache_steps": 2}
    assert passed["contract"]["loss"] == (plain["contract"]["loss"] + "; TRL options passed through: "
                                          'pad_to_multiple_of=8, log_level="info", torch_empty_cache_steps=2')
    assert {k: v for k, v in passed["contract"].items() if k != "loss"} == \
        {k: v for k, v in plain["contract"].items() if k != "loss"}


@needs_trl
@pytest.mark.slow
def test_every_field_passed_through_is_a_field_of_the_installed_trls_grpo_config_and_owns_nothing():
    import dataclasses

    from trl import GRPOConfig

    from trainer.adapters.trl_grpo import OWNED_FIELDS, PASS_THROUGH_FIELDS

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert set(PASS_THROUGH_FIELDS) <= fields and not set(PASS_THROUGH_FIELDS) & OWNED_FIELDS
    assert set(plan(parser().parse_args(toy_grpo())).grpo_config) <= OWNED_FIELDS  # every mapped field is owned


def test_the_command_refuses_in_one_line_before_anything_is_written(tmp_path):
    out = tmp_path / "run"
    proc = run_adapter(out, "--algo", "rpp")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        "python -m trainer.adapters.trl_grpo: refused: algo=rpp cannot run on TRL")
    assert not out.exists()


@needs_trl
@pytest.mark.slow
def test_check_only_refuses_a_pass_through_field_off_the_allow_list_and_prints_an_allowed_one(tmp_path):
    # (That every mapped key is a GRPOConfig field, the real runs below show: GRPOConfig takes them.)
    typo = run_adapter(tmp_path / "run", "--check-only", "--trl", "mask_truncated_completion=true")
    assert typo.returncode == 2
    assert typo.stderr.splitlines()[-1].startswith("python -m trainer.adapters.trl_grpo: refused: TRL option "
                                                   "mask_truncated_completion is not passed through")
    assert not (tmp_path / "run").exists()
    ok = run_adapter(tmp_path / "run", "--check-only", "--trl", "cache_implementation=static")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["grpo_config"]["cache_implementation"] == "static"


@needs_trl
@pytest.mark.slow
def test_a_run_exits_0_with_every_step_of_the_mapped_tags_in_tensorboard(first):
    out, proc = first
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = read_scalars(out / TENSORBOARD_DIR)
    assert log.problems == []
    assert log.missing(MAPPED_TAGS) == [], log.written()
    for tag in MAPPED_TAGS:  # TRL counts optimizer steps from 1: its step k is proofgrid's step k - 1
        assert list(log.values(tag)) == list(range(1, STEPS + 1)), tag
    record = json.loads((out / RUN_RECORD).read_text())
    assert (record["status"], record["steps_completed"], record["resumed_from"]) == ("completed", STEPS, None)
    assert record["grpo_config"]["loss_type"] == "grpo" and record["versions"]["trl"].startswith("1.16.")
    assert set(record["inputs"]) == {f["path"] for f in json.loads((REPO / "manifests/toy.json").read_text())["files"]}
    assert sorted(p.name for p in (out / CHECKPOINTS_DIR).glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


@needs_trl
@pytest.mark.slow
def test_the_final_model_is_a_model_directory_transformers_loads_with_the_toy_tokenizer(first):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, proc = first
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = out / FINAL_MODEL_DIR
    model = AutoModelForCausalLM.from_pretrained(str(final), local_files_only=True)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    tokenizer, toy = (AutoTokenizer.from_pretrained(str(d), local_files_only=True) for d in (final, REPO / TOY_MODEL))
    assert tokenizer.get_vocab() == toy.get_vocab()
    text = "Question: What is 12 + 30?\nAnswer: 42"
    assert tokenizer(text)["input_ids"] == toy(text)["input_ids"]
    trained, initial = load_file(str(final / "model.safetensors")), load_file(str(REPO / TOY_MODEL / "model.safetensors"))
    assert set(trained) == set(initial)
    assert any(not trained[k].equal(initial[k]) for k in initial)  # it trained


@needs_trl
@pytest.mark.slow
def test_one_seed_gives_one_run_step_by_step_on_the_cpu(first, tmp_path):
    out, proc = first
    again = run_adapter(tmp_path / "again")
    assert proc.returncode == 0 and again.returncode == 0, again.stderr[-3000:]
    assert per_step(tmp_path / "again") == per_step(out)
    assert (tmp_path / "again" / FINAL_MODEL_DIR / "model.safetensors").read_bytes() == (
        out / FINAL_MODEL_DIR / "model.safetensors").read_bytes()


@needs_trl
@pytest.mark.slow
def test_the_time_limit_signal_checkpoints_exits_75_and_the_resumed_run_is_the_uninterrupted_one(
        first, stopped_then_resumed):
    out, (code, output, checkpoints, record), resumed = stopped_then_resumed
    assert code == EXIT_CHECKPOINTED, output[-3000:]
    assert output.splitlines()[-1] == ("python -m trainer.adapters.trl_grpo: stopped by signal 12 after step 1, "
                                       "checkpoint checkpoints/checkpoint-1")
    assert checkpoints == ["checkpoint-1"] and (record["status"], record["steps_completed"]) == ("stopped", 1)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((out / RUN_RECORD).read_text())["resumed_from"] == "checkpoint-1"
    log = read_scalars(out / TENSORBOARD_DIR)
    assert len(log.files) == 2 and all(log.repeated_steps(t) == [] for t in MAPPED_TAGS)
    assert per_step(out) == per_step(first[0])
    assert (out / FINAL_MODEL_DIR / "model.safetensors").read_bytes() == (
        first[0] / FINAL_MODEL_DIR / "model.safetensors").read_bytes()
