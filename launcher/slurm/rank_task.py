"""A task of a job of several tasks (``cluster.nodes`` x ``cluster.tasks_per_node`` > 1): one trainer rank
placed by Slurm, as the job runtime's hooks.

Slurm starts one task per rank (submitit's ``srun`` line, ``--nodes`` x ``--ntasks-per-node``); each runs
``launcher.slurm.array_task.run_task``, which hands the runtime these hooks. The ranks are Slurm's
(``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, read through submitit's ``JobEnvironment``).
Rank 0 runs on the allocation's first node: its runtime claims its port block there, starts the job's
Ray head there when the workload uses Ray, and publishes the rendezvous (that node's address, the
block's ``master_port``, the Ray head) in ``<job>/ranks/rendezvous.json``, on the file system every
node shares. Every other rank waits for the publication of this very run (job id and restart count),
the first task of each other node joins Ray as a worker with its own block's ports, and each trainer
is given torch.distributed's ``env://`` variables. Rank 0 speaks for the job: the history (a node
failure named by the node that went down), the requeue, and at the end every rank's record gathered
into ``job.json``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

from facts import atomic_write_json
from facts.data_parallel_ranks import RANKS_DIR, RENDEZVOUS_RECORD, rank_record_dir
from facts.states import COMPLETED, FAILED, REQUEUED, TERMINATED
from launcher.isolation import JobRoots, rank_env
from launcher.job_records import read_job_record, update_job_record
from launcher.job_spec import JobSpec
from launcher.ports import PortBlock
from launcher.ray_runtime import JobRay
from launcher.runtime import RunEnd
from launcher.runtime.runtime_hooks import Placement
from launcher.slurm.commands import pipe_records, run_slurm
from launcher.slurm.requeue import keep_scheduler_output, record_scheduler_requeues
from launcher.slurm.slurm_hooks import SlurmHooks, submitit_paths

# At its end, how long rank 0 waits for the other ranks' final records before it gathers them.
RANK_RECORDS_WAIT_S = 30.0
# States a rank's runtime ends in (its own view); anything else is a rank that never finished.
ENDED = frozenset({COMPLETED, FAILED, TERMINATED, REQUEUED})
_POLL_S = 0.2


def rendezvous_path(job_dir: Path) -> Path:
    return Path(job_dir) / RANKS_DIR / RENDEZVOUS_RECORD


class SlurmRankHooks(SlurmHooks):
    """One task of a job of several tasks: rank ``SLURM_PROCID`` of ``SLURM_NTASKS``."""

    def __init__(self, spec: JobSpec, environment=None) -> None:
        super().__init__()
        if environment is None:
            import submitit  # inside a task only: the launcher side imports this module without running it

            environment = submitit.JobEnvironment()
        self.spec = spec
        self.rank, self.tasks = int(environment.global_rank), int(environment.num_tasks)
        self.local_rank, self.node_index = int(environment.local_rank), int(environment.node)
        self.nodes = list(environment.hostnames)
        self.host = socket.gethostname()
        self.published: dict | None = None
        # The record of the job's previous run, before this run's RUNNING record replaces it: the nodes
        # a node failure can have been one of.
        self.previous = read_job_record(spec.job_dir) if self.rank == 0 else {}

    def placement(self) -> Placement:
        return Placement(self.rank, self.tasks, self.local_rank)

    def identity(self) -> dict:
        return {**super().identity(), "rank": self.rank, "world_size": self.tasks, "local_rank": self.local_rank,
                "node_index": self.node_index, "nodes": self.nodes}

    def begin(self, job_dir: Path) -> None:
        if self.rank == 0:  # the job's history is rank 0's; a node failure is named by the node that went down
            record_scheduler_requeues(job_dir, self.job_id, self.restart_count, down_nodes=self._down_nodes)

    def _down_nodes(self) -> list[str]:
        """The previous run's nodes that Slurm's accounting saw go down (``sacctmgr show event``) since it
        started: the node (or nodes) whose failure ended it."""
        nodes, started = self.previous.get("nodes") or [], self.previous.get("started_at")
        if not nodes or not isinstance(started, int | float):
            return []
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started))
        reply = run_slurm(["sacctmgr", "-n", "-P", "show", "event", f"Nodes={','.join(nodes)}", f"Start={since}",
                           "format=NodeName,State"], timeout_s=30).answer()
        down = [e["node"] for e in pipe_records(reply or "", ("node", "state"))
                if e["state"].startswith(("DOWN", "FAIL"))]
        return sorted(set(down) & set(nodes), key=nodes.index)

    def start_services(self, roots: JobRoots, block: PortBlock, env: dict[str, str], ray_cpus: int,
                       confine: Callable[[], None] | None = None,
                       contain: Callable[[list[str]], list[str]] | None = None) -> tuple[dict[str, str], JobRay | None]:
        """Rank 0 publishes the rendezvous (after its Ray head is up); the others wait for it; the first
        task of every other node joins Ray. Returns the trainer's ``env://`` variables (and Ray's address)."""
        per_node = self.spec.tasks_per_node
        address = _address(self.host)
        ray = None
        try:
            if self.rank == 0:
                if self.node_index != 0 or (len(self.nodes) > 1 and address.startswith("127.")):
                    raise RuntimeError(
                        f"rank 0 runs on {self.host} (node {self.node_index} of {', '.join(self.nodes)}), whose address "
                        f"{address} the other nodes must reach; each node's host name must resolve to an address "
                        "the others reach (see /etc/hosts), with Slurm's default block distribution of tasks")
                head = None
                if ray_cpus > 0:
                    ray = JobRay(roots, block, ray_cpus * per_node, env, node_ip=address, confine=confine,
                                 contain=contain)
                    head = ray.start()
                self.published = {"job_id": self.job_id, "restart_count": self.restart_count, "node": self.host,
                                  "address": address, "port": block.ports["master_port"], "ray_address": head,
                                  "published_at": round(time.time(), 3)}
                rendezvous_path(self.spec.job_dir).parent.mkdir(parents=True, exist_ok=True)
                atomic_write_json(rendezvous_path(self.spec.job_dir), self.published)
            else:
                self.published = self._wait_for_rendezvous()
                if ray_cpus > 0 and self.local_rank == 0:  # this node's part of the job's Ray
                    ray = JobRay(roots, block, ray_cpus * per_node, env, node_ip=address,
                                 head=self.published["ray_address"], confine=confine, contain=contain)
                    ray.start()
        except BaseException:
            if ray is not None:
                ray.stop()
            raise
        extra = rank_env(self.published["address"], self.published["port"], self.rank, self.tasks, self.local_rank,
                         per_node, self.spec.rendezvous_timeout_s)
        if self.published.get("ray_address"):
            extra["RAY_ADDRESS"] = self.published["ray_address"]
        return extra, ray

    def _wait_for_rendezvous(self) -> dict:
        """Rank 0's publication of this run; fails in one line when it does not come in time."""
        path, timeout = rendezvous_path(self.spec.job_dir), self.spec.rendezvous_timeout_s
        deadline = time.monotonic() + timeout
        while True:
            published = _read_json(path)
            if published.get("job_id") == self.job_id and published.get("restart_count") == self.restart_count:
                return published
            lead = read_job_record(self.spec.job_dir)
            if lead.get("restart_count") == self.restart_count and lead.get("state") in ENDED:
                raise RuntimeError(f"rank 0 ({lead.get('node')}) ended {lead.get('state')} before it published the "
                                   f"rendezvous: {lead.get('failure') or 'see its runtime.log'}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"rank {self.rank} on {self.host}: rank 0 published no rendezvous for run {self.restart_count} of "
                    f"job {self.job_id} in {path.parent.parent.name}/{RANKS_DIR}/{RENDEZVOUS_RECORD} within {timeout} s; "
                    "the job directory must be on a file system every node of the allocation shares (is it?), and "
                    "rank 0's runtime must have started (see the job's runtime.log)")
            time.sleep(_POLL_S)

    def ended(self, job_dir: Path, end: RunEnd, record: dict) -> dict:
        if self.rank != 0:  # a rank's own record; what the job did is rank 0's to say
            if (paths := submitit_paths()) is not None:
                keep_scheduler_output(job_dir, self.job_id, self.restart_count, paths)
            return record
        record = self._gather(job_dir, end.state, wait_s=0.0 if end.killed_by_scheduler else RANK_RECORDS_WAIT_S)
        return super().ended(job_dir, end, record)

    def _gather(self, job_dir: Path, state: str, wait_s: float) -> dict:
        """``job.json`` with every rank of this run: its node, state and failure, its leftovers in the
        cleanup list, and the rendezvous. Waits up to ``wait_s`` for the other ranks to end. Rank 0's
        ``state`` is its runtime's: meanwhile a waiting launcher may copy sacct's RUNNING into job.json."""
        deadline = time.monotonic() + wait_s
        while True:
            records = {r: read_job_record(rank_record_dir(job_dir, r)) for r in range(1, self.tasks)}
            this_run = {r: rec for r, rec in records.items() if rec.get("restart_count") == self.restart_count}
            if all(rec.get("state") in ENDED for rec in this_run.values()) and len(this_run) == self.tasks - 1 \
                    or time.monotonic() >= deadline:
                break
            time.sleep(_POLL_S)
        own = {**read_job_record(job_dir), "state": state}
        ranks = [_rank_entry(0, {**own, "node": self.host})]
        cleanup = list(own.get("cleanup") or [])
        failures = []
        for r in range(1, self.tasks):
            rec = this_run.get(r, {})
            ranks.append(_rank_entry(r, rec))
            cleanup += [{**item, "rank": r, "node": rec.get("node")} for item in rec.get("cleanup") or []]
            if rec.get("failure"):
                failures.append(f"rank {r} ({rec.get('node')}): {rec['failure']}")
            elif rec.get("state") not in ENDED:
                failures.append(f"rank {r} ({rec.get('node') or 'its node'}) recorded no end")
        changes = {"ranks": ranks, "cleanup": cleanup, "rendezvous": self.published}
        if failures and own.get("state") != COMPLETED:
            changes["failure"] = "; ".join(filter(None, [own.get("failure"), *failures[:2]]))
        return update_job_record(job_dir, changes)


def _rank_entry(rank: int, record: dict) -> dict:
    """What ``job.json`` keeps of one rank's run (``NO_RECORD`` for a rank that never wrote one)."""
    return {"rank": rank, "local_rank": record.get("local_rank"), "node_index": record.get("node_index"),
            "node": record.get("node"), "state": record.get("state") or "NO_RECORD",
            "exit_code": record.get("exit_code"), "failure": record.get("failure"),
            "ports": (record.get("ports") or {}).get("block")}


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _address(host: str) -> str:
    """The address other nodes reach ``host`` at, as its name resolves (the cluster's hosts or DNS)."""
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise RuntimeError(f"this node's host name {host} does not resolve ({exc.strerror}); the other ranks "
                           "could not reach it") from None
