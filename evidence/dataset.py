"""The bundle's machine-readable data: the CSV files, their columns, and loading them back.

Build and audit share this module: the build writes ``steps.csv``/``eval.csv``/``index.csv``,
then loads them back with ``load_bundle_data`` and computes every table from what it loaded, so
the audit, loading the same files, recomputes exactly the same numbers. Floats are written with
``repr`` (shortest text that round-trips), so nothing is lost between the two.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from evidence.fileio import JSONError, read_csv, read_json, write_text
from evidence.gates.certificate_jobs import compute_certificates
from evidence.sweep import read_arms
from facts import loads_strict
from facts.bundle_layout import EVAL_FLOAT_COLUMNS
from facts.evaluation import prompt_counts
from facts.files import (
    BUNDLE_RUNS_DIR,
    EVAL_RESPONSES_DIR,
    EVAL_TABLE,
    EVIDENCE_SETTINGS,
    EXPERIMENT_FILE,
    INCIDENTS_TABLE,
    INDEX_TABLE,
    JOB_RECORD,
    RESOURCE_SAMPLES,
    RESOURCE_SAMPLING_FIELD,
    RUN_RECORD,
    STEPS_TABLE,
    SWEEP_RECORD,
    eval_responses_name,
)
from facts.metrics import CONTRACT_KEYS

STEP_ID_COLUMNS = ("arm", "algo", "seed", "step")
EVAL_ID_COLUMNS = ("arm", "algo", "seed", "kind")
EVAL_COLUMNS = EVAL_ID_COLUMNS + (
    "checkpoint", "n_prompts", "k", "n_responses", "eval_seed", "subset_sha256",
    "pass@1", "pass@2", "pass@4", "truncation", "mean_length", "mean_reward", "all_zero_reward",
    "initial_eval",  # an initial row's shared evaluation (initial_eval/<key12>), empty for a run's own
)
EVAL_INT_COLUMNS = ("n_prompts", "k", "n_responses", "eval_seed")
ARTIFACT_COLUMNS = ("job", "path", "bytes", "sha256")
SETTINGS_FILE = EVIDENCE_SETTINGS


def cell(value) -> str:
    """How one value is written to a CSV cell: floats round-trip exactly, None is empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def csv_text(columns, rows) -> str:
    """CSV text with a header, ``\\n`` line ends, and every cell written by ``cell``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        if isinstance(row, dict):
            row = [row.get(c) for c in columns]
        writer.writerow([cell(v) for v in row])
    return out.getvalue()


def write_csv(path: str | Path, columns, rows) -> None:
    write_text(path, csv_text(columns, rows))


def step_columns(metric_keys) -> tuple[str, ...]:
    """steps.csv columns: identity, then the contract's metrics in its order, then any others by name."""
    extra = sorted(set(metric_keys) - set(CONTRACT_KEYS) - {"step"})
    return STEP_ID_COLUMNS + tuple(k for k in CONTRACT_KEYS if k in metric_keys) + tuple(extra)


def _float(text: str) -> float | None:
    return None if text == "" else float(text)


def _arm(row: dict[str, str]) -> str:
    """The arm of a CSV row; rows written before arms existed belong to their algo's arm."""
    return row.get("arm") or row["algo"]


