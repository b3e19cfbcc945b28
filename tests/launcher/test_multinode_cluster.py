"""The throwaway multi-node Slurm cluster (scripts/slurm/multinode.sh) is a real one: a batch job spans
two nodes with their own hostnames and addresses, torch.distributed's gloo reduces across them through
srun, and a node that crashes under a job ends the job NODE_FAIL in sacct, requeues it onto the nodes
left and comes back idle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import MULTINODE_SH
from tests.sweeps import wait_for

# Job states sacct reports for a job that is still queued, running or on its way to a rerun.
NOT_ENDED = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING", "CONFIGURING"}


def _run(cluster: dict[str, str], *cmd: str) -> str:
    return subprocess.run(cmd, env={**os.environ, **cluster}, check=True, capture_output=True, text=True).stdout




def _sbatch(cluster: dict[str, str], tmp_path: Path, script: str, *options: str) -> str:
    """Submit ``script`` (a bash script body) to the cluster's partition; its output goes to
    ``tmp_path/job.out``. A 2-minute limit keeps a stuck job from holding nodes."""
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\nset -eu\n" + script)
    return _run(cluster, "sbatch", "--parsable", f"--partition={cluster['PROOFGRID_MULTINODE_PARTITION']}",
                "--time=2", f"--output={tmp_path / 'job.out'}", f"--chdir={tmp_path}", *options, str(path)).strip()


def _runs(cluster: dict[str, str], job_id: str) -> list[tuple[str, list[str]]] | None:
    """(state, nodes) of every run of the job, first first (``sacct -D``: a requeued job has one record per
    run); None while a run's node list is not yet complete. sacct first records a multi-node job on its
    batch host alone and names all its nodes a few seconds later (here up to ~5 s; seen on real sites too,
    reframe-hpc/reframe#2567); NNodes is right from the start."""
    runs = []
    for line in _run(cluster, "sacct", "-D", "-X", "-P", "-n", "-j", job_id, "-o", "State,NNodes,NodeList").splitlines():
        state, count, nodelist = line.split("|")
        nodes = _run(cluster, "scontrol", "show", "hostnames", nodelist).split() if nodelist not in ("", "None assigned") else []
        if nodes and len(nodes) != int(count):
            return None
        runs.append((state.split()[0], nodes))  # "CANCELLED by 0" -> CANCELLED
    return runs


def _ended(cluster: dict[str, str], job_id: str, runs: int = 1, timeout: float = 60) -> tuple[str, list[str]]:
    """(state, nodes) of the job's last run, once its ``runs``-th run has ended."""
    return wait_for(lambda: (seen := _runs(cluster, job_id)) and len(seen) >= runs and seen[-1][0] not in NOT_ENDED
                     and seen[-1], timeout, f"run {runs} of job {job_id} to end")


def _nodes(cluster: dict[str, str]) -> dict[str, str]:
    """Node name -> its address, as the cluster's env.sh gives them."""
    return dict(zip(cluster["PROOFGRID_MULTINODE_NODES"].split(","), cluster["PROOFGRID_MULTINODE_ADDRS"].split(",")))


def test_a_two_node_job_s_srun_tasks_run_on_two_nodes_under_their_own_hostnames_and_addresses(
        slurm_multinode_cluster, tmp_path):
    cluster = slurm_multinode_cluster
    job_id = _sbatch(cluster, tmp_path, """srun bash -c 'echo "$SLURM_PROCID $SLURM_LOCALID $SLURMD_NODENAME $(hostname) $(hostname -I)"'\n""",
                     "--nodes=2", "--ntasks-per-node=2")
    state, allocated = _ended(cluster, job_id)
    assert state == "COMPLETED", (state, (tmp_path / "job.out").read_text())

    tasks = [line.split() for line in (tmp_path / "job.out").read_text().splitlines()]
    assert sorted(int(t[0]) for t in tasks) == [0, 1, 2, 3]
    assert all(len(t) == 5 for t in tasks), tasks  # one address per node: its own, on the cluster's bridge
    assert len(set(allocated)) == 2 and set(allocated) <= set(_nodes(cluster))
    for node in allocated:
        on_node = [t for t in tasks if t[2] == node]
        assert sorted(int(t[1]) for t in on_node) == [0, 1]  # SLURM_LOCALID: two tasks per node
        assert {t[3] for t in on_node} == {node}  # the node's hostname is its own
        assert {t[4] for t in on_node} == {_nodes(cluster)[node]}
    assert len({t[4] for t in tasks}) == 2


ALL_REDUCE = """\
import datetime, json, os, socket
import torch
import torch.distributed as dist

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                        rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
value = torch.tensor([rank + 1.0, 0.5 ** rank, 3.0 * rank * rank], dtype=torch.float64)
dist.all_reduce(value)
print(json.dumps({"rank": rank, "host": socket.gethostname(), "sum": value.tolist()}), flush=True)
dist.destroy_process_group()
"""


def test_a_gloo_all_reduce_through_srun_across_two_nodes_gives_the_sum_over_their_ranks(slurm_multinode_cluster, tmp_path):
    cluster = slurm_multinode_cluster
    (tmp_path / "all_reduce.py").write_text(ALL_REDUCE)
    # The batch step runs on the allocation's first node: the rendezvous is there, on a port free there.
    job_id = _sbatch(cluster, tmp_path, f"""\
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR=$(getent hosts "$first" | awk '{{print $1}}')
export MASTER_PORT=$({sys.executable} -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
echo "rendezvous $first $MASTER_ADDR $MASTER_PORT"
export OMP_NUM_THREADS=1
srun {sys.executable} all_reduce.py
""", "--nodes=2", "--ntasks-per-node=1")
    state, allocated = _ended(cluster, job_id, timeout=90)
    out = (tmp_path / "job.out").read_text()
    assert state == "COMPLETED", (state, out)

    [rendezvous] = [line.split() for line in out.splitlines() if line.startswith("rendezvous ")]
    assert rendezvous[1:3] == [allocated[0], _nodes(cluster)[allocated[0]]]
    ranks = sorted((json.loads(line) for line in out.splitlines() if line.startswith("{")), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1]
    assert sorted(r["host"] for r in ranks) == sorted(allocated)  # one rank on each node
    expected = [sum(rank + 1.0 for rank in range(2)), sum(0.5 ** rank for rank in range(2)),
                sum(3.0 * rank * rank for rank in range(2))]
    assert all(r["sum"] == expected for r in ranks), (ranks, expected)


def test_a_node_that_crashes_under_a_job_ends_it_node_fail_requeues_it_onto_the_nodes_left_and_comes_back_idle(
        slurm_multinode_cluster, tmp_path):
    cluster = slurm_multinode_cluster
    directory = cluster["PROOFGRID_MULTINODE_DIR"]
    # First run: a task on each node that marks itself started and waits; the rerun reports where it ran.
    job_id = _sbatch(cluster, tmp_path, """\
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then srun hostname > rerun-hosts; exit 0; fi
srun bash -c 'touch "started-$SLURMD_NODENAME"; exec sleep 300'
""", "--nodes=2", "--ntasks-per-node=1", "--requeue")
    try:
        allocated = wait_for(lambda: (runs := _runs(cluster, job_id)) and runs[0][0] == "RUNNING" and runs[0][1],
                              30, f"job {job_id} to run")
        wait_for(lambda: all((tmp_path / f"started-{node}").exists() for node in allocated), 30,
                  "the job's tasks to start on both nodes")
        crashed = allocated[1]  # not the batch step's node: slurmctld, not the script, must end the job
        subprocess.run(["bash", str(MULTINODE_SH), "kill-node", crashed, directory], check=True, capture_output=True)
        try:
            first = wait_for(lambda: (runs := _runs(cluster, job_id)) and runs[0][0] != "RUNNING" and runs[0], 60,
                              f"slurmctld to end job {job_id} on the crashed node {crashed}")
            assert first == ("NODE_FAIL", allocated)
            state, rerun_on = _ended(cluster, job_id, runs=2)
            assert state == "COMPLETED" and crashed not in rerun_on, (state, rerun_on, _runs(cluster, job_id))
            assert sorted((tmp_path / "rerun-hosts").read_text().split()) == sorted(rerun_on)
            assert _run(cluster, "sinfo", "-h", "-n", crashed, "-o", "%T").strip().startswith("down")
        finally:
            subprocess.run(["bash", str(MULTINODE_SH), "restart-node", crashed, directory], check=True,
                           capture_output=True)
        wait_for(lambda: _run(cluster, "sinfo", "-h", "-n", crashed, "-o", "%T").strip() == "idle", 30,
                  f"{crashed} to be idle again")
    finally:
        subprocess.run(["scancel", job_id], env={**os.environ, **cluster}, capture_output=True)
