"""One typed schema for every setting: refused before anything starts, one line naming the setting,
the bad value and the allowed range; seeds are canonical integers in the generator's range."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from trainer.run_config import RunConfigError, compose, validate
from trainer.schema import SEED_MAX, algo_fields

# (override(s), the setting the one-line error must name). Several bad values per setting.
INVALID = [
    (["workload.max_grad_norm=-1"], "workload.max_grad_norm"),
    (["workload.max_grad_norm=0"], "workload.max_grad_norm"),
    (["workload.max_grad_norm=inf"], "workload.max_grad_norm"),
    (["workload.max_grad_norm=abc"], "workload.max_grad_norm"),
    (["workload.lr=-0.5"], "workload.lr"),
    (["workload.lr=0"], "workload.lr"),
    (["workload.lr=nan"], "workload.lr"),
    (["workload.lr=true"], "workload.lr"),
    (["workload.max_response_len=0"], "workload.max_response_len"),
    (["workload.max_response_len=-5"], "workload.max_response_len"),
    (["workload.max_response_len=4.5"], "workload.max_response_len"),
    (["workload.num_threads=0"], "workload.num_threads"),
    (["workload.num_threads=two"], "workload.num_threads"),
    (["workload.dtype=fp8"], "workload.dtype"),
    (["workload.dtype=32"], "workload.dtype"),
    (["workload.device=gpu"], "workload.device"),
    (["workload.device=cuda:x"], "workload.device"),
    (["workload.device=cuda"], "workload.gpus_per_job"),
    (["workload.reward_workers=-1"], "workload.reward_workers"),
    (["workload.reward_max_concurrency=0"], "workload.reward_max_concurrency"),
    (["workload.sampling.temperature=0"], "workload.sampling.temperature"),
    (["workload.sampling.temperature=-0.5"], "workload.sampling.temperature"),
    (["workload.eval.temperature=-1"], "workload.eval.temperature"),
    (["workload.eval.top_p=0"], "workload.eval.top_p"),
    (["workload.eval.top_p=1.5"], "workload.eval.top_p"),
    (["workload.eval.k=0"], "workload.eval.k"),
    (["workload.eval.n_prompts=0"], "workload.eval.n_prompts"),
    (["workload.eval.seed=-1"], "workload.eval.seed"),
    (["workload.eval.seed=1.5"], "workload.eval.seed"),
    (["workload.adam_betas=[0.9,1.0]"], "workload.adam_betas"),
    (["workload.adam_betas=[0.9]"], "workload.adam_betas"),
    (["workload.adam_betas=[a,b]"], "workload.adam_betas"),
    (["workload.adam_eps=0"], "workload.adam_eps"),
    (["workload.weight_decay=-0.1"], "workload.weight_decay"),
    (["workload.n_updates=0"], "workload.n_updates"),
    (["workload.checkpoint_every=0"], "workload.checkpoint_every"),
    (["workload.cpus_per_job=0"], "workload.cpus_per_job"),
    (["workload.gpus_per_job=-1"], "workload.gpus_per_job"),
    (["workload.ppo_epochs=0"], "workload.ppo_epochs"),
    (["workload.ppo_mini_batches=-1"], "workload.ppo_mini_batches"),
    (["workload.sampler_refresh_every=1.5"], "workload.sampler_refresh_every"),
    (["+workload.lrr=3"], "workload.lrr"),
    (["~workload.lr"], "workload.lr"),
    (["dp_size=0"], "dp_size"),
    (["dp_size=-2"], "dp_size"),
    (["resume=maybe"], "resume"),
    (["algo.clip_low=abc"], "algo.clip_low"),
    (["algo.use_kl_loss=3"], "algo.use_kl_loss"),
    (["algo.kl_loss_coef=nan"], "algo.kl_loss_coef"),
    (["+algo.bogus=1"], "algo.bogus"),
    (["cluster=slurm", "cluster.time=forever"], "cluster.time"),
    (["cluster=slurm", "cluster.mem=lots"], "cluster.mem"),
    (["cluster=slurm", "cluster.cpus_per_task=0"], "cluster.cpus_per_task"),
    (["cluster=slurm", "cluster.requeue=sometimes"], "cluster.requeue"),
    (["cluster.kind=pbs"], "cluster.kind"),
    (["cluster.max_parallel=0"], "cluster.max_parallel"),
]
BAD_SEEDS = ["1.5", "true", "false", "1e3", "01", "007", "2**70", "-1", "9223372036854775808", "'42'", "null", "nan"]


def _refusal(overrides: list[str]) -> str:
    with pytest.raises(RunConfigError) as info:
        validate(compose(["algo=grpo", *overrides]))
    return str(info.value)


@pytest.mark.parametrize(("overrides", "setting"), INVALID, ids=[" ".join(o) for o, _ in INVALID])
def test_an_invalid_setting_is_refused_in_one_line_naming_it(overrides, setting):
    message = _refusal(overrides)
    assert "\n" not in message and setting in message, message
    assert any(word in message for word in ("must be", "unknown setting", "is missing", "needs")), message
    bad_value = overrides[-1].split("=", 1)[1] if "=" in overrides[-1] else None
    if bad_value and not bad_value.startswith("[") and "must be" in message:
        assert f"={bad_value}" in message.replace("'", "").replace("True", "true"), message


@pytest.mark.parametrize("seed", BAD_SEEDS)
def test_a_seed_that_is_not_a_canonical_integer_in_range_is_refused(seed):
    message = _refusal([f"seed={seed}"])
    assert message.startswith("setting seed=") and "2**63-1" in message, message


@pytest.mark.parametrize("overrides", [
    ["seed=0"], [f"seed={SEED_MAX}"], ["workload.lr=1e-3"], ["workload.max_grad_norm=0.5"],
    ["workload.sampling.temperature=0.7"], ["workload.eval.temperature=0"], ["workload.adam_betas=[0,0.5]"],
    ["cluster=slurm", "cluster.time=1-12:30"], ["cluster=slurm", "cluster.time=45"], ["cluster=slurm", "cluster.mem=512M"],
    ["workload.ppo_epochs=2", "workload.ppo_mini_batches=4", "workload.sampler_refresh_every=3"],
])
def test_valid_edge_values_are_accepted(overrides):
    validate(compose(["algo=grpo", *overrides]))


@pytest.mark.parametrize(("algo", "workload", "cluster"), list(itertools.product(
    ("grpo", "rpp", "rppb"), ("toy", "gsm8k_qwen3_0p6b"), ("local", "slurm", "a40_seed000"))))
def test_every_shipped_config_combination_fits_the_schema(algo, workload, cluster):
    validate(compose([f"algo={algo}", f"workload={workload}", f"cluster={cluster}"]))


def test_the_algo_settings_are_derived_from_algo_config_so_a_new_field_needs_no_schema_edit():
    from trainer.algorithms import AlgoConfig

    own = {f.name for f in dataclasses.fields(AlgoConfig)} - {"n_samples_per_prompt"}
    assert set(algo_fields()) == own | {"short", "display_name"}
