"""A trainer spec (``conf/trainer/<name>.yaml``, the ``trainer`` node of the config): how to run a trainer
that is not proofgrid's as a job, where its metrics and final model land, and how its tags map to ours.

Standard library only (the launcher parses and expands specs while it plans, torch-free). Fields:

=====================  ==============================================================================
``name``               the trainer's name (arm labels, the report's contract table)
``command``            ``null`` for proofgrid's own trainer; else the argument list the job runs, with
                       placeholders (below). An element that is itself a list is an optional group of
                       arguments, kept only when every placeholder in it has a value (not null):
                       ``[--loss-type, "{trainer.loss_type}"]``
``metrics``            ``format``: ``tensorboard`` (event files in the directory ``path``) or ``jsonl``
                       (one object per line in the file ``path``, the step in ``step_key``); ``path``
                       relative to ``{output_dir}``; ``step_offset`` added to the trainer's step to make
                       proofgrid's 0-based step (TRL counts from 1: ``-1``); ``map``: proofgrid metric ->
                       the trainer's tag (or JSON key). Only mapped metrics are declared and validated
``checkpoint``         the final model, a Hugging Face model directory, relative to ``{output_dir}``
``resume``             rerunning the same command continues from the trainer's own checkpoints; false:
                       a rerun (a requeue, a re-run of a rejected job) starts the trainer from scratch
``stop_signal``        the signal (``USR2`` or ``TERM``) on which the trainer checkpoints and exits with
                       ``checkpointed_exit``; ``null``: it has no such handler, and a stop ends its run
``declares``           a JSON file under ``{output_dir}`` whose ``algorithm`` object is what the run
                       declares it ran (loss, normalisation, KL); ``contract``: the same, fixed in the spec
``algorithm``          the algorithm the trainer runs, by its name (``RLOO``): the arm is labelled
                       (``rloo-<trainer>``) and described by it, not by ``algo`` (proofgrid's algorithm)
``plan_check``         ``trainer.adapters.<module>:<function>``, one of ``trainer.adapters.PLAN_CHECKS``, called in
                       the launcher with the expanded command before anything starts, dry runs included (it
                       raises ``ValueError`` with a one-line reason to refuse). Only the spec file declares
                       it (a command-line override is refused), and only proofgrid's adapters' code: a plan
                       check runs while the launcher plans, where nothing may run or write
``requires_extra``     the optional extra of pyproject.toml the trainer needs (``trl``: ``facts.extras``); the
                       launcher refuses the arm at plan time, naming its Makefile target, where it is missing
any other key          the trainer's own options (``trainer.loss_type``): each must appear in the command
=====================  ==============================================================================

Placeholders: ``{output_dir}`` (the trainer's own directory, ``<job>/run/trainer``), ``{python}`` (the
interpreter the launcher runs under), ``{repo}`` (proofgrid's checkout), and any resolved setting by its
dotted name, ``{seed}``, ``{workload.lr}``, ``{algo.kl_loss_coef}``, ``{workload.adam_betas[0]}``,
``{trainer.loss_type}``. Settings resolve against the validated config, so an algorithm setting its
file leaves out has its default. A path setting (``workload.model_path``, ...) expands to an absolute
path. A list fills one argument per item when the placeholder is the whole argument, else its items
joined by commas; booleans are ``true``/``false``. ``{{`` and ``}}`` are literal braces. A placeholder
naming no setting is refused with one line; one below a null group of settings (``{workload.lora.rank}`` with
``workload.lora: null``) is null.
"""

from __future__ import annotations

import difflib
import importlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from facts.extras import EXTRAS
from facts.trainers import PROOFGRID_TRAINER, TRAINER_SPEC_FIELDS
from trainer.adapters import PLAN_CHECKS
from trainer.trainer_errors import TrainerError

