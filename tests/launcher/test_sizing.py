"""A profile sized from the workload (issue 36 section 2): what a job needs (``launcher.job_sizing``) against what the
profile, this machine or Slurm gives it; refused or warned in one line before anything is submitted, the estimate
in the dry run.

The parameter counts are checked against the models transformers builds from the same config.json (on the meta
device: no memory), the fused decoder weights against the lean decoder's own tensors, the activation bytes
against the tensors autograd saves in a real forward, and the whole estimate against a real trainer run's peak
resident size. Workloads of other sizes are a config.json in a temporary model directory, pinned by a temporary
manifest (planning reads no weights)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.job_sizing import (
    ACTIVATION_BYTES,
    BACKWARD_FACTOR,
    LOGITS_GRADIENT_BYTES,
    Limits,
    ModelShape,
    NotEstimated,
    estimate,
    gpu_name,
    judge,
    read_shape,
)
from tests.launch_in_process import launch_in_process
from tests.sweeps import REPO

QWEN3_0P6B = json.loads((REPO / "benchmarks" / "qwen3_0p6b" / "config.json").read_text())
TOY_CONFIG = json.loads((REPO / "trainer" / "assets" / "toy" / "model" / "config.json").read_text())
GSM8K = ("workload=gsm8k_qwen3_0p6b", "workload.train_path=trainer/assets/toy/data/train.parquet",
         "workload.test_path=trainer/assets/toy/data/test.parquet")
LLAMA = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "num_hidden_layers": 4,
         "intermediate_size": 5632, "num_attention_heads": 32, "num_key_value_heads": 4, "tie_word_embeddings": False,
         "attention_bias": True}
QWEN2 = {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 256, "num_hidden_layers": 3, "intermediate_size": 704,
         "num_attention_heads": 8, "num_key_value_heads": 2, "tie_word_embeddings": True}


def model_overrides(tmp_path, name: str = "m", **arch) -> list[str]:
    """A workload's model overrides for a model directory of Qwen3-0.6B's config.json changed by ``arch`` (a
    stub weights file, the toy tokenizer), pinned with the toy's data in a manifest of its own."""
    model = tmp_path / name / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({**QWEN3_0P6B, **arch}))
    (model / "model.safetensors").write_bytes(b"planning reads no weights")
    for f in (REPO / "trainer" / "assets" / "toy" / "model").glob("tokenizer*"):
        shutil.copy(f, model / f.name)
    toy = json.loads((REPO / "manifests" / "toy.json").read_text())
    files = [e for e in toy["files"] if "/data/" in e["path"]]
    files += [{"path": str(f), "size": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
              for f in sorted(model.iterdir())]
    manifest = tmp_path / name / "manifest.json"
    manifest.write_text(json.dumps({"workload": name, "files": files}))
    return [f"workload.model_path={model}", f"workload.manifest={manifest}"]


def meta_params(config: dict) -> int:
    """The parameters of the model transformers builds from ``config`` (on the meta device: no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


def _one_line(proc, code: int = 2) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == code and len(lines) == 1 and lines[0].startswith("proofgrid: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def _warnings(proc) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("proofgrid: warning:")]


def _estimate(proc) -> list[str]:
    return [ln.removeprefix("# estimate | ") for ln in proc.stdout.splitlines() if ln.startswith("# estimate | ")]


# ---- the model's size from its config.json ---------------------------------------------------------------------

@pytest.mark.slow  # transformers builds four models (on the meta device): 5-12 s of imports and init
@pytest.mark.parametrize("config", [QWEN3_0P6B, TOY_CONFIG, LLAMA, QWEN2], ids=["qwen3-0.6b", "toy", "llama", "qwen2"])
def test_parameters_from_the_architecture_equal_the_model_transformers_builds(config):
    assert ModelShape.from_config(config).params == meta_params(config)


def test_the_toy_s_parameters_are_the_tensors_in_its_weights_file():
    from safetensors.torch import load_file

    stored = sum(t.numel() for t in load_file(str(REPO / "trainer" / "assets" / "toy" / "model" / "model.safetensors")).values())
    assert read_shape(REPO / "trainer" / "assets" / "toy" / "model").params == stored == 342_144


def test_the_fused_weights_are_the_lean_decoder_s_own_copies():
    from trainer.decoding import LeanQwen3
    from trainer.policy import load_policy

    model, _ = load_policy(str(REPO / "trainer" / "assets" / "toy" / "model"))
    lean = LeanQwen3(model)
    copies = sum(w.qkv.numel() + w.gate_up.numel() for w in lean.layers)
    assert read_shape(REPO / "trainer" / "assets" / "toy" / "model").fused == copies


@pytest.mark.parametrize(("config", "says"), [
    ({**QWEN3_0P6B, "num_experts": 8}, "mixture-of-experts"),
    ({k: v for k, v in QWEN3_0P6B.items() if k != "hidden_size"}, "has no hidden_size"),
    ({**QWEN3_0P6B, "num_hidden_layers": True}, "has no num_hidden_layers"),
])
def test_a_config_that_does_not_say_enough_is_not_estimated(config, says):
    with pytest.raises(NotEstimated, match=says):
        ModelShape.from_config(config)


@pytest.mark.parametrize(("text", "name"), [("NVIDIAA40", "A40"), ("nvidia_a40", "A40"), ("a40", "A40"),
                                            ("H200", "H200"), ("h100_80gb", "H100"), ("L40S", "L40S"), ("L40", "L40"),
                                            ("tesla_v100", "V100"), ("mi300x", None), (None, None)])
def test_a_gpu_model_or_gres_type_is_matched_to_the_memory_table(text, name):
    assert gpu_name(text) == name


@pytest.mark.slow  # four forwards of a small model with autograd's hooks: 10-20 s on the shared machine
def test_the_activation_bytes_match_the_tensors_autograd_keeps_on_a_shape_outside_the_fit():
    """The fit (launcher.job_sizing.ACTIVATION_BYTES) was made on the shapes of benchmarks/sizing_accuracy.py; this one is not
    among them (wider MLP, more heads, another vocabulary)."""
    from benchmarks.sizing_accuracy import saved_bytes_per_token

    L, H, heads, kv, d, I, V = 3, 320, 5, 1, 64, 1280, 1500  # noqa: E741 - the formula's names
    for dtype in ("float32", "bfloat16"):
        a = ACTIVATION_BYTES[dtype]
        predicted = L * (a["H"] * H + a["A"] * heads * d + a["K"] * kv * d + a["I"] * I) + a["V"] * V + a["0"]
        measured = saved_bytes_per_token((L, H, heads, kv, d, I, V), dtype)
        assert abs(predicted - measured) / measured < 0.06, (dtype, predicted, measured)


# ---- the judge -------------------------------------------------------------------------------------------------

def _gsm8k_workload(**changes):
    from trainer.run_config import compose

    cfg = compose(["workload=gsm8k_qwen3_0p6b", *(f"workload.{k}={v}" for k, v in changes.items())])
    return cfg.workload


def _shape_estimate(tmp_path, workload, **kw):
    (model,) = [o.split("=", 1)[1] for o in model_overrides(tmp_path) if o.startswith("workload.model_path=")]
    workload = OmegaConf.merge(workload, {"model_path": model})
    return estimate(workload, 1, 1, **kw), workload


def test_the_estimate_of_seed_000_s_workload_is_its_formulas(tmp_path):
    """Qwen3-0.6B at 4 x 8 responses, cap 1,024, bf16, one A40: every term recomputed here from the formulas of
    docs/sizing.md with the published shape (596,049,920 parameters)."""
    est, _ = _shape_estimate(tmp_path, _gsm8k_workload(), gpu="A40")
    P, V, L, K = 596_049_920, 151_936, 28, 8 * 128
    fused = 28 * (1024 * (2048 + 2 * 1024) + 2 * 1024 * 3072)
    assert est.shape.params == P and est.shape.fused == fused
    assert est.rank_floor == 24 * P + 4 * fused
    kv_eval = 2 * L * K * 1024 * (256 * 4) * 2 + 4 * P + 4 * fused
    phases = {p.name.split(" ")[0]: p.value for p in est.phases}
    assert phases["evaluation"] == kv_eval
    a = ACTIVATION_BYTES["bfloat16"]  # measured coefficients (checked against autograd below)
    kept = L * (a["H"] * 1024 + a["A"] * 2048 + a["K"] * 1024 + a["I"] * 3072) + a["V"] * V + a["0"]
    assert phases["update"] == pytest.approx(32 * 1024 * (BACKWARD_FACTOR * kept + LOGITS_GRADIENT_BYTES * V) + 2 * P)
    steps = 50 * 32 * 1024 / 409.8  # seed 000's A40 figure, the same model: no scaling
    assert dict((p.name, p.value) for p in est.time)["50 steps"] == pytest.approx(steps)
    # seed 000's runs took 65.6 min of Slurm time without evaluations; at its measured mean length (896.7 tokens)
    # the estimate's start, steps and checkpoints come to within 10% of it
    at_measured = sum(p.value for p in est.time if "evaluations" not in p.name) - steps * (1 - 896.7 / 1024)
    assert abs(at_measured / 60 - 65.6) / 65.6 < 0.10


def _limits(**kw) -> Limits:
    """Limits that check only what ``kw`` gives (a GPU as large as needed unless it says otherwise)."""
    return Limits(**{"node_memory_from": "cluster.mem=X", "gpu_memory_from": "cluster.gpu_model=X",
                     "time_from": "cluster.time=X", "gpu_memory": 1e15, **kw})


def test_memory_below_the_floor_refuses_below_the_peak_warns_and_above_passes(tmp_path):
    est, w = _shape_estimate(tmp_path, _gsm8k_workload(), gpu="A40")
    floor, peak = est.rank_floor, est.rank_peak
    assert judge(est, _limits(gpu_memory=floor - 1), w)[0].refuse
    (warned,) = judge(est, _limits(gpu_memory=floor + 1), w)
    assert not warned.refuse and "below the" in warned.text
    assert judge(est, _limits(gpu_memory=peak * 1.11), w) == []
    host_floor = est.host_floor
    assert judge(est, _limits(node_memory=host_floor - 1), w)[0].refuse
    assert not judge(est, _limits(node_memory=host_floor + 1), w)[0].refuse  # CUDA's libraries: warned, assumed


def test_a_time_limit_below_the_unsplittable_stretch_refuses_and_below_the_whole_job_warns(tmp_path):
    est, w = _shape_estimate(tmp_path, _gsm8k_workload(), gpu="A40")
    delay = 90.0
    refused = judge(est, _limits(time_s=est.piece_s + delay - 1, signal_delay_s=delay, requeue=True), w)
    assert refused[0].refuse and "no requeue would get further" in refused[0].text
    (requeued,) = judge(est, _limits(time_s=est.piece_s + delay + 1, signal_delay_s=delay, requeue=True), w)
    assert not requeued.refuse and "requeued about" in requeued.text
    (ends,) = judge(est, _limits(time_s=est.piece_s + delay + 1, signal_delay_s=delay, requeue=False), w)
    assert "reach the limit before it ends" in ends.text
    assert judge(est, _limits(time_s=est.total_s * 1.11, signal_delay_s=delay), w) == []


def test_a_throughput_given_by_the_profile_replaces_the_reference(tmp_path):
    slow, _ = _shape_estimate(tmp_path / "a", _gsm8k_workload(), gpu="A40")
    fast, _ = _shape_estimate(tmp_path / "b", _gsm8k_workload(), gpu="A40", given_tok_per_s=4098.0)
    steps = [next(p.value for p in e.time if p.name.endswith("steps")) for e in (slow, fast)]
    assert steps[0] == pytest.approx(10 * steps[1])
    assert fast.throughput.source == "cluster.response_tok_per_s"


def test_dp_ranks_split_the_batch_and_share_the_host(tmp_path):
    one, w = _shape_estimate(tmp_path / "a", _gsm8k_workload(device="cpu", dtype="float32", gpus_per_job=0))
    two = estimate(w, 2, 2)
    update = {e: next(p.value for p in e.phases if p.name == "update") for e in (one, two)}
    assert update[two] < update[one]  # 16 responses a rank instead of 32
    assert two.host_floor == 2 * two.rank_floor


# ---- through launch.py: dry runs ------------------------------------------------------------------------------

def test_the_toy_on_the_default_profiles_is_estimated_and_warns_nothing(tmp_path):
    for cluster in ("local", "slurm"):
        proc = launch_in_process(tmp_path / cluster, "algo=grpo", "seed=1", "dry_run=true", f"cluster={cluster}")
        assert proc.returncode == 0, proc.stderr
        assert not _warnings(proc), proc.stderr
        shown = _estimate(proc)
        assert shown[0].startswith("workload toy: a qwen3 model of 0.3M parameters")
        assert any(line.startswith("memory per rank: floor") for line in shown)
        assert any(line.startswith("time at the cap:") for line in shown)
    limits = [ln for ln in proc.stdout.splitlines() if ln.startswith("# limits |")]
    assert limits == ["# limits | what a job gets: 4.00 GiB per node (cluster.mem=4G); 30.0 min (cluster.time=00:30:00)"]


def test_seed_000_s_workload_on_the_default_slurm_profile_is_warned_in_one_line_each(tmp_path):
    """The issue's case: gsm8k_qwen3_0p6b on cluster=slurm (4G, 30 minutes; a GPU given) planned without a word."""
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", *GSM8K, *model_overrides(tmp_path),
                             "dry_run=true", "cluster=slurm", "cluster.gres=gpu:1")
    assert proc.returncode == 0, proc.stderr
    warned = _warnings(proc)
    assert any("cluster.time=00:30:00 is below the" in w and "requeued about" in w for w in warned), warned
    assert any("cluster.mem=4G gives 4.00 GiB, tight against the" in w for w in warned), warned
    assert any("more than any GPU in proofgrid's table holds" in w for w in warned), warned
    shown = _estimate(proc)
    assert shown[0].startswith("workload gsm8k_qwen3_0p6b: a qwen3 model of 596.0M parameters (config.json: L=28 ")
    assert "GPU memory not checked: name the GPU in cluster.gpu_model" in proc.stdout


