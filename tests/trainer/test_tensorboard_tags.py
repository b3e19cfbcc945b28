"""What a run's TensorBoard holds beside metrics.jsonl: the hparams, the learning rate, the policy's
entropy, the k1 reference KL where the record puts KL in the reward, and every evaluation on one set
of ``eval/`` tags (initial at step 0, during training every N steps, final at n_updates).

Read back with the project's one reader of event files (``evidence.gates.tensorboard_log``, TensorBoard's own
loader) from real trainer runs on the toy workload.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from evidence.gates.tensorboard_log import read_hparams, read_scalars
from facts.algorithms import ALGORITHMS, KL_IN_REWARD
from facts.files import TENSORBOARD_DIR
from facts.metrics import (
    ENTROPY_TAG,
    EVAL_DURING_TRAINING_FIELD,
    EVAL_SECONDS_TAG,
    LEARNING_RATE_TAG,
    REFERENCE_KL_TAG,
    TENSORBOARD_ONLY_TAGS,
    eval_tag,
)
from tests.trainer_runs import REPO, read_metrics, train_in_process, without_perf
from trainer.policy import token_entropy

pytestmark = pytest.mark.slow

N_UPDATES, EVERY = 4, 2
SMALL = (f"workload.n_updates={N_UPDATES}", "workload.checkpoint_every=2", "workload.eval.n_prompts=4",
         "workload.eval.k=2")
# The toy model's vocabulary bounds the entropy: 0 <= H <= log V.
TOY_VOCAB = json.loads((REPO / "trainer" / "assets" / "toy" / "model" / "config.json").read_text())["vocab_size"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """rpp with evaluations every 2 steps, the same run without them, and grpo (KL as a loss)."""
    root = tmp_path_factory.mktemp("tb")
    train_in_process(root / "rpp-every", "algo=rpp", "seed=3", *SMALL, f"workload.eval.every={EVERY}")
    train_in_process(root / "rpp", "algo=rpp", "seed=3", *SMALL)
    train_in_process(root / "grpo", "algo=grpo", "seed=3", *SMALL)
    return root


def test_token_entropy_equals_a_float64_reference_and_leaves_the_log_probs_and_their_graph_alone():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=generator, dtype=torch.float32, requires_grad=True)
    logp = torch.log_softmax(logits, dim=-1)
    before = logp.detach().clone()
    entropy = token_entropy(logp)
    p = torch.softmax(logits.detach().double(), dim=-1)
    reference = -(p * p.log()).sum(-1)  # H = -sum_v p_v log p_v, in float64
    torch.testing.assert_close(entropy.double(), reference, rtol=1e-5, atol=1e-6)
    assert not entropy.requires_grad and torch.equal(logp.detach(), before) and logp.grad_fn is not None


def test_metrics_jsonl_is_unchanged_by_evaluations_during_training_and_holds_no_tensorboard_only_tag(runs):
    with_eval, without = read_metrics(runs / "rpp-every"), read_metrics(runs / "rpp")
    assert without_perf(with_eval) == without_perf(without)  # the training's random streams did not move
    assert not {k for r in with_eval for k in r} & set(TENSORBOARD_ONLY_TAGS)
    assert json.loads((runs / "rpp-every" / "run.json").read_text())["metric_keys"] == \
        json.loads((runs / "rpp" / "run.json").read_text())["metric_keys"]


def test_the_evaluations_lie_on_one_line_of_eval_tags_from_step_0_to_n_updates(runs):
    log = read_scalars(runs / "rpp-every" / TENSORBOARD_DIR)
    assert not log.problems
    evaluation = json.loads((runs / "rpp-every" / "eval.json").read_text())
    during = json.loads((runs / "rpp-every" / "run.json").read_text())[EVAL_DURING_TRAINING_FIELD]
    by_step = {e["step"]: e["summary"] for e in during["evaluations"]}
    assert sorted(by_step) == [0, EVERY] and during["every"] == EVERY
    assert by_step[0] == evaluation["initial"]  # step 0 is the initial checkpoint's evaluation, once
    for key in ("pass@1", "pass@2", "mean_reward"):
        want = {0: evaluation["initial"][key], EVERY: by_step[EVERY][key], N_UPDATES: evaluation["final"][key]}
        assert log.values(eval_tag(key)) == pytest.approx(want, rel=1e-6)
    seconds = log.values(EVAL_SECONDS_TAG)
    assert sorted(seconds) == [0, EVERY] and all(v > 0 for v in seconds.values())
    assert during["seconds"] == pytest.approx(sum(e["seconds"] for e in during["evaluations"]), abs=1e-3)
    # Without evaluations during training: the initial and the final checkpoint, on the same tags.
    plain = read_scalars(runs / "rpp" / TENSORBOARD_DIR)
    assert sorted(plain.values(eval_tag("pass@1"))) == [0, N_UPDATES]
    assert EVAL_DURING_TRAINING_FIELD not in json.loads((runs / "rpp" / "run.json").read_text())


def test_learning_rate_entropy_and_the_reference_kl_of_kl_in_reward_algorithms_are_logged_per_step(runs):
    for name in ("rpp", "grpo"):
        log = read_scalars(runs / name / TENSORBOARD_DIR)
        steps = list(range(N_UPDATES))
        assert log.values(LEARNING_RATE_TAG) == {s: pytest.approx(1e-4, rel=1e-6) for s in steps}
        entropy = log.values(ENTROPY_TAG)
        assert sorted(entropy) == steps and all(0 < h <= math.log(TOY_VOCAB) for h in entropy.values())
        in_reward = ALGORITHMS[name].kl_placement == KL_IN_REWARD
        assert (REFERENCE_KL_TAG in log.tags) == in_reward  # keyed on the record's trait
        if in_reward:
            kl = log.values(REFERENCE_KL_TAG)
            assert kl[0] == 0.0  # at step 0 the policy is the reference: k1 is exactly 0
            assert any(v != 0.0 for s, v in kl.items() if s > 0)


def test_the_hparams_dashboard_reads_every_resolved_setting(runs):
    hparams = read_hparams(runs / "rpp-every" / TENSORBOARD_DIR)
    assert hparams["algo.short"] == "rpp" and hparams["seed"] == 3.0 and hparams["workload.lr"] == pytest.approx(1e-4)
    assert hparams["workload.eval.every"] == float(EVERY) and hparams["algo.kl_coef"] == pytest.approx(0.01)
    assert hparams["workload.adam_betas"] == "[0.9, 0.999]"  # a list as its text
    assert "arm" not in hparams and "output_dir" not in hparams  # a run of its own; never a machine path


def test_a_killed_run_keeps_the_evaluations_of_its_checkpointed_steps_and_redoes_the_rest(runs, tmp_path):
    from tests.trainer.test_trainer import sigkill_after_step_3

    overrides = ("algo=rpp", "seed=3", *SMALL, "workload.eval.every=1")
    killed = tmp_path / "killed"
    sigkill_after_step_3(killed, overrides)
    assert (killed / "checkpoints" / "latest").read_text().strip() == "step_000002"
    before = json.loads((killed / "run.json").read_text())[EVAL_DURING_TRAINING_FIELD]["evaluations"]
    assert [e["step"] for e in before][:3] == [0, 1, 2]
    train_in_process(killed, *overrides)
    during = json.loads((killed / "run.json").read_text())[EVAL_DURING_TRAINING_FIELD]["evaluations"]
    assert [e["step"] for e in during] == [0, 1, 2, 3]  # each once: 3 again after the resume at 2
    assert during[:3] == before[:3]  # kept from the first attempt
    assert without_perf(read_metrics(killed)) == without_perf(read_metrics(runs / "rpp"))


def hparams_sessions(run_dir) -> tuple[list, list]:
    """The HParams plugin's session starts and ends of a run, read as TensorBoard's backend reads them: its
    event accumulator's content for the plugin's tags, parsed by the plugin's own metadata parsers."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    accumulator = EventAccumulator(str(run_dir / TENSORBOARD_DIR))
    accumulator.Reload()
    content = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
    starts = [metadata.parse_session_start_info_plugin_data(c) for t, c in content.items()
              if t == metadata.SESSION_START_INFO_TAG]
    ends = [metadata.parse_session_end_info_plugin_data(c) for t, c in content.items()
            if t == metadata.SESSION_END_INFO_TAG]
    return starts, ends


def test_the_hparams_session_ends_with_the_run_s_status_not_unknown(runs, tmp_path):
    from tensorboard.plugins.hparams import api_pb2

    started = json.loads((runs / "rpp" / "run.json").read_text())
    starts, ends = hparams_sessions(runs / "rpp")
    assert len(starts) == 1 and len(ends) == 1
    assert api_pb2.Status.Name(ends[0].status) == "STATUS_SUCCESS"
    assert started["status"] == "completed" and ends[0].end_time_secs >= starts[0].start_time_secs > 0
    # A run that fails (lr = 1e30: a non-finite gradient norm at step 1) ends its session as a failure.
    failed = tmp_path / "failed"
    proc = train_in_process(failed, "algo=grpo", "seed=3", *SMALL, "workload.lr=1e30", check=False)
    assert proc.returncode == 3 and json.loads((failed / "run.json").read_text())["status"] == "failed"
    starts, ends = hparams_sessions(failed)
    assert len(starts) == 1 and [api_pb2.Status.Name(e.status) for e in ends] == ["STATUS_FAILURE"]
