"""The command line's overrides, checked before Hydra sees them, each problem in one line.

Hydra validates the whole grid before any launcher runs and reports a bad group option or an
unknown key over a dozen lines; ``launch.py`` (and an experiment's arms) run ``check_overrides``
first. It needs the config only, not the sweep machinery, so ``launch.py --help`` stays quick.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf

from facts.repo import CONF_DIR
from launcher.errors import PreflightError
from launcher.preflight import check_sweep_dir
from trainer.config import compose as trainer_compose

GROUPS = ("algo", "workload", "cluster", "experiment")


def one_line(exc: BaseException) -> str:
    """Hydra's composition errors span several lines; keep the problem and the available options."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines)


def check_overrides(argv: list[str], compose=None) -> str | None:
    """A one-line error for a bad command-line override, else ``None``: an unusable sweep
    directory, unknown config-group options (``algo=bogus``) and unknown settings
    (``workload.lrr=3``). ``compose`` composes the group choices (default:
    ``trainer.config.compose``, outside a Hydra app)."""
    args = [a for a in argv if not a.startswith("-")]
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
        known = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        values = [str(v) for v in o.sweep_iterator()] if o.is_sweep_override() else [str(o.value())]
        unknown = [v for v in values if v not in known]
        if unknown:
            return (f"bad grid: unknown {group} {', '.join(repr(u) for u in unknown)}; "
                    f"choose from {', '.join(known)} (conf/{group}/)")
        choices.append(f"{group}={values[0]}")
    cfg = (compose or trainer_compose)(choices)
    missing = object()
    for o in parsed:
        key = o.key_or_group
        if key.split(".")[0] in GROUPS and "." not in key or key.startswith("hydra") or o.is_add() or o.is_force_add():
            continue
        if OmegaConf.select(cfg, key, default=missing) is missing:
            parts, node, i = key.split("."), cfg, 0
            while i < len(parts) - 1 and OmegaConf.is_dict(node) and parts[i] in node:
                node, i = node[parts[i]], i + 1  # down to the first unknown part: worklaod in worklaod.lr
            near = difflib.get_close_matches(parts[i], list(node.keys()) if OmegaConf.is_dict(node) else [], n=1)
            hint = f"did you mean {'.'.join([*parts[:i], near[0], *parts[i + 1:]])}? " if near else ""
            return f"unknown setting {key!r}; {hint}(+{key}=... adds a new key)"
    return None
