"""The real training loop on the embedded toy workload: contract files, determinism, resume,
data-parallel invariance, KL placement and input pinning."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time

import pytest
import torch

from tests.trainer_runs import REPO, read_metrics, run_trainer, train_in_process, trainer_cmd, without_perf
from trainer.metrics_writer import KL_LOSS_KEY, REQUIRED_KEYS

SHORT = ("workload.n_updates=4", "workload.checkpoint_every=2", "workload.eval.n_prompts=8")


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {algo: (train_in_process(root / algo, f"algo={algo}", "seed=7", *SHORT), root / algo)[1]
            for algo in ("grpo", "rpp", "rppb")}


@pytest.mark.parametrize("algo", ["grpo", "rpp", "rppb"])
def test_run_writes_the_contract_files(short_runs, algo):
    run = short_runs[algo]
    records = read_metrics(run)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    for r in records:
        assert set(REQUIRED_KEYS) <= set(r)
        assert all(isinstance(v, (int, float)) and v == v and abs(v) != float("inf") for v in r.values())
        assert r["train/ppo_kl"] == 0.0 and r["train/clip_frac"] == 0.0  # one update per rollout batch
    summary = json.loads((run / "run.json").read_text())
    assert summary["status"] == "completed" and summary["steps_completed"] == 4
    assert summary["responses_generated"] == 4 * 32 and summary["algo"] == algo
    assert all(len(d) == 64 for d in summary["inputs"].values())
    # The run declares what it ran, for the evidence to read: its record's contract and its reduction.
    declared = summary["algorithm"]
    assert (declared["short"], declared["loss_reduction"]) == (algo, "response_mean")
    assert declared["kl_placement"] == ("k1_in_reward" if algo == "rpp" else "k2_loss")
    assert declared["global_normalization"] is (algo != "grpo")
    assert set(declared["contract"]) == {"advantage", "normalization", "kl_regularization", "loss"}
    ev = json.loads((run / "eval.json").read_text())
    assert ev["final"]["checkpoint"] == "step_000004" and ev["initial"]["checkpoint"] == "initial"
    assert ev["final"]["subset_sha256"] == ev["initial"]["subset_sha256"]
    for kind in ("initial", "final"):
        assert ev[kind]["n_responses"] == 8 * 4
        assert len((run / "eval" / f"{kind}.jsonl").read_text().splitlines()) == 32
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_000004"
    assert (run / "checkpoints" / "step_000004" / "model.safetensors").stat().st_size > 0
    assert any(p.stat().st_size > 0 for p in (run / "tensorboard").glob("events.out.tfevents.*"))


def test_kl_loss_is_logged_exactly_for_the_algorithms_with_a_separate_kl_loss(short_runs):
    assert all(KL_LOSS_KEY not in r for r in read_metrics(short_runs["rpp"]))
    for algo in ("grpo", "rppb"):
        assert all(KL_LOSS_KEY in r for r in read_metrics(short_runs[algo]))


def test_rpp_k1_shaping_reaches_the_return(short_runs):
    # After the first update the policy has moved from the reference, so k1 shaping changes the return.
    records = read_metrics(short_runs["rpp"])
    assert records[0]["rollout/returns"] == pytest.approx(records[0]["rollout/raw_reward"], abs=1e-6)
    assert any(abs(r["rollout/returns"] - r["rollout/raw_reward"]) > 1e-7 for r in records[1:])
    for algo in ("grpo", "rppb"):
        assert all(r["rollout/returns"] == r["rollout/raw_reward"] for r in read_metrics(short_runs[algo]))


def test_same_algo_and_seed_give_bit_identical_metrics(short_runs, tmp_path):
    again = tmp_path / "again"  # a process of its own: nothing of the test process leaks into the numbers
    run_trainer(again, "algo=rppb", "seed=7", *SHORT)
    assert without_perf(read_metrics(again)) == without_perf(read_metrics(short_runs["rppb"]))
    assert (again / "eval.json").read_text() == (short_runs["rppb"] / "eval.json").read_text()


def test_different_seeds_differ(short_runs, tmp_path):
    other = tmp_path / "other"
    train_in_process(other, "algo=rppb", "seed=8", *SHORT)
    assert without_perf(read_metrics(other)) != without_perf(read_metrics(short_runs["rppb"]))



def sigkill_after_step_3(run_dir, overrides) -> None:
    """Start the trainer and SIGKILL it once step 3 has been logged (a checkpoint at 2 exists)."""
    proc = subprocess.Popen(trainer_cmd(run_dir, *overrides), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONNOUSERSITE": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (run_dir / "metrics.jsonl").exists() and len((run_dir / "metrics.jsonl").read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

def test_killed_run_resumes_from_its_checkpoint_with_identical_metrics(tmp_path):
    overrides = ("algo=rpp", "seed=11", "workload.n_updates=6", "workload.checkpoint_every=2",
                 "workload.eval.n_prompts=4")
    full = tmp_path / "full"
    train_in_process(full, *overrides)
    killed = tmp_path / "killed"
    sigkill_after_step_3(killed, overrides)
    logged = len(read_metrics(killed))
    assert 3 <= logged < 6, "the kill must land mid-run"
    checkpointed = int((killed / "checkpoints" / "latest").read_text().strip().split("_")[1])
    assert checkpointed in (2, 4)
    before = json.loads((killed / "run.json").read_text())["step_ended_at"]  # written with the checkpoint
    train_in_process(killed, *overrides)
    assert without_perf(read_metrics(killed)) == without_perf(read_metrics(full))
    # Every step's time once: the first start's up to its checkpoint, kept; the rest from the resumed start.
    after = json.loads((killed / "run.json").read_text())["step_ended_at"]
    assert len(after) == 6 and after == sorted(after) and after[:checkpointed] == before[:checkpointed]
    assert json.loads((killed / "eval.json").read_text()) == json.loads((full / "eval.json").read_text())


@pytest.mark.distributed
@pytest.mark.parametrize("algo", ["rpp", "rppb", "dapo"])
def test_dp2_produces_the_same_advantages_as_dp1(tmp_path, algo):
    # dapo: dynamic sampling refills each slot from its own deterministic candidates, so the kept
    # groups, the global token mean and the refill counters do not depend on the DP split.
    common = (f"algo={algo}", "seed=5", "workload.n_updates=2", "workload.eval.n_prompts=2", "debug.dump_advantages=true")
    train_in_process(tmp_path / "dp1", *common, "dp_size=1")
    train_in_process(tmp_path / "dp2", *common, "dp_size=2")  # its two ranks are processes of their own
    for step in range(2):
        one = torch.load(tmp_path / "dp1" / "debug" / f"step{step:06d}-rank0.pt")
        parts = [torch.load(tmp_path / "dp2" / "debug" / f"step{step:06d}-rank{r}.pt") for r in (0, 1)]
        assert parts[0]["positions"] + parts[1]["positions"] == one["positions"]
        assert torch.equal(torch.cat([p["reward"] for p in parts]), one["reward"])
        width = one["normalized"].shape[1]
        stacked = torch.cat([torch.nn.functional.pad(p["normalized"], (0, width - p["normalized"].shape[1]))
                             for p in parts])
        mask = torch.cat([torch.nn.functional.pad(p["mask"], (0, width - p["mask"].shape[1])) for p in parts])
        assert torch.equal(mask, one["mask"])
        torch.testing.assert_close(stacked, one["normalized"], atol=1e-5, rtol=1e-5)
    m1, m2 = read_metrics(tmp_path / "dp1"), read_metrics(tmp_path / "dp2")
    # Losses and the gradient norm too: a mean-instead-of-sum gradient all-reduce would halve grad_norm
    # (and AdamW, nearly scale-invariant, would hide it from the advantages alone).
    keys = ("rollout/raw_reward", "rollout/valid_tokens", "rollout/adv_raw_mean", "rollout/adv_norm_std",
            "train/loss", "train/pg_loss", "train/grad_norm", "train/ppo_kl")
    for a, b in zip(m1, m2):
        extra = {"rppb": ("train/kl_loss",),
                 "dapo": ("rollout/dynamic_sampling_refilled", "rollout/dynamic_sampling_exhausted")}.get(algo, ())
        for key in keys + extra:
            assert a[key] == pytest.approx(b[key], abs=1e-5, rel=1e-4), key


def test_trainer_and_evidence_agree_on_the_required_metric_keys():
    from evidence.gates.metrics_log import required_keys

    for algo in ("grpo", "rpp", "rppb"):
        expected = set(REQUIRED_KEYS) | ({KL_LOSS_KEY} if algo != "rpp" else set())
        assert set(required_keys(algo)) == expected, algo


def test_an_input_whose_digest_differs_is_refused(tmp_path):
    manifest = json.loads((REPO / "manifests" / "toy.json").read_text())
    victim = next(f for f in manifest["files"] if f["path"].endswith("train.parquet"))
    victim["sha256"] = "0" * 64
    bad = tmp_path / "toy-tampered.json"
    bad.write_text(json.dumps(manifest))
    proc = run_trainer(tmp_path / "run", f"workload.manifest={bad}", "workload.n_updates=1", check=False)
    assert proc.returncode == 2
    assert "train.parquet" in proc.stderr and "SHA256" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_changed_input_file_is_refused(tmp_path):
    from trainer.inputs import InputDigestError, verify_inputs

    data = tmp_path / "data.bin"
    data.write_bytes(b"pinned bytes")
    manifest = tmp_path / "m.json"
    import hashlib

    manifest.write_text(json.dumps({"workload": "t", "files": [
        {"path": str(data), "size": 12, "sha256": hashlib.sha256(b"pinned bytes").hexdigest()}]}))
    assert verify_inputs(manifest) == {str(data): hashlib.sha256(b"pinned bytes").hexdigest()}
    data.write_bytes(b"pinned bytez")
    with pytest.raises(InputDigestError, match="SHA256"):
        verify_inputs(manifest)
    with pytest.raises(InputDigestError, match="not pinned"):
        data.write_bytes(b"pinned bytes")
        verify_inputs(manifest, required=[str(tmp_path / "other.parquet")])


def test_refused_algo_config_fails_before_any_compute(tmp_path):
    proc = train_in_process(tmp_path / "r", "algo=rppb", "workload.n_samples_per_prompt=1",
                       "workload.global_batch_size=4", check=False)
    assert proc.returncode == 2 and "[group-size]" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_greedy_sampling_is_warned_about_and_only_greedy_sampling(caplog):
    from trainer.rollout import SamplingParams, warn_if_greedy

    with caplog.at_level(logging.WARNING):
        warn_if_greedy(SamplingParams(temperature=0.0), "training rollout")
        warn_if_greedy(SamplingParams(temperature=1.0), "training rollout")
        warn_if_greedy(SamplingParams(temperature=0.05), "training rollout")
    (record,) = caplog.records
    assert "training rollout" in record.getMessage() and "greedy decoding" in record.getMessage()


@pytest.mark.slow  # tens of CPU seconds of toy-model forward passes: not a fast-tier unit
def test_greedy_kv_cache_rollout_picks_the_argmax_of_an_unpadded_full_forward():
    # The reference re-runs the whole prefix of one response at a time, unpadded and without a KV
    # cache: a wrong position id, pad mask or cache entry in the batched engine changes the argmax.
    from trainer.inputs import resolve
    from trainer.policy import load_policy
    from trainer.rollout import SamplingParams, make_engine

    torch.manual_seed(0)
    model, tokenizer = load_policy(str(resolve("trainer/assets/toy/model")))
    model.eval()
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"]
               for text in ("Question: 2 + 3?\nAnswer:", "Question: what is 12 times 7 minus 4?\nAnswer:")]
    engine = make_engine("torch", model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    batch = engine.generate(prompts, keys=[1, 2], sampling=SamplingParams(temperature=0.0, max_new_tokens=16))
    for prompt, generation in zip(prompts, batch.generations):
        response = generation.response_ids
        assert generation.finished == (tokenizer.eos_token_id in response)
        assert generation.finished or len(response) == 16
        assert tokenizer.eos_token_id not in response[:-1]
        with torch.no_grad():
            for t, token in enumerate(response):
                logits = model(input_ids=torch.tensor([prompt + response[:t]])).logits[0, -1].double()
                assert logits[token] >= logits.max() - 1e-4, (t, token, int(logits.argmax()))


def test_greedy_training_rollouts_are_refused_before_training(tmp_path):
    """Temperature 0 is not a distribution the PPO ratio can use (issue 10): refused, not warned about."""
    proc = train_in_process(tmp_path / "g", "algo=grpo", "workload.n_updates=1", "workload.sampling.temperature=0",
                       "workload.eval.n_prompts=1", "workload.eval.k=4", check=False)
    assert proc.returncode == 2 and "workload.sampling.temperature=0" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "g" / "metrics.jsonl").exists()


def test_pinning_the_toy_inputs_reproduces_the_committed_manifest(tmp_path):
    from trainer.inputs import pin

    written = pin("toy", ["trainer/assets/toy/data", "trainer/assets/toy/model"], manifest_dir=tmp_path)
    assert json.loads(written.read_text()) == json.loads((REPO / "manifests" / "toy.json").read_text())


def test_the_eval_subset_is_checked_against_the_pinned_rows_and_without_them_against_the_split(tmp_path):
    """The manifest states a split's rows (the rows pinned are the split's: the manifest test above re-pins with
    the reader); the launcher's check reads the split itself (its fields and answers, trainer.inputs.check_task),
    so a manifest pinned before rows were stated is checked alike."""
    from omegaconf import OmegaConf

    from launcher.errors import PreflightError
    from launcher.preflight import check_inputs
    from trainer.inputs import pinned_rows

    assert pinned_rows("manifests/toy.json", "trainer/assets/toy/data/test.parquet") == 256
    old = json.loads((REPO / "manifests" / "toy.json").read_text())
    for entry in old["files"]:
        entry.pop("rows", None)
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert pinned_rows(tmp_path / "old.json", "trainer/assets/toy/data/test.parquet") is None
    workload = OmegaConf.load(REPO / "conf" / "workload" / "toy.yaml")
    for manifest in ("manifests/toy.json", str(tmp_path / "old.json")):
        assert check_inputs(OmegaConf.merge(workload, {"manifest": manifest, "eval": {"n_prompts": 256}}))
        with pytest.raises(PreflightError, match="must be <= 256, the rows of the test split"):
            check_inputs(OmegaConf.merge(workload, {"manifest": manifest, "eval": {"n_prompts": 257}}))


def test_every_file_of_a_directory_input_must_be_pinned(tmp_path):
    import hashlib

    from trainer.inputs import InputDigestError, verify_inputs

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "chat_template.jinja").write_text("unpinned")
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"workload": "t", "files": [
        {"path": f"{model}/config.json", "size": 2, "sha256": hashlib.sha256(b"{}").hexdigest()}]}))
    with pytest.raises(InputDigestError, match="chat_template.jinja is not pinned"):
        verify_inputs(manifest, required=[str(model)])


def test_a_non_finite_gradient_norm_stops_the_run_and_the_evidence_names_the_cause(tmp_path):
    # lr = 1e30: the first update blows every weight to ~1e30, so the next forward overflows to NaN.
    out = tmp_path / "nan"
    proc = train_in_process(out, "algo=grpo", "workload.lr=1e30", "workload.n_updates=4", "workload.eval.n_prompts=1",
                       check=False)
    assert proc.returncode == 3, proc.stderr[-2000:]
    error_lines = [line for line in proc.stderr.splitlines() if line.startswith("proofgrid trainer: error:")]
    assert len(error_lines) == 1 and "non-finite gradient norm" in error_lines[0] and "at step 1" in error_lines[0]
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "failed" and summary["failed_step"] == 1 and summary["steps_completed"] == 1
    assert "non-finite gradient norm" in summary["error"]
    assert [r["step"] for r in read_metrics(out)] == [0]  # the poisoned step is never logged nor stepped

    from evidence.gates.artifacts import check_run_summary

    _, failures = check_run_summary(out, "grpo", 7, 4)
    assert any("non-finite gradient norm" in f.reason for f in failures)


def test_a_stale_sampler_logs_staleness_up_to_k_minus_one_and_the_logp_gap_it_causes(tmp_path):
    out = tmp_path / "stale"
    train_in_process(out, "algo=is_pg", "seed=3", "workload.n_updates=6", "workload.sampler_refresh_every=4",
                "workload.eval.n_prompts=1")
    records = read_metrics(out)
    assert [r["train/staleness"] for r in records] == [0, 1, 2, 3, 0, 1]
    for r in records:
        if r["train/staleness"] == 0:  # same weights: only the engine's incremental-decoding rounding
            assert r["train/sampler_logp_gap"] < 1e-5 and abs(r["train/is_ratio_max"] - 1) < 1e-4
        else:
            assert r["train/sampler_logp_gap"] > 1e-4 and r["train/is_ratio_max"] > 1.0
        assert r["train/is_ratio_max"] >= r["train/is_ratio_mean"] > 0


def test_several_updates_per_rollout_batch_make_the_ratio_and_clipping_act(tmp_path):
    one, many = tmp_path / "one", tmp_path / "many"
    common = ("algo=grpo", "seed=1", "workload.n_updates=2", "workload.eval.n_prompts=1")
    train_in_process(one, *common)
    train_in_process(many, *common, "workload.ppo_epochs=2", "workload.ppo_mini_batches=2")
    assert all(r["train/clip_frac"] == 0 and r["train/ppo_kl"] == 0 for r in read_metrics(one))
    assert all(r["train/clip_frac"] > 0 and r["train/ppo_kl"] != 0 for r in read_metrics(many))
    # Same rollouts at step 0 (the sampler is refreshed only after the updates).
    assert read_metrics(one)[0]["rollout/raw_reward"] == read_metrics(many)[0]["rollout/raw_reward"]


def test_a_run_with_a_stale_sampler_resumes_bit_identically(tmp_path):
    # A checkpoint at step 2 or 4 falls between two sampler refreshes (k = 4): the lagging sampler
    # weights must be restored, or the resumed rollouts would come from another policy.
    overrides = ("algo=score_centering", "seed=2", "workload.n_updates=6", "workload.checkpoint_every=2",
                 "workload.sampler_refresh_every=4", "workload.eval.n_prompts=1")
    full = tmp_path / "full"
    train_in_process(full, *overrides)
    killed = tmp_path / "killed"
    sigkill_after_step_3(killed, overrides)
    latest = (killed / "checkpoints" / "latest").read_text().strip()
    assert latest in ("step_000002", "step_000004") and 3 <= len(read_metrics(killed)) < 6
    assert (killed / "checkpoints" / latest / "sampler.pt").is_file()  # the sampler lagged at both
    train_in_process(killed, *overrides)
    assert without_perf(read_metrics(killed)) == without_perf(read_metrics(full))