@dataclass
class BundleData:
    """Everything the report is computed from, as loaded from a bundle's ``data/`` directory.

    Runs are keyed by (arm label, seed).
    """

    sweep: dict
    settings: dict
    index: list[dict[str, str]]
    incidents: list[dict[str, str]]
    steps: dict[tuple[str, int], list[dict[str, float | None]]] = field(default_factory=dict)
    evals: dict[tuple[str, int], dict[str, dict]] = field(default_factory=dict)
    runs: dict[tuple[str, int], dict] = field(default_factory=dict)
    step_keys: tuple[str, ...] = ()
    experiment: str | None = None  # text of data/experiment.yaml, when the bundle has one
    # Each accepted run's resource samples (runs/<job>/resources.jsonl, the well-formed lines in order) and
    # what its job.json says was sampled (resource_sampling: interval, and why no GPU was).
    resources: dict[tuple[str, int], list[dict]] = field(default_factory=dict)
    resource_sampling: dict[tuple[str, int], dict] = field(default_factory=dict)
    stages: dict[str, BundleData] = field(default_factory=dict)  # an experiment's earlier stages, data/stages/<name>/
    # Each accepted run's final evaluation per prompt, {row index: (correct, responses)}, from its responses
    # (runs/<job>/eval/final.jsonl; ``read_prompt_counts``); absent when the file is missing or unreadable.
    final_prompts: dict[tuple[str, int], dict[int, tuple[int, int]]] = field(default_factory=dict)
    # certify=true: the reproducibility certificates recomputed from the payload's files (evidence.gates.certificate_jobs);
    # None for a sweep that certifies nothing.
    certificates: dict | None = None
    # Values the tables derive from the loaded data once per load, by (kind, key): an arm's report name, which
    # every row of every table asks for (the data is not changed after loading).
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def last_k(self) -> int:
        return int(self.settings["last_k"])

    @property
    def n_updates(self) -> int:
        return int(self.settings["n_updates"])

    @property
    def ci_level(self) -> float:
        return float(self.settings["ci_level"])

    @property
    def accepted(self) -> list[tuple[str, int]]:
        """Accepted (arm, seed) pairs, in index order. Nothing else enters an aggregate."""
        return [(_arm(r), int(r["seed"])) for r in self.index if r["accepted"] == "yes"]

    @cached_property
    def _index_rows(self) -> dict[tuple[str, str], dict[str, str]]:
        """``{(arm, seed cell): index row}``, the first row of each (the index is set once, at load)."""
        rows: dict[tuple[str, str], dict[str, str]] = {}
        for r in self.index:
            rows.setdefault((_arm(r), r["seed"]), r)
        return rows

    @cached_property
    def _index_algos(self) -> dict[str, str]:
        """``{arm: algo}`` of the first index row of each arm."""
        algos: dict[str, str] = {}
        for r in self.index:
            algos.setdefault(_arm(r), r["algo"])
        return algos

    def index_row(self, arm: str, seed: int) -> dict[str, str]:
        """The index row of one run (KeyError when the index has none): one lookup, not a walk of the index,
        since tables and the crate ask once per run."""
        return self._index_rows[(arm, str(seed))]

    @cached_property
    def arms(self) -> dict[str, tuple[str, dict[str, str]]]:
        """``{arm label: (algo, overrides)}`` in report order (``sweep.read_arms``; read once)."""
        return read_arms(self.sweep)

    def arm_algo(self, arm: str) -> str:
        """The algo short name an arm runs (a stray job's arm: its index row's algo)."""
        arms = self.arms
        if arm in arms:
            return arms[arm][0]
        return self._index_algos.get(arm, arm)


SAMPLE_NUMBERS = ("t", "cpu_percent", "rss_bytes")  # every resource sample's numbers
GPU_SAMPLE_NUMBERS = ("util_percent", "mem_used_bytes")  # every GPU entry's


def _finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def sample_problem(sample) -> str | None:
    """Why one line of ``resources.jsonl`` is not a resource sample (None: it is one)."""
    if not isinstance(sample, dict):
        return "is not a JSON object"
    missing = [k for k in SAMPLE_NUMBERS if not _finite_number(sample.get(k))]
    if missing:
        return f"has no finite {', '.join(missing)}"
    gpus = sample.get("gpus")
    if gpus is not None and not (isinstance(gpus, list) and all(
            isinstance(g, dict) and all(_finite_number(g.get(k)) for k in GPU_SAMPLE_NUMBERS) for g in gpus)):
        return "has a gpus entry without a finite util_percent and mem_used_bytes"
    return None


