"""What a planned sweep is: its ``JobSpec``s (each a grid cell expanded into the command it runs and
the resources it needs) and the ``Sweep`` that holds them with the launcher's settings.

A ``JobSpec`` is plain data (picklable for submitit, JSON for the local runner and the records).
The planner (``launcher.planning``) makes both; the back ends and the job runtime only read them.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from facts import TRAINER_OUTPUT_DIR, sweep_job_dir
from facts.certify import CERTIFY_FIELD, RESUME, STOP_SETTING
from facts.containers import CONTAINER_FIELD
from facts.data_parallel_ranks import DEFAULT_RENDEZVOUS_TIMEOUT_S
from facts.files import EXPERIMENT_DIGEST_FIELD, FIGURES_FIELD, JOB_SPEC, STAGE_FIELD, certify_job_dir
from facts.license import DEFAULT_LICENSE, LICENSE_FIELD
from facts.processes import DEFAULT_RESOURCE_SAMPLE_S
from facts.sweep_plan import (
    EARLIER_PLANS_FIELD,
    JOB_NONCE_BYTES,
    JOB_NONCE_ENV,
    JOB_NONCE_FIELD,
    PLAN_DIGEST_ENV,
    PLAN_DIGEST_FIELD,
    PLAN_FIELD,
    plan_digest,
    plan_jobs,
)
from launcher.isolation import JobRoots, ecosystem_env
from trainer.external.trainer_spec import fill_output_dir

# Characters a Hydra override value may hold unquoted (a comma would make a sweep, a quote or a
# non-ASCII character fails to parse).
_HYDRA_PLAIN = re.compile(r"[A-Za-z0-9_/.\-+@%]*")


def hydra_value(text: str) -> str:
    """``text`` as a Hydra override value that parses back to exactly ``text``: as is when plain,
    else single-quoted, with quotes (and the backslashes before a quote or the end) escaped."""
    if _HYDRA_PLAIN.fullmatch(text):
        return text
    body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
    return f"'{body}'"


@dataclass(frozen=True)
class JobSpec:
    name: str  # "<arm>-<seed>", the job directory's name
    algo: str  # short name: grpo | rpp | rppb
    seed: int
    sweep_dir: str  # absolute
    trainer_overrides: tuple[str, ...]  # Hydra overrides of the grid cell, e.g. ("algo=rpp", "seed=42")
    cpus: int  # CPUs the job needs: trainer plus its reward workers
    ray_cpus: int  # 0 = the workload does not use Ray
    n_updates: int
    source_commit: str | None
    gpu_model: str | None = None  # e.g. "A40": checked against the visible device inside the job
    arm: str = ""  # the arm's label (launcher.grid); "" in records older than arms: the algo's short name
    arm_overrides: dict[str, str] = field(default_factory=dict)  # the arm's settings, as written
    share_initial_eval: bool = False  # one of several jobs: the initial checkpoint is evaluated once per sweep
    # The allocation of the job (``allocation_shape``): with more than one task, the scheduler starts
    # one runtime per task and each runs one trainer rank; with one, the trainer starts its dp_size ranks.
    nodes: int = 1
    tasks_per_node: int = 1
    rendezvous_timeout_s: int = DEFAULT_RENDEZVOUS_TIMEOUT_S  # ranks that have not met by then fail the job (more than one task)
    resource_sample_s: float = DEFAULT_RESOURCE_SAMPLE_S  # the runtime samples the job's CPU, memory and GPUs this often

    @property
    def tasks(self) -> int:
        """Processes the scheduler starts for the job, one trainer rank each when more than one."""
        return self.nodes * self.tasks_per_node

    # A trainer that is not proofgrid's (a trainer spec with a command): {"argv": its command with every
    # placeholder filled but {output_dir}, "spec": the spec as data (trainer.external.trainer_spec.to_record),
    # "config": the job's resolved, validated config}. None: proofgrid's own trainer.
    external: dict | None = None
    # A reproducibility certificate's job (certify=true, facts.certify): {"of": the grid's job it repeats,
    # "kind": "rerun" | "resume", "stop_at_step": K for a resume}. None: a job of the grid.
    certify: dict | None = None
    # A job of a pre-registered experiment's stage: the SHA256 of the spec it was planned under (registration.json's
    # spec_sha256), recorded in its job.json before it runs, so a spec changed after the results disagrees with every
    # run's own record (evidence.audit.experiment). None: a job of a plain sweep.
    experiment_sha256: str | None = None
    # The plan it was prepared under (facts.sweep_plan: sweep.json's plan_sha256) and its own nonce, drawn when the launcher
    # first planned it and kept across its attempts; both bound when the plan is written (``Sweep.bind_plan``), in its
    # job.json from its start and handed to its trainer (``run_env``). None: not bound (a plan not written yet).
    plan_sha256: str | None = None
    job_nonce: str | None = None
    # Config directories beyond conf/ the launcher composed the arm with (``-cd DIR``, ``hydra.searchpath``):
    # proofgrid's trainer composes the job's config on the same search path (a workload of the user's own).
    config_dirs: tuple[str, ...] = ()
    # Live tracking (tracking.live, launcher.live): {"live": tool, "uri": where, "project": name}, the job runtime's
    # follower logs the job's metrics there while it runs (launcher.runtime.follower). None: off.
    tracking: dict | None = None
    # The image the job runs in (cluster.container, checked by launcher.container.plan_container): {"runtime",
    # "image", "digest", "mounts", "python", "runtime_args", "gpus": GPUs per job, "inputs": {path: pinned SHA256}}.
    # None: the job runs on the host.
    container: dict | None = None
    # cluster.job_ports: TCP ports outside the job's port block its processes may reach (the guard allows them).
    job_ports: tuple[int, ...] = ()

    @property
    def arm_label(self) -> str:
        return self.arm or self.algo

    def identity(self) -> dict:
        """What ``job.json`` records about which job this is (the arm contract; a certificate job says so)."""
        identity = {"algo": self.algo, "seed": self.seed, "arm": self.arm_label, "arm_overrides": dict(self.arm_overrides)}
        if self.experiment_sha256 is not None:  # the pre-registered spec it runs under (an experiment's stage)
            identity[EXPERIMENT_DIGEST_FIELD] = self.experiment_sha256
        for key, value in ((PLAN_DIGEST_FIELD, self.plan_sha256), (JOB_NONCE_FIELD, self.job_nonce)):
            if value is not None:  # the plan it was prepared under, its own nonce
                identity[key] = value
        return identity if self.certify is None else {**identity, CERTIFY_FIELD: dict(self.certify)}

    @property
    def job_dir(self) -> Path:
        """``<sweep>/jobs/<name>``; a certificate job's ``<sweep>/certify/<name>``, outside the grid."""
        return sweep_job_dir(self.sweep_dir, self.name) if self.certify is None else certify_job_dir(self.sweep_dir, self.name)

    @property
    def planned_stop(self) -> int | None:
        """The step a certificate's resume job stops before (its runtime then starts the trainer again), or None."""
        return int(self.certify[STOP_SETTING]) if self.certify is not None and self.certify.get("kind") == RESUME else None

    def trainer_argv(self, output_dir: Path) -> list[str]:
        """The command this job runs, writing its run into ``output_dir``: proofgrid's trainer with
        the cell's overrides (and the sweep directory when its jobs share one initial evaluation).

        The one place that says what a job runs: the job runtime starts it and the dry run prints
        it. A trainer that is not proofgrid's runs as ``python -m trainer.external``, which runs the
        trainer's own command (after ``--``, its placeholders filled by the planner, ``{output_dir}``
        here: ``run/trainer``), then reads its metrics and final model into the run directory and
        evaluates it as proofgrid's trainer does."""
        if self.external is not None:
            shared = ["--sweep-dir", self.sweep_dir] if self.share_initial_eval else []
            own = Path(output_dir) / TRAINER_OUTPUT_DIR
            return [sys.executable, "-m", "trainer.external", "--job-spec", str(self.job_dir / JOB_SPEC),
                    "--output-dir", str(output_dir), *shared, "--", *fill_output_dir(self.external["argv"], own)]
        shared = [f"sweep_dir={hydra_value(self.sweep_dir)}"] if self.share_initial_eval else []
        stop = [f"{STOP_SETTING}={self.planned_stop}"] if self.planned_stop is not None else []
        search = [f"hydra.searchpath=[{','.join(f'file://{d}' for d in self.config_dirs)}]"] if self.config_dirs else []
        return [sys.executable, "-m", "trainer", *search, *self.trainer_overrides,
                f"output_dir={hydra_value(str(output_dir))}", *shared, *stop]

    def trainer_env(self, roots: JobRoots) -> dict[str, str]:
        """What the job's environment adds for its trainer beyond the isolation every job has: the
        other ecosystems' caches for a trainer that is not proofgrid's (``isolation.ecosystem_env``)."""
        return ecosystem_env(roots) if self.external is not None else {}

    def run_env(self) -> dict[str, str]:
        """What the job's runtime adds to its trainer's environment when it runs (never the dry run's command: the
        nonce is drawn when the plan is written): the job's nonce and its plan's digest, which its trainer records."""
        return {name: value for name, value in ((JOB_NONCE_ENV, self.job_nonce), (PLAN_DIGEST_ENV, self.plan_sha256))
                if value is not None}

    def to_json(self) -> str:
        data = asdict(self)
        for key in ("certify", EXPERIMENT_DIGEST_FIELD, PLAN_DIGEST_FIELD, JOB_NONCE_FIELD, "tracking", CONTAINER_FIELD):  # absent: as before them
            if data[key] is None:
                del data[key]
        if not data["job_ports"]:
            del data["job_ports"]
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        data = json.loads(text)
        data["trainer_overrides"] = tuple(data["trainer_overrides"])
        data["config_dirs"] = tuple(data.get("config_dirs") or ())
        data["job_ports"] = tuple(data.get("job_ports") or ())
        return cls(**data)


