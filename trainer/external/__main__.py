"""``python -m trainer.external --job-spec <job>/spec.json --output-dir <job>/run [--sweep-dir <sweep>] -- <command>``:
one job of a trainer that is not proofgrid's (``trainer.external.run``). The launcher writes this command
(``JobSpec.trainer_argv``); the trainer's own command follows ``--`` with its placeholders filled."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from facts.process_exit import exit_now


def main(argv: list[str] | None = None) -> int:
    # First: a stop signal the job runtime held across exec is delivered to this handler from here on.
    from trainer.preemption import StopRequest

    stop = StopRequest().install()
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("usage: python -m trainer.external --job-spec FILE --output-dir DIR [--sweep-dir DIR] -- COMMAND ...",
              file=sys.stderr)
        return 2
    split = args.index("--")
    ap = argparse.ArgumentParser(prog="python -m trainer.external")
    ap.add_argument("--job-spec", required=True, type=Path)
    ap.add_argument("--output-dir", required=True, type=Path)
    ap.add_argument("--sweep-dir", type=Path)
    ns = ap.parse_args(args[:split])
    command = args[split + 1:]
    if not command:
        print("python -m trainer.external: error: no trainer command after --", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from trainer.external.run import run_external
    from trainer.run_lock import LockHeld, own_run_dir
    from trainer.trainer_errors import TrainerError

    job_spec = json.loads(ns.job_spec.read_text())
    ns.output_dir.mkdir(parents=True, exist_ok=True)
    try:
        with own_run_dir(ns.output_dir):  # one trainer per run directory
            return run_external(job_spec, command, ns.output_dir, ns.sweep_dir, stop)
    except (TrainerError, LockHeld) as exc:
        print(f"proofgrid external trainer: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    exit_now(main())  # a normal exit, less the interpreter's teardown (facts/process_exit.py)
