"""The grid: command-line overrides expanded into cells, each distinct cell composed once, and the
arm of every cell with its label (the arm contract that ``evidence`` reads).

A job is ``(arm, seed)``. An arm is the set of a cell's overrides other than ``seed``, Hydra's own
(``hydra.*``) and the launcher's settings, as a sorted mapping of each key to its value as the user
wrote it. Its label is the algo's short name when nothing but the algo varies across the grid,
otherwise the short name plus every varying setting (``rpp-lr3e-4``); the job name is
``<label>-<seed>``. Expansion uses Hydra's public override parser only.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from launcher.errors import GridError

# Settings of the launcher itself: never passed on to the trainer, never part of an arm.
LAUNCHER_KEYS = ("dry_run", "wait", "formal", "certify", "cluster", "license", "figures", "tracking")
SEED_KEY = "seed"
ALGO_GROUP = "algo"
TRAINER_GROUP = "trainer"  # which trainer ran is part of the label's base (``arm_bases``), never a suffix
LABEL_MAX = 64  # characters; longer labels keep their start and end in a digest

# A cell's overrides -> its composed config (Hydra's config loader or compose API).
Composer = Callable[[list[str]], DictConfig]


def _parser(config_loader=None) -> OverridesParser:
    return OverridesParser.create(config_loader=config_loader)


def _split_top_level(text: str) -> list[str]:
    """``a,[1,2],'x,y'`` -> ``['a', '[1,2]', "'x,y'"]``: commas outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote and text[i - 1] != "\\" else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _as_written(parser, override, canonical: list[str]) -> list[str]:
    """The values of a choice sweep as the user typed them (``1e-4``, not Hydra's ``0.0001``),
    where each typed element parses to the same value; otherwise Hydra's canonical strings."""
    if not override.is_choice_sweep():
        return canonical  # range() generates its values: they have no typed text
    elements = _split_top_level(override.input_line.partition("=")[2])
    if len(elements) != len(canonical):
        return canonical
    key = override.get_key_element()
    for element, value in zip(elements, canonical):
        single = parser.parse_override(f"{key}={element}")
        if single.is_sweep_override() or single.get_value_element_as_str() != value:
            return canonical
    return elements


def expand_grid(arguments: Sequence[str], config_loader=None) -> list[list[str]]:
    """The cartesian product of the command line's overrides, in their order: one list per cell."""
    parser = _parser(config_loader)
    axes = []
    for override in parser.parse_overrides(list(arguments)):
        if not override.is_sweep_override():
            axes.append([override.input_line])
            continue
        if not override.is_discrete_sweep():
            raise GridError(f"{override.input_line}: an interval sweep has no finite grid; "
                            "list the values (a,b,c) or use range(start,stop,step)")
        key = override.get_key_element()
        values = _as_written(parser, override, list(override.sweep_string_iterator()))
        axes.append([f"{key}={value}" for value in values])
    return [list(cell) for cell in itertools.product(*axes)]


@dataclass(frozen=True)
class Cell:
    """One grid cell's overrides, sorted into what the arm, the seed and the launcher get."""

    overrides: tuple[str, ...]  # every override of the cell, as written
    arm: tuple[tuple[str, str], ...]  # (key, value as written), sorted by key
    canonical: tuple[tuple[str, str], ...]  # the same keys, Hydra's canonical values (1e-4 == 0.0001)
    seed: int | None  # None: the config's default seed
    launcher: tuple[str, ...]  # launcher settings of the cell (must be the same in every cell)

    @property
    def arm_key(self) -> tuple[tuple[str, str], ...]:
        return self.canonical


def _bare_key(key: str) -> str:
    """``+workload.x@pkg`` -> ``workload.x``."""
    return key.lstrip("+~").split("@")[0]


def last_value_wins(cell: Sequence[str]) -> list[str]:
    """A cell with each setting given once: where the command line gives a setting twice
    (``workload.n_updates=40 workload.n_updates=6``), its last value, as Hydra composes it. The plan, the
    job's command and its records then all carry that one value (the job command's overrides are sorted, so
    two values of one key could otherwise reach the trainer in another order than Hydra composed them)."""
    last = {_bare_key(text.split("=", 1)[0]): i for i, text in enumerate(cell)}
    return [text for i, text in enumerate(cell) if last[_bare_key(text.split("=", 1)[0])] == i]


def classify(cells: Sequence[Sequence[str]], config_loader=None) -> list[Cell]:
    """Sort every cell's overrides into arm, seed and launcher settings (each text parsed once)."""
    parser = _parser(config_loader)
    parsed: dict[str, object] = {}
    out = []
    for cell in cells:
        arm, canonical, launcher, seed = [], [], [], None
        for text in cell:
            if text not in parsed:
                (parsed[text],) = parser.parse_overrides([text])
            o = parsed[text]
            if o.is_sweep_override():
                raise GridError(f"{text}: a cell holds one value per setting; expand the grid first")
            key = o.get_key_element()
            bare = _bare_key(key)
            if bare.startswith("hydra.") or bare == "hydra":
                continue
            if bare.split(".")[0] in LAUNCHER_KEYS:
                launcher.append(text)
            elif bare == SEED_KEY and not o.is_delete():
                value = o.value()
                if isinstance(value, bool) or not isinstance(value, int):
                    raise GridError(f"{text}: a seed is an integer; write seed=1,2,3 or seed=range(1,4)")
                seed = value
            else:
                written = text.partition("=")[2] if "=" in text else ""
                arm.append((key, written))
                canonical.append((key, "" if o.is_delete() and o.value() is None else o.get_value_element_as_str()))
        out.append(Cell(tuple(cell), tuple(sorted(arm)), tuple(sorted(canonical)), seed, tuple(sorted(launcher))))
    return out


