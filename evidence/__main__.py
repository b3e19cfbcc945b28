"""Command line: ``python -m evidence {build,audit,validate} PATH``, ``python -m evidence compare A B [C ...]``,
``python -m evidence export --to wandb|mlflow PATH`` and ``python -m evidence sign ARCHIVE --key KEY``.

Exit status: 0 clean; 1 findings (audit), violations (validate) or a refused seal (build);
2 usage errors and inputs compare refuses. Errors are one line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from facts import JOBS_DIR, run_dir_of_job, sweep_jobs_dir
from facts.files import BUNDLE_ARCHIVE, JOB_RECORD, RUN_RECORD, SWEEP_RECORD, job_files_glob
from facts.process_exit import exit_now

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
# A missing module of these is a bug of the checkout (a traceback); any other one is a missing install.
OWN_PACKAGES = ("evidence", "facts", "launcher", "trainer", "proofgrid")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parser(prog: str = "python -m evidence") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    build = sub.add_parser("build", help="validate a sweep and seal <sweep_dir>/bundle, bundle.tar.gz(.sha256)")
    build.add_argument("sweep_dir", type=Path)
    build.add_argument("--last-k", type=int, default=10, help="last-K window of the stability table (default 10)")
    drawn = build.add_mutually_exclusive_group()
    drawn.add_argument("--no-figures", dest="figures", action="store_false", default=None,
                       help="skip the figures (default: as the launcher was told, figures=true unless set false)")
    drawn.add_argument("--figures", dest="figures", action="store_true",
                       help="draw the figures, also for a sweep launched with figures=false")
    build.add_argument("--smallest-difference", type=float, metavar="POINTS",
                       help="the smallest difference of final eval pass@1 that matters, in points: the report's "
                            "allocation plans to detect it (default: the experiment's threshold, else 5)")
    build.add_argument("--reward", action="append", default=[], metavar="MODULE:FUNCTION",
                       help="re-score the runs whose reward is this function of yours (its source must have the "
                            "SHA256 the runs recorded); repeatable")
    audit = sub.add_parser("audit", help="audit a bundle directory or its .tar.gz")
    audit.add_argument("path", type=Path)
    audit.add_argument("--public-key", type=Path, metavar="FILE",
                       help="verify the archive's signature (<archive>.intoto.jsonl) with this public key")
    audit.add_argument("--strict", action="store_true",
                       help="count what the audit could not re-derive (its notes) as findings")
    audit.add_argument("--reward", action="append", default=[], metavar="MODULE:FUNCTION",
                       help="re-score the runs whose reward is this user's function (imported here, never from the "
                            "bundle; its source must have the SHA256 the runs recorded); repeatable")
    sign = sub.add_parser("sign", help="sign a bundle archive: <archive>.intoto.jsonl beside it (DSSE, in-toto)")
    sign.add_argument("archive", type=Path, nargs="?", help="the bundle.tar.gz to sign")
    sign.add_argument("--key", type=Path, metavar="FILE", help="the private key (PEM PKCS#8 or OpenSSH, unencrypted)")
    sign.add_argument("--force", action="store_true", help="sign even a bundle whose audit has findings")
    sign.add_argument("--generate-key", type=Path, metavar="PATH",
                      help="write a new Ed25519 key pair, PATH (private, mode 0600) and PATH.pub, and sign nothing")
    validate = sub.add_parser("validate", help="validate one job directory or run directory")
    validate.add_argument("run_dir", type=Path)
    validate.add_argument("--algo", help="short algo name (default: from job.json / run.json)")
    validate.add_argument("--n-updates", type=int, help="configured updates (default: from run.json)")
    compare = sub.add_parser("compare", help="before/after table of two sweeps or bundles (A -> B), per arm; "
                             "with more inputs, a table across all of them")
    compare.add_argument("a", type=Path, help="sweep directory, bundle directory or bundle .tar.gz (before)")
    compare.add_argument("b", type=Path, help="the same for after")
    compare.add_argument("more", type=Path, nargs="*", help="more inputs: one column each, beside A's and B's")
    compare.add_argument("--metric", action="append", default=[],
                         help="another measure: eval/<name> (final) or a metrics.jsonl key (last-k mean); repeatable")
    compare.add_argument("--last-k", type=int, default=10, help="last-K window of training metrics (default 10)")
    compare.add_argument("--csv", type=Path, help="also write the table as CSV (full precision) to this path")
    compare.add_argument("--force", action="store_true", help="compare different workloads or no common arm")
    compare.add_argument("--smallest-difference", type=float, metavar="POINTS",
                         help="the smallest B − A of final eval pass@1 that matters, in points, for the allocation "
                              "under the table (default: A's)")
    export = sub.add_parser("export", help="the accepted runs as W&B offline runs or an MLflow file store, by arm")
    export.add_argument("path", type=Path, help="sweep directory, bundle directory or bundle .tar.gz")
    export.add_argument("--to", required=True, choices=("wandb", "mlflow"), help="the tracking tool")
    export.add_argument("--out", type=Path, help="output directory (default: <sweep>/exports/<tool>, beside a bundle)")
    export.add_argument("--project", help="W&B project (default proofgrid) or MLflow experiment (default: the sweep's name)")
    export.add_argument("--force", action="store_true", help="export a bundle whose audit has findings")
    return parser


# The command's name in its error lines: ``python -m evidence``, or ``proofgrid`` when its console command runs it.
PROG = "python -m evidence"
_prog = [PROG]


def as_typed(message: str) -> str:
    """``message`` with the commands it names (``python -m evidence audit ...``) as the user's own command line
    spells them: ``proofgrid audit ...`` when the ``proofgrid`` console command runs this one."""
    return message if _prog[0] == PROG else message.replace(f"{PROG} ", f"{_prog[0]} ")


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    from evidence.problems import printable

    print(f"{_prog[0]}: error: {printable(as_typed(message))}", file=sys.stderr)
    return code


def _build(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from evidence.problems import IncidentsFileError, LeakError, SweepError, VerdictError
    from evidence.seal.bundle import build_bundle
    from evidence.seal.sanitize import payload_note
    from facts.locks import LockHeld, LockPathError

    if args.last_k < 1:
        return _fail("--last-k must be at least 1")
    if args.smallest_difference is not None and not 0 < args.smallest_difference <= 100:
        return _fail(f"--smallest-difference {args.smallest_difference:g}: give a difference in points, above 0 and "
                     "at most 100 (5 = five points of pass@1)")
    if not any(sweep_jobs_dir(args.sweep_dir).glob(job_files_glob(JOB_RECORD))):  # 0/N sealed as if it were a result
        return _fail(f"nothing ran in {args.sweep_dir}: no job under {JOBS_DIR}/ has a job.json (a dry run only "
                     "plans); run the sweep (or wait for its jobs to start), then build")
    from evidence.evaluation.rewards import RewardError, reviewer_rewards

    try:
        with reviewer_rewards(args.reward):
            result = build_bundle(args.sweep_dir, last_k=args.last_k, figures=args.figures,
                                  smallest_difference=args.smallest_difference)
    except RewardError as exc:
        return _fail(str(exc))
    except LockHeld as exc:  # another writer of the sweep's evidence (a launcher sealing it, another build)
        return _fail(str(exc), EXIT_FINDINGS)
    except LockPathError as exc:  # its .launcher.lock is a symlink, a directory or not ours to open: the launcher's line
        return _fail(exc.line)
    except (SweepError, IncidentsFileError, FileExistsError, VerdictError) as exc:
        return _fail(str(exc))
    except LeakError as exc:
        for leak in exc.problems:
            print(leak)
        return _fail(str(exc), EXIT_FINDINGS)
    console = Console()
    table = Table(title="Evidence index")
    for column in ("job", "job id", "scheduler", "exit", "steps", "accepted", "reason"):
        table.add_column(column)
    for row in result.jobs:
        table.add_row(row["job"], str(row["job_id"] or "—"), str(row["scheduler_state"]), str(row["exit_code"]),
                      f"{row['steps_accepted']}/{row['steps_expected']}", row["accepted"], row["reason"] or "")
    console.print(table)
    console.print(f"accepted {result.accepted}/{len(result.jobs)} jobs, {len(result.incidents)} incident(s)")
    for note in result.notes:  # what only looks like a leak in a model's response: sealed as written, said here
        print(f"note: {payload_note(note)}")
    console.print(f"bundle:  {result.bundle_dir}\narchive: {result.archive}\nsha256:  {result.archive_sha256}")
    for problem in result.plan_problems:  # the sweep's plan against its jobs: the audit names each too
        print(f"plan: {problem}")
    return EXIT_FINDINGS if result.plan_problems else EXIT_OK


def _audit(args) -> int:
    from evidence.audit import audit_bundle
    from evidence.audit.locate import is_sweep, sweep_bundle
    from evidence.audit.signature import signature_status
    from evidence.evaluation.rewards import RewardError, reviewer_rewards
    from evidence.problems import SigningError, UsageError

    if is_sweep(args.path) and (sealed := sweep_bundle(args.path)) is not None:
        print(f"auditing {sealed}, the bundle of the sweep {args.path}")  # what a sweep's audit means
        args.path = sealed
    try:
        notes: list[str] = []
        with reviewer_rewards(args.reward):
            findings = audit_bundle(args.path, public_key=args.public_key, notes=notes)
        key = None
        if args.public_key is not None:
            from evidence.seal.signing import load_public_key  # the signing library: only when a key is given

            key = load_public_key(args.public_key)
    except (UsageError, SigningError, RewardError) as exc:
        return _fail(str(exc))
    print(signature_status(args.path, key, findings))  # first: the findings and their count stay the last lines
    for note in notes:  # what the audit could not check, said as such
        print(note)
    for finding in findings:
        print(finding)
    # --strict: a reviewer who accepts only what was re-derived counts each note as a finding
    unchecked = len(notes) if args.strict else 0
    if findings or unchecked:  # with the findings: `audit > out.txt` has both
        print(f"{len(findings)} finding(s)" + (f", {unchecked} not re-derived (--strict)" if unchecked else ""))
        return EXIT_FINDINGS
    print("clean")
    return EXIT_OK


def _sweep_of_archive_locked(archive: Path):
    """The sweep's lock when ``archive`` is a sweep's own (``<sweep>/bundle.tar.gz``): no build replaces it while
    it is signed. An archive elsewhere (copied out, downloaded) has no writer to exclude."""
    import contextlib

    from facts.locks import SIGN, sweep_lock

    sweep = Path(archive).parent
    if Path(archive).name == BUNDLE_ARCHIVE and (sweep / SWEEP_RECORD).is_file():
        return sweep_lock(sweep, SIGN)
    return contextlib.nullcontext()


def _audit_before_signing(archive: Path) -> str | None:
    """Why ``archive`` is not signed (a signature vouches for it): the audit's findings, or None when clean."""
    from evidence.audit import audit_bundle
    from evidence.problems import UsageError

    try:
        problems = audit_bundle(archive)
    except UsageError:  # not a bundle archive: sign_archive says so (a usage error)
        return None
    from facts.files import signature_path

    stale = signature_path(archive).name  # an earlier signature: the one this signing replaces
    problems = [p for p in problems if p.file != stale]
    if not problems:
        return None
    first = "; ".join(str(p) for p in problems[:2])
    return (f"{archive} fails its audit ({len(problems)} finding(s), first: {first}): not signed; run python -m "
            f"evidence audit {archive} (--force signs it anyway)")


