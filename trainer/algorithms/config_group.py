"""``conf/algo/<short>.yaml``, Hydra's ``algo`` config group, written from the algorithm records.

The files stay on disk because they are the interface users read for an algorithm's defaults (and
``launch.py --help`` lists them); their content is the record (``facts.algorithms``): the summary as
the header comment, then ``short``, ``display_name``, ``estimator``, the shipped config node and the settings
every algorithm reads (``facts.algorithms.COMMON_CONFIG``).
``python -m trainer.algorithms.config_group`` rewrites them; ``--check`` exits 1 naming every file
that differs from its record (the test suite runs the same comparison).
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

from facts.algorithms import COMMON_CONFIG, RECORDS, Algorithm
from facts.repo import CONF_DIR

ALGO_DIR = CONF_DIR / "algo"
_PLAIN = re.compile(r"[A-Za-z_](?:[A-Za-z0-9_.+-]| (?=[A-Za-z0-9_.+-]))*")  # words, single spaces between
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def yaml_scalar(value) -> str:
    """One config value as YAML that reads back as the same value and type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        # YAML 1.1 reads 1e-05 as a string: a float's mantissa needs its point.
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent}" if e else text
    if isinstance(value, str) and _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return json.dumps(value)


def render(record: Algorithm) -> str:
    """The text of ``conf/algo/<record.short>.yaml``."""
    comment = "".join(f"# {line}\n" for line in textwrap.wrap(record.summary, width=100 - 2, break_on_hyphens=False))
    values = {"short": record.short, "display_name": record.display_name, "estimator": record.name,
              **record.config, **COMMON_CONFIG}
    return comment + "".join(f"{key}: {yaml_scalar(value)}\n" for key, value in values.items())


def drifted(algo_dir: Path = ALGO_DIR) -> list[str]:
    """File names under ``algo_dir`` that differ from their record, are missing, or have no record."""
    expected = {f"{r.short}.yaml": render(r) for r in RECORDS}
    present = {p.name for p in algo_dir.glob("*.yaml")}
    wrong = [name for name, text in expected.items()
             if name not in present or (algo_dir / name).read_text(encoding="utf-8") != text]
    return sorted(wrong + sorted(present - set(expected)))


def write(algo_dir: Path = ALGO_DIR) -> list[str]:
    """Write every record's file; returns the names written (a file without a record is left, and reported)."""
    for record in RECORDS:
        (algo_dir / f"{record.short}.yaml").write_text(render(record), encoding="utf-8")
    return [f"{r.short}.yaml" for r in RECORDS]


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        wrong = drifted()
        for name in wrong:
            print(f"conf/algo/{name} differs from its record in facts/algorithms.py; "
                  "run python -m trainer.algorithms.config_group", file=sys.stderr)
        return 1 if wrong else 0
    if argv:
        print("usage: python -m trainer.algorithms.config_group [--check]", file=sys.stderr)
        return 2
    write()
    for name in drifted():
        print(f"conf/algo/{name} has no record in facts/algorithms.py; remove it or add its record", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
