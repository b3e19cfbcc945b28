"""The frozen evaluation subsets the bundle carries (``data/eval_subset/<subset12>.json``) cut again from the
test split each accepted run pinned (``evidence.subset_source``): a subset file whose rows are not the split's
first ``n_prompts`` (an edited label, question or index) is a finding naming its first differing row, whatever
digests were rewritten around it. Where the split with its pinned bytes is not in the reviewer's checkout (a
user's own data set) the subset cannot be re-derived, and the audit says so in one note instead."""

from __future__ import annotations

from pathlib import Path

from evidence.dataset import BundleData
from evidence.fileio import JSONError, read_json
from evidence.problems import Problem
from evidence.subset_source import check_subset, subset_source
from facts.files import (
    BUNDLE_PAYLOAD,
    BUNDLE_RUNS_DIR,
    EVAL_RECORD,
    RUN_RECORD,
    STAGES_DIR,
    bundle_subset_relpath,
)


def _payload_subsets(root: Path, prefix: str, data: BundleData, seen: dict, problems: list[Problem],
                     not_derived: dict[str, str]) -> None:
    for row in data.index:
        if row.get("accepted") != "yes":
            continue
        run = root / BUNDLE_RUNS_DIR / row["job"]
        try:
            source = subset_source(read_json(run / RUN_RECORD))
            digest = read_json(run / EVAL_RECORD)["final"]["subset_sha256"]
            rel = bundle_subset_relpath(digest)
            stated = (root / rel).read_bytes()
        except (JSONError, OSError, KeyError, TypeError, ValueError):
            continue  # the runs and evaluations checks name a missing or unreadable record or subset
        if source is None:
            not_derived.setdefault(f"{prefix}/{rel}", f"run {row['job']}'s run.json does not name its test split")
            continue
        if (rel, source) in seen:
            continue
        seen[(rel, source)] = True
        difference, why = check_subset(stated, source)
        if difference is not None:
            problems.append(Problem(f"{prefix}/{rel}", f"{difference}: {source.describe()}", f"run {row['job']}"))
        elif why is not None:
            not_derived.setdefault(f"{prefix}/{rel}", why)


def check_subsets(data_dir: Path, data: BundleData, notes: list[str] | None = None) -> list[Problem]:
    """Each subset of the bundle and of its earlier stages against its runs' pinned test split (module
    docstring); one note per subset that could not be re-derived appended to ``notes``."""
    problems, not_derived = [], {}
    _payload_subsets(data_dir, BUNDLE_PAYLOAD, data, {}, problems, not_derived)
    for name, stage in sorted(data.stages.items()):
        _payload_subsets(data_dir / STAGES_DIR / name, f"{BUNDLE_PAYLOAD}/{STAGES_DIR}/{name}", stage, {}, problems,
                         not_derived)
    if notes is not None:
        notes += [f"eval subset: {rel} not re-derived ({why}): its labels are as the bundle states them"
                  for rel, why in sorted(not_derived.items())]
    return problems
