"""proofgrid sweep launcher.

    python launch.py -m algo=grpo,rpp,rppb seed=42,1234,2026            # 9 local jobs
    python launch.py -m algo=grpo,rpp,rppb seed=42,1234,2026 cluster=slurm   # one Slurm job array
    python launch.py -m ... dry_run=true                                # expand and check only

Without ``-m`` it runs the single job of the composed config the same way.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    # Single-run mode (no -m): the one composed job goes through the same sweep machinery.
    from hydra.core.hydra_config import HydraConfig

    from launcher.cli import launch_grid

    hc = HydraConfig.get()
    overrides = list(hc.overrides.task)
    code = launch_grid(cfg, _SingleJobLoader(cfg), [overrides], hc.run.dir)
    if code:
        sys.exit(code)


class _SingleJobLoader:
    """Stands in for Hydra's config loader when the job config is already composed."""

    def __init__(self, cfg):
        self.cfg = cfg

    def load_sweep_config(self, master_config, sweep_overrides):
        return self.cfg


if __name__ == "__main__":
    from launcher.cli import check_overrides

    if (problem := check_overrides(sys.argv[1:])) is not None:
        print(f"proofgrid: error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
