"""The typed schema of the whole config tree (``conf/``): every setting's type and allowed range.

The dataclasses below are OmegaConf structured configs; ``check_settings`` validates a composed
config against them before anything starts (the launcher's preflight and the trainer both call it
through ``trainer.run_config.validate``), in two layers:

1. strict values: an ``int`` setting holds a genuine integer (``seed=1.5``, ``true``, ``1e3``,
   ``01``, ``2**70`` are refused, not converted), a ``float`` a finite number, a ``bool`` a
   boolean; every range (``ge``/``gt``/``le``/``lt``/``choices``/``pattern`` in a field's
   metadata) is checked; unknown keys are refused;
2. ``OmegaConf.merge`` of the structured schema with the config, as OmegaConf's own type check.

The ``algo`` node is typed by ``trainer.algorithms.AlgoConfig`` itself (its dataclass fields), so a
new algorithm setting needs no edit here; ``AlgoConfig`` then applies the algorithms' own rules. The
``trainer`` node is a trainer spec, checked by ``trainer.external.trainer_spec``.
Every refusal is one line naming the setting, the bad value and the allowed range.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

from facts.backends import BACKEND_KINDS
from facts.containers import DIGEST_PATTERN, RUNTIMES
from facts.data_parallel_ranks import DEFAULT_RENDEZVOUS_TIMEOUT_S
from facts.license import DEFAULT_LICENSE, SPDX_ID
from facts.processes import DEFAULT_RESOURCE_SAMPLE_S
from facts.reward import DEFAULT_REWARD, reward_name_problem
from facts.slurm_formats import GRES_PATTERN, MEM_PATTERN, TIME_FORMS, time_ok
from facts.task import DEFAULT_TEMPLATE
from facts.trackers import DEFAULT_PROJECT, LIVE_TOOLS
from trainer.trainer_errors import TrainerError

SEED_MAX = 2**63 - 1  # torch.manual_seed and the run's derived seeds (trainer.data.mix_seed) are 63/64-bit
# Upper bounds of the count settings: far above any run proofgrid makes, far below what would overflow a
# tensor shape or a plan (10**15 for eval.k passed plan time once). Bounds that follow from other settings or
# the inputs (num_threads <= cpus_per_job, a response cap within the model's positions, the batch's tokens)
# are checked where those are known: trainer.run_config.validate and the launcher's preflight.
STEPS_MAX = 10**6  # updates, steps between checkpoints, evaluations, refreshes
COUNT_MAX = 2**16  # prompts, responses per prompt, k, mini-batches, workers, CPUs, nodes, ranks
TOKENS_MAX = 2**20  # a response cap, in tokens
SECONDS_MAX = 7 * 86400  # a week
DTYPES = ("float32", "bfloat16", "float16")
ALGO_DESCRIPTIVE_KEYS = {"short": str, "display_name": str}
ALGO_KEYS_FROM_WORKLOAD = ("n_samples_per_prompt",)  # AlgoConfig fields filled from the workload


class SettingError(TrainerError, ValueError):
    """A refused setting (one line: the setting, the bad value, the allowed range)."""


REQUIRED = "???"  # OmegaConf's MISSING: a setting without a default that the config must give


def setting(default: Any = REQUIRED, **rules: Any):
    """A schema field with its allowed range: ``ge``, ``gt``, ``le``, ``lt``, ``choices``, ``pattern``, ``reward_name`` (``facts.reward.reward_name_problem``)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=rules)
    return field(default=default, metadata=rules)


@dataclass
class SamplingSchema:
    """Training rollout sampling (the PPO ratio needs a proper, unfiltered distribution)."""

    temperature: float = setting(gt=0.0)
    top_k: int = setting(ge=0, le=TOKENS_MAX)
    top_p: float = setting(gt=0.0, le=1.0)


@dataclass
class EvalSchema:
    n_prompts: int = setting(ge=1, le=STEPS_MAX)  # also <= the test split's rows (checked with the inputs)
    k: int = setting(ge=1, le=COUNT_MAX)
    seed: int = setting(ge=0, le=SEED_MAX)
    temperature: float = setting(ge=0.0)  # 0 = greedy
    top_k: int = setting(ge=0, le=TOKENS_MAX)
    top_p: float = setting(gt=0.0, le=1.0)
    max_response_len: int = setting(ge=1, le=TOKENS_MAX)
    every: int = setting(0, ge=0, le=STEPS_MAX)  # evaluate every N training steps too (0: only the initial and final)


