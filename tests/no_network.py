"""Trackers and validators offline: running a command with no network, and reading W&B's offline runs back."""

from __future__ import annotations

import shutil
import subprocess


def no_network_prefix() -> list[str]:
    """``unshare -n`` (a network namespace with no interface up) where this machine allows it: the command
    then cannot reach any address, so passing proves it needs none."""
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        if shutil.which("unshare") and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    return []


def wandb_records(run_file) -> list[dict]:
    """Every record of a W&B offline run's .wandb transaction log, read by W&B's own reader (``wandb leet inspect``)."""
    import json
    import sys
    from pathlib import Path

    wandb = Path(sys.executable).with_name("wandb")
    out = subprocess.run([str(wandb), "leet", "inspect", "--json", str(run_file)], capture_output=True, text=True,
                         timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
