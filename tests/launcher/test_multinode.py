"""Multi-node jobs through `launch.py` on the real multi-node Slurm cluster (scripts/slurm/multinode.sh:
one network namespace per node, each with its own address and hostname): a 2-node data-parallel
array is accepted, each rank on its own node, and its metrics equal the same dp_size on one node bit
for bit; the evidence checks every rank's step records (a tampered one fails the audit); a warned
task stops every rank after the same step and resumes bit-identically; a node that dies under a job
fails it with that node named, and the requeue resumes it."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from facts import CHECKPOINTS_DIR, JOB_RECORD, JOB_RUN_DIR, METRICS_LOG, checkpoint_name
from tests.conftest import MULTINODE_SH
from tests.sweeps import REPO, index_rows, job_records, launch, reseal_bag, wait_for
from tests.trainer_runs import read_eval, read_metrics, trainer_cmd, without_perf

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_multinode_cluster")]

# One sweep, two 2-node tasks that train the same numbers (checkpoint_every changes what is saved, not
# what is computed): the first runs through; the second is warned (USR2, Slurm's time-limit signal) after
# step 3 and, in its resumed run, loses a node. Both must equal one run of dp_size=2 on one node.
N_UPDATES = 16
RUN = ("algo=grpo", "seed=1", f"workload.n_updates={N_UPDATES}", "workload.eval.n_prompts=4")
TWO_NODES = ("dp_size=2", "cluster=slurm", "cluster.nodes=2")
THROUGH, INTERRUPTED = "grpo-checkpoint_every4-1", "grpo-checkpoint_every100-1"


def _env(cluster: dict[str, str], port_base: int) -> dict[str, str]:
    """The multi-node cluster's client variables, its partition as the Slurm profile's default."""
    return {**os.environ, **cluster, "PROOFGRID_SLURM_PARTITION": cluster["PROOFGRID_MULTINODE_PARTITION"],
            "PROOFGRID_PORT_BASE": str(port_base)}


def _addresses(cluster: dict[str, str]) -> dict[str, str]:
    return dict(zip(cluster["PROOFGRID_MULTINODE_NODES"].split(","), cluster["PROOFGRID_MULTINODE_ADDRS"].split(",")))


def _record(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not yet written
        return {}




def _running(job_dir: Path, restart: int, steps: int) -> dict | None:
    """Rank 0's record once run ``restart`` of the job has logged ``steps`` steps (and rank 1's record is
    of that run); fails at once if the job ended first."""
    record = _record(job_dir / JOB_RECORD)
    assert record.get("state") not in ("COMPLETED", "FAILED", "CANCELLED", "TERMINATED") \
        or record.get("restart_count", 0) < restart, f"the job ended before run {restart} trained {steps} steps: {record}"
    log = job_dir / JOB_RUN_DIR / METRICS_LOG
    logged = len(log.read_text().splitlines()) if log.is_file() else 0
    rank1 = _record(job_dir / "ranks" / "rank1" / JOB_RECORD)
    return record if record.get("restart_count") == restart == rank1.get("restart_count") and logged >= steps \
        and record.get("state") == "RUNNING" else None


def _last_step(log: Path) -> int:
    return json.loads(log.read_text().splitlines()[-1])["step"]


def _interrupt(job_dir: Path, cluster: dict[str, str]) -> dict:
    """USR2 after run 0's step 3; a crash of rank 1's node after run 1's second step past the checkpoint.
    Returns what was seen on the way (the warning, the rank logs and checkpoints at it, the node)."""
    seen = {}
    record = wait_for(lambda: _running(job_dir, 0, 3), 300, "run 0 to train 3 steps")
    subprocess.run(["scancel", "--signal=USR2", record["job_id"]], env=_env(cluster, 0), check=True)
    seen["warned"] = wait_for(lambda: (h := _record(job_dir / JOB_RECORD).get("history")) and h[0], 120, "the warning")
    at = seen["warned"]["at_step"]
    # Before the requeued run starts (cred_expire later): each rank's last step, the checkpoints.
    seen["last_steps"] = [_last_step(job_dir / JOB_RUN_DIR / "ranks" / f"rank{r}.jsonl") for r in (0, 1)]
    seen["checkpoints"] = sorted(p.name for p in (job_dir / JOB_RUN_DIR / CHECKPOINTS_DIR).iterdir())
    wait_for(lambda: _running(job_dir, 1, at + 2), 300, "run 1 to train 2 steps past the checkpoint")
    seen["killed"] = _record(job_dir / "ranks" / "rank1" / JOB_RECORD)["node"]
    subprocess.run(["bash", str(MULTINODE_SH), "kill-node", seen["killed"], cluster["PROOFGRID_MULTINODE_DIR"]],
                   check=True, capture_output=True)
    try:
        wait_for(lambda: _record(job_dir / JOB_RECORD).get("restart_count") == 2, 300, "Slurm to requeue the job")
    finally:  # the node comes back whatever happened: the cluster serves the other tests
        subprocess.run(["bash", str(MULTINODE_SH), "restart-node", seen["killed"], cluster["PROOFGRID_MULTINODE_DIR"]],
                       capture_output=True)
    return seen


@pytest.fixture(scope="module")
def two_node_sweep(slurm_multinode_cluster, tmp_path_factory):
    """The sealed sweep above (through the waiting launcher, as a user runs it), what was seen while
    its second task was interrupted, and the one-node run."""
    root = tmp_path_factory.mktemp("multinode")
    reference = subprocess.Popen(trainer_cmd(root / "one-node", *RUN, "workload.checkpoint_every=100", "dp_size=2"),
                                 cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "PYTHONNOUSERSITE": "1"})
    sweep, started = root / "sweep", time.monotonic()
    waiting = subprocess.Popen([sys.executable, "launch.py", "-m", *RUN, "workload.checkpoint_every=4,100", *TWO_NODES,
                                f"hydra.sweep.dir={sweep}"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=_env(slurm_multinode_cluster, 21000))
    try:
        seen = _interrupt(sweep / "jobs" / INTERRUPTED, slurm_multinode_cluster)
        out, err = waiting.communicate(timeout=300)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            subprocess.run([sys.executable, "-m", "launcher", "cancel", str(sweep)], capture_output=True,
                           env=_env(slurm_multinode_cluster, 0))
    print(f"two-node sweep of two tasks, one interrupted twice: {time.monotonic() - started:.1f} s")
    _, reference_err = reference.communicate(timeout=600)
    assert reference.returncode == 0, reference_err[-3000:]
    assert waiting.returncode == 0, out[-2000:] + err[-3000:]
    return {"sweep": sweep, "reference": root / "one-node", "stdout": out, "root": root, **seen}


def test_a_two_node_array_of_two_tasks_is_accepted_with_each_rank_on_its_own_node(two_node_sweep,
                                                                                   slurm_multinode_cluster):
    sweep, addresses = two_node_sweep["sweep"], _addresses(slurm_multinode_cluster)
    assert "audit: clean" in two_node_sweep["stdout"]
    assert {job: row["accepted"] for job, row in index_rows(sweep).items()} == {THROUGH: "yes", INTERRUPTED: "yes"}
    records = job_records(sweep)
    assert len({r["job_id"].split("_")[0] for r in records.values()}) == 1  # one array
    for name, record in records.items():
        nodes, job_dir = record["nodes"], sweep / "jobs" / name
        assert record["world_size"] == 2 and len(set(nodes)) == 2 and set(nodes) <= set(addresses), record
        assert [(r["rank"], r["node"], r["state"]) for r in record["ranks"]] == \
            [(0, nodes[0], "COMPLETED"), (1, nodes[1], "COMPLETED")]
        rendezvous = record["rendezvous"]  # rank 0's node, at its address, on the port its own block holds
        assert (rendezvous["node"], rendezvous["address"]) == (nodes[0], addresses[nodes[0]])
        assert rendezvous["port"] == record["ports"]["master_port"]
        assert (rendezvous["job_id"], rendezvous["restart_count"]) == (record["job_id"], record["restart_count"])
        rank1 = _record(job_dir / "ranks" / "rank1" / JOB_RECORD)
        assert rank1["node"] == nodes[1] and rank1["state"] == "COMPLETED" and rank1["cleanup"] == []
        script = _record(job_dir / "command.json")["sbatch"]
        assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script and "\nsrun " in script
        for rank, node in enumerate(nodes):  # each rank's step records, the last run's written on its node
            lines = [json.loads(ln) for ln in (job_dir / JOB_RUN_DIR / "ranks" / f"rank{rank}.jsonl").read_text().splitlines()]
            assert [ln["step"] for ln in lines] == list(range(N_UPDATES)) and lines[-1]["host"] == node


def test_two_node_dp_metrics_are_bit_identical_to_the_same_dp_size_on_one_node(two_node_sweep):
    # CPU gloo: a two-rank all_reduce adds the same two float32 values whatever carries them, and each
    # rank owns the same prompt groups (its rank), so nothing depends on where the ranks run.
    reference = two_node_sweep["reference"]
    for name in (THROUGH, INTERRUPTED):
        run = two_node_sweep["sweep"] / "jobs" / name / JOB_RUN_DIR
        assert without_perf(read_metrics(run)) == without_perf(read_metrics(reference)), name
        assert read_eval(run) == read_eval(reference), name


def test_a_warned_task_stops_every_rank_after_the_same_step_with_one_checkpoint_and_resumes(two_node_sweep):
    warned, at = two_node_sweep["warned"], two_node_sweep["warned"]["at_step"]
    assert "USR2" in warned["event"] and warned["action"] == "requeued" and warned["checkpointed"] is True
    assert 3 <= at < N_UPDATES and warned["restart_count"] == 0
    assert two_node_sweep["last_steps"] == [at - 1, at - 1]  # rank 0 and rank 1: the same last step
    assert two_node_sweep["checkpoints"] == ["latest", checkpoint_name(at)]  # one, rank 0's, at the warning
    job_dir = two_node_sweep["sweep"] / "jobs" / INTERRUPTED
    assert not (job_dir / "ranks" / "rank1" / CHECKPOINTS_DIR).exists()
    assert (job_dir / "trainer.log").read_text().count(f"resumed from {checkpoint_name(at)}") == 2  # runs 1 and 2


def test_a_node_that_dies_under_the_task_is_named_and_the_requeue_resumes_on_the_nodes_left(two_node_sweep):
    killed, job_dir = two_node_sweep["killed"], two_node_sweep["sweep"] / "jobs" / INTERRUPTED
    record = _record(job_dir / JOB_RECORD)
    assert record["restart_count"] == 2 and record["failure"] is None and record["cleanup"] == []
    failed = record["history"][1]  # recorded by the next run: on a dead node nothing is left to record it
    assert (failed["kind"], failed["node"], failed["down_nodes"], failed["restart_count"]) == \
        ("node-failure", killed, [killed], 1), record["history"]
    assert f"node {killed} went down" in failed["event"] and killed not in record["nodes"]
    with open(two_node_sweep["sweep"] / "bundle" / "data" / "incidents.csv", newline="") as f:
        incidents = [(r["job"], r["kind"]) for r in csv.DictReader(f)]
    assert incidents == [(INTERRUPTED, "requeue"), (INTERRUPTED, "node-failure")]
    assert (job_dir / "trainer.log").read_text().count("eval final") == 1


def test_the_bundle_keeps_every_rank_s_records_and_names_no_node(two_node_sweep, slurm_multinode_cluster):
    data = two_node_sweep["sweep"] / "bundle" / "data" / "runs" / THROUGH
    assert sorted(p.name for p in (data / "ranks").iterdir()) == ["rank0.jsonl", "rank1.jsonl"]
    assert (data / "logs" / "rank1" / "trainer.log").is_file()
    record = _record(data / JOB_RECORD)
    assert record["nodes"] == ["<NODE0>", "<NODE1>"] and [r["node"] for r in record["ranks"]] == ["<NODE0>", "<NODE1>"]
    assert record["rendezvous"]["address"] == "<RANK0_NODE_ADDR>"
    bundle = two_node_sweep["sweep"] / "bundle" / "data"
    text = "\n".join(p.read_text(errors="replace") for p in bundle.rglob("*") if p.is_file() and p.suffix != ".png")
    for name, address in _addresses(slurm_multinode_cluster).items():
        assert f'"{name}"' not in text and address not in text


def _bundle_copy(two_node_sweep, name: str) -> Path:
    copy = two_node_sweep["root"] / name
    shutil.copytree(two_node_sweep["sweep"] / "bundle", copy)
    return copy


def _audit(bundle: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bundle)], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode != 0, proc.stdout
    return proc.stdout + proc.stderr


def test_a_rank_log_that_disagrees_or_misses_a_step_fails_the_audit_even_resealed(two_node_sweep):
    bundle = two_node_sweep["root"] / "tampered-bundle"
    shutil.copytree(two_node_sweep["sweep"] / "bundle", bundle)
    disagrees = bundle / "data" / "runs" / INTERRUPTED / "ranks" / "rank1.jsonl"
    lines = disagrees.read_text().splitlines()
    record = json.loads(lines[2])
    lines[2] = json.dumps({**record, "digest": record["digest"][::-1]})
    disagrees.write_text("\n".join(lines) + "\n")
    misses = bundle / "data" / "runs" / THROUGH / "ranks" / "rank0.jsonl"
    misses.write_text("".join(line + "\n" for line in misses.read_text().splitlines()[:-1]))
    reseal_bag(bundle)  # the manifests and the crate agree: only the rank check can notice
    proc = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bundle)], cwd=REPO, capture_output=True,
                          text=True)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"data/runs/{INTERRUPTED}/ranks/rank1.jsonl: step 2: rank 1 held other" in said
    assert "the ranks disagree" in said
    assert f"data/runs/{THROUGH}/ranks/rank0.jsonl: rank 0 did not report step(s) {N_UPDATES - 1} of {N_UPDATES}" in said


def test_a_job_whose_rank_log_disagrees_is_rejected_by_validation(two_node_sweep):
    job = two_node_sweep["root"] / "tampered-job"
    shutil.copytree(two_node_sweep["sweep"] / "jobs" / THROUGH, job, symlinks=True)
    log = job / JOB_RUN_DIR / "ranks" / "rank1.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    records[0]["digest"] = "0" * 64
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    proc = subprocess.run([sys.executable, "-m", "evidence", "validate", str(job)], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode != 0 and "run/ranks/rank1.jsonl" in proc.stdout + proc.stderr
    assert "the ranks disagree" in proc.stdout + proc.stderr


def test_more_nodes_than_the_partition_has_is_refused_in_one_line_before_submission(slurm_multinode_cluster,
                                                                                    tmp_path):
    nodes = len(_addresses(slurm_multinode_cluster))
    proc = launch(tmp_path / "s", *RUN, f"dp_size={nodes + 1}", "cluster=slurm", f"cluster.nodes={nodes + 1}",
                  env=_env(slurm_multinode_cluster, 21500), timeout=120)
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    partition = slurm_multinode_cluster["PROOFGRID_MULTINODE_PARTITION"]
    assert line == (f"proofgrid: error: cluster.nodes={nodes + 1} is more than partition {partition} has "
                    f"({nodes} node(s)); set cluster.nodes<={nodes} or choose another partition")
    assert not (tmp_path / "s" / "jobs").exists() and not (tmp_path / "s" / ".submitit").exists()


def test_ranks_that_cannot_meet_fail_the_job_in_one_line_naming_the_rendezvous(slurm_multinode_cluster, tmp_path):
    """A firewall between the nodes (every node drops TCP to the job's port blocks arriving from the
    others): rank 1 cannot reach rank 0's store, and the job fails after cluster.rendezvous_timeout_s
    with that cause in one line, instead of hanging until its time limit."""
    base, last = 24576, 24576 + 4 * 64 - 1  # four port blocks (below the ephemeral range): the job claims the first free one
    nodes = list(_addresses(slurm_multinode_cluster))
    state = slurm_multinode_cluster["PROOFGRID_MULTINODE_DIR"]
    sweep = tmp_path / "s"
    try:
        for node in nodes:
            subprocess.run(["bash", str(MULTINODE_SH), "block-ports", node, f"{base}-{last}", state], check=True,
                           capture_output=True)
        started = time.monotonic()
        proc = launch(sweep, "algo=grpo", "seed=1", "workload.n_updates=2", "workload.eval.n_prompts=4", *TWO_NODES,
                      "cluster.rendezvous_timeout_s=10", env=_env(slurm_multinode_cluster, base), timeout=300)
        took = time.monotonic() - started
    finally:  # the cluster serves the other tests
        for node in nodes:
            subprocess.run(["bash", str(MULTINODE_SH), "unblock-ports", node, state], capture_output=True)
    assert proc.returncode != 0, proc.stdout[-2000:]
    (record,) = job_records(sweep).values()
    port = record["ports"]["master_port"]
    assert base <= port <= last, f"the job claimed port {port}, outside the blocked {base}-{last}: {record}"
    assert record["state"] == "FAILED", record
    failure = record["failure"]
    assert "did not meet the others at rank 0's" in failure and f":{port} within 10 s" in failure, failure
    assert "can the nodes reach each other on that port? else raise cluster.rendezvous_timeout_s" in failure
    assert "\n" not in failure
    (row,) = index_rows(sweep).values()
    assert row["accepted"] == "no" and "did not meet the others" in proc.stdout, proc.stdout[-2000:]
    assert took < 200, f"the job took {took:.0f} s to fail: the rendezvous timeout did not end it"


def _processes_naming(needles: list[str]) -> list[str]:
    """Command lines of this machine's processes (every namespace's: they share the PID namespace) that
    contain any of ``needles``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in cmdline for n in needles) and str(os.getpid()) != proc.name:
            found.append(cmdline[:200])
    return found