def _sign(args) -> int:
    from evidence.problems import SigningError
    from evidence.seal.signing import generate_key, key_label, load_signer, sign_archive
    from facts.locks import LockHeld, LockPathError

    try:
        if args.generate_key is not None:
            if args.archive is not None or args.key is not None:
                return _fail("--generate-key makes a key pair and signs nothing; sign with --key afterwards")
            private, public = generate_key(args.generate_key)
            print(f"private key: {private} (keep it secret; sign with --key {private})\n"
                  f"public key:  {public} (give it to reviewers: audit --public-key {public})")
            return EXIT_OK
        if args.archive is None or args.key is None:
            return _fail("sign needs the archive and --key: python -m evidence sign <bundle.tar.gz> --key <private key> "
                         "(make a key pair with --generate-key <path>)")
        if args.archive.is_file():
            load_signer(args.key)  # bad key input is refused before the lock (which records its holder) is taken
        with _sweep_of_archive_locked(args.archive):
            refused = None if args.force or not args.archive.is_file() else _audit_before_signing(args.archive)
            if refused is not None:
                return _fail(refused, EXIT_FINDINGS)
            signature, key = sign_archive(args.archive, args.key)
    except SigningError as exc:
        return _fail(str(exc))
    except LockHeld as exc:  # the sweep's evidence is being written: its archive is about to change
        return _fail(str(exc), EXIT_FINDINGS)
    except LockPathError as exc:
        return _fail(exc.line)
    print(f"signed {args.archive}: {signature} (DSSE envelope, in-toto statement over the archive's SHA256 and its "
          f"bag's manifests; {key_label(key)})")
    return EXIT_OK


