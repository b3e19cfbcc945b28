"""One run of an external trainer as a proofgrid run, top to bottom: set up, train (the trainer's own
command), read its metrics, check its final model, evaluate it with proofgrid's evaluator, record.

The run directory keeps proofgrid's contract (docs/run-directory.md), so the evidence judges this run
exactly as one of ``python -m trainer``: ``metrics.jsonl`` (the mapped tags under proofgrid's names,
``trainer.external.external_metrics``) with canonical TensorBoard events beside it, ``eval.json`` (the final model
and the initial-checkpoint control, evaluated on the workload's frozen subset with the same sampling,
seed, engine and identity as proofgrid's trainer, so a sweep's shared control serves every trainer),
and ``run.json``, which also names the final model (``final_model``) and what ran (``trainer``: the
command, the metric map and the files it was read from, the restarts). The trainer's own files stay in
``trainer/`` (its ``{output_dir}``).

Stops: on the job's stop signal a trainer with a handler (the spec's ``stop_signal``) gets that signal
and its checkpointed exit makes this run exit 75 (the job is requeued and the rerun continues from its
checkpoint when the spec says ``resume``); a trainer without one is ended and this run exits 76
(nothing saved): the rerun starts it from scratch, and ``run.json``'s ``restarts`` says so.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from facts import (
    ALGORITHM_FIELD,
    EVAL_RECORD,
    EVAL_RESPONSES_DIR,
    FINAL_MODEL_FIELD,
    METRIC_KEYS_FIELD,
    METRICS_LOG,
    RUN_RECORD,
    TENSORBOARD_DIR,
    TRAINER_FIELD,
    TRAINER_OUTPUT_DIR,
    algorithm,
    atomic_write_json,
)
from facts.processes import ProcessTree
from facts.states import RUN_COMPLETED, RUN_FAILED, RUN_RUNNING, RUN_STOPPED
from trainer.external.external_metrics import MetricsError, jsonl_line, read_log, to_records
from trainer.external.external_process import (
    CommandError,
    TrainerProcess,
    WriteWatch,
    end_command_tree,
    exit_words,
    wait_watching,
)
from trainer.external.final_model import CheckpointError, check_final_model, load_final_model
from trainer.external.trainer_spec import TrainerSpec, from_record
from trainer.preemption import EXIT_CHECKPOINTED, EXIT_STOPPED_UNSAVED, StopRequest
from trainer.trainer_errors import TrainerError

log = logging.getLogger("trainer.external")
PROG = "proofgrid external trainer"
EXIT_FAILED = 1
EXIT_REFUSED = 2
# What this run's command line leaves out of the trainer's environment: the job runtime's run-lock
# descriptor (the trainer does not inherit it: it is this process's).
NOT_INHERITED = ("PROOFGRID_RUN_LOCK_FD",)


class RunFailed(TrainerError, RuntimeError):
    """The run cannot be accepted; the message is the job's failure cause (one line)."""


@dataclass
class ExternalRun:
    """What one run knows as it goes: the job's spec and config, where it writes, what happened."""

    spec: TrainerSpec
    config: dict  # the job's resolved, validated proofgrid config
    argv: list[str]  # the trainer's command, every placeholder filled
    out: Path  # the run directory
    sweep_dir: Path | None
    restarts: list[dict] = field(default_factory=list)
    trainer_record: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)

    @property
    def trainer_out(self) -> Path:
        return self.out / TRAINER_OUTPUT_DIR

    @property
    def final_model(self) -> str:
        """The final model directory relative to the run directory (what eval.json and run.json name)."""
        return f"{TRAINER_OUTPUT_DIR}/{self.spec.checkpoint}"

    def summary(self) -> dict:
        """run.json's part that every state shares."""
        c, algo = self.config, self.config["algo"]
        record = algorithm(str(algo["estimator"]) if "estimator" in algo else str(algo["short"]))
        keys = sorted(self.spec.metrics.map)
        config = {k: v for k, v in c.items() if k not in ("output_dir", "sweep_dir")}
        from facts.task import TASK_FIELD
        from trainer.data import task_record
        from trainer.loop import image_record, software_versions, source_commit

        return {
            "algo": record.short, "algo_name": record.name, "seed": int(c["seed"]), "workload": str(c["workload"]["name"]),
            "n_updates": int(c["workload"]["n_updates"]), "dp_size": 1, "versions": software_versions(),
            "inputs": self.inputs, "source_commit": source_commit(), "config": config, METRIC_KEYS_FIELD: keys,
            FINAL_MODEL_FIELD: self.final_model, TASK_FIELD: task_record(c["workload"]),
            TRAINER_FIELD: {"name": self.spec.name, "command": self.argv, "resume": self.spec.resume,
                            "stop_signal": self.spec.stop_signal, "restarts": self.restarts, **self.trainer_record},
            **image_record(),
        }

    def write(self, status: str, steps: int = 0, **details) -> dict:
        per_step = int(self.config["workload"]["global_batch_size"])
        record = {**self.summary(), "status": status, "steps_completed": steps,
                  "responses_generated": steps * per_step, **details}
        atomic_write_json(self.out / RUN_RECORD, record)
        return record

    def fail(self, message: str, steps: int = 0) -> int:
        self.write(RUN_FAILED, steps, error=message)
        print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
        return EXIT_FAILED