def test_the_job_s_ray_spans_both_nodes_and_is_torn_down_on_each(slurm_multinode_cluster, tmp_path):
    """Reward workers on the job's Ray across a 2-node task: each node's part holds cpus_per_job=3 CPUs and
    the two ranks ask for 2 actors each, so the 4 actors only fit on a Ray that spans both nodes (one
    that did not would leave an actor unscheduled and the job failing). At the end no process of the
    job's Ray is left, on either node."""
    sweep = tmp_path / "s"
    proc = launch(sweep, "algo=grpo", "seed=1", "workload.n_updates=2", "workload.eval.n_prompts=4", *TWO_NODES,
                  "workload.reward_workers=2", "workload.cpus_per_job=3", env=_env(slurm_multinode_cluster, 25000),
                  timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (row,) = index_rows(sweep).values()
    assert row["accepted"] == "yes", row
    (record,) = job_records(sweep).values()
    job = sweep / "jobs" / row["job"]
    addresses = _addresses(slurm_multinode_cluster)
    head = record["rendezvous"]["ray_address"]
    assert head.split(":")[0] == addresses[record["node"]], record["rendezvous"]  # the head: rank 0's node
    rank1 = json.loads((job / "ranks" / "rank1" / JOB_RECORD).read_text())
    assert rank1["node"] != record["node"]
    joined = (job / "ranks" / "rank1" / "ray-start.log").read_text()
    assert head in joined or "Ray runtime started" in joined, joined[-2000:]
    # Ray's processes name the short alias of their roots (launcher/isolation.py: pgray-<digest of the
    # directory whose roots they are>), the others the sweep's own paths.
    aliases = [f"pgray-{hashlib.sha256(str(d.resolve()).encode()).hexdigest()[:10]}" for d in (job, job / "ranks" / "rank1")]
    left = _processes_naming([str(sweep.resolve()), *aliases])
    assert not left, left
