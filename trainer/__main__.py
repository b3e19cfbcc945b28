"""``python -m trainer <hydra overrides>``: train one (algo, seed) run into ``output_dir``.

Example: ``python -m trainer algo=rpp seed=42 output_dir=outputs/rpp-42``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from trainer.algorithms import AlgoConfigError
from trainer.config import RunConfigError, compose, validate
from trainer.inputs import InputDigestError
from trainer.run_lock import LockHeld, own_run_dir


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from trainer.loop import NonFiniteGradientError, train

    try:
        cfg = compose(list(sys.argv[1:] if argv is None else argv))
        validate(cfg)
        with own_run_dir(Path(cfg.output_dir)):  # one trainer per run directory
            summary = train(cfg)
    except (AlgoConfigError, RunConfigError, InputDigestError, LockHeld) as exc:
        print(f"proofgrid trainer: error: {exc}", file=sys.stderr)
        return 2
    except NonFiniteGradientError as exc:
        print(f"proofgrid trainer: error: {exc}", file=sys.stderr)
        return 3
    print(f"trained {summary['algo']} seed {summary['seed']}: {summary['steps_completed']} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