def _validate(args) -> int:
    from evidence.audit.locate import is_archive, is_bag, is_sweep
    from evidence.fileio import JSONError, read_json
    from evidence.gates.index import JobEvidence, check_run_dir, evaluate_job

    path: Path = args.run_dir
    if is_bag(path) or is_archive(path):
        return _fail(f"{path} is a bundle, not a job: audit it: python -m evidence audit {path}")
    if not path.is_dir():
        return _fail(f"{path}: not a directory")
    is_job = (path / JOB_RECORD).is_file() and run_dir_of_job(path).is_dir()
    run_dir = run_dir_of_job(path) if is_job else path
    if not is_job and not (run_dir / RUN_RECORD).is_file():  # a plausible wrong path: say what it is instead
        if is_sweep(path):
            return _fail(f"{path} is a sweep directory, not a job: validate one of its jobs ({path / JOBS_DIR}/<job>), "
                         f"or validate and seal them all: python -m evidence build {path}")
        return _fail(f"{path} is neither a job directory (with {JOB_RECORD}) nor a run directory (with {RUN_RECORD})")

    def field(name: str, file: Path):
        try:
            value = read_json(file)
        except JSONError:
            return None
        return value.get(name) if isinstance(value, dict) else None

    algo = args.algo or field("algo", path / JOB_RECORD) or field("algo", run_dir / RUN_RECORD)
    seed = field("seed", path / JOB_RECORD) if is_job else field("seed", run_dir / RUN_RECORD)
    n_updates = args.n_updates or field("n_updates", run_dir / RUN_RECORD)
    if not isinstance(algo, str) or not isinstance(n_updates, int):
        return _fail("cannot tell the algo and n_updates from job.json/run.json; pass --algo and --n-updates")
    seed = seed if isinstance(seed, int) else -1
    if is_job:
        evidence = evaluate_job(path, algo, seed, n_updates)
    else:
        evidence = check_run_dir(run_dir, JobEvidence(algo=algo, seed=seed, present=True, n_updates=n_updates))
    for failure in evidence.failures:
        print(failure)
    for anomaly in evidence.anomalies:
        print(f"{anomaly} (reported, not rejecting)")
    print("valid" if not evidence.failures else f"{len(evidence.failures)} violation(s)", file=sys.stderr)
    return EXIT_FINDINGS if evidence.failures else EXIT_OK


