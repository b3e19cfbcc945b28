"""An evaluation re-derived from its rawest data: every response re-scored against the frozen subset's label
(with the run's reward, ``evidence.evaluation.rewards``, never the stored reward), the summary's statistics recomputed from the re-scored
rewards, and the statistics no evaluation can report (``facts.evaluation.impossible_statistics``); the build's
eval gate (``evidence.gates.artifacts``) and the audit (``evidence.audit.evaluations``) both judge by it."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from evidence.problems import Problem, capped
from facts.evaluation import (
    impossible_statistics,
    recompute_eval,
    rescore,
    sample_problems,
    subset_labels,
    subset_rows,
)
from facts.reward import Reward, RewardValueError

SUBSET_MISSING = "missing: the frozen evaluation subset (the labels every response is re-scored against)"
RESPONSES_MISSING = "missing: the evaluation's responses (every one is re-scored from them)"


class SubsetLabels(dict):
    """The labels by row of a subset file, and (``rows``) the rows it carries for a user's reward."""

    rows: dict[int, dict] = {}


def read_subset(path: Path, subset_sha256) -> tuple[dict[int, str] | None, str | None]:
    """The labels by row of the subset file at ``path``, when its bytes hash to the pinned ``subset_sha256``
    (the summaries' digest); else None and why."""
    try:
        data = path.read_bytes()
    except OSError:
        return None, SUBSET_MISSING
    digest = hashlib.sha256(data).hexdigest()
    if digest != subset_sha256:
        return None, f"its SHA256 {digest[:12]}… is not the pinned subset_sha256 {str(subset_sha256)[:12]}…"
    try:
        labels = SubsetLabels(subset_labels(data))
        labels.rows = subset_rows(data)
        return labels, None
    except ValueError as exc:
        return None, f"not an evaluation subset ({exc})"


def _records(responses: bytes, labels: dict[int, str], file: str, scorer: Reward | None = None
             ) -> tuple[list[dict], list[float], list[Problem], list[tuple[int, int, object]]]:
    """The response records, their re-scored rewards, what is wrong with each line (the record named) and the
    (line, row, sample) of each record whose row is the subset's."""
    records, rewards, problems, pairs = [], [], [], []
    for number, line in enumerate(responses.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("response"), str) \
                    or not isinstance(record.get("index"), int) or isinstance(record.get("reward"), bool) \
                    or not isinstance(record.get("reward"), (int, float)):
                raise ValueError
        except ValueError:
            problems.append(Problem(file, "not a response record (index, sample, response, reward)", f"line {number}"))
            continue
        where = f"line {number}, row {record['index']}, sample {record.get('sample')}"
        if record["index"] not in labels:
            problems.append(Problem(file, "its row is not in the frozen evaluation subset", where))
            continue
        if "label" in record and record["label"] != labels[record["index"]]:
            problems.append(Problem(file, f"label {record['label']!r} is not the subset's {labels[record['index']]!r}",
                                    where))
        pairs.append((number, record["index"], record.get("sample")))
        try:
            reward = rescore(record, labels, scorer, getattr(labels, "rows", None))
        except RewardValueError as exc:
            problems.append(Problem(file, f"does not re-score: {exc}", where))
            continue
        if reward != record["reward"]:
            problems.append(Problem(file, f"reward {record['reward']!r} re-scores to {reward!r}", where))
        records.append(record)
        rewards.append(reward)
    return records, rewards, problems, pairs


def rescored_problems(summary: dict, responses: bytes, labels: dict[int, str], responses_file: str,
                      summary_file: str, where: str, scorer: Reward | None = None) -> list[Problem]:
    """Every response of ``responses`` re-scored against ``labels`` (a finding per response whose stored reward
    differs, naming its line and row), each evaluated row's samples 0..k-1 there once each (a finding per
    duplicated, out-of-range or missing (row, sample), ``facts.evaluation.sample_problems``), and ``summary``'s statistics (in ``summary_file`` at ``where``) recomputed
    from the re-scored rewards (a finding per statistic that differs, with the recomputed value). ``scorer``: the
    run's reward (``evidence.evaluation.rewards.rescoring``; default the embedded default's)."""
    records, rewards, problems, pairs = _records(responses, labels, responses_file, scorer)
    problems = capped(problems)
    if not records:
        return problems + [Problem(responses_file, "no response records")]
    evaluated = {r["index"] for r in records}
    if evaluated != set(labels):
        problems.append(Problem(responses_file, f"its responses cover {len(evaluated)} rows, the frozen subset has "
                                                f"{len(labels)}"))
    k = summary.get("k") if isinstance(summary.get("k"), int) and not isinstance(summary.get("k"), bool) else -1
    if k > 0:  # each evaluated row holds samples 0..k-1 once each (a k that is not one: the field checks say so)
        problems += capped([Problem(responses_file, reason, (f"line {line}, " if line is not None else "")
                                    + f"row {row}, sample {sample!r}")
                            for line, row, sample, reason in sample_problems(pairs, evaluated, k)])
    recomputed = recompute_eval(records, k, rewards)
    for name, value in recomputed.items():
        stored = summary.get(name)
        if not (isinstance(stored, (int, float)) and not isinstance(stored, bool) and math.isfinite(stored)
                and math.isclose(stored, value, rel_tol=1e-12, abs_tol=1e-12)):
            problems.append(Problem(summary_file, f"{name} {stored!r} does not recompute from the re-scored "
                                                  f"responses of {responses_file} ({value!r})", where))
    return problems


def statistics_problems(summary: dict, file: str, where: str) -> list[Problem]:
    """The statistics of ``summary`` that no evaluation can report (``facts.evaluation.STATISTIC_RULES``)."""
    return [Problem(file, reason, where) for reason in impossible_statistics(summary)]
