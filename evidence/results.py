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
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pyarrow as pa
from pyarrow import csv as pa_csv

from evidence import stats
from evidence.dataset import (
    EVAL_COLUMNS,
    SETTINGS_FILE,
    STEP_ID_COLUMNS,
    BundleData,
    cell,
    csv_text,
    load_bundle_data,
    step_columns,
)
from evidence.fileio import JSONError, read_json
from evidence.incidents import INCIDENT_COLUMNS, derive_incidents, load_user_incidents
from evidence.index import INDEX_COLUMNS, evaluate_sweep, index_row
from evidence.problems import EvidenceError, IncidentsFileError, LoadError, SweepError
from evidence.sweep import job_name, read_sweep
from facts.files import (
    INDEX_TABLE,
    RUN_RECORD,
    SWEEP_RECORD,
    TABLES_DIR,
    bundle_payload_dir,
    run_dir_of_job,
    sweep_bundle_payload,
    sweep_job_dir,
)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
PANDAS_INSTALL = "pip install pandas"


# ---- reading any input into BundleData ------------------------------------------------------------

def _safe_members(tar: tarfile.TarFile, name: str) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for member in members:
        parts = PurePosixPath(member.name).parts
        if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
            raise LoadError(f"{name}: archive member {member.name!r} is unsafe; audit it with "
                            f"`python -m evidence audit {name}`")
    return members


def _from_archive(path: Path) -> tuple[BundleData, dict[str, str]]:
    """The bundle inside an archive, and its tables' CSV text (read before the temporary copy goes)."""
    with tempfile.TemporaryDirectory(prefix="evidence-load-") as tmp:
        try:
            with tarfile.open(path, mode="r:gz") as tar:
                tar.extractall(tmp, members=_safe_members(tar, path.name), filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise LoadError(f"{path}: not a readable bundle archive ({exc.__class__.__name__})") from None
        roots = [p for p in Path(tmp).iterdir() if p.is_dir()]
        if len(roots) != 1 or not (bundle_payload_dir(roots[0]) / INDEX_TABLE).is_file():
            raise LoadError(f"{path}: no bundle (data/index.csv) inside the archive")
        payload = bundle_payload_dir(roots[0])
        return load_bundle_data(payload), _table_files(payload)


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
    data = BundleData(sweep=sweep.record, settings={"last_k": last_k, "ci_level": stats.CI_LEVEL,
                                                    "n_updates": sweep.n_updates},
                      index=[{k: cell(v) for k, v in index_row(e).items()} for e in evidences], incidents=incidents)
    for e in evidences:
        if e.accepted:
            data.steps[(e.arm, e.seed)] = sorted(e.metrics.records, key=lambda r: r["step"])
            data.evals[(e.arm, e.seed)] = {k: v for k, v in (e.eval_summary or {}).items() if isinstance(v, dict)}
            try:
                data.runs[(e.arm, e.seed)] = read_json(run_dir_of_job(sweep_job_dir(path, e.job)) / RUN_RECORD)
            except JSONError:
                data.runs[(e.arm, e.seed)] = {}
    return data


def input_name(path: Path) -> str:
    """How a table names an input: ``bundle/`` and ``bundle.tar.gz`` say little on their own, so
    they are named with their sweep's directory (``before/bundle.tar.gz``)."""
    return f"{path.resolve().parent.name}/{path.name}" if path.name.startswith("bundle") else path.name


def read_evidence(path: str | Path, last_k: int = stats.DEFAULT_LAST_K) -> tuple[str, BundleData, dict[str, str] | None]:
    """``(name, data, tables)`` of a sweep directory, a bundle directory or a bundle archive; ``tables``
    is the bundle's sealed ``tables/*.csv`` text, None for a sweep evaluated in memory. Raises
    ``LoadError`` (one line) for anything else."""
    path = Path(path)
    if path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES):
        data, tables = _from_archive(path)
        return input_name(path), data, tables
    if path.is_dir() and (bundle_payload_dir(path) / SETTINGS_FILE).is_file():
        payload = bundle_payload_dir(path)
        return input_name(path), load_bundle_data(payload), _table_files(payload)
    if path.is_dir() and (path / SWEEP_RECORD).is_file():
        built = sweep_bundle_payload(path)
        if (built / SETTINGS_FILE).is_file():
            return path.name, load_bundle_data(built), _table_files(built)
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
            raise EvidenceError(f"no table {name!r}; known: {', '.join([*own, *self.tables])}")
        return table.to_pandas()


def load(path: str | Path, last_k: int = stats.DEFAULT_LAST_K) -> Results:
    """The results of a sweep directory, a bundle directory or a bundle archive (``.tar.gz``).

    ``last_k`` is the stability tables' window for a sweep without a built bundle (a bundle keeps its
    own). Raises ``LoadError`` (one line) for a path that is none of those.
    """
    from evidence.tables import compute_tables  # the report's tables, for a sweep evaluated in memory

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