@pytest.mark.parametrize(("args", "says"), [
    (("cluster.time=10",), "cluster.time=10 leaves 8.5 min before the checkpoint signal, less than the"),
    (("cluster.time=00:12:00", "cluster.requeue=false"), "cluster.time=00:12:00 leaves"),
    (("cluster.mem=1G",), "cluster.mem=1G gives a job 1.00 GiB but a job of workload gsm8k_qwen3_0p6b needs at least"),
    (("cluster.mem=2000M",), "cluster.mem=2000M gives a job"),
    (("cluster.gres=null",), "needs a GPU per job but cluster.gres is empty"),
])
def test_a_profile_that_cannot_hold_seed_000_s_workload_is_refused_in_one_line(tmp_path, args, says):
    overrides = ["cluster.gres=gpu:1", "cluster.mem=64G", "cluster.time=06:00:00", *args]
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", *GSM8K, *model_overrides(tmp_path),
                             "dry_run=true", "cluster=slurm", *overrides)
    line = _one_line(proc)
    assert says in line, line
    assert not (tmp_path / "s" / "commands.txt").exists()


def test_a_gpu_smaller_than_the_floor_refuses_and_one_below_the_peak_warns(tmp_path):
    big = model_overrides(tmp_path, "big", hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                          num_attention_heads=32, head_dim=128)  # Qwen3-4B's shape: 4.0B parameters
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", *GSM8K, *big, "dry_run=true",
                             "cluster=a40_seed000", "cluster.partition=gpu")
    line = _one_line(proc)
    assert "cluster.gpu_model=A40 gives a rank 48.0 GiB of GPU memory but one of workload" in line, line
    ok = launch_in_process(tmp_path / "t", "algo=grpo", "seed=1", *GSM8K, *model_overrides(tmp_path, "small"),
                           "dry_run=true", "cluster=a40_seed000", "cluster.partition=gpu")
    assert ok.returncode == 0, ok.stderr
    (warned,) = [w for w in _warnings(ok) if "GPU memory" in w]
    assert "cluster.gpu_model=A40 gives a rank 48.0 GiB of GPU memory, below the" in warned
    h200 = launch_in_process(tmp_path / "u", "algo=grpo", "seed=1", *GSM8K, *model_overrides(tmp_path, "h"),
                             "workload.max_response_len=256", "workload.eval.max_response_len=256",
                             "workload.eval.n_prompts=64", "dry_run=true", "cluster=a40_seed000",
                             "cluster.partition=gpu", "cluster.gpu_model=H200", "cluster.gres=gpu:h200:1")
    assert h200.returncode == 0 and not [w for w in _warnings(h200) if "GPU memory" in w], h200.stderr