PROOFGRID = PROOFGRID_TRAINER  # the name of proofgrid's own trainer (conf/trainer/proofgrid.yaml)
DEFERRED = "output_dir"  # filled when the job starts (the runtime names its run directory)
METRIC_FORMATS = ("tensorboard", "jsonl")
STOP_SIGNALS = ("USR2", "TERM")
# The package whose declared checks a spec may name as its plan check (``trainer.adapters.PLAN_CHECKS``): reviewed
# code that reads the command and writes nothing, never a third party's nor any other function of an adapter (it
# would run at plan time, dry runs included: an adapter's ``main`` trains).
PLAN_CHECK_PACKAGE = "trainer.adapters"
CONTRACT_FIELDS = ("advantage", "normalization", "kl_regularization", "loss")
SPEC_FIELDS = TRAINER_SPEC_FIELDS
METRICS_FIELDS = ("format", "path", "step_key", "step_offset", "map")
ALGORITHM_NAME = r"[A-Za-z0-9][A-Za-z0-9 .+_-]{0,39}"  # a spec's `algorithm`: a name a label can be made of
# Settings that hold a path (relative to the checkout): they expand to absolute paths, because the
# trainer runs in its own output directory.
PATH_SETTINGS = ("workload.manifest", "workload.model_path", "workload.train_path", "workload.test_path")
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*)*")


class SpecError(TrainerError, ValueError):
    """A trainer spec or its command that cannot run; the message is one line naming the field and the fix."""


@dataclass(frozen=True)
class MetricsSpec:
    format: str
    path: str
    map: dict[str, str]
    step_key: str | None = None
    step_offset: int = 0


@dataclass(frozen=True)
class TrainerSpec:
    """A parsed spec; ``command`` is None for proofgrid's own trainer."""

    name: str
    command: list | None = None
    metrics: MetricsSpec | None = None
    checkpoint: str | None = None
    resume: bool = False
    stop_signal: str | None = None
    checkpointed_exit: int = 75
    declares: str | None = None
    contract: dict[str, str] | None = None
    algorithm: str | None = None
    plan_check: str | None = None
    requires_extra: str | None = None
    options: dict = field(default_factory=dict)

    @property
    def external(self) -> bool:
        return self.command is not None


def _where(name: str, key: str) -> str:
    return f"trainer {name}: {key}"


