"""Running a planned sweep: the dry run, or the jobs that still need to run on the chosen back end,
then the sealed evidence bundle and the summary printed at the end."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from facts import INITIAL_EVAL_DIR, sweep_job_dir, sweep_jobs_dir
from facts.files import (
    CERTIFICATES_FILE,
    COMMANDS_FILE,
    EVAL_TABLE,
    JOB_SPEC,
    SWEEP_RECORD,
    TABLES_DIR,
    bundle_payload_dir,
)
from launcher.backend import backend
from launcher.directory_locks import sweep_lock
from launcher.job_spec import JobSpec, Sweep
from launcher.jobs import check_arms, check_planned_by_this_launcher, prepare_job_dirs
from launcher.planning import dry_run_lines, write_plan

HEADLINE_TABLE = "headline.csv"  # evidence.tables.headline_table: one row, the report's first sentence


def run_sweep(sweep: Sweep) -> int:
    """Dry-run or run the sweep; returns the process exit code."""
    check_arms(sweep.sweep_dir, sweep.arms)
    check_planned_by_this_launcher(sweep)
    if sweep.dry_run and (sweep.sweep_dir / SWEEP_RECORD).is_file():
        # A sweep's records are what its runs, its seal and an experiment's pre-registration link read
        # (confirm/sweep.json's experiment_sha256): a dry run prints and changes none of them.
        print("\n".join(dry_run_lines(sweep) + sweep.prompts))
        print(f"dry run: {jobs_checked(sweep)} checked, nothing submitted; {sweep.sweep_dir} already holds a "
              f"sweep, whose {SWEEP_RECORD} and {COMMANDS_FILE} are left as they are")
        return 0
    write_plan(sweep)
    if sweep.dry_run:
        print("\n".join(dry_run_lines(sweep) + sweep.prompts))
        print(f"dry run: {jobs_checked(sweep)} checked, nothing submitted; commands in "
              f"{sweep.sweep_dir / COMMANDS_FILE}")
        return 0
    _, finished = submit_jobs(sweep)
    if not finished:
        return 0  # wait=false: `python -m evidence build` (or `launcher status`) seals it later
    return seal(sweep.sweep_dir, sweep.user_rewards)


def submit_jobs(sweep: Sweep) -> tuple[list[JobSpec], bool]:
    """The jobs of a sweep whose plan is written that still need to run, handed to its back end: (those jobs,
    whether every job has ended). Accepted jobs are never re-submitted (``launcher.jobs.prepare_job_dirs``)."""
    todo = prepare_job_dirs(sweep)
    skipped = len(sweep.all_specs) - len(todo)
    if skipped:
        print(f"{skipped} job(s) already accepted in {sweep.sweep_dir}; not re-submitted")
    return todo, backend(sweep.cluster.kind).submit(sweep, todo)


def submit_sweep(sweep: Sweep) -> list[JobSpec]:
    """A planned sweep's plan checked and written, and the jobs that still need to run submitted without waiting
    (``wait=false``): those jobs. Nothing is sealed, even when no job needed to run."""
    check_arms(sweep.sweep_dir, sweep.arms)
    check_planned_by_this_launcher(sweep)
    write_plan(sweep)
    return submit_jobs(sweep)[0]


def jobs_checked(sweep: Sweep) -> str:
    """``9 job(s)``, and ``+ 6 certificate job(s)`` when the sweep certifies (certify=true)."""
    extra = f" + {len(sweep.certify)} certificate job(s) (certify=true, outside the grid)" if sweep.certify else ""
    return f"{len(sweep.specs)} job(s){extra}"


def seal(sweep_dir: Path, user_rewards: tuple[str, ...] = ()) -> int:
    """Build, seal and audit the evidence bundle; 0 when every job was accepted and the audit is clean.
    ``user_rewards``: the sweep's own ``module:function`` rewards (its workloads', imported when it was planned),
    with which the build and the audit re-score its runs (``evidence.evaluation.rewards``; without them they say they did not)."""
    # The build and the audit (bagit, the report, the tables: ~0.4 s of imports) only when a sweep is
    # sealed: a dry run, `status` and `cancel` import this module and never seal.
    from evidence import audit_bundle, build_bundle
    from evidence.evaluation.rewards import reviewer_rewards

    # One writer of its evidence: the build and the audit of what it sealed.
    with sweep_lock(sweep_dir), reviewer_rewards(user_rewards):
        print(f"sealing the evidence of {sweep_dir} (validate, tables, figures, report, archive, audit)", flush=True)
        result = build_bundle(sweep_dir)
        print()
        print_headline(bundle_payload_dir(result.bundle_dir) / TABLES_DIR)
        print_eval_summary(bundle_payload_dir(result.bundle_dir) / TABLES_DIR, result.jobs, job_arms(sweep_dir),
                           arm_names(bundle_payload_dir(result.bundle_dir)))
        print(result.summary())
        certified = print_certificates(bundle_payload_dir(result.bundle_dir) / CERTIFICATES_FILE)
        findings = audit_bundle(result.archive)
    for finding in findings:
        print(f"audit: {finding}", file=sys.stderr)
    print(f"audit: {'clean' if not findings else f'{len(findings)} finding(s)'}")
    print(f"training curves: tensorboard --logdir {sweep_jobs_dir(sweep_dir)}")
    return 0 if not findings and result.accepted == len(result.jobs) and certified else 1


def print_certificates(path: Path) -> bool:
    """certify=true: how many certificate jobs reproduced their original, under which tolerance, and each
    that did not with its first difference (``certificates.json`` as the build wrote it); False when one did not."""
    if not path.is_file():
        return True
    certificates = json.loads(path.read_text())
    rule = certificates["tolerance"]
    tolerance = "exact, tolerance 0" if rule["exact"] else f"relative tolerance {rule['metrics_rel_tol']}"
    print(f"reproducibility certificates: {certificates['reproduced']} reproduced ({tolerance} on "
          f"{'/'.join(rule['devices'])}; {certificates_relpath(path)})")
    failed = [c for c in certificates["certificates"] if not c["reproduced"]]
    for cert in failed:
        print(f"  NOT REPRODUCED: {cert['certificate_job']} does not reproduce {cert['job']}: {cert['first_difference']}")
    return not failed


def certificates_relpath(path: Path) -> str:
    """``bundle/data/certificates.json``: where the summary says the certificates are, relative to the sweep."""
    return "/".join(path.parts[-3:])


def job_arms(sweep_dir: Path) -> dict[str, str]:
    """Job name -> arm label of the planned sweep (``sweep.json``'s jobs, each job's ``spec.json``)."""
    jobs = json.loads((sweep_dir / SWEEP_RECORD).read_text())["jobs"]
    specs = [sweep_job_dir(sweep_dir, name) / JOB_SPEC for name in jobs]
    return {path.parent.name: JobSpec.from_json(path.read_text()).arm_label for path in specs if path.is_file()}


def arm_names(data_dir: Path) -> dict[str, str]:
    """Arm label -> the name the report gives it (an experiment spec's arm name, the algorithm a trainer declares
    it runs, ``GRPO`` for the plain ``grpo`` arm: ``evidence.tables.display``), from the sealed bundle's data."""
    # with the build's own imports: only a sealed sweep reads them
    from evidence.dataset import load_bundle_data
    from evidence.tables import display

    data = load_bundle_data(data_dir)
    return {arm: display(data, arm) for arm in data.arms}


