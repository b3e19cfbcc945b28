"""``python -m trainer <hydra overrides>``: train one (algo, seed) run into ``output_dir``.

Example: ``python -m trainer algo=rpp seed=42 output_dir=outputs/rpp-42``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path

from facts.process_exit import exit_now
from facts.reward import RewardValueError
from trainer.run_config import compose, validate
from trainer.run_lock import LockHeld, own_run_dir
from trainer.trainer_errors import TrainerError


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from trainer.loop import NonFiniteGradientError, RendezvousError, ranks_from_environment, train

    try:
        cfg = compose(list(sys.argv[1:] if argv is None else argv))
        validate(cfg)
        given = ranks_from_environment()
        # One trainer per run directory: its rank 0 holds it; the other ranks started from outside
        # (one process per Slurm task) write only their own step records into it.
        owner = own_run_dir(Path(cfg.output_dir)) if given is None or given[0] == 0 else contextlib.nullcontext()
        with owner:
            summary = train(cfg)
    except NonFiniteGradientError as exc:
        print(f"proofgrid trainer: error: {exc}", file=sys.stderr)
        return 3
    except RendezvousError as exc:
        print(f"proofgrid trainer: error: {exc}", file=sys.stderr)
        return 4
    except RewardValueError as exc:  # the workload's reward raised or gave no number in [0, 1]: the row named
        print(f"proofgrid trainer: error: {exc}", file=sys.stderr)
        return 5
    except (TrainerError, LockHeld) as exc:  # every other refusal of the trainer: one line, exit 2
        print(f"proofgrid trainer: error: {exc}", file=sys.stderr)
        return 2
    rank = f" (rank {summary['rank']})" if "rank" in summary else ""
    print(f"trained {summary['algo']} seed {summary['seed']}{rank}: {summary['steps_completed']} steps")
    return 0


if __name__ == "__main__":
    exit_now(main())  # a normal exit, less a second of teardown (facts/process_exit.py)