def _relative_inside(value, name: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{_where(name, key)} must be a path relative to {{output_dir}}")
    parts = Path(value).parts
    if Path(value).is_absolute() or ".." in parts:
        raise SpecError(f"{_where(name, key)}={value!r} must lie inside the trainer's {{output_dir}} "
                        "(a relative path without ..)")
    return value


def parse_spec(node: dict, proofgrid_metrics: tuple[str, ...] = ()) -> TrainerSpec:
    """The spec from a resolved ``trainer`` node; raises ``SpecError``. ``proofgrid_metrics``: the metric
    names a map may target (empty: not checked)."""
    if not isinstance(node, dict):
        raise SpecError("setting trainer must be a mapping (trainer=<name> picks conf/trainer/<name>.yaml)")
    name = node.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise SpecError(f"trainer.name={name!r} must be a name of letters, digits, '_', '.' or '-'")
    options = {k: v for k, v in node.items() if k not in SPEC_FIELDS}
    command = node.get("command")
    if command is None:
        if options or any(node.get(k) not in (None, False, 75) for k in SPEC_FIELDS if k not in ("name", "command")):
            extra = sorted(set(options) | {k for k in SPEC_FIELDS if k not in ("name", "command")
                                           and node.get(k) not in (None, False, 75)})
            raise SpecError(f"trainer {name} has no command (proofgrid's own trainer) but sets {', '.join(extra)}; "
                            "give it a command or drop them")
        return TrainerSpec(name=name)
    if not isinstance(command, list) or not command or not all(
            isinstance(a, (str, int, float)) or (isinstance(a, list) and a and all(isinstance(b, (str, int, float))
                                                                                    for b in a)) for a in command):
        raise SpecError(f"{_where(name, 'command')} must be a non-empty list of arguments (strings), or lists of "
                        "them for an optional group")
    if isinstance(command[0], list):
        raise SpecError(f"{_where(name, 'command')}: the program (its first element) cannot be an optional group")
    metrics = _parse_metrics(node.get("metrics"), name, proofgrid_metrics)
    checkpoint = _relative_inside(node.get("checkpoint"), name, "checkpoint")
    stop_signal = node.get("stop_signal")
    if stop_signal is not None and stop_signal not in STOP_SIGNALS:
        raise SpecError(f"{_where(name, 'stop_signal')}={stop_signal!r} must be one of {', '.join(STOP_SIGNALS)} "
                        "or null (the trainer has no checkpoint-and-stop handler)")
    exit_code = node.get("checkpointed_exit", 75)
    if isinstance(exit_code, bool) or not isinstance(exit_code, int) or not 1 <= exit_code <= 125:
        raise SpecError(f"{_where(name, 'checkpointed_exit')}={exit_code!r} must be an exit code in 1..125")
    resume = node.get("resume", False)
    if not isinstance(resume, bool):
        raise SpecError(f"{_where(name, 'resume')}={resume!r} must be true or false")
    declares = node.get("declares")
    if declares is not None:
        declares = _relative_inside(declares, name, "declares")
    contract = node.get("contract")
    if contract is not None and (not isinstance(contract, dict) or set(contract) - set(CONTRACT_FIELDS)
                                 or not all(isinstance(v, str) and v for v in contract.values())):
        raise SpecError(f"{_where(name, 'contract')} must map some of {', '.join(CONTRACT_FIELDS)} to text")
    algorithm = node.get("algorithm")
    if algorithm is not None and not (isinstance(algorithm, str) and re.fullmatch(ALGORITHM_NAME, algorithm)):
        raise SpecError(f"{_where(name, 'algorithm')}={algorithm!r} must name the algorithm the trainer runs "
                        "(letters, digits, spaces, '.', '+', '-' or '_', at most 40), e.g. RLOO")
    plan_check = node.get("plan_check")
    if plan_check is not None and not (isinstance(plan_check, str) and plan_check in PLAN_CHECKS):
        raise SpecError(f"{_where(name, 'plan_check')}={plan_check!r} is refused: a plan check runs in the launcher "
                        f"while it plans (dry runs too), so it must be one of proofgrid's declared plan checks "
                        f"({PLAN_CHECK_PACKAGE}.PLAN_CHECKS: {', '.join(sorted(PLAN_CHECKS))}); check a trainer of "
                        "your own in its command")
    extra = node.get("requires_extra")
    if extra is not None and extra not in EXTRAS:
        raise SpecError(f"{_where(name, 'requires_extra')}={extra!r} is not an extra proofgrid knows; they are: "
                        f"{', '.join(EXTRAS)} (or null)")
    spec = TrainerSpec(name=name, command=list(command), metrics=metrics, checkpoint=checkpoint, resume=resume,
                       stop_signal=stop_signal, checkpointed_exit=exit_code, declares=declares,
                       contract=dict(contract) if contract else None, algorithm=algorithm, plan_check=plan_check,
                       requires_extra=extra,
                       options=options)
    used = set(_placeholders(command))
    unused = sorted(k for k in options if f"trainer.{k}" not in used
                    and not any(u.startswith(f"trainer.{k}.") or u.startswith(f"trainer.{k}[") for u in used))
    if unused:
        raise SpecError(f"trainer {name}: option {unused[0]} is not used by its command (no {{trainer.{unused[0]}}} "
                        "in it); use it there, or drop it (a misspelt spec field?)")
    return spec


def run_plan_check(spec: TrainerSpec, argv: list[str]) -> None:
    """Call the spec's declared plan check (``PLAN_CHECKS``) on the job's expanded ``argv``; a refusal, a failure to
    import it or any failure of its own (``SystemExit`` from a parser too) is a one-line ``SpecError``."""
    if spec.plan_check is None:
        return
    if spec.plan_check not in PLAN_CHECKS:  # parse_spec refuses it; a spec built another way too
        raise SpecError(f"trainer {spec.name}'s plan_check {spec.plan_check} is not a declared plan check "
                        f"({PLAN_CHECK_PACKAGE}.PLAN_CHECKS)")
    module, _, function = spec.plan_check.partition(":")
    try:
        check = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError):
        raise SpecError(f"trainer {spec.name}'s plan_check {spec.plan_check} cannot be imported; fix the spec") from None
    try:
        check(argv)
    except ValueError as exc:
        raise SpecError(f"trainer {spec.name} refuses it: {exc}") from None
    except (KeyboardInterrupt, GeneratorExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - a check's own failure (SystemExit too) is one line, never a traceback
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise SpecError(f"trainer {spec.name}'s plan_check {spec.plan_check} failed "
                        f"({type(exc).__name__}{': ' + first if first else ''}); fix the spec or the check") from None


def _parse_metrics(node, name: str, known: tuple[str, ...]) -> MetricsSpec:
    if not isinstance(node, dict):
        raise SpecError(f"{_where(name, 'metrics')} must be a mapping: format, path, map (and step_key, step_offset)")
    unknown = sorted(set(node) - set(METRICS_FIELDS))
    if unknown:
        raise SpecError(f"{_where(name, 'metrics')}.{unknown[0]} is not a metrics field; they are: "
                        f"{', '.join(METRICS_FIELDS)}")
    fmt = node.get("format")
    if fmt not in METRIC_FORMATS:
        raise SpecError(f"{_where(name, 'metrics.format')}={fmt!r} must be one of {', '.join(METRIC_FORMATS)}")
    path = _relative_inside(node.get("path"), name, "metrics.path")
    step_key = node.get("step_key")
    if fmt == "jsonl" and not (isinstance(step_key, str) and step_key):
        raise SpecError(f"{_where(name, 'metrics.step_key')}: a JSONL log needs the key that holds each line's step")
    if fmt == "tensorboard" and step_key is not None:
        raise SpecError(f"{_where(name, 'metrics.step_key')}: TensorBoard events carry their own step; drop it")
    offset = node.get("step_offset", 0)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise SpecError(f"{_where(name, 'metrics.step_offset')}={offset!r} must be an integer")
    mapping = node.get("map")
    if not isinstance(mapping, dict) or not mapping or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in mapping.items()):
        raise SpecError(f"{_where(name, 'metrics.map')} must map proofgrid metric names to the trainer's tags "
                        "(at least one)")
    if known:
        for key in mapping:
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {near[0]}? " if near else ""
                raise SpecError(f"{_where(name, 'metrics.map')} maps {key!r}, which is not a proofgrid metric; "
                                f"{hint}proofgrid's are: {', '.join(known)}")
    return MetricsSpec(fmt, path, dict(mapping), step_key, offset)