def read_resource_samples(path: Path) -> tuple[list[dict], list[str]]:
    """The resource samples of a job's ``resources.jsonl`` (launcher.runtime.resource_sampler), in file order, and
    a problem for each line that is not one (``line 3: is not a JSON object``); ``([], [why])`` when the
    file is missing or unreadable."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], [f"cannot be read ({exc.__class__.__name__})" if path.exists() else "missing"]
    samples, problems = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            sample = loads_strict(line)
        except ValueError:
            problems.append(f"line {number}: not JSON")
            continue
        why = sample_problem(sample)
        if why:
            problems.append(f"line {number}: {why}")
        else:
            samples.append(sample)
    return samples, problems


def read_prompt_counts(path: Path) -> dict[int, tuple[int, int]] | None:
    """An evaluation's responses file (``eval/<kind>.jsonl``) per prompt: ``facts.evaluation.prompt_counts`` of
    its response records (a response correct when its stored reward is > 0: the audit re-scores every one);
    None when the file is missing, unreadable or holds a line that is not a response record."""
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
        records = [loads_strict(line) for line in lines if line.strip()]
        if not records or not all(isinstance(r, dict) and isinstance(r.get("index"), int)
                                  and _finite_number(r.get("reward")) for r in records):
            return None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return prompt_counts(records)


def load_bundle_data(data_dir: str | Path) -> BundleData:
    """Load ``data/``: sweep.json, evidence.json, index/incidents/steps/eval CSVs, runs/*/run.json.

    Rows of jobs that the index does not accept are dropped here, so that no rejected job can
    enter any aggregate whatever the CSV files hold.
    """
    data_dir = Path(data_dir)
    sweep = read_json(data_dir / SWEEP_RECORD)
    settings = read_json(data_dir / SETTINGS_FILE)
    _, index = read_csv(data_dir / INDEX_TABLE)
    _, incidents = read_csv(data_dir / INCIDENTS_TABLE)
    data = BundleData(sweep=sweep, settings=settings, index=index, incidents=incidents)
    accepted = set(data.accepted)

    header, rows = read_csv(data_dir / STEPS_TABLE)
    data.step_keys = tuple(c for c in header if c not in STEP_ID_COLUMNS)
    for row in rows:
        run = (_arm(row), int(row["seed"]))
        if run in accepted:
            record = {k: _float(row[k]) for k in data.step_keys}
            record["step"] = int(row["step"])
            data.steps.setdefault(run, []).append(record)
    for records in data.steps.values():
        records.sort(key=lambda r: r["step"])

    _, rows = read_csv(data_dir / EVAL_TABLE)
    for row in rows:
        run = (_arm(row), int(row["seed"]))
        if run in accepted:
            entry = dict(row)
            entry.update({k: int(row[k]) for k in EVAL_INT_COLUMNS})
            entry.update({k: _float(row[k]) for k in EVAL_FLOAT_COLUMNS})  # pass@j is empty when j > k
            entry["all_zero_reward"] = row["all_zero_reward"] == "true"
            entry["initial_eval"] = row.get("initial_eval") or ""  # absent from bundles made before it
            data.evals.setdefault(run, {})[row["kind"]] = entry

    for arm, seed in accepted:
        try:
            data.runs[(arm, seed)] = read_json(data_dir / BUNDLE_RUNS_DIR / f"{arm}-{seed}" / RUN_RECORD)
        except JSONError:
            data.runs[(arm, seed)] = {}
        job_dir = data_dir / BUNDLE_RUNS_DIR / f"{arm}-{seed}"
        data.resources[(arm, seed)] = read_resource_samples(job_dir / RESOURCE_SAMPLES)[0]
        try:
            sampling = read_json(job_dir / JOB_RECORD).get(RESOURCE_SAMPLING_FIELD)
        except (JSONError, AttributeError):
            sampling = None
        data.resource_sampling[(arm, seed)] = sampling if isinstance(sampling, dict) else {}
        counts = read_prompt_counts(job_dir / EVAL_RESPONSES_DIR / eval_responses_name("final"))
        if counts is not None:
            data.final_prompts[(arm, seed)] = counts
    data.certificates = compute_certificates(data_dir, sweep, {r["job"] for r in index if r["accepted"] == "yes"})
    experiment = data_dir / EXPERIMENT_FILE
    if experiment.is_file():
        data.experiment = experiment.read_text(encoding="utf-8")
    stages = data_dir / "stages"
    for stage in sorted(stages.iterdir()) if stages.is_dir() else []:
        if (stage / INDEX_TABLE).is_file():
            data.stages[stage.name] = load_bundle_data(stage)
    return data