def previous_restarts(out: Path) -> list[dict]:
    try:
        previous = json.loads((out / RUN_RECORD).read_text()).get(TRAINER_FIELD, {}).get("restarts")
    except (OSError, ValueError, AttributeError):
        return []
    return list(previous) if isinstance(previous, list) else []


def set_up(run: ExternalRun) -> None:
    """A fresh run directory for this run's records; the trainer's own directory kept when it resumes,
    else emptied (a rerun of a trainer without resume starts from scratch, and the record says so)."""
    run.restarts = previous_restarts(run.out)
    earlier = run.trainer_out.is_dir() and any(run.trainer_out.iterdir())
    if earlier:
        if run.spec.resume:
            run.restarts.append({"from": "its own checkpoints", "reason": "the spec declares resume: its command "
                                 "was run again in the same output directory"})
        else:
            shutil.rmtree(run.trainer_out)
            run.restarts.append({"from": "scratch", "reason": f"trainer {run.spec.name} declares no resume: its "
                                 "earlier output was removed and its command started again"})
            log.warning("restarting trainer %s from scratch (it declares no resume)", run.spec.name)
    for name in (METRICS_LOG, EVAL_RECORD):
        (run.out / name).unlink(missing_ok=True)
    for name in (TENSORBOARD_DIR, EVAL_RESPONSES_DIR):
        shutil.rmtree(run.out / name, ignore_errors=True)
    run.trainer_out.mkdir(parents=True, exist_ok=True)


def verify(run: ExternalRun) -> None:
    from trainer.inputs import verify_inputs

    w = run.config["workload"]
    run.inputs = verify_inputs(w["manifest"], required=[w["model_path"], w["train_path"], w["test_path"]])


def trainer_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env["PYTHONUNBUFFERED"] = "1"  # its lines reach trainer.log as they are printed
    return env