def _placeholders(command: list) -> list[str]:
    """Every placeholder key in a command (groups included), in order."""
    found = []
    for arg in command:
        for text in (arg if isinstance(arg, list) else [arg]):
            found += [m.group(1) for m in _TOKEN.finditer(str(text)) if m.group(1) is not None]
    return found


def _shown(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


class _Missing:
    pass


MISSING = _Missing()


def lookup(values: dict, key: str):
    """``values`` at the dotted key (``a.b[0].c``), or ``MISSING``; None below a null setting (a group of settings
    that is off, ``workload.lora: null``, has null settings: an optional group naming one is left out)."""
    node = values
    for part in key.split("."):
        if node is None:
            return None
        name, _, rest = part.partition("[")
        indexes = [int(i) for i in re.findall(r"\[(\d+)\]", "[" + rest)] if rest else []
        if not isinstance(node, dict) or name not in node:
            return MISSING
        node = node[name]
        for i in indexes:
            if not isinstance(node, list) or i >= len(node):
                return MISSING
            node = node[i]
    return node


def _suggest(values: dict, key: str) -> str:
    """``did you mean workload.lr?`` for a placeholder that names no setting, else a list of the node's keys."""
    parts, node, i = key.split("."), values, 0
    while i < len(parts) - 1 and isinstance(node, dict) and parts[i].partition("[")[0] in node:
        node, i = node[parts[i].partition("[")[0]], i + 1
    keys = list(node) if isinstance(node, dict) else []
    near = difflib.get_close_matches(parts[i].partition("[")[0], keys, n=1)
    if near:
        return f"did you mean {{{'.'.join([*parts[:i], near[0]])}}}?"
    where = ".".join(parts[:i])
    return f"{where or 'the config'} has: {', '.join(sorted(map(str, keys)))}" if keys else "it is not a mapping"


def _expand_one(text: str, values: dict, name: str, whole_list_ok: bool) -> list[str] | None:
    """One argument with its placeholders filled: a list of arguments (a whole-argument list placeholder
    gives several), or None when a placeholder's value is null (or an empty list: an optional group
    ``[--trl, "{trainer.trl}"]`` with nothing to pass is left out)."""
    text = str(text)
    whole = _TOKEN.fullmatch(text)
    if whole is not None and whole.group(1) is not None and whole.group(1).strip() != DEFERRED:
        value = _value(whole.group(1).strip(), values, name)
        if value is None or value == []:
            return None
        if isinstance(value, list) and whole_list_ok:
            return [_shown(v) for v in value]
        return [",".join(_shown(v) for v in value) if isinstance(value, list) else _shown(value)]
    null = False

    def fill(m: re.Match) -> str:
        nonlocal null
        if m.group(0) == "{{":
            return "{"
        if m.group(0) == "}}":
            return "}"
        key = m.group(1).strip()
        if key == DEFERRED:
            return "{output_dir}"
        value = _value(key, values, name)
        if value is None:
            null = True
            return ""
        return ",".join(_shown(v) for v in value) if isinstance(value, list) else _shown(value)

    out = _TOKEN.sub(fill, text)
    return None if null else [out]


def _value(key: str, values: dict, name: str):
    if not _KEY.fullmatch(key):
        raise SpecError(f"trainer {name}: {{{key}}} in its command is not a placeholder (a dotted setting name, "
                        "e.g. {workload.lr}); write {{ and }} for literal braces")
    value = lookup(values, key)
    if value is MISSING:
        raise SpecError(f"trainer {name}: placeholder {{{key}}} in its command names no setting; {_suggest(values, key)}")
    if isinstance(value, dict):
        raise SpecError(f"trainer {name}: placeholder {{{key}}} names a mapping of settings, not a value; "
                        "name one of its settings")
    return value


def placeholder_values(config: dict, repo: Path, python: str | None = None) -> dict:
    """What placeholders resolve against: the validated config (``config``, a plain mapping with every
    default filled), its path settings made absolute, plus ``python``, ``repo`` and ``task`` (the workload's data
    field map, prompt and reward as one compact JSON argument, ``facts.task``)."""
    from facts.task import Task

    task = Task.of(config.get("workload") or {}).settings()  # one JSON argument: a template's newlines stay escaped
    values = {**config, "python": python or sys.executable, "repo": str(repo),
              "task": json.dumps(task, sort_keys=True, separators=(",", ":"), ensure_ascii=False)}
    for key in PATH_SETTINGS:
        value = lookup(values, key)
        if isinstance(value, str):
            group, _, leaf = key.rpartition(".")
            node = dict(lookup(values, group))
            node[leaf] = str(value if Path(value).is_absolute() else Path(repo) / value)
            values[group] = node
    return values


def expand_command(spec: TrainerSpec, values: dict) -> list[str]:
    """The spec's command with every placeholder filled except ``{output_dir}``, which stays for the
    job to fill (``fill_output_dir``); raises ``SpecError`` for a placeholder that names no setting."""
    argv: list[str] = []
    for i, arg in enumerate(spec.command):
        if isinstance(arg, list):
            group = [_expand_one(a, values, spec.name, True) for a in arg]
            if all(g is not None for g in group):
                argv += [x for g in group for x in g]
            continue
        filled = _expand_one(arg, values, spec.name, i > 0)
        if filled is None:
            raise SpecError(f"trainer {spec.name}: argument {arg!r} of its command is null or an empty list; give the setting a "
                            "value, or make it an optional group ([--flag, \"{...}\"])")
        argv += filled
    if not argv or not argv[0]:
        raise SpecError(f"trainer {spec.name}: its command has no program")
    return argv


def fill_output_dir(argv: list[str], output_dir: str | Path) -> list[str]:
    """The expanded command with ``{output_dir}`` filled (the job's ``run/trainer``)."""
    return [a.replace("{output_dir}", str(output_dir)) for a in argv]


def to_record(spec: TrainerSpec) -> dict:
    """The spec as plain data (a job carries it in ``spec.json``; ``from_record`` reads it back)."""
    record = {"name": spec.name, "checkpoint": spec.checkpoint, "resume": spec.resume,
              "stop_signal": spec.stop_signal, "checkpointed_exit": spec.checkpointed_exit,
              "declares": spec.declares, "contract": spec.contract, "algorithm": spec.algorithm}
    if spec.metrics is not None:
        m = spec.metrics
        record["metrics"] = {"format": m.format, "path": m.path, "map": dict(m.map), "step_key": m.step_key,
                             "step_offset": m.step_offset}
    return record


def from_record(record: dict) -> TrainerSpec:
    metrics = record.get("metrics")
    return TrainerSpec(
        name=record["name"], command=[], checkpoint=record.get("checkpoint"), resume=bool(record.get("resume")),
        stop_signal=record.get("stop_signal"), checkpointed_exit=int(record.get("checkpointed_exit", 75)),
        declares=record.get("declares"), contract=record.get("contract"), algorithm=record.get("algorithm"),
        metrics=MetricsSpec(metrics["format"], metrics["path"], dict(metrics["map"]), metrics.get("step_key"),
                            int(metrics.get("step_offset", 0))) if metrics else None)