@dataclass
class DataSchema:
    """How a split's rows are read (``facts.splits``): the prompt's field (or chat data's messages), the answer's."""

    prompt_field: Optional[str] = setting("question", pattern=r".+")  # noqa: UP045
    answer_field: str = setting("answer", pattern=r".+")
    messages_field: Optional[str] = setting(None, pattern=r".+")  # noqa: UP045 - chat data: a list of messages


@dataclass
class PromptSchema:
    """How a row becomes the policy's prompt (``facts.task``, ``trainer.prompts``)."""

    template: Optional[str] = setting(DEFAULT_TEMPLATE)  # noqa: UP045 - a format string over the row's fields
    chat: bool = setting(False)  # the tokenizer's own chat template, add_generation_prompt=True
    system: Optional[str] = setting(None)  # noqa: UP045 - a chat prompt's system message
    enable_thinking: Optional[bool] = setting(None)  # noqa: UP045 - passed to a chat template that reads it


# The Linear layers of a Qwen3 (Llama-family) decoder layer: LoRA's targets unless workload.lora names others.
LORA_DEFAULT_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class LoraSchema:
    """``workload.lora``: train low-rank adapters instead of every weight (``trainer.lora``; null: full fine-tuning)."""

    rank: int = setting(8, ge=1, le=COUNT_MAX)  # r: the adapters' inner dimension
    alpha: float = setting(16.0, gt=0.0)  # the update is scaled by alpha / r
    dropout: float = setting(0.0, ge=0.0, lt=1.0)  # on the adapters' input, in the policy's training forward only
    target_modules: list[str] = setting(LORA_DEFAULT_TARGETS, nonempty=True)  # module names the model must have


@dataclass
class WorkloadSchema:
    name: str = setting(pattern=r"[A-Za-z0-9_.-]+")
    manifest: str = setting()
    model_path: str = setting()
    train_path: str = setting()
    test_path: str = setting()
    n_updates: int = setting(ge=1, le=STEPS_MAX)
    prompts_per_step: int = setting(ge=1, le=COUNT_MAX)
    n_samples_per_prompt: int = setting(ge=1, le=COUNT_MAX)
    global_batch_size: int = setting(ge=1, le=COUNT_MAX**2)
    max_response_len: int = setting(ge=1, le=TOKENS_MAX)
    lr: float = setting(gt=0.0)
    adam_betas: list[float] = setting(ge=0.0, lt=1.0, length=2)
    adam_eps: float = setting(gt=0.0)
    weight_decay: float = setting(ge=0.0)
    max_grad_norm: float = setting(gt=0.0)  # <= 0 would flip the clipped gradient's sign
    sampling: SamplingSchema = field(default_factory=SamplingSchema)
    eval: EvalSchema = field(default_factory=EvalSchema)
    checkpoint_every: int = setting(ge=1, le=STEPS_MAX)
    engine: str = setting(choices="rollout_engines")
    device: str = setting(pattern=r"cpu|cuda(:\d+)?")
    dtype: str = setting(choices=DTYPES)
    num_threads: int = setting(ge=1, le=COUNT_MAX)  # also <= cpus_per_job (trainer.run_config.validate)
    cpus_per_job: int = setting(ge=1, le=COUNT_MAX)
    reward_workers: int = setting(ge=0, le=COUNT_MAX)
    reward_max_concurrency: int = setting(ge=1, le=COUNT_MAX)
    gpus_per_job: int = setting(ge=0, le=COUNT_MAX)
    sampler_refresh_every: int = setting(1, ge=1, le=STEPS_MAX)
    ppo_epochs: int = setting(1, ge=1, le=1000)
    ppo_mini_batches: int = setting(1, ge=1, le=COUNT_MAX)
    data: DataSchema = field(default_factory=DataSchema)
    prompt: PromptSchema = field(default_factory=PromptSchema)
    # A built-in reward (facts.reward) or the user's module:function of (response, row), imported at plan time
    reward: str = setting(DEFAULT_REWARD, reward_name=True)  # a built-in or module:function (facts.reward)
    lora: Optional[LoraSchema] = None  # noqa: UP045 - OmegaConf needs Optional


@dataclass
class ContainerSchema:
    """The image every job of the sweep runs in (``launcher.container``; docs/containers.md)."""

    runtime: str = setting(choices=tuple(RUNTIMES))
    image: str = setting(pattern=r".+")  # an image file (.sif, .sqsh, an OCI archive) or a registry reference
    digest: str = setting(pattern=DIGEST_PATTERN)  # sha256:<hex>: the image file's SHA256 or the reference's pin
    mounts: list[str] = setting([], pattern=r"/.*")  # host paths bound read-only at the same path
    allowed_roots: list[str] = setting([], pattern=r"/.*")  # where the profile lets mounts come from
    python: str = setting("python3", pattern=r".+")  # the interpreter inside the image (relative: to the checkout)
    runtime_args: list[str] = setting([])  # the site's extra options of the runtime's run command