def _compact_float(x: float) -> str:
    """The shorter exact text of a float: Python's shortest repr (``0.5``) or mantissa-exponent
    (``3e-4`` for 0.0003); both round-trip to the same float."""
    text = repr(x)
    if not math.isfinite(x):
        return text
    sign, digits, exponent = Decimal(text).normalize().as_tuple()
    mantissa = "".join(map(str, digits))
    sci = f"{'-' if sign else ''}{mantissa[0]}{'.' + mantissa[1:] if len(mantissa) > 1 else ''}" \
          f"e{exponent + len(mantissa) - 1}"
    return sci if len(sci) < len(text) else text


def _slug(text: str) -> str:
    """Filesystem-safe: letters, digits, ``.``, ``-``; anything else becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9.\-]+", "_", text).strip("_.") or "_"


def _value_slug(canonical: str) -> str:
    try:
        value = float(canonical)
    except ValueError:
        return _slug(canonical)
    if re.fullmatch(r"-?\d+", canonical):  # an integer stays as written
        return canonical
    return _slug(_compact_float(value))


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Each key's shortest dotted suffix that no other key shares (``workload.lr`` -> ``lr``)."""
    parts = {k: _bare_key(k).split(".") for k in keys}
    short = {}
    for key, p in parts.items():
        for n in range(1, len(p) + 1):
            suffix = p[-n:]
            if all(q[-n:] != suffix for other, q in parts.items() if other != key) or n == len(p):
                short[key] = ".".join(suffix)
                break
    return short


def _digest(arm: tuple[tuple[str, str], ...]) -> str:
    return hashlib.sha256(json.dumps(arm).encode()).hexdigest()[:6]


def arm_bases(arms: dict[tuple[tuple[str, str], ...], tuple[str, str]], default_trainer: str) -> dict:
    """Arm -> the start of its label, given each arm's (algo short name, trainer name): the algo, then
    the trainer when the grid varies it or it is not ``default_trainer`` (so ``grpo`` stays proofgrid's
    GRPO, ``grpo-trl`` is TRL's, and a sweep of ``trainer=proofgrid,trl`` says both)."""
    trainers = {trainer for _, trainer in arms.values()}
    named = len(trainers) > 1
    return {arm: algo if trainer == default_trainer and not named else f"{algo}-{_slug(trainer)}"
            for arm, (algo, trainer) in arms.items()}


def arm_labels(arms: dict[tuple[tuple[str, str], ...], str]) -> dict[tuple[tuple[str, str], ...], str]:
    """Arm (canonical overrides) -> label, given each arm's base (its algo short name, with its
    trainer when that is named: ``arm_bases``).

    Deterministic (a function of the set of arms only), filesystem-safe, and collision-free: two
    arms whose readable labels would coincide (``a/b`` and ``a_b``) both get a digest suffix.
    """
    all_keys = sorted({k for arm in arms for k, _ in arm})
    values = {k: {dict(arm).get(k) for arm in arms} for k in all_keys}
    varying = [k for k in all_keys if len(values[k]) > 1 and _bare_key(k) not in (ALGO_GROUP, TRAINER_GROUP)]
    short = _short_keys(varying)
    labels = {}
    for arm, algo in arms.items():
        own = dict(arm)
        parts = [_slug(algo)]
        for key in varying:
            if key not in own:
                parts.append(f"{_slug(short[key])}_default")
                continue
            value = _value_slug(own[key])
            joiner = "" if value[0].isdigit() or value[0] in "-." else "_"
            parts.append(f"{_slug(short[key])}{joiner}{value}")
        label = "-".join(parts)
        if len(label) > LABEL_MAX:
            label = f"{label[:LABEL_MAX - 7]}-{_digest(arm)}"
        labels[arm] = label
    seen: dict[str, int] = {}
    for label in labels.values():
        seen[label] = seen.get(label, 0) + 1
    return {arm: (f"{label}-{_digest(arm)}" if seen[label] > 1 else label) for arm, label in labels.items()}


def _is_structural(override) -> bool:
    """Overrides that change which config files are composed (or add/delete keys) need Hydra."""
    key = override.key_or_group
    return key.split(".")[0] in ("algo", "workload", "cluster", TRAINER_GROUP) or key.startswith("hydra") or \
        override.is_add() or \
        override.is_delete() or override.is_force_add() or "@" in key


def compose_jobs(compose: Composer, job_overrides: list[list[str]]) -> list[DictConfig]:
    """Compose every grid cell. Hydra's full composition (~0.1 s) runs once per distinct set of
    structural overrides (config-group choices); the remaining ``key=value`` overrides (seed, lr,
    ...) are applied to a copy with OmegaConf, which refuses unknown keys exactly as Hydra does."""
    parser = _parser()
    composed: dict[tuple[str, ...], DictConfig] = {}
    cfgs = []
    for overrides in job_overrides:
        parsed = parser.parse_overrides(overrides)
        structural = tuple(o.input_line for o in parsed if _is_structural(o))
        if structural not in composed:
            full = compose(list(structural))
            with open_dict(full):
                full.pop("hydra", None)  # Hydra's own settings (absent in single-run mode): no job reads them
            composed[structural] = full
        cfg = composed[structural].copy()
        for o in parsed:
            if not _is_structural(o):
                OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True)
        cfgs.append(cfg)
    return cfgs


def hydra_compose(config_name: str = "config") -> Composer:
    """Compose with Hydra's public compose API (inside ``launch.py`` or ``initialize_config_dir``)."""
    return lambda overrides: hydra.compose(config_name=config_name, overrides=list(overrides))
