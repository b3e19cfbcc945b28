"""proofgrid's trainer on the toy GRPO workload with each step's CPU time, for the TRL comparison.

``python -m benchmarks.proofgrid_grpo --steps 60 --seed 1 --out ours.json`` runs exactly what
``python -m trainer algo=grpo workload=toy`` runs (the trainer's own ``train``), with a timer around
each call of ``trainer.loop.train_step``: wall seconds, this process's CPU seconds (what a shared
machine's load does not inflate) and the step's response tokens, one record per step.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import step_run_args
from facts.files import JOB_RUN_DIR


def run(steps: int, seed: int, output_dir: str) -> list[dict]:
    import trainer.loop as loop
    from trainer.config import compose

    cfg = compose(["algo=grpo", "workload=toy", f"seed={seed}", f"workload.n_updates={steps}",
                   f"workload.checkpoint_every={steps}", "workload.eval.n_prompts=1", "workload.eval.k=1",
                   f"output_dir={output_dir}"])
    batch = int(cfg.workload.global_batch_size)
    records: list[dict] = []
    step_fn = loop.train_step

    def timed_step(state, step):
        wall, cpu = time.perf_counter(), time.process_time()
        metrics = step_fn(state, step)
        tokens = metrics["rollout/response_len"] * batch
        records.append({"step_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                        "response_tokens": tokens, "rollout_s": tokens / metrics["perf/response_tok_per_s"]})
        return metrics

    loop.train_step = timed_step  # the loop looks the step up by name at every call
    try:
        loop.train(cfg)
    finally:
        loop.train_step = step_fn
    return records


def main(argv: list[str] | None = None) -> int:
    args = step_run_args(__doc__, argv)
    with tempfile.TemporaryDirectory() as tmp:
        records = run(args.steps, args.seed, str(Path(tmp) / JOB_RUN_DIR))
    args.out.write_text(json.dumps({"records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