def train(run: ExternalRun, stop: StopRequest | None) -> tuple[int, str | None]:
    """Run the trainer's command to its end; returns the code this run exits with after it (0 to go on)
    and how it stopped. A stop request is passed on as the spec's ``stop_signal``, or ends the trainer."""
    spec = run.spec
    process = TrainerProcess(run.argv, run.trainer_out, trainer_env(), sys.stdout.buffer,
                             hold_stop_signals=spec.stop_signal is not None)
    watch = WriteWatch(run.out.parent)
    handled = {"stop": False}

    def on_tick() -> None:
        if stop is None or not stop.requested or handled["stop"]:
            return
        handled["stop"] = True
        if spec.stop_signal is not None:
            log.info("signal %s: passed on to the trainer as SIG%s", stop.signum, spec.stop_signal)
            process.send(getattr(signal, f"SIG{spec.stop_signal}"))
        else:
            log.info("signal %s: trainer %s has no stop handler; ending it (nothing is saved)", stop.signum, spec.name)
            process.terminate()

    tree = ProcessTree()  # this run is the subreaper of everything the command starts, whatever it sheds
    process.start()
    sys.stdout.flush()
    code = wait_watching(process, watch, on_tick)
    on_tick()  # a request that came as the trainer exited
    run.trainer_record["exit_code"] = code
    left = end_command_tree(tree, run.out.parent)
    if left:
        run.trainer_record["left_running"] = left
    if watch.found:
        run.trainer_record["outside_writes"] = [w.as_record() for w in watch.found.values()]
    if handled["stop"]:
        if code == 0:
            return 0, None  # warned during its last step: it finished its run
        if spec.stop_signal is not None and code == spec.checkpointed_exit:
            return EXIT_CHECKPOINTED, "stopped at a checkpoint of its own"
        return EXIT_STOPPED_UNSAVED, "stopped without a checkpoint it can resume from"
    if code != 0:
        cause = process.last_error_line()
        # The job's write guard (launcher.runtime.confine) refuses a write outside the job at its source.
        hint = ("; a job writes only inside its job directory (job.json's guard): point that output into {output_dir}"
                if cause and "Permission denied" in cause else "")
        raise RunFailed(f"the trainer's command {exit_words(code)}" + (f": {cause}{hint}" if cause else " and printed nothing"))
    if left:
        shown = "; ".join(f"pid {item['pid']}: {item['cmd'] or '?'}" for item in left[:3])
        more = f" (and {len(left) - 3} more)" if len(left) > 3 else ""
        raise RunFailed(f"the trainer's command left {len(left)} process(es) running after it exited, ended before "
                        f"proofgrid's evaluation: {shown}{more}; a trainer's command waits for everything it starts")
    if watch.found:
        first = next(iter(watch.found.values()))
        more = f" (and {len(watch.found) - 1} more)" if len(watch.found) > 1 else ""
        # the cause and its fix first: the job's failure line keeps the first 300 characters
        raise RunFailed(f"the trainer wrote outside its job directory: {first.path}{more}; point that output into "
                        f"{{output_dir}} (written by pid {first.pid}: {first.cmd})")
    return 0, None


def write_metrics(run: ExternalRun) -> int:
    """metrics.jsonl and canonical TensorBoard events from the trainer's log; the number of steps."""
    trainer_log = read_log(run.spec.metrics, run.trainer_out, int(run.config["workload"]["n_updates"]))
    converted = to_records(trainer_log, run.spec.metrics)
    with open(run.out / METRICS_LOG, "w", encoding="utf-8") as f:
        f.writelines(jsonl_line(r) + "\n" for r in converted.records)
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(run.out / TENSORBOARD_DIR)) as writer:
        for record in converted.records:
            for key, value in record.items():
                if key != "step":
                    writer.add_scalar(key, value, record["step"])
    m = run.spec.metrics
    run.trainer_record["metrics_source"] = {
        "format": m.format, "path": f"{TRAINER_OUTPUT_DIR}/{m.path}", "step_key": m.step_key, "step_offset": m.step_offset,
        "map": dict(m.map), "files": trainer_log.files, "tags_written": trainer_log.tags_written(),
        "rewritten_steps": converted.rewritten_steps,
    }
    return converted.steps


def declared_algorithm(run: ExternalRun) -> dict:
    """What the run declares it ran: the trainer's own declaration (the spec's ``declares`` file), else
    the spec's ``contract`` over the algorithm's record, else the record as configured; with its trainer, and the
    algorithm's name the spec declares (``algorithm``) as its display name."""
    algo = run.config["algo"]
    record = algorithm(str(algo.get("estimator", algo.get("short"))))
    base = {**record.declaration(), "loss_reduction": algo.get("loss_reduction"), "trainer": run.spec.name}
    if run.spec.algorithm:
        base["display_name"] = run.spec.algorithm
    if run.spec.declares:
        path = run.trainer_out / run.spec.declares
        try:
            declared = json.loads(path.read_text()).get(ALGORITHM_FIELD)
        except (OSError, ValueError, AttributeError) as exc:
            raise RunFailed(f"trainer {run.spec.name} declares its algorithm in {TRAINER_OUTPUT_DIR}/{run.spec.declares}, "
                            f"which cannot be read ({type(exc).__name__})") from None
        if not isinstance(declared, dict) or not isinstance(declared.get("contract"), dict):
            raise RunFailed(f"{TRAINER_OUTPUT_DIR}/{run.spec.declares} has no {ALGORITHM_FIELD} object with a contract")
        return {**base, **declared, "trainer": run.spec.name, "declared_by": f"{TRAINER_OUTPUT_DIR}/{run.spec.declares}"}
    if run.spec.contract:
        return {**base, "contract": {**base["contract"], **run.spec.contract}, "declared_by": "the trainer spec"}
    return {**base, "declared_by": f"algo={record.short} as configured (trainer {run.spec.name} declares nothing)"}