def test_a_faster_machine_s_throughput_silences_the_time_warning(tmp_path):
    args = ("algo=grpo", "seed=1", *GSM8K, *model_overrides(tmp_path), "dry_run=true", "cluster=slurm",
            "cluster.gres=gpu:1", "cluster.mem=64G")
    assert any("cluster.time" in w for w in _warnings(launch_in_process(tmp_path / "a", *args)))
    proc = launch_in_process(tmp_path / "b", *args, "cluster.response_tok_per_s=8000")
    assert proc.returncode == 0 and not [w for w in _warnings(proc) if "cluster.time" in w], proc.stderr
    assert "at 8,000.0 response tok/s per rank (cluster.response_tok_per_s)" in proc.stdout
    bad = launch_in_process(tmp_path / "c", *args, "cluster.response_tok_per_s=0")
    assert "cluster.response_tok_per_s=0" in _one_line(bad)


def test_gpus_the_workload_does_not_use_are_warned(tmp_path):
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", "dry_run=true", "cluster=slurm",
                             "cluster.gres=gpu:2")
    assert proc.returncode == 0
    (warned,) = _warnings(proc)
    assert "the profile asks for 2 GPU(s) per task but workload toy uses none" in warned


def test_a_model_the_estimate_cannot_read_is_said_and_planned(tmp_path):
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", *GSM8K,
                             *model_overrides(tmp_path, num_experts=8, num_experts_per_tok=2),
                             "dry_run=true", "cluster=slurm", "cluster.gres=gpu:1")
    assert proc.returncode == 0, proc.stderr
    (line,) = _estimate(proc)
    assert line.startswith("workload gsm8k_qwen3_0p6b: not estimated (") and "mixture-of-experts" in line