def allocation_shape(cluster: DictConfig) -> tuple[int, int]:
    """``(nodes, tasks_per_node)`` of each job's allocation: the profile's ``cluster.nodes`` and
    ``cluster.tasks_per_node``, ``(1, 1)`` for a profile without them (the local back end)."""
    return int(cluster.get("nodes") or 1), int(cluster.get("tasks_per_node") or 1)


# A job of several tasks needs a scheduler that starts them; the local back end runs one process per job.
MULTINODE_NEEDS_SLURM = ("{setting} needs cluster=slurm (or a site profile): the local back end runs each job's "
                         "dp_size ranks as processes of this machine; drop the setting, or use cluster=slurm")


@dataclass
class Sweep:
    """A planned, checked sweep: its jobs in order and the launcher's settings they run under."""

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
    experiment_sha256: str | None = None  # an experiment's stage: the pre-registered spec's digest (``registered``)
    certify: list[JobSpec] = field(default_factory=list)  # certify=true: the certificate jobs, outside the grid
    stage: str | None = None  # an experiment's stage (probe, tuning, confirm): sweep.json says which
    prompts: list[str] = field(default_factory=list)  # the dry run's lines of each task's first rendered prompts
    user_rewards: tuple[str, ...] = ()  # the arms' module:function rewards: the seal re-scores with them
    license: str = DEFAULT_LICENSE  # the bundle's license (license=, facts.license), recorded in sweep.json
    figures: bool = True  # figures=false: the seal draws none (sweep.json records it, the build follows it)
    estimates: list[str] = field(default_factory=list)  # the dry run's lines of what a job needs and gets (launcher.job_sizing)

    def registered(self, digest: str, stage: str | None = None) -> Sweep:
        """This sweep as ``stage`` of the experiment pre-registered with spec SHA256 ``digest``: its ``sweep.json``
        and every job's (grid and certificate) ``spec.json`` and ``job.json`` record the digest."""
        self.experiment_sha256, self.stage = digest, stage
        self.specs = [replace(s, experiment_sha256=digest) for s in self.specs]
        self.certify = [replace(s, experiment_sha256=digest) for s in self.certify]
        return self

    @property
    def arms(self) -> dict[str, dict[str, str]]:
        """Arm label -> its overrides (as written), in job order."""
        return {s.arm: dict(s.arm_overrides) for s in self.specs}

    @property
    def all_specs(self) -> list[JobSpec]:
        """Every job the sweep runs: the grid's, then the certificate jobs."""
        return [*self.specs, *self.certify]

    def plan(self) -> dict:
        """What must run, bound before any job starts (``facts.sweep_plan``): every job in order (grid, then certificate
        jobs) with its arm and seed and what it certifies, the workload, run length, and pre-registered spec."""
        jobs = [{"job": s.name, "arm": s.arm_label, "seed": s.seed, **({"certify": dict(s.certify)} if s.certify else {})}
                for s in self.all_specs]
        return {"jobs": jobs, "n_updates": self.n_updates, "workload": self.workload,
                **({EXPERIMENT_DIGEST_FIELD: self.experiment_sha256} if self.experiment_sha256 else {}),
                **({STAGE_FIELD: self.stage} if self.stage else {})}

    def bind_plan(self, nonces: dict[str, str]) -> str:
        """Bind every job to the plan: its digest, and each job's nonce (``nonces``' for a job planned before, a new
        one otherwise), into the specs its ``spec.json`` and its runtime read. Returns the plan's digest."""
        digest = plan_digest(self.plan())
        self.specs, self.certify = ([replace(s, plan_sha256=digest, job_nonce=nonces.get(s.name)
                                             or secrets.token_hex(JOB_NONCE_BYTES)) for s in specs]
                                    for specs in (self.specs, self.certify))
        return digest

    def certify_record(self) -> dict:
        """``sweep.json``'s ``certify``: each certificate job, the grid job it repeats, its kind (and stop step)."""
        return {"jobs": {s.name: {**s.certify, "arm": s.arm_label, "seed": s.seed} for s in self.certify}}

    def record(self) -> dict:
        return {
            "jobs": [s.name for s in self.specs],
            "arms": self.arms,
            "algos": sorted({s.algo for s in self.specs}),
            "seeds": sorted({s.seed for s in self.specs}),
            "n_updates": self.n_updates,
            "eval_responses": self.eval_responses,
            "workload": self.workload,
            "source_commit": self.source_commit,
            "cluster": OmegaConf.to_container(self.cluster, resolve=True),
            LICENSE_FIELD: self.license,
            **({FIGURES_FIELD: False} if not self.figures else {}),
            **({EXPERIMENT_DIGEST_FIELD: self.experiment_sha256} if self.experiment_sha256 else {}),
            **({CERTIFY_FIELD: self.certify_record()} if self.certify else {}),
            **({STAGE_FIELD: self.stage} if self.stage else {}),
            PLAN_FIELD: self.plan(), PLAN_DIGEST_FIELD: plan_digest(self.plan()),
        }

    def plan_history(self, previous: dict) -> list[dict]:
        """``sweep.json``'s earlier plans: the previous record's, and its own plan when this one differs (a sized
        design's second look, a tuning grid extended): the digests an earlier job of this directory may carry."""
        earlier = [e for e in previous.get(EARLIER_PLANS_FIELD) or [] if isinstance(e, dict)]
        before = previous.get(PLAN_DIGEST_FIELD)
        if isinstance(before, str) and before != plan_digest(self.plan()) \
                and before not in {e.get(PLAN_DIGEST_FIELD) for e in earlier}:
            earlier.append({PLAN_DIGEST_FIELD: before, "jobs": plan_jobs(previous.get(PLAN_FIELD) or {})})
        return earlier
