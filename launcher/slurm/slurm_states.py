"""Scheduler states of array tasks as Slurm reports them, and the rules for when to believe them.

Slurm names array tasks in two notations: one task per line (``88_3``) and, for tasks that never
started, one aggregated line in array-range notation (``88_[1-3%4]``, ``88_[1,3-5]``); sacct keeps
that aggregated form even after the array is cancelled. ``expand_job_ids`` turns both into task
ids. A state is trusted only when Slurm confirms it: a state that ``--requeue`` or preemption can
follow (``TRANSIENT_STATES``) is final only when ``squeue`` no longer holds the task on a second
look, and a task that neither sacct nor squeue reports any more is ``VANISHED`` only on a second
look too (never left PENDING forever).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

from facts.states import COMPLETED, IN_FLIGHT_STATES, TRANSIENT_STATES, VANISHED
from launcher.slurm.commands import pipe_records, run_slurm

# How long to wait before the confirming second look.
CONFIRM_DELAY_S = 2.0

_TASK_RANGE = re.compile(r"^(?P<array>\d+)_\[(?P<ranges>[0-9,\-]+)(?:%\d+)?\]$")


def expand_job_ids(text: str) -> list[str]:
    """Task ids of one sacct/squeue JobID field: ``88_[1-3%4]`` -> ``88_1 88_2 88_3``,
    ``88_[1,3-5]`` -> ``88_1 88_3 88_4 88_5``; ``88_7`` and a plain ``88`` stay as they are.
    (The ``%N`` suffix is the array's concurrency limit, not a task.)"""
    text = text.strip()
    match = _TASK_RANGE.match(text)
    if match is None:
        return [text] if text else []
    ids = []
    for part in match["ranges"].split(","):
        first, _, last = part.partition("-")
        ids += [f"{match['array']}_{i}" for i in range(int(first), int(last or first) + 1)]
    return ids


def base_state(text: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``; an empty field -> ``UNKNOWN``."""
    return text.split()[0].rstrip("+") if text.strip() else "UNKNOWN"


def _elapsed_s(text: str) -> int:
    return int(text) if text.strip().isdigit() else 0


# What proofgrid asks sacct for, and what ``sacct_records`` reads back, field by field.
SACCT_FIELDS = ("JobID", "State", "ExitCode", "ElapsedRaw", "NodeList")
SACCT_FORMAT = "--format=" + ",".join(SACCT_FIELDS)
# squeue's format letters for the same idea: task id, state, and why a pending task waits.
SQUEUE_FIELDS = {"JobID": "%i", "State": "%T", "Reason": "%r"}
SQUEUE_FORMAT = "|".join(SQUEUE_FIELDS.values())


def sacct_records(text: str) -> list[tuple[str, dict]]:
    """``sacct -P -n SACCT_FORMAT`` -> ``(task id, {state, exit_code, signal, elapsed_s, node})`` per
    record line and task, in sacct's order (an aggregated range line gives one pair per task)."""
    records = []
    for fields in pipe_records(text, SACCT_FIELDS):
        code, _, sig = fields["ExitCode"].partition(":")
        node = fields["NodeList"]
        info = {"state": base_state(fields["State"]), "exit_code": int(code) if code.isdigit() else 0,
                "signal": int(sig) if sig.isdigit() else 0, "elapsed_s": _elapsed_s(fields["ElapsedRaw"]),
                "node": node if node and node != "None assigned" else ""}
        records += [(task, dict(info)) for task in expand_job_ids(fields["JobID"])]
    return records


def parse_sacct(text: str) -> dict[str, dict]:
    """``sacct -X -P -n SACCT_FORMAT`` -> per task id ``{state, exit_code, signal, elapsed_s, node}``
    (a task's last record wins); aggregated range lines are expanded."""
    return dict(sacct_records(text))


def parse_squeue(text: str) -> dict[str, dict]:
    """``squeue -h -r -o SQUEUE_FORMAT`` -> per task id ``{state, reason}`` (ranges expanded)."""
    return {task: {"state": base_state(fields["State"]), "reason": fields["Reason"].strip()}
            for fields in pipe_records(text, tuple(SQUEUE_FIELDS)) for task in expand_job_ids(fields["JobID"])}


def sacct_states(job_ids: list[str]) -> dict[str, dict]:
    """What accounting says about the arrays of ``job_ids``, per task id."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    return parse_sacct(run_slurm(["sacct", "-X", "-P", "-n", "-j", ",".join(arrays), SACCT_FORMAT]).output())


def sacct_runs(job_id: str) -> list[dict]:
    """Every run of one task that accounting recorded, oldest first: a task that Slurm requeued
    (node failure, preemption, ``scontrol requeue``) has one record per run with ``sacct -D``."""
    text = run_slurm(["sacct", "-D", "-X", "-P", "-n", "-j", job_id, SACCT_FORMAT]).output()
    return [info for _task, info in sacct_records(text)]


def squeue_states(job_ids: list[str]) -> dict[str, dict]:
    """What the controller still holds (queued, running, requeued) of the arrays of ``job_ids``."""
    arrays = {j.split("_")[0] for j in job_ids}
    queued = parse_squeue(run_slurm(["squeue", "-h", "-r", "--me", "-o", SQUEUE_FORMAT]).output())
    return {task: info for task, info in queued.items() if task.split("_")[0] in arrays}


_NOTHING_YET = {"exit_code": None, "signal": 0, "elapsed_s": 0, "node": "", "reason": ""}


def _looks(job_ids: list[str]) -> tuple[dict[str, dict], set[str]]:
    """One look: what sacct and squeue say now, combined by ``combine_looks``, and the tasks squeue holds."""
    accounted = sacct_states(job_ids)
    queued = squeue_states(job_ids)
    return combine_looks(accounted, queued, job_ids), set(queued)


def combine_looks(accounted: dict[str, dict], queued: dict[str, dict], job_ids: list[str]) -> dict[str, dict]:
    """sacct's view per task, overridden by squeue's for tasks the controller still holds: a
    requeued task's last sacct record (REQUEUED, NODE_FAIL, PREEMPTED) is not its state while it is
    queued again.

    Until Slurm splits an array's not-yet-started tasks off its meta record, sacct shows them only
    as the bare array id (``88|PENDING``, ``88|CANCELLED by 0``): that line stands for every task
    of the array that has no line of its own.
    """
    view = {}
    for job_id in job_ids:
        array = job_id.split("_")[0]
        accounted_info = accounted.get(job_id) or (accounted.get(array) if "_" in job_id else None)
        if job_id in queued:
            view[job_id] = {**_NOTHING_YET, **(accounted_info or {}), **queued[job_id]}
        elif accounted_info is not None:
            view[job_id] = {**_NOTHING_YET, **accounted_info}
    return view


def unsettled_tasks(view: dict[str, dict], held: set[str], job_ids: list[str]) -> list[str]:
    """Tasks whose state this look does not settle: unknown to both, in a state a requeue can follow, or in
    flight by sacct's account while the controller no longer holds them (a task that started and ended
    between the two commands: sacct's line was older than squeue's)."""
    return [j for j in job_ids if j not in view or view[j]["state"] in TRANSIENT_STATES
            or (view[j]["state"] in IN_FLIGHT_STATES and j not in held)]


def confirmed_states(job_ids: list[str], confirm_delay_s: float = CONFIRM_DELAY_S,
                     sleep: Callable[[float], None] = time.sleep) -> dict[str, dict]:
    """Per task id the state Slurm confirms: ``{state, exit_code, signal, elapsed_s, node, reason}``.

    A task in a transient state, in flight by sacct's account but out of the queue, or unknown to both
    sacct and squeue, gets a second look after
    ``confirm_delay_s``: the squeue state wins if the task came back (requeued); a task that is
    still transient and out of the queue is final; one still unknown to both is ``VANISHED``.
    """
    if not job_ids:
        return {}
    view, held = _looks(job_ids)
    doubtful = unsettled_tasks(view, held, job_ids)
    if doubtful:
        sleep(confirm_delay_s)
        second, _ = _looks(doubtful)
        for job_id in doubtful:
            if job_id in second:
                view[job_id] = second[job_id]
            else:
                view[job_id] = {**_NOTHING_YET, "state": VANISHED,
                                "reason": "neither sacct nor squeue reports this task (asked twice)"}
    return view


def recorded_exit_code(info: dict) -> int | None:
    """The exit code job.json records for a finished task: sacct's code, except that a task ended
    by a signal with code 0 (``CANCELLED`` shows ``0:15``) records ``128 + signal``, the shell's
    convention; one that never started (no node, no elapsed time), or that Slurm ended with code
    ``0:0``, records none."""
    if info["state"] != COMPLETED and not info.get("node") and not info.get("elapsed_s"):
        return None
    if info["state"] != COMPLETED and info.get("exit_code") == 0:
        # Slurm ended it (CANCELLED and TIMEOUT often read 0:0): never 0, the code of a success.
        return 128 + int(info["signal"]) if info.get("signal") else None
    return info.get("exit_code")


# The first look at Slurm after submitting: a task refused or failing at once is shown at once.
FIRST_LOOK_S = 2
DEFAULT_POLL_INTERVAL_S = 60  # conf/cluster/slurm.yaml's default, for a profile that does not say


def poll_interval_s(cluster) -> int:
    """The profile's longest wait between two looks (``cluster.poll_interval_s``)."""
    return int(cluster.get("poll_interval_s") or DEFAULT_POLL_INTERVAL_S)


def look_intervals(longest_s: float) -> Iterator[float]:
    """Seconds between a waiting launcher's looks: ``FIRST_LOOK_S``, then twice as long each time, up
    to ``longest_s`` (2, 4, 8, 16, 32, 60, 60, ... for 60): a sweep of any size costs one sacct and one
    squeue per look (``confirmed_states``), and a long one about one look per ``longest_s``."""
    interval = min(FIRST_LOOK_S, longest_s)
    while True:
        yield interval
        interval = min(2 * interval, longest_s)


def describe_watch(cluster) -> str:
    """The dry run's line on how the launcher will watch the sweep."""
    return (f"# watch | one sacct and one squeue per look for the whole sweep; the first look {FIRST_LOOK_S} s "
            f"after submitting, then twice as long each time up to cluster.poll_interval_s="
            f"{poll_interval_s(cluster)} s")
