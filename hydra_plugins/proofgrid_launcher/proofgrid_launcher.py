"""Hydra plugins on Hydra's public plugin API: a sweeper that expands the grid with Hydra's public
override parser and hands it to the launcher as ONE batch, and a launcher that hands that batch to
``launcher`` (each distinct cell composed once, every check run, then one local run or one Slurm
job array).

Hydra only instantiates plugins that live in the ``hydra_plugins`` namespace, hence these thin
adapters; all logic is in the ``launcher`` package.
"""


import sys  # noqa: I001 - no __future__ import: Hydra scans this module
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper


@dataclass
class ProofgridLauncherConf:
    _target_: str = "hydra_plugins.proofgrid_launcher.proofgrid_launcher.ProofgridLauncher"


@dataclass
class ProofgridSweeperConf:
    _target_: str = "hydra_plugins.proofgrid_launcher.proofgrid_launcher.ProofgridSweeper"
    max_batch_size: Optional[int] = None  # noqa: UP045 - Hydra's structured configs need Optional
    params: Optional[dict] = None  # noqa: UP045


ConfigStore.instance().store(group="hydra/launcher", name="proofgrid", node=ProofgridLauncherConf, provider="proofgrid")
ConfigStore.instance().store(group="hydra/sweeper", name="proofgrid", node=ProofgridSweeperConf, provider="proofgrid")


class ProofgridSweeper(Sweeper):
    """The grid sweeper: the cartesian product of the command line's overrides (and of
    ``hydra.sweeper.params``), composed by the launcher, not here, so each cell is composed once."""

    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[dict] = None) -> None:  # noqa: UP045
        if max_batch_size is not None:
            raise ValueError("hydra.sweeper.max_batch_size must stay null: a sweep is submitted as one batch")
        self.params = dict(params or {})
        self.hydra_context = None
        self.launcher = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        from launcher.grid import GridError, expand_grid

        try:
            cells = expand_grid([*(f"{k}={v}" for k, v in self.params.items()), *arguments],
                                self.hydra_context.config_loader)
        except GridError as exc:
            print(f"proofgrid: error: bad grid: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        return [self.launcher.launch(cells, initial_job_idx=0)]


class ProofgridLauncher(Launcher):
    def __init__(self) -> None:
        self.config = None
        self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from launcher.entry_points import launch_grid
        from launcher.preflight import remove_empty_dir

        loader, master = self.hydra_context.config_loader, self.config
        try:
            code = launch_grid(master, [list(o) for o in job_overrides], str(master.hydra.sweep.dir),
                               compose=lambda overrides: loader.load_sweep_config(master, overrides))
        finally:  # a sweep refused before anything ran leaves no empty directory
            remove_empty_dir(Path(str(master.hydra.sweep.dir)))
        if code:
            raise SystemExit(code)
        return [JobReturn(overrides=list(o), status=JobStatus.COMPLETED, _return_value=None) for o in job_overrides]