def _arm(row: dict) -> str:
    """A row's arm; rows of evidence older than arms name only the algo, which is then the arm."""
    return row.get("arm") or row["algo"]


def print_headline(tables_dir: Path) -> None:
    """The report's first sentence, the result from the intervals, as the build wrote it (``tables/headline.csv``)."""
    path = tables_dir / HEADLINE_TABLE
    if path.is_file():
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                print(row["sentence"])
        print()


def print_eval_summary(tables_dir: Path, jobs: list[dict], arms: dict[str, str], names: dict[str, str]) -> None:
    """Per arm of the sweep (``arms``: job name -> arm; ``names``: arm -> the report's name of it): final pass@1
    against the initial-checkpoint control (the sweep's one initial evaluation), and its accepted jobs."""
    # rich only to print the summary: planning and the dry run import no terminal library.
    from rich.console import Console
    from rich.table import Table

    def read(name: str) -> list[dict]:
        if not (tables_dir / name).is_file():
            return []
        with open(tables_dir / name, newline="") as f:
            return list(csv.DictReader(f))

    # imported here, as seal's evidence is: a dry run, status and cancel skip its ~0.3 s
    from evidence.tables import fmt

    rows = {(_arm(r), r["checkpoint"]): r for r in read("eval_aggregate.csv")}
    initial = read("eval_initial.csv")
    print("final eval pass@1 (mean ± SD over seeds) vs the initial checkpoint")  # a title would wrap to the table
    table = Table()
    for col in ("arm", "final", "initial control", "gain", "accepted"):
        table.add_column(col)

    def cell(row):
        if row is None or not row.get("pass@1_mean"):
            return "n/a"
        sd = f" ± {fmt(float(row['pass@1_sd']), 3)}" if row.get("pass@1_sd") else " (n<2)"
        return f"{fmt(float(row['pass@1_mean']), 3)}{sd}"

    # eval_initial.csv has one row per distinct initial evaluation: the sweep's shared one (initial_eval/<key12>;
    # one per workload when arms run different workloads), or each run's own (named after the run).
    by_name = {r["initial_eval"]: r for r in initial}
    used: dict[str, set[str]] = {}  # arm -> the initial evaluations its runs used (eval.csv's initial rows)
    if (tables_dir.parent / EVAL_TABLE).is_file():
        with open(tables_dir.parent / EVAL_TABLE, newline="") as f:
            for r in csv.DictReader(f):
                if r.get("kind") == "initial":
                    used.setdefault(_arm(r), set()).add(r.get("initial_eval") or f"{_arm(r)}-{r['seed']}")

    def initial_cell(arm: str) -> str:
        names = used.get(arm) or (set(by_name) if len(by_name) == 1 else set())
        if len(names) != 1 or not by_name.get(next(iter(names)), {}).get("pass@1"):
            return "see report" if initial else "n/a"
        row = by_name[next(iter(names))]
        shared = " (shared)" if row["initial_eval"].startswith(f"{INITIAL_EVAL_DIR}/") else ""
        return f"{fmt(float(row['pass@1']), 3)}{shared}"

    accepted = {j["job"] for j in jobs if j["accepted"] == "yes"}
    for arm in dict.fromkeys(arms.values()):
        name = names.get(arm, arm)  # GRPO, rpp-lr3e-4, or the experiment's per_example
        members = [job for job, a in arms.items() if a == arm]
        table.add_row(name, cell(rows.get((arm, "final"))), initial_cell(arm),
                      cell(rows.get((arm, "gain"))), f"{len(accepted.intersection(members))}/{len(members)}")
    Console(width=None if sys.stdout.isatty() else 200).print(table)  # off a terminal: never clipped at 80
    print()