@dataclass
class ClusterSchema:
    """Where jobs run: ``local`` processes or one Slurm job array (``conf/cluster/``)."""

    kind: str = setting(choices=BACKEND_KINDS)
    max_parallel: Optional[int] = setting(None, ge=1, le=STEPS_MAX)  # noqa: UP045 - OmegaConf needs Optional
    partition: Optional[str] = setting(None)  # noqa: UP045
    account: Optional[str] = setting(None)  # noqa: UP045
    qos: Optional[str] = setting(None)  # noqa: UP045
    gres: Optional[str] = setting(None, pattern=GRES_PATTERN)  # noqa: UP045
    gpu_model: Optional[str] = setting(None)  # noqa: UP045
    cpus_per_task: Optional[int] = setting(None, ge=1, le=COUNT_MAX)  # noqa: UP045
    mem: Optional[str] = setting(None, pattern=MEM_PATTERN)  # noqa: UP045
    time: Any = setting(None, slurm_time=True)  # minutes (int) or a Slurm time string
    constraint: Optional[str] = setting(None)  # noqa: UP045
    array_parallelism: Optional[int] = setting(None, ge=1, le=STEPS_MAX)  # noqa: UP045
    max_array_size: Optional[int] = setting(None, ge=1, le=STEPS_MAX)  # noqa: UP045 - null: the cluster's MaxArraySize
    requeue: bool = setting(True)
    signal_delay_s: int = setting(90, ge=0, le=SECONDS_MAX)  # USR2 this long before the time limit (checkpoint, requeue)
    wait_timeout_s: Optional[float] = setting(None, gt=0.0)  # noqa: UP045
    poll_interval_s: int = setting(60, ge=1, le=SECONDS_MAX)  # a waiting launcher's longest wait between two looks at Slurm
    seal_job: bool = setting(False)  # wait=false: an afterany job seals the bundle when the array ends
    # A job's allocation (Slurm): more than one task (nodes x tasks_per_node) runs one trainer rank per
    # task, and dp_size must equal that product; one task runs dp_size ranks as local processes.
    nodes: int = setting(1, ge=1, le=COUNT_MAX)
    tasks_per_node: int = setting(1, ge=1, le=COUNT_MAX)
    gpus_per_node: Optional[int] = setting(None, ge=1, le=COUNT_MAX)  # noqa: UP045 - GPU profiles: --gpus-per-node
    resource_sample_s: float = setting(DEFAULT_RESOURCE_SAMPLE_S, gt=0.0)  # the job's CPU/memory/GPU samples, this often
    # Response tokens per second of a training step on one rank of this hardware, for the job-time estimate
    # (launcher.job_sizing); null: a measured reference (seed 000's A40, this project's CPU) scaled to the model.
    response_tok_per_s: Optional[float] = setting(None, gt=0.0)  # noqa: UP045
    rendezvous_timeout_s: int = setting(DEFAULT_RENDEZVOUS_TIMEOUT_S, ge=1, le=SECONDS_MAX)  # ranks that cannot meet fail the job after this long
    sbatch: dict[str, Any] = setting({})  # extra sbatch long options (checked in launcher.slurm.slurm_profile)
    setup: list[str] = setting([])  # lines run in the batch script before the job (module load ...)
    container: Optional[ContainerSchema] = setting(None)  # noqa: UP045 - null: jobs run on the host
    # TCP ports outside its own block a job's processes may reach (a site's tracking or license server); the job's
    # guard (launcher.runtime.confine) refuses every other one where Landlock has network rules.
    job_ports: list[int] = setting([])


@dataclass
class DebugSchema:
    dump_advantages: bool = setting(False)
    # Test/diagnostic only, never for a result: one draw from the OS (os.urandom) per step seeds that step's
    # responses, so the run is NOT reproducible. Its whole purpose is to prove that a reproducibility
    # certificate (certify=true, facts.certify) catches a non-deterministic run.
    os_seeded_draw: bool = setting(False)


