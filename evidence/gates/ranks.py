"""The ranks of a data-parallel run: every rank reported every step, and all ranks agree on every step.

A run of several ranks declares how many in ``run.json`` (``rank_logs``); each rank wrote
``ranks/rank<r>.jsonl`` with, per step, the digest of the step's reduced values as that rank held
them (``facts.data_parallel_ranks.step_digest``). The digest of rank 0's ``metrics.jsonl`` line is recomputed here
from the line itself: a rank whose digest differs held other values after the all_reduces (a rank
that diverged, or a log that is not the run's). A job of several tasks also lists its ranks in
``job.json`` (``ranks``: each one's node and how its runtime ended); each must have completed.
"""

from __future__ import annotations

import json
from pathlib import Path

from evidence.problems import Problem, capped
from facts import JOB_RECORD
from facts.data_parallel_ranks import RANK_LOGS_FIELD, RANKS_DIR, rank_log, step_digest
from facts.states import COMPLETED

KIND = "ranks"


def _rank_records(path: Path, rel: str) -> tuple[dict[int, dict], list[Problem]]:
    """Step -> record of one rank's log, and what is malformed in it."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}, [Problem(rel, "missing: the rank recorded no step", kind=KIND)]
    steps, problems = {}, []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except ValueError:
            problems.append(Problem(rel, "not valid JSON", where=f"line {number}", kind=KIND))
            continue
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, int) or not isinstance(record.get("digest"), str):
            problems.append(Problem(rel, "not a {step, rank, digest} record", where=f"line {number}", kind=KIND))
        elif step in steps:
            problems.append(Problem(rel, f"step {step} recorded twice", where=f"line {number}", kind=KIND))
        else:
            steps[step] = record
    return steps, problems


def check_ranks(records_dir: Path, run_summary: dict | None, metrics: list[dict], job_record: dict,
                prefix: str = "run/") -> list[Problem]:
    """Problems with the ranks of one run: ``records_dir`` holds its ``ranks/`` (``prefix`` is how a
    problem names it: ``run/`` in a job directory, ``data/runs/<job>/`` in a bundle), ``metrics`` are the
    metrics log's records, ``job_record`` the job's ``job.json``. A run of one rank has none."""
    problems = []
    entries = job_record.get("ranks") or []
    if not isinstance(entries, list):  # the launcher writes a list, one entry per rank: a record it did not write
        problems.append(Problem(JOB_RECORD, f"ranks is {type(entries).__name__} {str(entries)[:40]}, not the list of "
                                            "each rank's end the launcher writes", kind=KIND))
        entries = []
    for entry in entries:  # a job of several tasks: how each rank's runtime ended
        if isinstance(entry, dict) and entry.get("state") != COMPLETED:
            cause = f": {entry['failure']}" if entry.get("failure") else ""
            problems.append(Problem(JOB_RECORD, f"rank {entry.get('rank')} on node {entry.get('node_index')} ended "
                                    f"{entry.get('state')}{cause}", kind=KIND))
    world = (run_summary or {}).get(RANK_LOGS_FIELD)
    if not isinstance(world, int) or isinstance(world, bool) or world < 2:
        return problems
    if (tasks := job_record.get("world_size")) is not None and tasks != world:
        problems.append(Problem(JOB_RECORD, f"world_size {tasks}, but the run had {world} ranks", kind=KIND))
    expected = {record["step"]: step_digest(record) for record in metrics if isinstance(record.get("step"), int)}
    for rank in range(world):
        path = rank_log(records_dir, rank)
        rel = f"{prefix}{RANKS_DIR}/{path.name}"
        steps, found = _rank_records(path, rel)
        if not steps and found:
            problems += found
            continue
        missing = sorted(set(expected) - set(steps))
        if missing:
            shown = ", ".join(str(s) for s in missing[:5]) + (", ..." if len(missing) > 5 else "")
            found.append(Problem(rel, f"rank {rank} did not report step(s) {shown} of {len(expected)}", kind=KIND))
        for step in sorted(set(steps) - set(expected)):
            found.append(Problem(rel, f"rank {rank} reported step {step}, which the metrics log has not", kind=KIND))
        for step in sorted(set(steps) & set(expected)):
            record = steps[step]
            if record.get("rank") != rank:
                found.append(Problem(rel, f"records rank {record.get('rank')}, not {rank}", where=f"step {step}",
                                     kind=KIND))
            elif record["digest"] != expected[step]:
                found.append(Problem(rel, f"rank {rank} held other reduced values than the metrics log: the ranks "
                                     "disagree", where=f"step {step}", kind=KIND))
        problems += capped(found)
    return problems


# How a bundle names the nodes of a job of several tasks: by their place in the allocation.
NODE_PLACEHOLDER = "<NODE{}>"
RENDEZVOUS_ADDRESS_PLACEHOLDER = "<RANK0_NODE_ADDR>"


def placement_hosts(record: dict) -> list[str]:
    """Every host name ``job.json`` records of a job of several tasks (its nodes, each rank's, the
    rendezvous node), for the sanitiser to replace wherever else they appear."""
    names = [*(record.get("nodes") or []), *(e.get("node") for e in record.get("ranks") or [] if isinstance(e, dict)),
             (record.get("rendezvous") or {}).get("node")]
    return sorted({n for n in names if isinstance(n, str) and n})


def placement_addresses(record: dict) -> list[str]:
    """The node addresses ``job.json`` records (rank 0's, where the ranks met)."""
    address = (record.get("rendezvous") or {}).get("address")
    return [address] if isinstance(address, str) and address else []


def path_free_placement(record: dict) -> dict:
    """``job.json``'s placement of a job of several tasks without host names or addresses: each node
    becomes ``<NODE<i>>`` by its place in the allocation, so which ranks shared a node stays visible."""
    nodes = record.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        return record
    named = {name: NODE_PLACEHOLDER.format(i) for i, name in enumerate(nodes) if isinstance(name, str)}
    out = {**record, "nodes": [named.get(n, n) for n in nodes]}
    if isinstance(record.get("ranks"), list):
        out["ranks"] = [{**e, "node": named.get(e.get("node"), e.get("node"))} if isinstance(e, dict) else e
                        for e in record["ranks"]]
    if isinstance(record.get("rendezvous"), dict):
        rendezvous = record["rendezvous"]
        out["rendezvous"] = {**rendezvous, "node": named.get(rendezvous.get("node"), rendezvous.get("node")),
                             **({"address": RENDEZVOUS_ADDRESS_PLACEHOLDER} if rendezvous.get("address") else {})}
    return out
