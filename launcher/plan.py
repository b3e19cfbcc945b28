"""Planning: the Hydra grid expanded into checked ``JobSpec``s, and the deterministic dry run.

``plan_sweep`` turns the composed config of every grid cell into a ``JobSpec`` and runs every
preflight check (nothing is started). ``expanded_commands`` is the deterministic, path-free dry-run
output; ``write_plan`` records it with ``sweep.json``. Nothing here starts, submits or waits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from launcher.isolation import JobRoots, isolated_env
from launcher.ports import NAMED_PORTS
from launcher.preflight import PreflightError, check_inputs, check_job_config, check_resources, check_source
from launcher.records import SWEEP_RECORD, path_free_sanitizer, public_copy
from launcher.spec import JobSpec
from trainer.inputs import REPO_ROOT

# Settings of the launcher itself: never passed on to the trainer.
LAUNCHER_KEYS = ("dry_run", "wait", "formal", "cluster")
COMMANDS_FILE = "commands.txt"


@dataclass
class Sweep:
    sweep_dir: Path
    cluster: DictConfig
    specs: list[JobSpec]
    dry_run: bool
    wait: bool
    formal: bool
    source_commit: str | None
    n_updates: int
    eval_responses: int
    workload: str

    def record(self) -> dict:
        return {
            "jobs": [s.name for s in self.specs],
            "algos": sorted({s.algo for s in self.specs}),
            "seeds": sorted({s.seed for s in self.specs}),
            "n_updates": self.n_updates,
            "eval_responses": self.eval_responses,
            "workload": self.workload,
            "source_commit": self.source_commit,
            "cluster": OmegaConf.to_container(self.cluster, resolve=True),
        }


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def trainer_overrides(overrides: list[str]) -> tuple[str, ...]:
    kept = []
    for o in overrides:
        key = _override_key(o)
        if key.startswith("hydra.") or key.split(".")[0] in LAUNCHER_KEYS:
            continue
        kept.append(o)
    return tuple(sorted(kept))


def plan_sweep(root_cfg: DictConfig, job_cfgs: list[DictConfig], job_overrides: list[list[str]],
               sweep_dir: Path) -> Sweep:
    """Expand and check the grid; raises ``PreflightError`` before anything is submitted."""
    sweep_dir = Path(sweep_dir).resolve()
    formal = bool(root_cfg.formal)
    commit = check_source(formal)
    cluster = root_cfg.cluster
    specs: list[JobSpec] = []
    checked_workloads: set[str] = set()
    for cfg, overrides in zip(job_cfgs, job_overrides):
        name = f"{cfg.algo.short}-{cfg.seed}"
        check_job_config(cfg, name)
        w = cfg.workload
        if w.name not in checked_workloads:
            check_inputs(w)
            check_resources(w, cluster, int(cfg.dp_size))
            checked_workloads.add(w.name)
        specs.append(JobSpec(
            name=name, algo=str(cfg.algo.short), seed=int(cfg.seed), sweep_dir=str(sweep_dir),
            trainer_overrides=trainer_overrides(list(overrides)), cpus=int(w.cpus_per_job),
            ray_cpus=int(w.reward_workers) and int(w.cpus_per_job), n_updates=int(w.n_updates),
            source_commit=commit, gpu_model=cluster.get("gpu_model") or None,
        ))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise PreflightError(
            f"grid cells share the job name(s) {', '.join(dup)}: a sweep varies algo and seed only; "
            "run other settings as separate sweeps (hydra.sweep.dir=...)"
        )
    if cluster.kind == "local" and not bool(root_cfg.wait):
        raise PreflightError("wait=false needs cluster=slurm: local jobs live only as long as the launcher")
    shapes = {(str(c.workload.name), int(c.workload.n_updates), int(c.workload.eval.n_prompts) * int(c.workload.eval.k))
              for c in job_cfgs}
    if len(shapes) != 1:
        raise PreflightError(
            "the grid mixes workloads, run lengths or eval sizes; a sweep compares algos and seeds on one "
            "frozen workload: run the others as separate sweeps"
        )
    ((workload, n_updates, eval_responses),) = shapes
    return Sweep(sweep_dir, cluster, sorted(specs, key=lambda s: s.name), bool(root_cfg.dry_run),
                 bool(root_cfg.wait), formal, commit, n_updates, eval_responses, workload)


def expanded_command(spec: JobSpec) -> dict:
    """The job's full command as it will run, with symbolic ports (claimed only at run time)."""
    from launcher.runtime import trainer_argv

    roots = JobRoots(spec.job_dir)
    ports = {name: f"<PORT:{name}>" for name in NAMED_PORTS}
    # Only what the job itself sets (not a diff against this shell), so the output is the same
    # wherever the dry run runs: CI compares it with a committed golden file.
    env = isolated_env(roots, ports, {})
    env["PROOFGRID_SOURCE_COMMIT"] = "<SOURCE_COMMIT>"
    if spec.ray_cpus:
        env["RAY_ADDRESS"] = "127.0.0.1:<PORT:ray_gcs>"
    env["RAY_TMPDIR"] = "<RAY_ALIAS>"
    return {"argv": trainer_argv(spec, roots), "env": dict(sorted(env.items()))}


def expanded_commands(sweep: Sweep) -> list[str]:
    """One deterministic, path-free line per job (the dry-run output and ``commands.txt``)."""
    from launcher.slurm import sbatch_line

    lines = []
    if sweep.cluster.kind == "slurm":
        lines.append("# " + sbatch_line(sweep.cluster, len(sweep.specs), "<SWEEP_DIR>/.submitit/<RUN>"))
    for i, spec in enumerate(sweep.specs):
        cmd = public_copy(expanded_command(spec), path_free_sanitizer(spec, REPO_ROOT))
        argv = " ".join(cmd["argv"])
        env = " ".join(f"{k}={v}" for k, v in cmd["env"].items())
        lines.append(f"[{i}] {spec.name}: env -u RAY_ADDRESS {env} {argv}" if not spec.ray_cpus
                     else f"[{i}] {spec.name}: env {env} {argv}")
    return lines


def write_plan(sweep: Sweep) -> None:
    """Write commands.txt and sweep.json. A re-run keeps the sweep's creation date and submission
    history, so the sealed bundle of an unchanged sweep stays byte-identical."""
    sweep.sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep.sweep_dir / COMMANDS_FILE).write_text("\n".join(expanded_commands(sweep)) + "\n")
    path = sweep.sweep_dir / SWEEP_RECORD
    previous = json.loads(path.read_text()) if path.is_file() else {}
    record = {**sweep.record(), "created": previous.get("created", date.today().isoformat())}
    if "submissions" in previous:
        record["submissions"] = previous["submissions"]
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
