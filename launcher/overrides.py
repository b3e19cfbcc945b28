"""The command line's overrides, checked before Hydra sees them, each problem in one line.

Hydra validates the whole grid before any launcher runs and reports a bad group option or an
unknown key over a dozen lines; ``launch.py`` (and an experiment's arms) run ``check_overrides``
first. It needs the config only, not the sweep machinery, so ``launch.py --help`` stays quick.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from facts.repo import CONF_DIR
from launcher.errors import PreflightError
from launcher.job_spec import MULTINODE_NEEDS_SLURM
from launcher.preflight import check_sweep_dir

GROUPS = ("algo", "workload", "cluster", "experiment", "trainer")
# Hydra's command-line options that take a value (the value is not an override).
VALUE_OPTIONS = ("-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "--cfg", "-c", "-p",
                 "--package", "--experimental-rerun")
CONFIG_DIR_OPTIONS = ("-cd", "--config-dir")
# The algorithm's identity: its record sets these through the group choice (algo=<short>); an override
# would run one algorithm under another's name (trainer.run_config.DESCRIPTIVE_ALGO_KEYS and the estimator
# that names the record), and the evidence, which knows algorithms by their records, fails after training.
DERIVED_ALGO_KEYS = ("short", "display_name", "estimator")


# Settings no command line may give: a plan check runs code in the launcher while it plans (dry runs included),
# so only the trainer's spec file declares it (trainer.external.trainer_spec.PLAN_CHECK_PACKAGE says whose code).
SPEC_FILE_ONLY = ("trainer.plan_check",)


def refuse_spec_file_only(cells) -> None:
    """Refuse (``PreflightError``, one line) a command-line or arm override of a ``SPEC_FILE_ONLY`` setting."""
    for cell in cells:
        for override in cell:
            key = override.split("=", 1)[0].lstrip("+~")
            if key in SPEC_FILE_ONLY or any(key.startswith(k + ".") for k in SPEC_FILE_ONLY):
                raise PreflightError(f"{override}: {key} cannot be set on the command line; a plan check runs in the "
                                     "launcher while it plans, so only the trainer's spec file declares it "
                                     "(conf/trainer/<name>.yaml, or one in a -cd directory)")


def split_command_line(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(overrides, search path overrides)`` of ``launch.py``'s command line: Hydra's own options are
    set aside, and an additional config directory (``-cd DIR``, ``--config-dir=DIR``) becomes the
    ``hydra.searchpath`` entry that gives composition here the same search path as Hydra's app."""
    overrides, dirs, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if arg.startswith("-") and name in VALUE_OPTIONS:
            if not eq:
                value, i = (argv[i + 1] if i + 1 < len(argv) else ""), i + 1
            if name in CONFIG_DIR_OPTIONS and value:
                dirs.append(os.path.abspath(value))
        elif not arg.startswith("-"):
            overrides.append(arg)
        i += 1
    search = [f"hydra.searchpath=[{','.join(f'file://{d}' for d in dirs)}]"] if dirs else []
    return overrides, search


@contextlib.contextmanager
def _config_loader():
    """Hydra's config loader: the app's (inside ``launch.py``, which knows its ``-cd``), else one on ``conf/``."""
    if GlobalHydra.instance().is_initialized():
        yield GlobalHydra.instance().config_loader()
        return
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def group_options(group: str, search: list[str]) -> list[str]:
    """The options of a config group over Hydra's whole search path (``conf/<group>/`` and every
    config directory added with ``-cd`` or ``hydra.searchpath``)."""
    with _config_loader() as loader:
        return sorted(loader.get_group_options(group, config_name="config", overrides=list(search)))


def search_path_compose(search: list[str]):
    """Compose ``conf/config.yaml`` with the search path's extra config directories."""
    def compose(choices: list[str]):
        if GlobalHydra.instance().is_initialized():
            return hydra_compose(config_name="config", overrides=[*search, *choices])
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose(config_name="config", overrides=[*search, *choices])
    return compose


