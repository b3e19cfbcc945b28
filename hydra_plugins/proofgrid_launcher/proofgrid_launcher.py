"""Hydra launcher plugin: hands the whole expanded grid to ``launcher.sweep`` at once.

Hydra only instantiates launcher plugins that live in the ``hydra_plugins`` namespace, hence this
thin adapter; all logic is in the ``launcher`` package.
"""


from collections.abc import Sequence  # noqa: I001 - no __future__ import: Hydra scans this module
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher


@dataclass
class ProofgridLauncherConf:
    _target_: str = "hydra_plugins.proofgrid_launcher.proofgrid_launcher.ProofgridLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="proofgrid", node=ProofgridLauncherConf, provider="proofgrid")


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
