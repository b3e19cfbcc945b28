"""Hydra plugins: a launcher that hands the whole expanded grid to ``launcher.sweep`` at once, and
a sweeper that does not compose every grid cell a second time before launching it.

Hydra only instantiates plugins that live in the ``hydra_plugins`` namespace, hence these thin
adapters; all logic is in the ``launcher`` package.
"""


from collections.abc import Sequence  # noqa: I001 - no __future__ import: Hydra scans this module
from dataclasses import dataclass
from typing import Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher


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


class ProofgridSweeper(BasicSweeper):
    """Hydra's basic grid sweeper, minus its up-front composition of every cell: the proofgrid
    launcher composes each cell itself (once) and turns any error into a one-line message. The
    grid always goes to the launcher as one batch, so a Slurm sweep is one job array."""

    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[dict] = None) -> None:  # noqa: UP045
        if max_batch_size is not None:
            raise ValueError("hydra.sweeper.max_batch_size must stay null: a sweep is submitted as one batch")
        super().__init__(max_batch_size=None, params=params)

    def validate_batch_is_legal(self, batch) -> None:
        return None


class ProofgridLauncher(Launcher):
    def __init__(self) -> None:
        self.config = None
        self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from launcher.cli import launch_grid

        code = launch_grid(self.config, self.hydra_context.config_loader, [list(o) for o in job_overrides],
                           str(self.config.hydra.sweep.dir))
        if code:
            raise SystemExit(code)
        return [JobReturn(overrides=list(o), status=JobStatus.COMPLETED, _return_value=None) for o in job_overrides]