# ---- calibration: a real trainer run ---------------------------------------------------------------------------

def test_the_toy_s_estimated_peak_is_within_15_percent_of_a_real_run_s_peak_resident_size(tmp_path):
    """A 3-step toy run under benchmarks/rusage.py (its own wait4: the trainer's peak resident size)."""
    from trainer.run_config import compose

    usage = tmp_path / "usage.json"
    overrides = ["algo=grpo", "seed=1", "workload.n_updates=3", "workload.eval.n_prompts=16"]
    subprocess.run([sys.executable, "-m", "benchmarks.rusage", str(usage), sys.executable, "-m", "trainer", *overrides,
                    f"output_dir={tmp_path / 'run'}"], cwd=REPO, check=True, capture_output=True, timeout=600)
    measured = json.loads(usage.read_text())["peak_mib"] * 2**20
    predicted = estimate(compose(overrides).workload, 1, 1).host_peak
    assert abs(predicted - measured) / measured < 0.15, (predicted / 2**20, measured / 2**20)


# ---- through launch.py on the throwaway Slurm cluster: what sinfo says ----------------------------------------

def _cpu_workload(tmp_path, name: str, **arch) -> list[str]:
    return [*GSM8K, *model_overrides(tmp_path, name, **arch), "workload.device=cpu", "workload.dtype=float32",
            "workload.gpus_per_job=0", "workload.reward_workers=0", "workload.num_threads=1", "workload.cpus_per_job=1"]


