"""A sweep's or a bundle's results for a notebook: ``evidence.load(path)`` -> pyarrow tables.

``path`` is a sweep directory (its built ``bundle/`` when there is one, else its jobs evaluated in
memory: nothing is written), a bundle directory or a bundle archive (read through a temporary
directory that is gone when ``load`` returns). Only accepted runs enter ``steps`` and
``evaluations``, as in every table of the report; ``index`` lists every job with its decision.

    >>> results = evidence.load("outputs/sweeps/2026-01-15_10-00-00")
    >>> results.steps.column_names[:5]           # arm, algo, seed, step, then the metrics
    >>> results.tables["eval_aggregate"]          # any table of the report, by its CSV name
    >>> results.to_pandas("steps")                # a pandas DataFrame, when pandas is installed
"""

from __future__ import annotations

import io
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from pyarrow import csv as pa_csv

from evidence.audit.archive import check_members, extracted
from evidence.audit.bag import check_bag
from evidence.dataset import (
    EVAL_COLUMNS,
    SETTINGS_FILE,
    STEP_ID_COLUMNS,
    BundleData,
    cell,
    csv_text,
    load_bundle_data,
    read_prompt_counts,
    step_columns,
)
from evidence.fileio import JSONError, read_json
from evidence.gates.incidents import INCIDENT_COLUMNS, derive_incidents, load_user_incidents
from evidence.gates.index import INDEX_COLUMNS, evaluate_sweep, index_row
from evidence.problems import EvidenceError, IncidentsFileError, LoadError, Problem, SweepError
from evidence.statistics import descriptive
from evidence.sweep import job_name, read_sweep
from facts.files import (
    BUNDLE_PAYLOAD,
    EVAL_RESPONSES_DIR,
    INDEX_TABLE,
    RUN_RECORD,
    SWEEP_RECORD,
    TABLES_DIR,
    bundle_payload_dir,
    eval_responses_name,
    run_dir_of_job,
    sweep_bundle_payload,
    sweep_job_dir,
)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
PANDAS_INSTALL = "pip install pandas"


# ---- reading any input into BundleData ------------------------------------------------------------

def _refusal(problems: list[Problem], path: Path, what: str) -> LoadError:
    """One line: the first of ``problems`` (and how many more), and how to see them all."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return LoadError(f"{path}: {what}: {problems[0]}{more}; audit it with `python -m evidence audit {path}`")


def _verified(bag: Path, shown: Path) -> None:
    """The audit's bag check (bagit's ``Bag.validate()``: every manifest digest and the Payload-Oxum, and
    proofgrid's rules on top); ``LoadError`` naming the first file that fails."""
    problems = check_bag(bag)
    if problems:
        raise _refusal(problems, shown, "the bundle does not verify")


def _payload(bag: Path, shown: Path, verify: bool) -> Path:
    """The bag's payload directory, its bag verified and its ``sweep.json`` checked as a sweep's is when
    ``verify`` (a bundle's sweep.json that is not one reads as one line, not a traceback)."""
    if verify:
        _verified(bag, shown)
    payload = bundle_payload_dir(bag)
    if verify:
        try:
            read_sweep(payload)
        except SweepError as exc:
            raise LoadError(f"{shown}: {BUNDLE_PAYLOAD}/{exc}") from None
        problem = _settings_problem(payload)
        if problem:
            raise LoadError(f"{shown}: {BUNDLE_PAYLOAD}/{SETTINGS_FILE}: {problem}")
    return payload


# The settings a bundle's numbers were computed with (``evidence.json``, as the build writes it).
_SETTINGS_FIELDS = {"last_k": "a positive integer", "n_updates": "a positive integer", "ci_level": "a number in (0, 1)"}


def _settings_problem(payload: Path) -> str | None:
    """What is wrong with a bundle's ``evidence.json``, or None."""
    try:
        settings = read_json(payload / SETTINGS_FILE)
    except JSONError as exc:
        return str(exc)
    if not isinstance(settings, dict):
        return "not a JSON object"
    for name, what in _SETTINGS_FIELDS.items():
        value = settings.get(name)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        sound = number and (0 < value < 1 if name == "ci_level" else isinstance(value, int) and value >= 1)
        if not sound:
            return f"{name!r} must be {what}, not {value!r}"
    return None


