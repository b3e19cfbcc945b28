"""Configurations seed 001 refuses, refused at config time with a message naming the rule."""

from __future__ import annotations

import pytest

from trainer.algorithms import ESTIMATORS, AlgoConfig, AlgoConfigError, get_estimator

SEED_000 = {
    "rpp": {"estimator": "rpp", "n_samples_per_prompt": 8, "kl_coef": 0.01, "gamma": 1.0},
    "rppb": {"estimator": "rppb", "n_samples_per_prompt": 8, "use_kl_loss": True, "kl_loss_type": "k2",
             "kl_loss_coef": 0.01},
    "grpo": {"estimator": "grpo", "n_samples_per_prompt": 8, "use_kl_loss": True, "kl_loss_coef": 0.01},
    "gspo": {"estimator": "gspo", "n_samples_per_prompt": 8},
    "sapo": {"estimator": "sapo", "n_samples_per_prompt": 8},
    "dapo": {"estimator": "dapo", "n_samples_per_prompt": 8, "loss_reduction": "token_mean", "clip_high": 0.28,
             "dynamic_sampling": True, "overlong_cache": 8},
    "is_pg": {"estimator": "is_pg", "n_samples_per_prompt": 8, "loss_reduction": "sum"},
    "score_centering": {"estimator": "score_centering", "n_samples_per_prompt": 8, "loss_reduction": "sum"},
}


@pytest.mark.parametrize("algo", SEED_000)
def test_seed_000_configs_are_accepted_and_canonicalised(algo):
    cfg = AlgoConfig.from_mapping(SEED_000[algo])
    assert cfg.estimator == get_estimator(algo).name
    assert cfg.short_name == algo


# (algo, change, rule, the fix the message must end with). The first changed key is the offending
# setting; the message must name it.
REFUSED = [
    ("rppb", {"n_samples_per_prompt": 1}, "group-size", "set n_samples_per_prompt >= 2"),
    ("grpo", {"n_samples_per_prompt": 1}, "group-size", "set n_samples_per_prompt >= 2"),
    ("rpp", {"loss_reduction": "token_mean"}, "loss-reduction", "set loss_reduction=response_mean"),
    ("rppb", {"loss_reduction": "token_mean"}, "loss-reduction", "set loss_reduction=response_mean"),
    ("rppb", {"loss_reduction": "sum"}, "loss-reduction", "set loss_reduction=response_mean"),
    ("rpp", {"reward_postprocess": "length_penalty"}, "custom-reward-hook", "remove the hook"),
    ("rppb", {"reward_postprocess": "length_penalty"}, "custom-reward-hook", "remove the hook"),
    ("rppb", {"custom_advantage_hook": "agentic"}, "custom-advantage-hook", "remove the hook"),
    ("rpp", {"use_kl_loss": True, "kl_loss_coef": 0.01}, "kl-placement", "set use_kl_loss=false"),
    ("rppb", {"kl_coef": 0.01}, "kl-placement", "set kl_coef=0 and use kl_loss_coef"),
    ("rppb", {"kl_loss_type": "k1"}, "kl-loss-type", "set kl_loss_type=k2"),
    ("rpp", {"fully_async": True}, "sync-only", "set fully_async=false hybrid=false"),
    ("rppb", {"hybrid": True}, "sync-only", "set fully_async=false hybrid=false"),
    ("rpp", {"context_parallel_size": 2}, "context-parallel", "set context_parallel_size=1"),
    ("grpo", {"loss_reduction": "per_token"}, "loss-reduction", "choose one of response_mean, token_mean, sum"),
    ("rpp", {"gamma": 0.0}, "gamma", "must lie in (0, 1]"),
    ("sapo", {"tau_neg": 0.0}, "sapo-tau", "set tau_pos > 0 and tau_neg > 0"),
    ("sapo", {"n_samples_per_prompt": 1}, "group-size", "set n_samples_per_prompt >= 2"),
    ("is_pg", {"is_cap": 0.5}, "is-cap", "set is_cap >= 1 or null"),
    ("score_centering", {"aux_source": "nucleus"}, "aux-tokens", "aux_source one of top_k, full"),
    ("score_centering", {"aux_samples": 0}, "aux-tokens", "aux_source one of top_k, full"),
    ("score_centering", {"sc_kl_coeff": 0.1, "use_kl_loss": True, "kl_loss_coef": 0.01}, "sc-kl", "keep one"),
    ("score_centering", {"aux_top_k": 10**15}, "aux-tokens", "aux_source one of top_k, full"),
    ("dapo", {"dynamic_sampling_max_attempts": 0}, "dynamic-sampling", "set dynamic_sampling_max_attempts in 1..1024"),
    ("dapo", {"dynamic_sampling_max_attempts": 10**15}, "dynamic-sampling", "in 1..1024"),
    ("dapo", {"overlong_cache": -1}, "overlong", "overlong_penalty_factor >= 0"),
    ("dapo", {"overlong_cache": 10**15}, "overlong", "in 0..1048576 (tokens) and overlong_penalty_factor >= 0"),
    ("grpo", {"tis_cap": 0.9}, "tis-cap", "set tis_cap >= 1 or null"),
    ("rpp", {"mis_bound": 1.0}, "mis-bound", "and mis_level one of token, sequence"),
    ("gspo", {"mis_bound": 2.0, "mis_level": "response"}, "mis-bound", "mis_level one of token, sequence"),
    ("grpo", {"mis_level": "sequence"}, "mis-level", "set mis_bound, or remove mis_level"),
    # A setting only another algorithm reads would be silently ignored: the whole class is refused.
    ("grpo", {"tau_pos": 2.0}, "unused-setting", "remove it (or choose the algorithm that reads it)"),
    ("rpp", {"dynamic_sampling": True}, "unused-setting", "remove it (or choose the algorithm that reads it)"),
    ("gspo", {"overlong_cache": 4}, "unused-setting", "remove it (or choose the algorithm that reads it)"),
    ("is_pg", {"aux_samples": 4}, "unused-setting", "remove it (or choose the algorithm that reads it)"),
    ("score_centering", {"is_cap": 2.0}, "unused-setting", "remove it (or choose the algorithm that reads it)"),
]