@pytest.mark.parametrize("mem", ["'0'", "null"])
def test_a_whole_node_s_memory_is_read_from_sinfo_and_a_model_beyond_it_refused(slurm_cluster, tmp_path, mem):
    node_mib = int(slurm_cluster["PROOFGRID_SLURM_MEM_MB"])
    big = _cpu_workload(tmp_path, "big", hidden_size=2048, intermediate_size=6144)  # 1.7B parameters: 40 GB floor
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", *big, "cluster=slurm", f"cluster.mem={mem}",
                             "cluster.time=null")
    line = _one_line(proc)
    said = "cluster.mem=0" if mem == "'0'" else "cluster.mem unset"
    assert f"{said}: a whole node of partition {slurm_cluster['PROOFGRID_SLURM_PARTITION']}, at most " \
           f"{node_mib / 1024:.1f} GiB (sinfo) gives a job" in line, line
    assert not (tmp_path / "s" / "jobs").exists()


def test_a_no_controller_submission_names_the_controller_not_the_profile(slurm_cluster, tmp_path):
    """SLURM_CONF pointing at a copy of the cluster's slurm.conf whose controller port nobody listens on."""
    conf = tmp_path / "slurm.conf"
    text = Path(slurm_cluster["SLURM_CONF"]).read_text()
    conf.write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("SlurmctldPort=")) +
                    "\nSlurmctldPort=6999\n")
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", "cluster=slurm", env={"SLURM_CONF": str(conf)})
    line = _one_line(proc)
    assert "no Slurm controller answers at " in line and f"port 6999 (from SLURM_CONF={conf})" in line, line
    assert "the cluster profile is not the problem" in line and "change cluster." not in line
    assert not (tmp_path / "s" / "jobs").exists()


def test_an_unreachable_controller_in_sbatch_s_words_is_not_blamed_on_the_profile():
    from launcher.slurm.slurm_profile import explain_refusal

    line = explain_refusal("sbatch: error: Batch job submission failed: Unable to contact slurm controller "
                           "(connect failure)\n")
    assert line.startswith("no Slurm controller answers at ") and "Unable to contact slurm controller" in line
    assert "change the cluster profile" not in line and "\n" not in line
    refused = explain_refusal("sbatch: error: Batch job submission failed: Requested node configuration is not "
                              "available\n")
    assert "change cluster.mem / cpus_per_task / gres / constraint" in refused