def _from_archive(path: Path, verify: bool = False) -> tuple[BundleData, dict[str, str]]:
    """The bundle inside an archive, and its tables' CSV text (read before the temporary copy goes).
    The archive is opened as the audit opens it: every member header checked (names, links, sizes,
    counts) before anything is extracted, then extracted with tarfile's data filter."""
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            members, root, refused = check_members(tar, path)
            if members is None:
                raise _refusal(refused, path, "not extracted")
            with extracted(tar, members, root) as bag:
                if not (bundle_payload_dir(bag) / INDEX_TABLE).is_file():
                    raise LoadError(f"{path}: no bundle (data/index.csv) inside the archive")
                payload = _payload(bag, path, verify)
                return load_bundle_data(payload), _table_files(payload)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise LoadError(f"{path}: not a readable bundle archive ({exc.__class__.__name__})") from None


def _table_files(payload: Path) -> dict[str, str]:
    """``{name: CSV text}`` of a bundle's ``tables/*.csv`` (the tables as sealed)."""
    folder = payload / TABLES_DIR
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.csv"))} if folder.is_dir() else {}


def _from_sweep(path: Path, last_k: int) -> BundleData:
    """The sweep's accepted runs as ``BundleData``, evaluated in memory from its job directories (with
    their incidents and run records, as a build would have them, unsanitised: it is the user's own)."""
    sweep = read_sweep(path)
    user = load_user_incidents(path, {job_name(a, s) for a, s in sweep.jobs})
    evidences = evaluate_sweep(sweep, user.excluded_jobs)
    incidents = [{k: cell(v) for k, v in i.row().items()} for i in derive_incidents(evidences, user, path)]
    data = BundleData(sweep=sweep.record, settings={"last_k": last_k, "ci_level": descriptive.CI_LEVEL,
                                                    "n_updates": sweep.n_updates},
                      index=[{k: cell(v) for k, v in index_row(e).items()} for e in evidences], incidents=incidents)
    for e in evidences:
        if e.accepted:
            data.steps[(e.arm, e.seed)] = sorted(e.metrics.records, key=lambda r: r["step"])
            data.evals[(e.arm, e.seed)] = {k: v for k, v in (e.eval_summary or {}).items() if isinstance(v, dict)}
            run_dir = run_dir_of_job(sweep_job_dir(path, e.job))
            try:
                data.runs[(e.arm, e.seed)] = read_json(run_dir / RUN_RECORD)
            except JSONError:
                data.runs[(e.arm, e.seed)] = {}
            counts = read_prompt_counts(run_dir / EVAL_RESPONSES_DIR / eval_responses_name("final"))
            if counts is not None:
                data.final_prompts[(e.arm, e.seed)] = counts
    return data


def input_name(path: Path) -> str:
    """How a table names an input: ``bundle/`` and ``bundle.tar.gz`` say little on their own, so
    they are named with their sweep's directory (``before/bundle.tar.gz``)."""
    return f"{path.resolve().parent.name}/{path.name}" if path.name.startswith("bundle") else path.name


def read_evidence(path: str | Path, last_k: int = descriptive.DEFAULT_LAST_K,
                  verify: bool = False) -> tuple[str, BundleData, dict[str, str] | None]:
    """``(name, data, tables)`` of a sweep directory, a bundle directory or a bundle archive; ``tables``
    is the bundle's sealed ``tables/*.csv`` text, None for a sweep evaluated in memory. With ``verify``
    a bundle's bag must verify (manifests, Payload-Oxum) and its ``sweep.json`` be a sweep's. Raises
    ``LoadError`` (one line) for anything else."""
    path = Path(path)
    if path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES):
        data, tables = _from_archive(path, verify)
        return input_name(path), data, tables
    if path.is_dir() and (bundle_payload_dir(path) / SETTINGS_FILE).is_file():
        payload = _payload(path, path, verify)
        return input_name(path), load_bundle_data(payload), _table_files(payload)
    if path.is_dir() and (path / SWEEP_RECORD).is_file():
        built = sweep_bundle_payload(path)
        if (built / SETTINGS_FILE).is_file():
            payload = _payload(built.parent, built.parent, verify)
            return path.name, load_bundle_data(payload), _table_files(payload)
        try:
            return path.name, _from_sweep(path, last_k), None
        except (SweepError, IncidentsFileError) as exc:
            raise LoadError(str(exc)) from None
    if not path.exists():
        raise LoadError(f"{path}: no such file or directory")
    raise LoadError(f"{path}: not a sweep directory (sweep.json), a bundle directory or a .tar.gz bundle")