def evaluate(run: ExternalRun) -> tuple[dict, dict]:
    """The final model and the initial-checkpoint control, as proofgrid's trainer evaluates them."""
    import torch
    from omegaconf import OmegaConf

    from trainer.data import load_split, workload_task
    from trainer.engine_registry import engine_settings
    from trainer.inputs import resolve
    from trainer.loop import evaluate_checkpoints
    from trainer.policy import load_policy
    from trainer.rollout import make_engine

    c = run.config
    w = c["workload"]
    torch.set_num_threads(int(w["num_threads"]))
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(int(c["seed"]))
    random.seed(int(c["seed"]))
    device = torch.device(str(w["device"]))
    model_dir = resolve(w["model_path"])
    final_dir = run.out / run.final_model
    check_final_model(final_dir, run.final_model, model_dir)
    policy = load_final_model(final_dir, run.final_model, str(device))
    reference, tokenizer = load_policy(str(model_dir), str(device))
    examples = load_split(resolve(w["test_path"]), workload_task(w), tokenizer)[: int(w["eval"]["n_prompts"])]
    cfg = OmegaConf.create({**c, "sweep_dir": str(run.sweep_dir) if run.sweep_dir else None})
    engine = make_engine(str(w["engine"]), policy, tokenizer.eos_token_id, tokenizer.pad_token_id,
                         engine_settings(cfg.workload))  # the workload's dtype and threads, as its own trainer's
    return evaluate_checkpoints(cfg, run.out, int(w["n_updates"]), engine, reference, tokenizer, examples, device,
                                run.inputs, final_name=run.final_model)


def run_external(job_spec: dict, argv: list[str], out: Path, sweep_dir: Path | None, stop: StopRequest | None) -> int:
    """The whole run; returns this process's exit code (0, 75 or 76 after a stop, 1 failed, 2 refused)."""
    external = job_spec["external"]
    run = ExternalRun(from_record(external["spec"]), external["config"], argv, out, sweep_dir)
    set_up(run)
    from trainer.inputs import InputDigestError

    timings = run.trainer_record.setdefault("seconds", {})  # wall seconds of each stage (make bench reads them)
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        timings[stage], clock = round(time.perf_counter() - clock, 3), time.perf_counter()

    try:
        verify(run)
    except InputDigestError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    lap("verify_inputs")
    run.write(RUN_RUNNING)  # imports the evaluator's torch and transformers (the record names their versions)
    lap("imports")
    steps = 0
    try:
        code, stopped = train(run, stop)
        lap("trainer")
        if code:
            run.write(RUN_STOPPED, 0, stop=stopped)
            print(f"{PROG}: trainer {run.spec.name} {stopped} (signal {stop.signum if stop else '?'}); the job may run "
                  "again" + (" and resume it" if run.spec.resume and code == EXIT_CHECKPOINTED else
                             ", starting it from scratch"), file=sys.stderr, flush=True)
            return code
        steps = write_metrics(run)
        declared = declared_algorithm(run)
        lap("metrics")
        final, initial = evaluate(run)
        lap("evaluation")
    except (CommandError, RunFailed, MetricsError, CheckpointError) as exc:
        return run.fail(str(exc), steps)
    atomic_write_json(out / EVAL_RECORD, {"initial": initial, "final": final})
    from trainer.metrics_writer import log_eval

    log.info("%s", log_eval(out, int(run.config["workload"]["n_updates"]), initial, final))
    run.write(RUN_COMPLETED, steps, **{ALGORITHM_FIELD: declared})
    print(f"trained {run.spec.name} ({declared.get('short', run.config['algo'].get('short'))}) seed "
          f"{run.config['seed']}: {steps} steps, final model {run.final_model}")
    return 0
