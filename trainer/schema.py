"""The typed schema of the whole config tree (``conf/``): every setting's type and allowed range.

The dataclasses below are OmegaConf structured configs; ``check_settings`` validates a composed
config against them before anything starts (the launcher's preflight and the trainer both call it
through ``trainer.config.validate``), in two layers:

1. strict values: an ``int`` setting holds a genuine integer (``seed=1.5``, ``true``, ``1e3``,
   ``01``, ``2**70`` are refused, not converted), a ``float`` a finite number, a ``bool`` a
   boolean; every range (``ge``/``gt``/``le``/``lt``/``choices``/``pattern`` in a field's
   metadata) is checked; unknown keys are refused;
2. ``OmegaConf.merge`` of the structured schema with the config, as OmegaConf's own type check.

The ``algo`` node is typed by ``trainer.algorithms.AlgoConfig`` itself (its dataclass fields), so a
new algorithm setting needs no edit here; ``AlgoConfig`` then applies the algorithms' own rules. The
``trainer`` node is a trainer spec, checked by ``trainer.external.spec``.
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
from facts.processes import DEFAULT_RESOURCE_SAMPLE_S
from facts.ranks import DEFAULT_RENDEZVOUS_TIMEOUT_S
from facts.slurm_formats import GRES_PATTERN, MEM_PATTERN, TIME_FORMS, time_ok

SEED_MAX = 2**63 - 1  # torch.manual_seed and the run's derived seeds (trainer.data.mix_seed) are 63/64-bit
DTYPES = ("float32", "bfloat16", "float16")
ALGO_DESCRIPTIVE_KEYS = {"short": str, "display_name": str}
ALGO_KEYS_FROM_WORKLOAD = ("n_samples_per_prompt",)  # AlgoConfig fields filled from the workload


class SettingError(ValueError):
    """A refused setting (one line: the setting, the bad value, the allowed range)."""


REQUIRED = "???"  # OmegaConf's MISSING: a setting without a default that the config must give


def setting(default: Any = REQUIRED, **rules: Any):
    """A schema field with its allowed range: ``ge``, ``gt``, ``le``, ``lt``, ``choices``, ``pattern``."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=rules)
    return field(default=default, metadata=rules)


@dataclass
class SamplingSchema:
    """Training rollout sampling (the PPO ratio needs a proper, unfiltered distribution)."""

    temperature: float = setting(gt=0.0)
    top_k: int = setting(ge=0)
    top_p: float = setting(gt=0.0, le=1.0)


@dataclass
class EvalSchema:
    n_prompts: int = setting(ge=1)  # also <= the test split's rows (checked with the inputs)
    k: int = setting(ge=1)
    seed: int = setting(ge=0, le=SEED_MAX)
    temperature: float = setting(ge=0.0)  # 0 = greedy
    top_k: int = setting(ge=0)
    top_p: float = setting(gt=0.0, le=1.0)
    max_response_len: int = setting(ge=1)
    every: int = setting(0, ge=0)  # evaluate every N training steps too (0: only the initial and final)


@dataclass
class WorkloadSchema:
    name: str = setting(pattern=r"[A-Za-z0-9_.-]+")
    manifest: str = setting()
    model_path: str = setting()
    train_path: str = setting()
    test_path: str = setting()
    n_updates: int = setting(ge=1)
    prompts_per_step: int = setting(ge=1)
    n_samples_per_prompt: int = setting(ge=1)
    global_batch_size: int = setting(ge=1)
    max_response_len: int = setting(ge=1)
    lr: float = setting(gt=0.0)
    adam_betas: list[float] = setting(ge=0.0, lt=1.0, length=2)
    adam_eps: float = setting(gt=0.0)
    weight_decay: float = setting(ge=0.0)
    max_grad_norm: float = setting(gt=0.0)  # <= 0 would flip the clipped gradient's sign
    sampling: SamplingSchema = field(default_factory=SamplingSchema)
    eval: EvalSchema = field(default_factory=EvalSchema)
    checkpoint_every: int = setting(ge=1)
    engine: str = setting(choices="rollout_engines")
    device: str = setting(pattern=r"cpu|cuda(:\d+)?")
    dtype: str = setting(choices=DTYPES)
    num_threads: int = setting(ge=1)
    cpus_per_job: int = setting(ge=1)
    reward_workers: int = setting(ge=0)
    reward_max_concurrency: int = setting(ge=1)
    gpus_per_job: int = setting(ge=0)
    sampler_refresh_every: int = setting(1, ge=1)
    ppo_epochs: int = setting(1, ge=1)
    ppo_mini_batches: int = setting(1, ge=1)