@pytest.mark.parametrize(("algo", "change", "rule", "fix"), REFUSED)
def test_refused_configurations_name_their_rule_the_setting_and_the_fix(algo, change, rule, fix):
    with pytest.raises(AlgoConfigError, match=rf"\[{rule}\]") as info:
        AlgoConfig.from_mapping({**SEED_000[algo], **change})
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message  # one line
    assert next(iter(change)) in message, message
    assert message.endswith(fix), message


def test_grpo_may_use_token_mean():
    assert AlgoConfig.from_mapping({**SEED_000["grpo"], "loss_reduction": "token_mean"}).loss_reduction == "token_mean"


def test_unknown_estimator_and_unknown_key_are_refused():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        AlgoConfig(estimator="ppo", n_samples_per_prompt=8)
    with pytest.raises(AlgoConfigError, match="unknown-key.*kl_cof"):
        AlgoConfig.from_mapping({**SEED_000["rpp"], "kl_cof": 0.01})


def test_registry_contract():
    names = {(e.name, e.short) for e in ESTIMATORS.values()}
    assert names == {("grpo", "grpo"), ("reinforce_plus_plus", "rpp"), ("reinforce_plus_plus_baseline", "rppb"),
                     ("gspo", "gspo"), ("sapo", "sapo"), ("dapo", "dapo"), ("is_pg", "is_pg"),
                     ("score_centering", "score_centering")}
    assert get_estimator("rpp").kl_placement == "k1_in_reward"
    assert get_estimator("rppb").kl_placement == get_estimator("grpo").kl_placement == "k2_loss"
    assert get_estimator("rpp").allowed_reductions == get_estimator("rppb").allowed_reductions == ("response_mean",)
    assert set(get_estimator("grpo").allowed_reductions) == {"response_mean", "token_mean", "sum"}
    assert get_estimator("rpp").global_normalization and get_estimator("rppb").global_normalization
    assert not get_estimator("grpo").global_normalization


def test_every_shipped_algo_config_composes_and_validates():
    from trainer.run_config import CONF_DIR, compose, validate

    shipped = sorted(p.stem for p in (CONF_DIR / "algo").glob("*.yaml"))
    assert {"gspo", "sapo", "dapo", "is_pg", "score_centering"} <= set(shipped)
    for name in shipped:
        algo = validate(compose([f"algo={name}"]))
        assert algo.short_name == name


@pytest.mark.parametrize("key", ["sampler_refresh_every", "ppo_epochs", "ppo_mini_batches"])
@pytest.mark.parametrize("bad", [0, -1, 1.5, "two", True])
def test_update_schedule_keys_must_be_integers_of_at_least_one(key, bad):
    from trainer.loop import update_schedule
    from trainer.run_config import RunConfigError, compose

    cfg = compose()
    cfg.workload[key] = bad
    with pytest.raises(RunConfigError, match=rf"workload\.{key}=.* must be an integer >= 1") as info:
        update_schedule(cfg)
    assert "\n" not in str(info.value)


def test_ppo_mini_batches_must_split_each_rank_batch_evenly():
    from trainer.loop import update_schedule
    from trainer.run_config import RunConfigError, compose

    assert update_schedule(compose(["workload.ppo_mini_batches=4"])).updates_per_step == 4
    with pytest.raises(RunConfigError, match="ppo_mini_batches=5 must divide the 32 responses"):
        update_schedule(compose(["workload.ppo_mini_batches=5"]))
