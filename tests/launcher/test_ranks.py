"""The ranks of a run a scheduler started: ranks that cannot meet fail in one line within the rendezvous
timeout (never hang until the time limit), and the evidence's rank check finds a rank that did not
report a step or held other values (digests written here from their definition: SHA256 of the sorted
JSON of a step's reduced values)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import types
from pathlib import Path

from evidence.gates.ranks import check_ranks
from facts.data_parallel_ranks import rank_record_dir
from facts.states import COMPLETED, RUNNING
from launcher.job_records import read_job_record, update_job_record
from launcher.job_spec import JobSpec
from launcher.liveness import death_cause
from launcher.runtime import RunEnd
from launcher.slurm.rank_task import SlurmRankHooks
from tests.sweeps import REPO
from tests.trainer_runs import trainer_cmd


def test_a_rank_whose_rank_0_cannot_be_reached_fails_in_one_line_within_the_rendezvous_timeout(tmp_path):
    # Rank 1 of 2, told to meet rank 0 at a port that nothing serves (bound, never listening): what a rank
    # on a node that cannot reach the first node sees. It must give up after the timeout, in one line.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    env = {**os.environ, "PYTHONNOUSERSITE": "1", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
           "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(closed.getsockname()[1]),
           "PROOFGRID_RENDEZVOUS_TIMEOUT_S": "2"}
    job_dir = tmp_path / "jobs" / "grpo-1"
    job_dir.mkdir(parents=True)
    try:  # a wait that the 2 s did not bound would outlast the 120 s (torch's own default is 300 s)
        with open(job_dir / "trainer.log", "w") as log:
            proc = subprocess.run(trainer_cmd(job_dir / "run", "algo=grpo", "seed=1", "dp_size=2",
                                              "workload.n_updates=2"),
                                  cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=120)
    finally:
        closed.close()
    assert proc.returncode != 0
    last = (job_dir / "trainer.log").read_text().strip().splitlines()[-1]
    assert last.startswith("proofgrid trainer: error: rank 1 of 2 did not meet the others at rank 0's 127.0.0.1:")
    assert "within 2 s" in last and last.endswith("else raise cluster.rendezvous_timeout_s")
    # The job's failure is that line, whole (the runtime keeps the last error line of the trainer's log).
    cause = death_cause(job_dir, f"the trainer exited with {proc.returncode}")
    assert cause == f"the trainer exited with {proc.returncode}: {last} (see jobs/grpo-1/trainer.log)"
    assert not (job_dir / "run" / "metrics.jsonl").exists()


def _digest(values: dict) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


def _run(tmp_path: Path, n: int = 3) -> tuple[Path, list[dict]]:
    """A run of two ranks: metrics records (with a per-rank timing that is not a reduced value) and
    each rank's log of the digest of every step's reduced values."""
    metrics = [{"step": s, "loss": 0.1 * s, "rollout/raw_reward": 0.5 + s / 7, "perf/step_s": 1.0 + s} for s in range(n)]
    (tmp_path / "ranks").mkdir()
    for rank in (0, 1):
        lines = [json.dumps({"step": m["step"], "rank": rank, "host": f"node{rank}",
                             "digest": _digest({"loss": m["loss"], "rollout/raw_reward": m["rollout/raw_reward"]})})
                 for m in metrics]
        (tmp_path / "ranks" / f"rank{rank}.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path, metrics


def test_ranks_that_agree_on_every_step_pass_and_the_per_rank_timings_are_not_compared(tmp_path):
    run, metrics = _run(tmp_path)
    assert check_ranks(run, {"rank_logs": 2}, metrics, {"world_size": 2}) == []
    assert check_ranks(run, {}, metrics, {}) == []  # a run of one rank declares no rank logs


def test_a_rank_that_held_other_values_missed_a_step_or_never_reported_is_named(tmp_path):
    run, metrics = _run(tmp_path)
    log = run / "ranks" / "rank1.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    records[1]["digest"] = _digest({"loss": 0.1, "rollout/raw_reward": 0.5 + 1 / 7 + 1e-12})  # one ulp-ish apart
    log.write_text("".join(json.dumps(r) + "\n" for r in records[:2]))  # and step 2 never reported
    found = [(p.file, p.where, p.reason) for p in check_ranks(run, {"rank_logs": 2}, metrics, {"world_size": 2})]
    assert ("run/ranks/rank1.jsonl", "", "rank 1 did not report step(s) 2 of 3") in found
    assert ("run/ranks/rank1.jsonl", "step 1",
            "rank 1 held other reduced values than the metrics log: the ranks disagree") in found
    assert len(found) == 2
    (run / "ranks" / "rank0.jsonl").unlink()
    found = [(p.file, p.reason) for p in check_ranks(run, {"rank_logs": 2}, metrics, {"world_size": 2})]
    assert ("run/ranks/rank0.jsonl", "missing: the rank recorded no step") in found


def test_a_rank_whose_runtime_did_not_complete_fails_the_job_with_its_node_and_cause(tmp_path):
    run, metrics = _run(tmp_path)
    record = {"world_size": 2, "ranks": [{"rank": 0, "node_index": 0, "state": "COMPLETED"},
                                         {"rank": 1, "node_index": 1, "state": "NO_RECORD", "failure": None}]}
    found = [(p.file, p.reason) for p in check_ranks(run, {"rank_logs": 2}, metrics, record)]
    assert found == [("job.json", "rank 1 on node 1 ended NO_RECORD")]


def test_rank_0_records_its_runtime_s_end_though_a_waiting_launcher_copied_sacct_s_running_meanwhile(tmp_path,
                                                                                                   monkeypatch):
    # While rank 0 gathers the other ranks' records the task is still RUNNING in sacct, and a waiting
    # launcher copies that into job.json over the runtime's COMPLETED (seen at load 10); the ranks entry
    # must keep what the runtime saw. The environment is what submitit's JobEnvironment gives task 0 of 2.
    for name in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    spec = JobSpec(name="grpo-1", algo="grpo", seed=1, sweep_dir=str(tmp_path), trainer_overrides=("algo=grpo",),
                   cpus=1, ray_cpus=0, n_updates=2, source_commit=None, nodes=2)
    spec.job_dir.mkdir(parents=True)
    placed = types.SimpleNamespace(global_rank=0, num_tasks=2, local_rank=0, node=0, hostnames=["n1", "n2"])
    hooks = SlurmRankHooks(spec, environment=placed)
    update_job_record(rank_record_dir(spec.job_dir, 1), {"restart_count": 0, "state": COMPLETED, "node": "n2",
                                                         "node_index": 1, "local_rank": 0})
    update_job_record(spec.job_dir, {"restart_count": 0, "state": RUNNING, "node": "n1"})  # the launcher's copy
    end = RunEnd(state=COMPLETED, exit_code=0, failure=None, stop_signal=None, killed_by_scheduler=False,
                 finished_anyway=False, requeue_refusal=None)
    hooks.ended(spec.job_dir, end, read_job_record(spec.job_dir))
    record = read_job_record(spec.job_dir)
    assert [(r["rank"], r["node"], r["state"]) for r in record["ranks"]] == [(0, socket.gethostname(), COMPLETED),
                                                                                    (1, "n2", COMPLETED)]
    assert record.get("failure") is None


def test_another_nodes_rendezvous_address_is_a_placeholder_in_the_public_command_record(tmp_path):
    """command.public.json names rank 0's node by <RANK0_NODE_ADDR>, never its address or host name (a literal
    added to a sanitiser after it was built was in none of its rules, and the address was published)."""
    from launcher.job_records import write_command_records

    spec = JobSpec(name="grpo-1", algo="grpo", seed=1, sweep_dir=str(tmp_path), trainer_overrides=("algo=grpo",),
                   cpus=1, ray_cpus=0, n_updates=2, source_commit=None, nodes=2)
    spec.job_dir.mkdir(parents=True)
    for address in ("10.217.27.2", "gpu-node-a17.cluster.example"):
        public = write_command_records(spec, ["python", "-m", "trainer"], {"MASTER_ADDR": address}, REPO)
        assert public["env"]["MASTER_ADDR"] == "<RANK0_NODE_ADDR>", public
        assert address not in (spec.job_dir / "command.public.json").read_text()
        assert address in (spec.job_dir / "command.json").read_text()  # the private record keeps it
    local = write_command_records(spec, ["python", "-m", "trainer"], {"MASTER_ADDR": "127.0.0.1"}, REPO)
    assert local["env"]["MASTER_ADDR"] == "127.0.0.1"  # the loopback is no machine's name
