"""The plan a sweep's jobs were bound to before any ran (``facts.sweep_plan``): every planned job has its records, and
every record carries the plan it was prepared under. The build (on the sweep's job directories) and the audit (on
the bundle's copies) call ``plan_problems``, so a planned job deleted before a rebuild, a job renamed, or the plan
edited after its jobs ran (a seed dropped from it, a certificate job struck out) is a finding of both.

The plan is the sweep's own record: a forger who rewrites the plan, its digest and every job's records alike leaves
a consistent sweep. What holds it beyond that is a pre-registration (an experiment's spec fixes its arms, seeds, looks
and certificate jobs: ``evidence.verdict.spec_jobs``) or a signature made where it ran.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from evidence.fileio import JSONError, read_json
from evidence.problems import Problem
from facts.certify import CERTIFY_FIELD
from facts.files import (
    BUNDLE_RUNS_DIR,
    CERTIFY_DIR,
    JOB_RECORD,
    JOBS_DIR,
    RUN_RECORD,
    SWEEP_RECORD,
    payload_relpath,
    recorded_job_dirs,
    run_dir_of_job,
    run_relpath,
)
from facts.sweep_plan import EARLIER_PLANS_FIELD, PLAN_DIGEST_FIELD, PLAN_FIELD, plan_digest, plan_jobs

KIND = "plan"
Records = dict[str, tuple[dict | None, dict | None]]  # job -> (its job.json, its run.json); None: absent


def _short(value) -> str:
    return value[:12] if isinstance(value, str) else repr(value)


def _carries(record) -> bool:
    return isinstance(record, dict) and PLAN_DIGEST_FIELD in record


def plan_problems(sweep: dict, records: Records, rel: Callable[[str, str], str],
                  sweep_rel: str = SWEEP_RECORD) -> list[Problem]:
    """Problems of a sweep's plan against its jobs' records: ``records`` maps each job present (grid and certificate
    jobs) to its job.json and run.json, ``rel(job, file)`` names one of its files, ``sweep_rel`` names sweep.json.
    A sweep planned before plans were bound (no ``plan``, and no record carrying one's digest) has none."""
    plan, digest = sweep.get(PLAN_FIELD), sweep.get(PLAN_DIGEST_FIELD)
    if plan is None:
        carried = sorted(job for job, pair in records.items() if any(_carries(r) for r in pair))
        if carried:
            return [Problem(sweep_rel, f"no {PLAN_FIELD}, but the records of {', '.join(carried[:3])}"
                                       f"{' ...' if len(carried) > 3 else ''} carry one's {PLAN_DIGEST_FIELD}: the "
                                       "sweep's plan was removed", kind=KIND)]
        return []
    if not isinstance(plan, dict) or not isinstance(plan.get("jobs"), list) or plan_digest(plan) != digest:
        return [Problem(sweep_rel, f"its {PLAN_FIELD} does not hash to its {PLAN_DIGEST_FIELD} {_short(digest)}: the "
                                   "plan was edited after its jobs were bound to it", kind=KIND)]
    problems = []
    entries = [e for e in plan["jobs"] if isinstance(e, dict) and isinstance(e.get("job"), str)]
    grid = [e["job"] for e in entries if CERTIFY_FIELD not in e]
    certificates = {e["job"]: e[CERTIFY_FIELD] for e in entries if CERTIFY_FIELD in e}
    if sweep.get("jobs") != grid:
        problems.append(Problem(sweep_rel, f"jobs {sweep.get('jobs')!r} are not the plan's grid jobs {grid!r}", kind=KIND))
    listed = (sweep.get(CERTIFY_FIELD) or {}).get("jobs") if isinstance(sweep.get(CERTIFY_FIELD), dict) else {}
    listed = listed if isinstance(listed, dict) else {}
    if {name: {k: v for k, v in (entry or {}).items() if k not in ("arm", "seed")} for name, entry in listed.items()} \
            != certificates:
        problems.append(Problem(sweep_rel, f"its {CERTIFY_FIELD} jobs ({', '.join(listed) or 'none'}) are not the "
                                           f"plan's certificate jobs ({', '.join(certificates) or 'none'})", kind=KIND))
    earlier = {e.get(PLAN_DIGEST_FIELD): set(e.get("jobs") or []) for e in sweep.get(EARLIER_PLANS_FIELD) or []
               if isinstance(e, dict)}
    for name in plan_jobs(plan):
        job, run = records.get(name, (None, None))
        if job is None:
            problems.append(Problem(rel(name, JOB_RECORD), f"planned (plan {_short(digest)}), but there is no record "
                                                           "of it: it never ran, or its files were removed", kind=KIND))
            continue
        for file, record in ((JOB_RECORD, job), (RUN_RECORD, run)):
            if not isinstance(record, dict):
                continue  # an unreadable record is its own gates' business
            got = record.get(PLAN_DIGEST_FIELD)
            if got is None:
                if file == JOB_RECORD:  # another trainer's run.json has none: it reads no launcher environment
                    problems.append(Problem(rel(name, file), f"no {PLAN_DIGEST_FIELD}: written outside the sweep's "
                                                             f"plan ({_short(digest)})", kind=KIND))
            elif got != digest and name not in earlier.get(got, ()):
                problems.append(Problem(rel(name, file), f"{PLAN_DIGEST_FIELD} {_short(got)} is neither the sweep's plan "
                                                         f"({_short(digest)}) nor an earlier plan of it listing {name}",
                                        kind=KIND))
    for name in sorted(set(records) - set(plan_jobs(plan))):
        problems.append(Problem(rel(name, JOB_RECORD), "a job the sweep's plan does not list (renamed, or added after "
                                                       "the plan)", kind=KIND))
    return problems


def _record(path: Path) -> dict | None:
    """A JSON record, or None when absent or not readable as one (its own gates name it)."""
    try:
        value = read_json(path)
    except JSONError:
        return None
    return value if isinstance(value, dict) else None


def sweep_plan_problems(sweep_dir: Path, sweep: dict) -> list[Problem]:
    """``plan_problems`` of a sweep directory: its grid's and certificate jobs' directories holding a job.json."""
    records, where = {}, {}
    for job_dir in recorded_job_dirs(sweep_dir):
        records[job_dir.name] = (_record(job_dir / JOB_RECORD), _record(run_dir_of_job(job_dir) / RUN_RECORD))
        where[job_dir.name] = job_dir.parent.name
    certified = (sweep.get(CERTIFY_FIELD) or {}).get("jobs") or {} if isinstance(sweep.get(CERTIFY_FIELD), dict) else {}

    def rel(job: str, file: str) -> str:
        folder = where.get(job) or (CERTIFY_DIR if job in certified else JOBS_DIR)
        return f"{folder}/{job}/{run_relpath(file) if file == RUN_RECORD else file}"

    return plan_problems(sweep, records, rel)


def bundle_plan_problems(data_dir: Path, sweep: dict) -> list[Problem]:
    """``plan_problems`` of a bundle's payload: each job's copy under ``runs/`` and each certificate job's under
    ``certify/``, named as the bag holds them."""
    records, where = {}, {}
    for folder in (BUNDLE_RUNS_DIR, CERTIFY_DIR):
        root = Path(data_dir) / folder
        for copy in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
            if (copy / JOB_RECORD).is_file():
                records[copy.name] = (_record(copy / JOB_RECORD), _record(copy / RUN_RECORD))
                where[copy.name] = folder
    certified = (sweep.get(CERTIFY_FIELD) or {}).get("jobs") or {} if isinstance(sweep.get(CERTIFY_FIELD), dict) else {}

    def rel(job: str, file: str) -> str:
        return payload_relpath(where.get(job) or (CERTIFY_DIR if job in certified else BUNDLE_RUNS_DIR), job, file)

    return plan_problems(sweep, records, rel, payload_relpath(SWEEP_RECORD))