def one_line(exc: BaseException) -> str:
    """Hydra's composition errors span several lines; keep the problem and the available options."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines)


# Launcher settings whose default an environment variable gives (conf/config.yaml's ``oc.env``), each a boolean.
ENVIRONMENT_DEFAULTS = {"PROOFGRID_FIGURES": "figures"}


def check_environment(environ=os.environ) -> str | None:
    """A variable of ``ENVIRONMENT_DEFAULTS`` set to anything but true or false, in one line naming it and the fix
    (before Hydra composes: an empty value would be a grammar error naming neither)."""
    for variable, setting in ENVIRONMENT_DEFAULTS.items():
        value = environ.get(variable)
        if value is not None and value.strip().lower() not in ("true", "false"):
            return (f"{variable}={value!r}: the default of the launcher's {setting}= setting must be true or false; "
                    f"set it so, or unset it")
    return None


def check_overrides(argv: list[str], compose=None) -> str | None:
    """A one-line error for a bad command-line override, else ``None``: an unusable sweep
    directory, unknown config-group options (``algo=bogus``, ``trainer=mylab`` found on no config
    directory of the search path) and unknown settings (``workload.lrr=3``). ``compose`` composes the
    group choices (default: ``conf/`` plus the command line's ``-cd`` directories)."""
    args, search = split_command_line(argv)
    try:
        refuse_spec_file_only([args])
    except PreflightError as exc:
        return str(exc)
    search += [a for a in args if a.split("=", 1)[0].lstrip("+~") == "hydra.searchpath"]
    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException as exc:
        return f"cannot parse the overrides: {one_line(exc)}"
    for o in parsed:
        if o.key_or_group in ("hydra.sweep.dir", "hydra.run.dir") and not o.is_sweep_override():
            # Hydra creates this directory before any launcher runs: check it first.
            value = str(o.value())
            if "${" not in value:
                try:
                    check_sweep_dir(Path(value).absolute(), o.key_or_group)
                except PreflightError as exc:
                    return str(exc)
    choices = []
    for o in parsed:
        group = o.key_or_group.lstrip("+~")
        if group not in GROUPS or o.is_delete():
            continue
        try:
            known = group_options(group, search)
        except HydraException as exc:
            return f"the config search path cannot be read: {one_line(exc)}"
        values = [str(v) for v in o.sweep_iterator()] if o.is_sweep_override() else [str(o.value())]
        unknown = [v for v in values if v not in known]
        if unknown:
            extra = " or a config directory given with -cd" if group == "trainer" else ""
            return (f"bad grid: unknown {group} {', '.join(repr(u) for u in unknown)}; "
                    f"choose from {', '.join(known)} (conf/{group}/{extra})")
        choices.append(f"{group}={values[0]}")
    try:
        cfg = (compose or search_path_compose(search))(choices)
    except HydraException as exc:
        return f"bad grid: {one_line(exc)}"
    missing = object()
    for o in parsed:
        key = o.key_or_group.lstrip("+~")
        derived = derived_setting(key)
        if derived is not None:
            return derived
        if key.split(".")[0] in GROUPS and "." not in key or key.startswith("hydra"):
            continue
        if OmegaConf.select(cfg, key, default=missing) is not missing:
            continue
        if (o.is_add() or o.is_force_add()) and schema_accepts(cfg, key, o.value()):
            continue  # a new key the schema takes
        if key in ("cluster.nodes", "cluster.tasks_per_node") and cfg.cluster.get("kind") == "local":
            return MULTINODE_NEEDS_SLURM.format(setting=f"{key}={o.value()}")
        return unknown_setting(cfg, key, o)
    return None


def derived_setting(key: str) -> str | None:
    """The one line for an override of a setting the algorithm's record derives (``algo.short=foo``), else None."""
    group, _, leaf = key.partition(".")
    if group == "algo" and leaf in DERIVED_ALGO_KEYS:
        return (f"the setting {key} is derived: the algorithm's record sets it through algo=<short>; choose the "
                f"algorithm with algo=<short> (the options are conf/algo/) and drop {key}")
    return None


def schema_accepts(cfg, key: str, value) -> bool:
    """Whether the run schema (``trainer.schema``) takes ``key`` as a new setting: only then may a
    ``+key=`` add it. Every schema node is closed (a dataclass of its settings), so for nearly every
    key it refuses: suggesting ``+key=`` there sends a user from one error to the next."""
    from trainer.schema import RunSchema, SettingError, check_settings

    run_settings = {f.name for f in dataclasses.fields(RunSchema)}
    if key.split(".")[0] == "experiment":
        return True  # an experiment's spec: its own check judges it
    if key.split(".")[0] not in run_settings:
        return False  # a top-level key no schema has (+zzz=red, +worklaod.lr=1)
    try:
        values = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException:
        return False
    values = {k: v for k, v in values.items() if k in run_settings}
    node = values
    *parents, leaf = key.split(".")
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[leaf] = value
    try:
        check_settings(values)
    except SettingError:
        return False
    return True


def schema_fields(path: list[str]) -> list[str]:
    """The settings the run schema's group at ``path`` takes (``["workload", "lora"]``: alpha, dropout, ...)."""
    import typing

    from trainer.schema import RunSchema

    schema = RunSchema
    for part in path:
        hint = typing.get_type_hints(schema).get(part)
        options = [o for o in typing.get_args(hint) if dataclasses.is_dataclass(o)] or [hint]
        if not dataclasses.is_dataclass(options[0]):
            return []
        schema = options[0]
    return sorted(f.name for f in dataclasses.fields(schema))


def unknown_setting(cfg, key: str, override) -> str:
    """The one line for a setting the config does not have: the close existing key to use instead (with
    the value as given), else the settings the node has; ``+key=`` only where the schema takes it."""
    parts, node, i = key.split("."), cfg, 0
    while i < len(parts) - 1 and OmegaConf.is_dict(node) and parts[i] in node:
        node, i = node[parts[i]], i + 1  # down to the first unknown part: worklaod in worklaod.lr
    known = sorted(str(k) for k in node) if OmegaConf.is_dict(node) else []
    if i > 0 and node is None:  # a group of settings that is null (off): workload.lora
        where, value = ".".join(parts[:i]), (override.input_line or "=").split("=", 1)[1]
        if not schema_accepts(cfg, key, override.value()):
            return f"unknown setting {key!r}; {where} (null: off) takes: {', '.join(schema_fields(parts[:i]))}"
        return (f"unknown setting {key!r}: {where} is null (off); add the setting with +{key}={value}, or set "
                f"the whole group with {where}={{{'.'.join(parts[i:])}:{value}}}")
    near = difflib.get_close_matches(parts[i], known, n=1)
    added = " (+ cannot add it: the schema has no such setting)" if override.is_add() or override.is_force_add() else ""
    if near:
        fixed = ".".join([*parts[:i], near[0], *parts[i + 1:]])
        if fixed in GROUPS:  # a config group: its options are files, not the value given
            return f"unknown setting {key!r}{added}; did you mean {fixed}=<option>? (the options are conf/{fixed}/)"
        value = (override.input_line or "=").split("=", 1)[1]  # as typed: a sweep's values too
        return f"unknown setting {key!r}{added}; did you mean {fixed}? ({fixed}={value})"
    where = ".".join(parts[:i]) or "the config"
    return f"unknown setting {key!r}{added}; {where} has: {', '.join(known)}"
