"""``python -m trainer <hydra overrides>``: train one (algo, seed) run into ``output_dir``.

Example: ``python -m trainer algo=rpp seed=42 output_dir=outputs/rpp-42``.
"""

from __future__ import annotations

import logging
import sys

from trainer.algorithms import AlgoConfigError
from trainer.config import RunConfigError, compose
from trainer.inputs import InputDigestError


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from trainer.loop import NonFiniteGradientError, train

    try:
        cfg = compose(list(sys.argv[1:] if argv is None else argv))
        summary = train(cfg)
    except (AlgoConfigError, RunConfigError, InputDigestError) as exc:
        print(f"proofgrid trainer: error: {exc}", file=sys.stderr)
        return 2
    except NonFiniteGradientError as exc:
        print(f"proofgrid trainer: error: {exc}", file=sys.stderr)
        return 3
    print(f"trained {summary['algo']} seed {summary['seed']}: {summary['steps_completed']} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
