"""Speed and memory figures, each printed beside a reference measured in the same run (`make bench`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def step_run_args(doc: str, argv: list[str] | None) -> argparse.Namespace:
    """The command line both sides of the TRL comparison take (``benchmarks.trl_grpo`` and
    ``benchmarks.proofgrid_grpo``): steps, seed, and the JSON file for the per-step records."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True, help="JSON file for the per-step records")
    return ap.parse_args(argv)