def _compare(args) -> int:
    from evidence.problems import CompareError
    from evidence.tools.compare import compare_paths

    if args.last_k < 1:
        return _fail("--last-k must be at least 1")
    if args.smallest_difference is not None and not 0 < args.smallest_difference <= 100:
        return _fail(f"--smallest-difference {args.smallest_difference:g}: give a difference in points, above 0 and "
                     "at most 100 (5 = five points of pass@1)")
    try:
        print(compare_paths(args.a, args.b, args.metric, args.last_k, args.force, args.csv, args.more,
                            args.smallest_difference), end="")
    except CompareError as exc:
        return _fail(str(exc))
    return EXIT_OK


def _export(args) -> int:
    from evidence.problems import ExportError, LoadError
    from evidence.tools.export import export

    try:
        result = export(args.path, args.to, args.out, args.project, force=args.force)
    except (ExportError, LoadError) as exc:
        return _fail(str(exc))
    what = "W&B offline runs" if result.tool == "wandb" else "runs in an MLflow file store"
    print(f"exported {len(result.runs)} {what} ({len(result.arms)} arm(s): {', '.join(result.arms)}) to {result.out}")
    print(f"take them later: {result.take_later}")
    if result.audit_findings:
        print(f"exported with --force although its audit has {len(result.audit_findings)} finding(s), first: "
              f"{result.audit_findings[0]}")
    return EXIT_OK


def main(argv: list[str] | None = None, prog: str = "python -m evidence") -> int:
    _prog[0] = prog
    args = _parser(prog).parse_args(argv)
    try:
        return _run(args)
    except ModuleNotFoundError as exc:  # a Python without the evidence's libraries: one line, not a traceback
        if exc.name is None or exc.name.partition(".")[0] in OWN_PACKAGES:
            raise
        return _fail(f"{exc.name} is not installed for {sys.executable}; run .venv/bin/python -m evidence ... in a "
                     "checkout (make venv creates it), or pip install the checkout or its wheel (the reviewer's install)")


def _run(args) -> int:
    if args.command == "compare":
        return _compare(args)
    if args.command == "build":
        return _build(args)
    if args.command == "audit":
        return _audit(args)
    if args.command == "sign":
        return _sign(args)
    if args.command == "export":
        return _export(args)
    return _validate(args)


if __name__ == "__main__":
    exit_now(main())  # a normal exit, less the interpreter's teardown (facts/process_exit.py)
