"""The frozen evaluation subsets the bundle carries (``data/eval_subset/<subset12>.json``) cut again from the
test split each accepted run pinned (``evidence.evaluation.subset_source``): a subset file whose rows are not the split's
first ``n_prompts`` (an edited label, question or index) is a finding naming its first differing row, whatever
digests were rewritten around it; so is a run.json whose split or row count is not what its workload and command
declare. Where the split with its pinned bytes is not in the reviewer's checkout (a
user's own data set) the subset cannot be re-derived, and the audit says so in one note instead. These are the rules of
the judge's ``eval-setting`` and ``eval-subset-derived`` gates (``evidence.evaluation.judge``, the same functions),
which the evaluations check leaves to this one (``SUBSET_GATES``): here each subset file is judged once, naming its
runs."""

from __future__ import annotations

from pathlib import Path

from evidence.dataset import BundleData
from evidence.evaluation.subset_source import (
    check_subset,
    command_settings,
    declared_difference,
    declared_overrides,
    subset_source,
)
from evidence.fileio import JSONError, read_json
from evidence.problems import Problem
from facts.bundle_layout import fits
from facts.files import (
    BUNDLE_PAYLOAD,
    BUNDLE_RUNS_DIR,
    COMMAND_PUBLIC_RECORD,
    COMMANDS_FILE,
    RUN_RECORD,
    STAGES_DIR,
    bundle_subset_relpath,
)


def _argv(root: Path, job: str) -> list | None:
    """The job's command line as the bundle states it (``runs/<job>/command.public.json``), or None."""
    try:
        command = read_json(root / BUNDLE_RUNS_DIR / job / COMMAND_PUBLIC_RECORD)
    except JSONError:
        return None
    return command.get("argv") if isinstance(command, dict) else None


def _listed_words(root: Path, job: str) -> list[str] | None:
    """The words of ``job``'s line of ``commands.txt`` (``[i] <job>: <command>``), or None."""
    try:
        text = (root / COMMANDS_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return next((line.split(":", 1)[1].split() for line in text.splitlines()
                 if line.startswith("[") and line.split("] ", 1)[-1].startswith(f"{job}:")), None)


def _commands_disagree(root: Path, job: str, argv) -> str | None:
    """Where ``command.public.json`` and ``commands.txt`` state the evaluation's overrides differently (the two
    records of one command: editing one alone is how a forger would declare what the run did not)."""
    listed = _listed_words(root, job)
    if listed is None or not isinstance(argv, list):
        return None
    # commands.txt's line is the argv joined by spaces: an argument holding a space (a prompt template's override)
    # is compared as the words it became there.
    argv = " ".join(str(a) for a in argv).split()
    stated, in_list = declared_overrides(argv)[0], declared_overrides(listed)[0]
    if stated != in_list:
        return (f"command.public.json's evaluation overrides {stated} are not {COMMANDS_FILE}'s {in_list} for "
                f"{job}: one command, two stories")
    stated, in_list = command_settings(argv), command_settings(listed)
    if stated != in_list:
        only_stated = sorted(set(stated[1]) - set(in_list[1])) or stated[0]
        only_listed = sorted(set(in_list[1]) - set(stated[1])) or in_list[0]
        return (f"command.public.json runs {only_stated} where {COMMANDS_FILE} runs {only_listed} for {job}: one "
                "command, two stories")
    return None


def _payload_subsets(root: Path, prefix: str, data: BundleData, problems: list[Problem],
                     not_derived: dict[str, str], not_declared: dict[str, str]) -> None:
    """Each subset of one payload root against the split its accepted runs pin (their run.json and eval.csv
    rows, as loaded: the runs check holds them to the runs' own files), each (subset, split) once."""
    seen = set()
    for arm, seed in data.accepted:
        job, digest = f"{arm}-{seed}", data.evals.get((arm, seed), {}).get("final", {}).get("subset_sha256")
        source = subset_source(data.runs.get((arm, seed), {}))
        if not isinstance(digest, str) or not fits("subset12", digest[:12]):
            continue  # the evaluations check names a digest that is not one
        rel = bundle_subset_relpath(digest)
        try:
            stated = (root / rel).read_bytes()
        except OSError:
            continue  # the evaluations check names a missing subset
        if source is None:
            not_derived.setdefault(f"{prefix}/{rel}", f"run {job}'s run.json does not name its test split as one "
                                                         "pinned file (a saved dataset is a directory of them)")
            continue
        record, argv = f"{prefix}/{BUNDLE_RUNS_DIR}/{job}/{RUN_RECORD}", _argv(root, job)
        if (disagree := _commands_disagree(root, job, argv)) is not None:
            problems.append(Problem(f"{prefix}/{BUNDLE_RUNS_DIR}/{job}/{COMMAND_PUBLIC_RECORD}", disagree))
        declared, unchecked = declared_difference(source, data.runs.get((arm, seed), {}), argv)
        if declared is not None:
            problems.append(Problem(record, declared, f"run {job}"))
        elif unchecked is not None:
            not_declared[record] = unchecked
        if (rel, source) in seen:
            continue
        seen.add((rel, source))
        difference, why = check_subset(stated, source)
        if difference is not None:
            problems.append(Problem(f"{prefix}/{rel}", f"{difference}: {source.describe()}", f"run {job}"))
        elif why is not None:
            not_derived.setdefault(f"{prefix}/{rel}", why)


def check_subsets(data_dir: Path, data: BundleData, notes: list[str] | None = None) -> list[Problem]:
    """Each subset of the bundle and of its earlier stages against its runs' pinned test split (module
    docstring); one note per subset that could not be re-derived appended to ``notes``."""
    problems, not_derived, not_declared = [], {}, {}
    _payload_subsets(data_dir, BUNDLE_PAYLOAD, data, problems, not_derived, not_declared)
    for name, stage in sorted(data.stages.items()):
        _payload_subsets(data_dir / STAGES_DIR / name, f"{BUNDLE_PAYLOAD}/{STAGES_DIR}/{name}", stage, problems,
                         not_derived, not_declared)
    if notes is not None:
        notes += [f"eval subset: {rel} not re-derived ({why}): its labels are as the bundle states them"
                  for rel, why in sorted(not_derived.items())]
        notes += [f"eval setting: {rel} not checked ({why}): its test split and prompt count are as it states them"
                  for rel, why in sorted(not_declared.items())]
    return problems