# ---- the public loader ----------------------------------------------------------------------------

def _arrow(csv: str) -> pa.Table:
    """A CSV text as a pyarrow table, column types inferred (floats round-trip: the CSVs use repr)."""
    return pa_csv.read_csv(io.BytesIO(csv.encode("utf-8")))


def _step_rows(data: BundleData):
    for (arm, seed), records in data.steps.items():
        for record in records:
            yield {"arm": arm, "algo": data.arm_algo(arm), "seed": seed, **record}


def _eval_rows(data: BundleData):
    for (arm, seed), kinds in data.evals.items():
        for kind, entry in kinds.items():
            yield {**entry, "arm": arm, "algo": data.arm_algo(arm), "seed": seed, "kind": kind}


@dataclass
class Results:
    """One sweep's or bundle's results as pyarrow tables.

    ``index``: one row per job (accepted or not, and why); ``steps``: one row per accepted (arm, seed,
    step), the metrics as columns named as in metrics.jsonl; ``evaluations``: one row per accepted run
    and checkpoint kind (``initial``, ``final``); ``incidents``; ``tables``: every report table by its
    CSV name (``eval_aggregate``, ``stability_last_k``, ...); ``sweep``: the plan (sweep.json).
    """

    name: str
    sweep: dict
    index: pa.Table
    steps: pa.Table
    evaluations: pa.Table
    incidents: pa.Table
    tables: dict[str, pa.Table] = field(default_factory=dict)

    def to_pandas(self, name: str):
        """One of ``index``, ``steps``, ``evaluations``, ``incidents`` or a table's name, as a pandas
        DataFrame. pandas is not a dependency: without it this raises ``EvidenceError`` saying how to
        install it (the pyarrow tables need nothing more)."""
        try:
            import pandas  # noqa: F401  (pyarrow's to_pandas needs it; imported here to say so in one line)
        except ModuleNotFoundError:
            raise EvidenceError(f"to_pandas needs pandas, which is not installed: {PANDAS_INSTALL}") from None
        own = {"index": self.index, "steps": self.steps, "evaluations": self.evaluations, "incidents": self.incidents}
        table = own.get(name, self.tables.get(name))
        if table is None:
            raise EvidenceError(f"no table {name!r}; known: {', '.join(dict.fromkeys([*own, *self.tables]))}")
        return table.to_pandas()


def load(path: str | Path, last_k: int = descriptive.DEFAULT_LAST_K) -> Results:
    """The results of a sweep directory, a bundle directory or a bundle archive (``.tar.gz``).

    ``last_k`` is the stability tables' window for a sweep without a built bundle (a bundle keeps its
    own). Raises ``LoadError`` (one line) for a path that is none of those.
    """
    from evidence.computed import compute_tables  # the report's tables, for a sweep evaluated in memory

    name, data, table_files = read_evidence(path, last_k)
    if table_files is None:
        table_files = {t.name: t.csv() for t in compute_tables(data).values()}
    keys = set(data.step_keys) | {k for records in data.steps.values() for r in records for k in r}
    index_columns = list(dict.fromkeys([*INDEX_COLUMNS, *(k for row in data.index for k in row)]))
    return Results(
        name=name, sweep=data.sweep,
        index=_arrow(csv_text(index_columns, data.index)),
        steps=_arrow(csv_text(step_columns(keys) if keys else STEP_ID_COLUMNS, _step_rows(data))),
        evaluations=_arrow(csv_text(EVAL_COLUMNS, _eval_rows(data))),
        incidents=_arrow(csv_text(INCIDENT_COLUMNS, data.incidents)),
        tables={table: _arrow(text) for table, text in table_files.items()},
    )

