"""What one job of a workload needs (memory, time), estimated before anything is submitted, and the one
judge of whether what a back end gives a job holds it (``judge``: the planner calls it for every back end).

Everything is computed from what the workload declares and its model's ``config.json`` (no weights are read);
the formulas follow what proofgrid's own trainer holds (``trainer/loop.py``, ``trainer/policy.py``,
``trainer/rollout.py``). docs/sizing.md states them for users, with how far off they were on measured runs.
Symbols: ``P`` the model's parameters (``ModelShape.params``), ``V`` its vocabulary, ``L`` layers, ``H`` hidden
size, ``A = heads x head_dim``, ``K = kv_heads x head_dim``, ``I`` the MLP's width; ``B`` the responses one rank
holds in a step (``prompts_per_step x n_samples_per_prompt / dp_size``), ``T`` the response cap (a batch is as
wide as its longest response: the estimate is "at the cap"), ``N_e = eval.n_prompts x eval.k``, ``T_e`` its
cap; ``e`` the compute dtype's bytes (2 under bf16/fp16 autocast, 4 for float32).

Memory of one trainer rank on its model's device (the GPU, or the host for ``device=cpu``):

- floor, held whatever the responses' lengths: ``24P + 4P_f`` (policy in float32, reference and rollout engine
  copies ``4P`` each, the lean Qwen3 decoder's fused q/k/v and gate/up ``4P_f``, gradients ``4P``, AdamW ``8P``),
  plus ``R0`` (the trainer process itself) on the host;
- peak: the floor plus the largest phase: the update ``B T (BACKWARD_FACTOR a + LOGITS_GRADIENT_BYTES V)`` (``a``
  the bytes per response token autograd keeps, ``ACTIVATION_BYTES``) ``+ 2P`` under autocast (its weight cache);
  the rollout's KV cache ``2 L K T B e``; the evaluation's ``2 L K T_e N_e e + 4P + 4P_f`` (one batch, and a
  second engine for the initial checkpoint). Prompt tokens are left out.

A GPU job's host memory: floor ``R0 + 4P`` (the model read in float32 before it moves), peak ``+ CUDA_HOST_BYTES``
per rank (assumed). Time: ``t_start + n_eval t_eval + n_updates t_step + n_ckpt t_ckpt`` with
``t_step = w B_job T / theta`` (``theta``: ``throughput``; ``w = (4 + 6u + 2[u > 1]) / 10`` for ``u = ppo_epochs``),
``t_eval = N_e T_e / (EVAL_SPEEDUP theta)``, ``n_eval = 2 + n_updates // eval.every``, ``t_start = S0 + 4P / read
rate``, ``t_ckpt = 12P / write rate``, ``n_ckpt = n_updates // checkpoint_every + 1``; ``t_piece`` (start, one
evaluation, one step, one checkpoint) is the longest stretch a requeue cannot split.

Refused (cannot fit): memory per node below the tasks' floors, GPU memory below a rank's floor, a time limit
(less ``cluster.signal_delay_s``) below ``t_piece`` (the back ends refuse a GPU workload with no GPU).
Warned (tight): memory or GPU memory below the peak + ``MARGIN``, an unnamed GPU and a peak above every GPU in
``GPU_MEMORY_GIB``, a time limit below the whole job + ``MARGIN``, GPUs in the profile the workload does not use.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping

from omegaconf import DictConfig

GIB = 2**30
MARGIN = 1.10  # "tight": within 10% of the estimate (allocator fragmentation, the prompt tokens left out)

# Bytes autograd keeps per response token for the backward of the policy's forward (``trainer.policy``'s
# packed Qwen3 forward and log-softmax), by compute dtype: per layer ``a_H H + a_A A + a_K K + a_I I``, plus
# ``a_V V + a_0``. Least-squares fit to the saved tensors counted with ``torch.autograd.graph.saved_tensors_hooks``
# (their growth from 32 to 64 tokens per response) on 12 Qwen3 shapes (H 128-512, A 256-768, K 64-256, I 384-1536,
# V 256-4096, L 2-5; benchmarks/sizing_accuracy.py): worst residual 2.9% (float32) and 1.2% (bfloat16); within 3.7% on three
# shapes outside the fit (tests/launcher/test_sizing.py checks one).
ACTIVATION_BYTES = {
    "float32": {"H": 29.1, "A": 31.1, "K": 16.2, "I": 15.4, "V": 8.08, "0": 3044.0},
    "bfloat16": {"H": 29.8, "A": 19.2, "K": 9.1, "I": 7.8, "V": 5.78, "0": 3638.0},
}
ACTIVATION_BYTES["float16"] = ACTIVATION_BYTES["bfloat16"]  # the same autocast path, not measured separately

# The trainer process's own resident size on the host (Python, torch, transformers, the tokenizer, the data) before
# its first batch: 458-529 MiB measured in the runs of benchmarks/sizing_accuracy.py; a site's Python and libraries may differ.
R0_BYTES = 512 * 2**20
# The update's peak over what autograd keeps (the backward's gradient buffers of each layer), and the bytes per
# response token per vocabulary entry of the log-softmax's gradient: fit to the resident peaks of a forward and
# backward of two Qwen3 shapes, checked on a third (float32 +6.1%, bfloat16 -0.9%; benchmarks/sizing_accuracy.py).
BACKWARD_FACTOR = 1.40
LOGITS_GRADIENT_BYTES = 6
# A GPU job's host memory beyond R0: the CUDA runtime and the libraries torch loads (cuBLAS, cuDNN). An assumed
# figure, not measured (no GPU was lent to this work); it counts toward the peak only (a warning, never a refusal).
CUDA_HOST_BYTES = 2 * GIB
S0_SECONDS = 10.0  # a trainer's start-up before its first step (imports, deterministic mode): 9.4-10.8 CPU s measured
READ_BYTES_PER_S = 200e6  # model weights read at start-up: an assumed rate (a busy parallel file system)
WRITE_BYTES_PER_S = 200e6  # a checkpoint written: the same assumption, not measured


@dataclasses.dataclass(frozen=True)
class Throughput:
    """``theta``: response tokens per second of a whole training step on one rank, and where it comes from."""

    tok_per_s: float
    source: str


# One CPU thread, 32 responses per step: seconds per response token = ALPHA + BETA x C. Fit to two random-weight
# Qwen3 models on this project's 2-core machine (C = 3.7M and 12.9M, responses at 97% of a 96-token cap;
# benchmarks/sizing_accuracy.py); threads divide it (ideal scaling, not measured).
CPU_SECONDS_PER_TOKEN = (1.107e-3, 1.497e-10)
# Seed 000: Qwen3-0.6B (C = 596M) at 4 x 8 responses, cap 1,024, bf16, with its SGLang rollout engine; proofgrid's
# own torch engine has not been measured on a GPU yet. Another model: scaled by C_ref / C.
GPU_THROUGHPUT = {"A40": (409.8, 596_049_920, "seed 000's Qwen3-0.6B runs on one A40")}
DEFAULT_GPU = "A40"  # a GPU whose throughput is not in the table is assumed as fast as this one (and said so)
# r_e: an evaluation's response tokens per second over a training step's (generation only, against sampling,
# the reference's forward and the policy's forward and backward: 2C against 10C by the products). Measured
# 3.0 and 5.3 on the two models above; the lower is used.
EVAL_SPEEDUP = 3.0

# GPU memory by model name (datasheets; the smaller variant where there are two). A name is matched without
# case or punctuation, as it appears in ``cluster.gpu_model`` or a gres type (``gpu:NVIDIAA40:1``).
GPU_MEMORY_GIB = {"A40": 48, "A100": 40, "H100": 80, "H200": 141, "L40S": 48, "L40": 48, "L4": 24, "A10": 24,
                  "V100": 16, "T4": 16, "RTXA6000": 48, "A6000": 48, "B200": 180, "GH200": 96}


class NotEstimated(ValueError):
    """The model's ``config.json`` does not say enough to estimate (one line: what is missing)."""


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape, from its Hugging Face ``config.json``."""

    model_type: str
    vocab: int
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool

    @classmethod
    def from_config(cls, config: Mapping) -> ModelShape:
        """Read the shape; ``NotEstimated`` for a config without the keys of a dense decoder-only model."""
        if any(int(config.get(key) or 0) > 1 for key in ("num_experts", "num_local_experts", "n_routed_experts")):
            raise NotEstimated("a mixture-of-experts model (its experts' parameters are not estimated)")
        needed = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads")
        missing = [key for key in needed if not isinstance(config.get(key), int) or isinstance(config.get(key), bool)]
        if missing:
            raise NotEstimated(f"its config.json has no {', '.join(missing)}")
        heads = int(config["num_attention_heads"])
        model_type = str(config.get("model_type", ""))
        bias = bool(config.get("attention_bias", False))
        return cls(model_type=model_type, vocab=int(config["vocab_size"]), hidden=int(config["hidden_size"]),
                   layers=int(config["num_hidden_layers"]), intermediate=int(config["intermediate_size"]), heads=heads,
                   kv_heads=int(config.get("num_key_value_heads") or heads),
                   head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
                   tied=bool(config.get("tie_word_embeddings", False)),
                   qkv_bias=bias or model_type == "qwen2",  # Qwen2 has q/k/v biases and no attention_bias key
                   o_bias=bias, qk_norm=model_type.startswith("qwen3"))

    @property
    def A(self) -> int:
        return self.heads * self.head_dim

    @property
    def K(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """One layer: ``H(A + 2K)`` q/k/v + ``AH`` o + ``3HI`` gate/up/down + ``2H`` norms (+ biases, + ``2D``
        Qwen3's q/k norms)."""
        H, A, K = self.hidden, self.A, self.K
        return (H * (A + 2 * K) + A * H + 3 * H * self.intermediate + 2 * H + (A + 2 * K) * self.qkv_bias
                + H * self.o_bias + 2 * self.head_dim * self.qk_norm)

    @property
    def params(self) -> int:
        """``P = V H`` (embedding) ``+ V H`` (output head, unless tied) ``+ H`` (final norm) ``+ L x layer_params``."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden + self.layers * self.layer_params

    @property
    def compute(self) -> int:
        """``C``: the parameters one token's forward multiplies by (the embedding is a lookup, the head a product)."""
        return self.params - self.vocab * self.hidden * (0 if self.tied else 1)

    @property
    def fused(self) -> int:
        """``P_f``: the lean Qwen3 decoder's fused copies (q/k/v and gate/up per layer); 0 for other models."""
        if self.model_type != "qwen3":
            return 0
        return self.layers * (self.hidden * (self.A + 2 * self.K) + 2 * self.hidden * self.intermediate)


def read_shape(model_dir) -> ModelShape:
    """The shape of the model in ``model_dir`` (its ``config.json``)."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NotEstimated(f"its config.json cannot be read ({type(exc).__name__})") from None
    if not isinstance(config, dict):
        raise NotEstimated("its config.json is not a JSON object")
    return ModelShape.from_config(config)


@dataclasses.dataclass(frozen=True)
class Part:
    """One named term of an estimate and its formula, as the dry run shows it."""

    name: str
    value: float  # bytes or seconds
    formula: str


@dataclasses.dataclass(frozen=True)
class Estimate:
    """What one job of a workload needs: per rank on its model's device, per task on the host, and its time."""

    workload: str
    shape: ModelShape
    on_gpu: bool
    ranks_per_task: int
    floor: tuple[Part, ...]  # per rank, on the model's device (host for a CPU job: R0 included)
    phases: tuple[Part, ...]  # per rank: the transient phases; the largest one is added to the floor
    host_floor: float  # per task, bytes (a CPU job: ranks x rank floor)
    host_peak: float  # per task, bytes
    throughput: Throughput
    time: tuple[Part, ...]
    piece_s: float  # the longest stretch a requeue cannot split

    @property
    def rank_floor(self) -> float:
        return sum(p.value for p in self.floor)

    @property
    def rank_peak(self) -> float:
        return self.rank_floor + max(p.value for p in self.phases)

    @property
    def total_s(self) -> float:
        return sum(p.value for p in self.time)

    def lines(self) -> list[str]:
        """What the dry run shows of the estimate (each line follows ``# estimate |``)."""
        s = self.shape
        where = "one GPU" if self.on_gpu else "the CPU"
        peak_phase = max(self.phases, key=lambda p: p.value)
        memory = "GPU memory" if self.on_gpu else "memory"
        out = [f"workload {self.workload}: a {s.model_type or 'decoder'} model of {s.params / 1e6:,.1f}M parameters "
               f"(config.json: L={s.layers} H={s.hidden} I={s.intermediate} heads={s.heads}/{s.kv_heads} "
               f"V={s.vocab}), {self.ranks_per_task} rank(s) per task, each on {where}",
               f"{memory} per rank: floor {gib(self.rank_floor)} ("
               + " + ".join(f"{p.name} {gib(p.value)}" for p in self.floor)
               + f"); peak at the cap {gib(self.rank_peak)} (+ {peak_phase.name} {gib(peak_phase.value)}: "
               f"{peak_phase.formula}; " + ", ".join(f"{p.name} {gib(p.value)}" for p in self.phases
                                                  if p is not peak_phase) + ")"]
        if self.on_gpu:
            out.append(f"host memory per task: floor {gib(self.host_floor)} (R0 + 4P per rank: the model read in "
                       f"float32), peak {gib(self.host_peak)} (+ {gib(CUDA_HOST_BYTES)} per rank assumed for CUDA's "
                       "libraries; the reward workers' not counted)")
        elif self.ranks_per_task > 1:
            out.append(f"host memory per task ({self.ranks_per_task} ranks): floor {gib(self.host_floor)}, "
                       f"peak {gib(self.host_peak)}")
        out.append(f"time at the cap: {minutes(self.total_s)} ("
                   + " + ".join(f"{p.name} {minutes(p.value)}" for p in self.time)
                   + f") at {self.throughput.tok_per_s:,.1f} response tok/s per rank ({self.throughput.source}); "
                   f"the longest stretch a requeue cannot split: {minutes(self.piece_s)}")
        return out


def gib(n: float) -> str:
    """Bytes in words: MiB below 1 GiB, GiB above."""
    return f"{n / 2**20:,.0f} MiB" if n < GIB else f"{n / GIB:,.2f} GiB" if n < 10 * GIB else f"{n / GIB:,.1f} GiB"


def minutes(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{int(seconds // 3600)} h {int(round(seconds % 3600 / 60)):02d} min"


def gpu_name(text: str | None) -> str | None:
    """``NVIDIAA40``, ``nvidia_a40``, ``a40`` -> ``A40``: the table's name a GPU model or gres type matches, else None."""
    if not text:
        return None
    key = "".join(c for c in str(text).upper() if c.isalnum()).removeprefix("NVIDIA").removeprefix("TESLA")
    for name in sorted(GPU_MEMORY_GIB, key=len, reverse=True):  # H200 before H20, L40S before L40
        if key.startswith(name) or key == name:
            return name
    return None


def throughput(shape: ModelShape, on_gpu: bool, threads: int, gpu: str | None, given: float | None) -> Throughput:
    """``theta`` for one rank: the profile's own figure (``cluster.response_tok_per_s``), else the measured
    reference for the device (``CPU_SECONDS_PER_TOKEN`` over the threads; a GPU's table figure scaled by
    ``C_ref / C``)."""
    if given:
        return Throughput(float(given), "cluster.response_tok_per_s")
    C = shape.compute
    if not on_gpu:
        alpha, beta = CPU_SECONDS_PER_TOKEN
        return Throughput(threads / (alpha + beta * C), f"this project's CPU measurements at C={C / 1e6:,.1f}M, "
                                                        f"{threads} thread(s); set cluster.response_tok_per_s")
    name = gpu if gpu in GPU_THROUGHPUT else DEFAULT_GPU
    tok_per_s, c_ref, source = GPU_THROUGHPUT[name]
    scaled = "" if c_ref == C else f" scaled to C={C / 1e6:,.1f}M"
    unknown = "" if gpu == name else (f"; {gpu}'s own rate is unknown" if gpu else "; the GPU model is not named")
    return Throughput(tok_per_s * c_ref / C, f"{source}{scaled}{unknown}; set cluster.response_tok_per_s")


def estimate(workload: DictConfig, dp_size: int, ranks_per_task: int, gpu: str | None = None,
             given_tok_per_s: float | None = None) -> Estimate:
    """The estimate for one job of ``workload`` run as ``dp_size`` ranks, ``ranks_per_task`` of them in one task
    (``launcher.job_spec.allocation_shape``: all of them in a one-task job). ``NotEstimated`` when the model's config
    does not say enough."""
    from trainer.inputs import resolve  # the launcher's own dependency (its pins), no torch

    w = workload
    shape = read_shape(resolve(str(w.model_path)))
    P, Pf, V, L = shape.params, shape.fused, shape.vocab, shape.layers
    on_gpu = str(w.device).startswith("cuda")
    dtype = str(w.dtype)
    e = 4 if dtype == "float32" else 2
    B = max(1, int(w.prompts_per_step) * int(w.n_samples_per_prompt) // max(1, int(dp_size)))
    T, Te, Ne = int(w.max_response_len), int(w.eval.max_response_len), int(w.eval.n_prompts) * int(w.eval.k)
    u, mb = int(w.get("ppo_epochs", 1) or 1), int(w.get("ppo_mini_batches", 1) or 1)

    floor = [Part("weights x3 (policy, reference, rollout engine)", 12 * P, "12P"),
             Part("gradients", 4 * P, "4P"), Part("AdamW moments", 8 * P, "8P")]
    if Pf:
        floor.insert(1, Part("fused decoder weights", 4 * Pf, "4P_f"))
    if not on_gpu:
        floor.insert(0, Part("trainer process", R0_BYTES, "R0"))
    a = ACTIVATION_BYTES[dtype]
    per_token = L * (a["H"] * shape.hidden + a["A"] * shape.A + a["K"] * shape.K + a["I"] * shape.intermediate) \
        + a["V"] * V + a["0"]
    tokens = -(-B // mb) * T  # one mini-batch's responses at the cap
    update = tokens * (BACKWARD_FACTOR * per_token + LOGITS_GRADIENT_BYTES * V) + (2 * P if e == 2 else 0)
    phases = (
        Part("update", update, f"{tokens:,} tokens x ({BACKWARD_FACTOR:.2f} x {per_token / 1e3:,.1f} kB kept for the "
                               f"backward + {LOGITS_GRADIENT_BYTES}V){' + 2P autocast cache' if e == 2 else ''}"),
        Part("rollout KV cache", 2 * L * shape.K * T * B * e, "2 L K T B e"),
        Part("evaluation KV cache + control engine", 2 * L * shape.K * Te * Ne * e + 4 * P + 4 * Pf,
             "2 L K T_e N_e e + 4P + 4P_f"),
    )
    rank_floor = sum(p.value for p in floor)
    rank_peak = rank_floor + max(p.value for p in phases)
    if on_gpu:
        host_floor = ranks_per_task * (R0_BYTES + 4 * P)
        host_peak = host_floor + ranks_per_task * CUDA_HOST_BYTES
    else:
        host_floor, host_peak = ranks_per_task * rank_floor, ranks_per_task * rank_peak

    threads = int(w.get("num_threads", 1) or 1)
    theta = throughput(shape, on_gpu, threads, gpu, given_tok_per_s)
    rate = theta.tok_per_s * max(1, int(dp_size))  # ideal data-parallel scaling
    work = (4 + 6 * u + (2 if u > 1 else 0)) / 10
    B_job = int(w.prompts_per_step) * int(w.n_samples_per_prompt)
    t_step = work * B_job * T / rate
    t_eval = Ne * Te / (EVAL_SPEEDUP * rate)
    n_updates, every = int(w.n_updates), int(w.eval.get("every", 0) or 0)
    n_eval = 2 + (n_updates // every if every else 0)
    n_ckpt = n_updates // max(1, int(w.checkpoint_every)) + 1
    t_start = S0_SECONDS + 4 * P / READ_BYTES_PER_S
    t_ckpt = 12 * P / WRITE_BYTES_PER_S
    time = (Part("start", t_start, "S0 + 4P / read rate"),
            Part(f"{n_eval} evaluations", n_eval * t_eval, "N_e T_e / (r_e theta)"),
            Part(f"{n_updates} steps", n_updates * t_step, "w B T / theta"),
            Part(f"{n_ckpt} checkpoint(s)", n_ckpt * t_ckpt, "12P / write rate"))
    return Estimate(str(w.name), shape, on_gpu, ranks_per_task, tuple(floor), phases, host_floor, host_peak, theta,
                    time, t_start + t_eval + t_step + t_ckpt)


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a back end gives one job, each with the words that say where it came from (``None``: no limit
    known, not checked). Memory in bytes, time in seconds."""

    node_memory: float | None = None  # per node (Slurm --mem) or this machine's
    node_memory_from: str = ""
    tasks_per_node: int = 1
    concurrent: int = 1  # jobs that share ``node_memory`` at once (the local back end)
    gpu_model: str | None = None  # the name GPU_MEMORY_GIB knows it by
    gpu_memory: float | None = None
    gpu_memory_from: str = ""
    gpus: int | None = None  # GPUs per task the profile asks for (None: not known)
    time_s: float | None = None
    time_from: str = ""
    signal_delay_s: float = 0.0
    requeue: bool = False


    def line(self) -> str:
        """The dry run's ``# limits |`` line: what the back end gives a job (the profile's, or the machine's)."""
        memory = f"{gib(self.node_memory)} per node ({self.node_memory_from})" if self.node_memory is not None \
            else "memory not known here (not checked)"
        gpu = f"; GPU {gib(self.gpu_memory)} ({self.gpu_memory_from})" if self.gpu_memory is not None else \
            (f"; {self.gpu_memory_from}" if self.gpu_memory_from else "")
        time = f"{minutes(self.time_s)} ({self.time_from})" if self.time_s is not None else f"no time limit known ({self.time_from or 'none'})"
        return f"# limits | what a job gets: {memory}{gpu}; {time}"


@dataclasses.dataclass(frozen=True)
class Finding:
    refuse: bool
    text: str


def judge(est: Estimate, limits: Limits, workload: DictConfig) -> list[Finding]:
    """Every shortfall of ``limits`` against ``est``, refusals first (the rules: the module docstring)."""
    found: list[Finding] = []
    name = est.workload
    if limits.node_memory is not None:
        node_floor = est.host_floor * limits.tasks_per_node
        node_peak = est.host_peak * limits.tasks_per_node * limits.concurrent
        what = "host memory" if est.on_gpu else "memory"
        if limits.node_memory < node_floor:
            found.append(Finding(True, f"{limits.node_memory_from} gives a job {gib(limits.node_memory)} but a job of "
                                       f"workload {name} needs at least {gib(node_floor)} of {what} (its floor: the "
                                       "model's weights, reference, gradients and optimizer state; see the dry run's "
                                       "estimate); raise it or use a smaller model"))
        elif limits.node_memory < MARGIN * node_peak:
            jobs = f" for {limits.concurrent} jobs at once" if limits.concurrent > 1 else ""
            found.append(Finding(False, f"{limits.node_memory_from} gives {gib(limits.node_memory)}, tight against the "
                                        f"{gib(node_peak)} of {what}{jobs} estimated at the response cap for workload "
                                        f"{name} (+{MARGIN - 1:.0%} margin); raise it or expect out-of-memory kills on "
                                        "long responses"))
    if est.on_gpu and limits.gpu_memory is not None:
        if limits.gpu_memory < est.rank_floor:
            found.append(Finding(True, f"{limits.gpu_memory_from} gives a rank {gib(limits.gpu_memory)} of GPU memory but one of workload "
                                       f"{name} holds {gib(est.rank_floor)} on its GPU before any response (weights x3, "
                                       "gradients, AdamW); choose a larger GPU"))
        elif limits.gpu_memory < MARGIN * est.rank_peak:
            found.append(Finding(False, f"{limits.gpu_memory_from} gives a rank {gib(limits.gpu_memory)} of GPU memory, below the "
                                        f"{gib(est.rank_peak)} a rank of workload {name} is estimated to need at the "
                                        f"response cap (workload.max_response_len={workload.max_response_len}, "
                                        "eval.max_response_len, eval.n_prompts x eval.k in one batch); lower them, "
                                        "or expect CUDA out-of-memory on long responses"))
    elif est.on_gpu and est.rank_peak > MARGIN * max(GPU_MEMORY_GIB.values()) * GIB:
        found.append(Finding(False, f"a rank of workload {name} is estimated to need {gib(est.rank_peak)} of GPU memory "
                                    f"at the response cap, more than any GPU in proofgrid's table holds (the largest: "
                                    f"{max(GPU_MEMORY_GIB.values())} GiB); lower workload.max_response_len, "
                                    "eval.max_response_len or eval.n_prompts x eval.k, or split the batch over ranks "
                                    "(dp_size)"))
    if limits.gpus and int(workload.gpus_per_job) == 0:
        found.append(Finding(False, f"the profile asks for {limits.gpus} GPU(s) per task but workload {name} uses none "
                                    "(workload.gpus_per_job=0, workload.device=cpu); drop cluster.gres/gpus_per_node"))
    if limits.time_s is not None:
        usable = limits.time_s - limits.signal_delay_s
        if usable < est.piece_s:
            found.append(Finding(True, f"{limits.time_from} leaves {minutes(max(usable, 0))} before the checkpoint "
                                       f"signal, less than the {minutes(est.piece_s)} a job of workload {name} needs to "
                                       "start, evaluate once and train one step at the response cap, so no requeue "
                                       f"would get further; raise it (at {est.throughput.tok_per_s:,.1f} response tok/s"
                                       "; a faster machine: set cluster.response_tok_per_s)"))
        elif limits.time_s < MARGIN * est.total_s:
            then = (f"it will be stopped and requeued about {math.ceil(est.total_s / usable) - 1} time(s), each back "
                    "in the queue" if limits.requeue else "it will reach the limit before it ends (cluster.requeue="
                    "false)")
            found.append(Finding(False, f"{limits.time_from} is below the {minutes(est.total_s)} a job of workload "
                                        f"{name} is estimated to take at the response cap (+{MARGIN - 1:.0%}): {then}; "
                                        "raise it, or set cluster.response_tok_per_s if this hardware is faster than "
                                        f"{est.throughput.tok_per_s:,.1f} response tok/s"))
    return sorted(found, key=lambda f: not f.refuse)