@dataclass
class ClusterSchema:
    """Where jobs run: ``local`` processes or one Slurm job array (``conf/cluster/``)."""

    kind: str = setting(choices=BACKEND_KINDS)
    max_parallel: Optional[int] = setting(None, ge=1)  # noqa: UP045 - OmegaConf needs Optional
    partition: Optional[str] = setting(None)  # noqa: UP045
    account: Optional[str] = setting(None)  # noqa: UP045
    qos: Optional[str] = setting(None)  # noqa: UP045
    gres: Optional[str] = setting(None, pattern=GRES_PATTERN)  # noqa: UP045
    gpu_model: Optional[str] = setting(None)  # noqa: UP045
    cpus_per_task: Optional[int] = setting(None, ge=1)  # noqa: UP045
    mem: Optional[str] = setting(None, pattern=MEM_PATTERN)  # noqa: UP045
    time: Any = setting(None, slurm_time=True)  # minutes (int) or a Slurm time string
    constraint: Optional[str] = setting(None)  # noqa: UP045
    array_parallelism: Optional[int] = setting(None, ge=1)  # noqa: UP045
    max_array_size: Optional[int] = setting(None, ge=1)  # noqa: UP045 - null: the cluster's MaxArraySize
    requeue: bool = setting(True)
    signal_delay_s: int = setting(90, ge=0)  # USR2 this long before the time limit (checkpoint, requeue)
    wait_timeout_s: Optional[float] = setting(None, gt=0.0)  # noqa: UP045
    poll_interval_s: int = setting(60, ge=1)  # a waiting launcher's longest wait between two looks at Slurm
    seal_job: bool = setting(False)  # wait=false: an afterany job seals the bundle when the array ends
    # A job's allocation (Slurm): more than one task (nodes x tasks_per_node) runs one trainer rank per
    # task, and dp_size must equal that product; one task runs dp_size ranks as local processes.
    nodes: int = setting(1, ge=1)
    tasks_per_node: int = setting(1, ge=1)
    gpus_per_node: Optional[int] = setting(None, ge=1)  # noqa: UP045 - GPU profiles: --gpus-per-node
    resource_sample_s: float = setting(DEFAULT_RESOURCE_SAMPLE_S, gt=0.0)  # the job's CPU/memory/GPU samples, this often
    rendezvous_timeout_s: int = setting(DEFAULT_RENDEZVOUS_TIMEOUT_S, ge=1)  # ranks that cannot meet fail the job after this long
    sbatch: dict[str, Any] = setting({})  # extra sbatch long options (checked in launcher.slurm.options)
    setup: list[str] = setting([])  # lines run in the batch script before the job (module load ...)


@dataclass
class DebugSchema:
    dump_advantages: bool = setting(False)
    # Test/diagnostic only, never for a result: one draw from the OS (os.urandom) per step seeds that step's
    # responses, so the run is NOT reproducible. Its whole purpose is to prove that a reproducibility
    # certificate (certify=true, facts.certify) catches a non-deterministic run.
    os_seeded_draw: bool = setting(False)


@dataclass
class RunSchema:
    """The root of ``conf/config.yaml`` after composition."""

    algo: dict[str, Any] = field(default_factory=dict)  # typed by AlgoConfig (see check_algo)
    trainer: dict[str, Any] = field(default_factory=dict)  # a trainer spec (see check_trainer)
    workload: WorkloadSchema = field(default_factory=WorkloadSchema)
    cluster: ClusterSchema = field(default_factory=ClusterSchema)
    seed: int = setting(ge=0, le=SEED_MAX)
    dp_size: int = setting(ge=1)
    output_dir: str = setting()
    sweep_dir: Optional[str] = setting(None)  # noqa: UP045 - set by the launcher: share the initial eval
    resume: bool = setting()
    # 0: off. K >= 1: a run that starts before step K checkpoints there and exits 75 (as on a scheduler's
    # warning); a run resumed at K or later goes on. A certificate's resume job (facts.certify) uses it.
    stop_at_step: int = setting(0, ge=0)
    debug: DebugSchema = field(default_factory=DebugSchema)
    dry_run: bool = setting(False)
    wait: bool = setting(True)
    formal: bool = setting(False)
    certify: bool = setting(False)  # launcher: per arm, a rerun and a stop-and-resume job certify reproducibility


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
            from trainer.engines import ENGINES

            choices = tuple(sorted(ENGINES))
        if value not in choices:
            return "one of " + ", ".join(str(c) for c in choices)
    pattern = rules.get("pattern")
    if pattern is not None and not (isinstance(value, str) and re.fullmatch(pattern, value)):
        return f"a string matching {pattern}"
    if rules.get("slurm_time") and not time_ok(value):
        return f"minutes > 0 or a Slurm time ({TIME_FORMS})"
    return None


def _bound(b: Any) -> str:
    return "2**63-1" if b == SEED_MAX else f"{b:g}"


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
        if dataclasses.is_dataclass(hint):
            check_node(value, hint, key)
            continue
        if name == "algo" and schema is RunSchema:
            check_algo(value)
            continue
        if name == "trainer" and schema is RunSchema:
            check_trainer(value)
            continue
        check_value(value, hint, dict(f.metadata), key)


def check_value(value: Any, hint: Any, rules: dict[str, Any], key: str) -> None:
    problem = _type_problem(value, hint)
    if problem is None and typing.get_origin(hint) is list:
        (item_hint,) = typing.get_args(hint) or (Any,)
        item_problems = [_type_problem(i, item_hint) or _range_problem(i, rules) for i in value]
        wrong_length = "length" in rules and len(value) != rules["length"]
        if wrong_length or any(item_problems):
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
    """The ``trainer`` node is a trainer spec (``trainer.external.spec``): proofgrid's own, or a command
    with its metric map (onto proofgrid's metric names), final model and options."""
    from facts import DYNAMIC_SAMPLING_KEYS, KL_LOSS_KEY, OFF_POLICY_KEYS, REQUIRED_KEYS
    from trainer.external.spec import SpecError, parse_spec

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
