"""proofgrid sweep launcher.

    python launch.py -m algo=grpo,rpp,rppb seed=42,1234,2026            # 9 local jobs
    python launch.py -m algo=grpo,rpp,rppb seed=42,1234,2026 cluster=slurm   # one Slurm job array
    python launch.py -m ... dry_run=true                                # expand and check only
    python launch.py experiment=loss_norm [workload.n_updates=8 ...]    # a pre-registered study

Without ``-m`` it runs the single job of the composed config the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import hydra
    from omegaconf import DictConfig
except ModuleNotFoundError as exc:  # a bare `python` outside the project's venv: one line, not a traceback
    print(f"proofgrid: error: {exc.name} is not installed for {sys.executable}; run .venv/bin/python launch.py "
          "... (make venv creates it) or source .venv/bin/activate first", file=sys.stderr)
    sys.exit(2)


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    # Single-run mode (no -m): the one composed job goes through the same sweep machinery; its
    # cell is composed again with Hydra's compose API, exactly as a grid cell would be.
    from hydra.core.hydra_config import HydraConfig

    from launcher.entry_points import launch_grid
    from launcher.grid import hydra_compose
    from launcher.preflight import remove_empty_dir

    hc = HydraConfig.get()
    try:
        if cfg.get("experiment") is not None:  # its stages are sweeps of their own (launcher/experiment/)
            from launcher.entry_points import one_line_errors
            from launcher.experiment import experiment_dir, run_experiment

            name = hc.runtime.choices.get("experiment")
            where = experiment_dir(name, hc.run.dir, list(hc.overrides.hydra), list(hc.overrides.task))
            code = one_line_errors(where, lambda: run_experiment(cfg, list(hc.overrides.task), where, name))
        else:
            code = launch_grid(cfg, [list(hc.overrides.task)], hc.run.dir, compose=hydra_compose(hc.job.config_name))
    finally:  # Hydra made hc.run.dir before main started: a command that wrote nothing there leaves none
        remove_empty_dir(Path(hc.run.dir))
    if code:
        sys.exit(code)


if __name__ == "__main__":
    from facts.process_exit import exit_now
    from launcher.overrides import check_environment, check_overrides

    if "-m" in sys.argv[1:] and any(a.startswith("experiment=") for a in sys.argv[1:]):
        print("proofgrid: error: an experiment runs its own sweeps (probe, tuning, confirm); drop -m", file=sys.stderr)
        sys.exit(2)
    if (problem := check_environment() or check_overrides(sys.argv[1:])) is not None:
        print(f"proofgrid: error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()  # raises SystemExit with a failure's status
    exit_now(0)  # success: a normal exit, less the interpreter's teardown (facts/process_exit.py)