@dataclass
class TrackingSchema:
    """Live tracking (launcher): each job's metrics to a tracker while it runs (docs/tracking.md)."""

    live: Optional[str] = setting(None, choices=LIVE_TOOLS)  # noqa: UP045 - null: off (the offline export stays)
    uri: Optional[str] = setting(None)  # noqa: UP045 - mlflow's tracking URI, tensorboard's log directory
    project: str = setting(DEFAULT_PROJECT, pattern=r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@dataclass
class RunSchema:
    """The root of ``conf/config.yaml`` after composition."""

    algo: dict[str, Any] = field(default_factory=dict)  # typed by AlgoConfig (see check_algo)
    trainer: dict[str, Any] = field(default_factory=dict)  # a trainer spec (see check_trainer)
    workload: WorkloadSchema = field(default_factory=WorkloadSchema)
    cluster: ClusterSchema = field(default_factory=ClusterSchema)
    seed: int = setting(ge=0, le=SEED_MAX)
    dp_size: int = setting(ge=1, le=COUNT_MAX)
    output_dir: str = setting()
    sweep_dir: Optional[str] = setting(None)  # noqa: UP045 - set by the launcher: share the initial eval
    resume: bool = setting()
    # 0: off. K >= 1: a run that starts before step K checkpoints there and exits 75 (as on a scheduler's
    # warning); a run resumed at K or later goes on. A certificate's resume job (facts.certify) uses it.
    stop_at_step: int = setting(0, ge=0, le=STEPS_MAX)
    debug: DebugSchema = field(default_factory=DebugSchema)
    dry_run: bool = setting(False)
    wait: bool = setting(True)
    formal: bool = setting(False)
    certify: bool = setting(False)  # launcher: per arm, a rerun and a stop-and-resume job certify reproducibility
    license: str = setting(DEFAULT_LICENSE, pattern=SPDX_ID)  # launcher: the bundle's license (facts.license)
    figures: bool = setting(True)  # launcher: the seal draws the report's figures (sweep.json records false)
    tracking: TrackingSchema = field(default_factory=TrackingSchema)


def _shown(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _refuse(path: str, value: Any, allowed: str) -> SettingError:
    return SettingError(f"setting {path}={_shown(value)} is refused: it must be {allowed}")


def _type_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` is not of type ``hint`` (strictly: no conversion), or None."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return None
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        problems = [_type_problem(value, o) for o in options if o is not type(None)]
        return None if any(p is None for p in problems) else problems[0]
    if hint is bool:
        return None if isinstance(value, bool) else "true or false"
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else "an integer in plain decimal digits (not 1.5, 1e3, true, '01' or an expression)"
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "a number"
        return None if math.isfinite(value) else "a finite number"
    if hint is str:
        return None if isinstance(value, str) else "a string"
    if origin is list:
        return None if isinstance(value, list) else "a list"
    if origin is dict:
        return None if isinstance(value, dict) else "a mapping"
    if dataclasses.is_dataclass(hint):
        return None if isinstance(value, dict) else "a mapping of settings"
    return None


def _range_problem(value: Any, rules: dict[str, Any]) -> str | None:
    """Why ``value`` is outside the field's range, or None."""
    if value is None:
        return None
    checks = {"gt": lambda v, b: v > b, "ge": lambda v, b: v >= b, "lt": lambda v, b: v < b, "le": lambda v, b: v <= b}
    if isinstance(value, int | float) and not all(ok(value, rules[r]) for r, ok in checks.items() if r in rules):
        return _bounds_text(rules)
    choices = rules.get("choices")
    if choices is not None:
        if choices == "rollout_engines":
            from trainer.engine_registry import ENGINES

            choices = tuple(sorted(ENGINES))
        if value not in choices:
            return "one of " + ", ".join(str(c) for c in choices)
    pattern = rules.get("pattern")
    if pattern is not None and not (isinstance(value, str) and re.fullmatch(pattern, value)):
        return f"a string matching {pattern}"
    if rules.get("reward_name") and (problem := reward_name_problem(value)):
        return problem
    if rules.get("slurm_time") and not time_ok(value):
        return f"minutes > 0 or a Slurm time ({TIME_FORMS})"
    return None


def _bound(b: Any) -> str:
    return "2**63-1" if b == SEED_MAX else str(b) if isinstance(b, int) else f"{b:g}"


def check_node(node: Any, schema: type, path: str) -> None:
    """Check one mapping against a schema dataclass, recursively; raises ``SettingError``."""
    if not isinstance(node, dict):
        raise _refuse(path, node, "a mapping of settings")
    hints = typing.get_type_hints(schema)
    known = {f.name: f for f in dataclasses.fields(schema)}
    unknown = sorted(set(node) - set(known))
    if unknown:
        key = f"{path}.{unknown[0]}" if path else unknown[0]
        raise SettingError(f"unknown setting {key}; {(path or 'the config')} has: {', '.join(sorted(known))}")
    for name, f in known.items():
        key = f"{path}.{name}" if path else name
        if name not in node:
            if f.default == REQUIRED:
                raise SettingError(f"setting {key} is missing; set it in its config file or with {key}=...")
            continue
        value, hint = node[name], hints[name]
        inner = _optional_dataclass(hint)
        if inner is not None and value is None:
            continue
        if dataclasses.is_dataclass(hint) or inner is not None:
            check_node(value, inner or hint, key)
            continue
        if name == "algo" and schema is RunSchema:
            check_algo(value)
            continue
        if name == "trainer" and schema is RunSchema:
            check_trainer(value)
            continue
        check_value(value, hint, dict(f.metadata), key)


def _optional_dataclass(hint: Any) -> type | None:
    """``X`` for a hint ``Optional[X]`` whose ``X`` is a schema dataclass (a group of settings that may be null)."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return None
    options = [o for o in typing.get_args(hint) if o is not type(None)]
    return options[0] if len(options) == 1 and dataclasses.is_dataclass(options[0]) else None


def check_value(value: Any, hint: Any, rules: dict[str, Any], key: str) -> None:
    problem = _type_problem(value, hint)
    if problem is None and typing.get_origin(hint) is list:
        (item_hint,) = typing.get_args(hint) or (Any,)
        item_problems = [_type_problem(i, item_hint) or _range_problem(i, rules) for i in value]
        wrong_length = "length" in rules and len(value) != rules["length"]
        if rules.get("nonempty") and not value:
            problem = "a list of at least one value"
        elif wrong_length or any(item_problems):
            each = next((p for p in item_problems if p), None) or _bounds_text(rules) or "valid"
            problem = f"a list of {rules.get('length', 'any number of')} values, each {each}"
    elif problem is None:
        problem = _range_problem(value, rules)
    elif bounds := _bounds_text(rules):
        problem = f"{problem}, {bounds}"
    if problem:
        raise _refuse(key, value, problem)


def _bounds_text(rules: dict[str, Any]) -> str:
    words = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    return " and ".join(f"{w} {_bound(rules[r])}" for r, w in words.items() if r in rules)


def algo_fields() -> dict[str, Any]:
    """The settings an ``algo`` node may hold and their types: ``AlgoConfig``'s own fields (so a
    new algorithm setting is typed where it is defined) plus the descriptive keys."""
    from trainer.algorithms import AlgoConfig

    hints = typing.get_type_hints(AlgoConfig)
    fields = {f.name: hints[f.name] for f in dataclasses.fields(AlgoConfig) if f.name not in ALGO_KEYS_FROM_WORKLOAD}
    return {**ALGO_DESCRIPTIVE_KEYS, **fields}


def check_algo(node: Any) -> None:
    if not isinstance(node, dict):
        raise _refuse("algo", node, "a mapping of algorithm settings (algo=<name> picks conf/algo/<name>.yaml)")
    allowed = algo_fields()
    for name, value in node.items():
        key = f"algo.{name}"
        if name not in allowed:
            raise SettingError(f"unknown setting {key}; algo settings are: {', '.join(sorted(allowed))}")
        check_value(value, allowed[name], {}, key)


def check_trainer(node: Any) -> None:
    """The ``trainer`` node is a trainer spec (``trainer.external.trainer_spec``): proofgrid's own, or a command
    with its metric map (onto proofgrid's metric names), final model and options."""
    from facts import DYNAMIC_SAMPLING_KEYS, KL_LOSS_KEY, OFF_POLICY_KEYS, REQUIRED_KEYS
    from trainer.external.trainer_spec import SpecError, parse_spec

    try:
        parse_spec(node, (*REQUIRED_KEYS, KL_LOSS_KEY, *OFF_POLICY_KEYS, *DYNAMIC_SAMPLING_KEYS))
    except SpecError as exc:
        raise SettingError(str(exc)) from None


_STRUCTURED = None


def structured_schema():
    """The schema as an OmegaConf structured config (built once)."""
    global _STRUCTURED
    if _STRUCTURED is None:
        from omegaconf import OmegaConf

        _STRUCTURED = OmegaConf.structured(RunSchema)
    return _STRUCTURED


def check_settings(values: dict) -> None:
    """Validate a resolved config (a plain mapping) against the schema; raises ``SettingError``."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    check_node(values, RunSchema, "")
    try:
        OmegaConf.merge(structured_schema(), values)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        raise SettingError(f"setting {key} is refused: {str(exc).splitlines()[0]}") from None
