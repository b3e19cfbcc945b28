"""The frozen evaluation subset re-derived from the pinned test split it was cut from.

Every response is re-scored against the subset's labels (``evidence.evaluation.rescore``), and the subset file is
pinned by the summaries' ``subset_sha256``; but a forger who edits a label rewrites that digest too. What
they cannot rewrite is the test split itself: the run's ``run.json`` pins it by SHA256 (``inputs``, checked
by the trainer before it ran), and the subset is a pure function of it and the evaluation's settings, the
first ``workload.eval.n_prompts`` rows as ``[index, question, label]`` read with the run's field map and its reward's
label normalisation (``facts.splits``, ``facts.evaluation.subset_bytes``; a user's reward adds the row). So the build
and the audit cut the
subset again from the split, wherever its pinned bytes are found (the repository's own embedded data set; a
bundle cannot carry a user's data set), and hold the subset file to it, row by row. Where the split with its
pinned digest is not at hand, the subset is not re-derived and the audit says so in one line.

The run's pin is itself held to the reviewer's checkout: the trainer copies ``inputs`` from the workload's
manifest (``config.workload.manifest``), so a run.json naming a manifest of the checkout must pin the test
split as that manifest does, and one pinning a path some manifest of the checkout pins must pin its bytes.
Otherwise a forger who rewrote run.json's digest would turn "this label is not the split's" into "the split is
not at hand" (a note). A run naming neither a manifest nor a path the checkout knows still gets the note, which
``python -m evidence audit --strict`` counts as a finding. Paths are compared in their normal form (``./`` and
``//`` spell the same file).

Which split, how many of its rows and which reward are a fact of the run's workload, not of its record: the checkout's
``conf/workload/<name>.yaml`` with the overrides of the job's command (``command.public.json``) says them, so a
run.json evaluating on another pinned file (the train split) or on fewer rows (the hardest last prompts dropped)
than its command asked for is a finding too (proofgrid's trainer, whose command must then be ``python -m
trainer``; another trainer's settings are in its job spec); a workload the checkout does not have is a note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

from evidence.evaluation.rewards import recorded_reward
from facts.containers import contained_command
from facts.evaluation import subset_bytes, subset_labels
from facts.files import TRAINER_FIELD, sha256_file
from facts.manifests import ManifestFormatError, read_manifest
from facts.repo import CONF_DIR, MANIFESTS_DIR, REPO_ROOT
from facts.reward import BUILTIN_REWARDS, DEFAULT_REWARD, is_user_reward, strip_label
from facts.splits import SplitError, split_rows
from facts.task import Task
from facts.trainers import PROOFGRID_TRAINER


@dataclass(frozen=True)
class SubsetSource:
    """Where a run's subset comes from: the test split's path as the run names it, its pinned SHA256, how many
    rows the evaluation takes, and the manifest the run says it copied the pin from (None: it names none)."""

    test_path: str
    sha256: str
    n_prompts: int
    manifest: str | None = None
    task: str = "{}"  # the run's workload settings that read the split (data, reward), as canonical JSON

    def describe(self) -> str:
        return f"{self.test_path} (sha256 {self.sha256[:12]}…, first {self.n_prompts} rows)"


def subset_source(run_record: dict) -> SubsetSource | None:
    """The run's subset source from its ``run.json`` (config.workload.test_path and eval.n_prompts, and the
    split's pin in ``inputs``); None when the record does not say (another trainer's, or a malformed one)."""
    try:
        workload = run_record["config"]["workload"]
        test_path, n_prompts = workload["test_path"], workload["eval"]["n_prompts"]
        digest = run_record["inputs"][test_path]
    except (KeyError, TypeError):
        return None
    if not isinstance(test_path, str) or not isinstance(digest, str) or isinstance(n_prompts, bool) \
            or not isinstance(n_prompts, int) or n_prompts < 1:
        return None
    manifest = workload.get("manifest")
    task = json.dumps({k: workload.get(k) for k in ("data", "reward") if k in workload}, sort_keys=True, default=str)
    return SubsetSource(test_path, digest, n_prompts, manifest if isinstance(manifest, str) else None, task)


def normal_path(path: str) -> str:
    """A repository-relative path in its normal form: ``./a//b`` is ``a/b`` (``..`` is kept: it is refused)."""
    return PurePosixPath(path).as_posix()


DECLARING_KEYS = {"workload.test_path": "test_path", "workload.eval.n_prompts": "n_prompts", "workload.reward": "reward"}


def declared_overrides(words) -> tuple[dict[str, str], str | None]:
    """``({"test_path" | "n_prompts": value}, a key set twice or None)`` from a command's ``key=value`` words
    (``+``/``++`` prefixes included)."""
    found, twice = {}, None
    for word in words:
        key, sep, value = str(word).lstrip("+").partition("=")
        if sep and key in DECLARING_KEYS:
            if DECLARING_KEYS[key] in found:
                twice = key
            found[DECLARING_KEYS[key]] = value
    return found, twice


def command_settings(words) -> tuple[str | None, list[str]]:
    """(the module a command runs with ``-m``, or None; its ``key=value`` words after it, sorted, but those naming a
    placeholder: a path each record of the command sanitised on its own)."""
    words = contained_command([str(w) for w in words])  # in an image: the command its entry runs
    for i, (flag, module) in enumerate(zip(words, words[1:])):
        if flag == "-m":
            return module, sorted(w for w in words[i + 2:] if "=" in w and "<" not in w)
    return None, []


@lru_cache(maxsize=16)
def _workload_evaluation(text: str) -> tuple[tuple[str, object], ...]:
    """``(("test_path", ...), ("n_prompts", ...), ("reward", ...))`` a workload file's text states (parsed once per
    text: the build and the audit ask for every run)."""
    import yaml  # here: only a check that has a workload to read parses YAML

    workload = yaml.safe_load(text)
    return (("test_path", workload["test_path"]), ("n_prompts", workload["eval"]["n_prompts"]),
            ("reward", workload.get("reward") or DEFAULT_REWARD))


def declared_difference(source: SubsetSource, run_record: dict, argv, root: Path = REPO_ROOT
                        ) -> tuple[str | None, str | None]:
    """(difference, not checked because): how the run's split or row count differs from what its workload
    declares, the checkout's ``conf/workload/<name>.yaml`` (``name``: run.json's ``workload``) with the overrides
    of proofgrid's trainer command (``workload.test_path=``, ``workload.eval.n_prompts=``, ``+``/``++`` prefixes
    included); both None when they agree, or for another trainer's run (run.json's ``trainer`` names it: its
    settings are in its job spec, which the bundle does not carry). A run of proofgrid's trainer whose command is
    not ``python -m trainer`` declares nothing: a difference."""
    import yaml  # here: only a check that has a workload to read parses YAML

    trainer = run_record.get(TRAINER_FIELD) if isinstance(run_record, dict) else None
    if isinstance(trainer, dict) and trainer.get("name") != PROOFGRID_TRAINER:
        return None, None  # another trainer's run (trainer.external records which): its job spec is not bundled
    words = [str(a) for a in argv] if isinstance(argv, list) else []
    if command_settings(words)[0] != "trainer":
        return ("run.json is proofgrid's trainer's (it names no other trainer), but its command does not run "
                "python -m trainer: its evaluation is not declared"), None
    name = run_record.get("workload") if isinstance(run_record, dict) else None
    conf = root / CONF_DIR.relative_to(REPO_ROOT) / "workload" / f"{name}.yaml"
    if not isinstance(name, str) or not name or "/" in name or not conf.is_file():
        return None, f"its workload {name!r} is not in this checkout's conf/workload/"
    try:
        declared = dict(_workload_evaluation(conf.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return None, f"conf/workload/{name}.yaml does not state test_path and eval.n_prompts"
    overrides, twice = declared_overrides(words)
    if twice:
        return f"the command sets {twice} more than once (Hydra refuses that): its evaluation is not declared", None
    declared.update(overrides)
    said = f"conf/workload/{name}.yaml with the command's overrides"
    if normal_path(str(declared["test_path"])) != normal_path(source.test_path):
        return (f"run.json evaluates on {source.test_path}, the workload's test split is {declared['test_path']} "
                f"({said})"), None
    if str(declared["n_prompts"]) != str(source.n_prompts):
        return (f"run.json evaluates on {source.n_prompts} prompts, the workload's eval.n_prompts is "
                f"{declared['n_prompts']} ({said})"), None
    recorded = recorded_reward(run_record)["name"]
    if str(declared["reward"]) != recorded:
        return f"run.json scores with reward {recorded}, the workload's reward is {declared['reward']} ({said})", None
    return None, None


def checkout_manifests(root: Path = REPO_ROOT) -> dict[str, dict[str, str]]:
    """``{manifest's path relative to root: {pinned path: sha256}}`` for every readable manifest of the checkout
    (``manifests/*.json``; one that is not a manifest pins nothing here: the trainer refuses it)."""
    pins = {}
    for path in sorted((root / MANIFESTS_DIR.relative_to(REPO_ROOT)).glob("*.json")):
        try:
            pins[path.relative_to(root).as_posix()] = {pin.path: pin.sha256 for pin in read_manifest(path)}
        except (OSError, ManifestFormatError):
            continue
    return pins


def pin_conflict(source: SubsetSource, root: Path = REPO_ROOT) -> str | None:
    """How the run's pin of its test split contradicts the checkout's manifests (module docstring), or None:
    the manifest the run names does not pin the split, or pins other bytes; or another manifest of the checkout
    pins the same path with other bytes."""
    manifests = checkout_manifests(root)
    fix = ("run.json was edited, or the data set was re-pinned since the run: audit from a checkout of the "
           "commit that ran it")
    named = manifests.get(normal_path(source.manifest)) if source.manifest else None
    test_path = normal_path(source.test_path)
    if named is not None and test_path not in named:
        return f"run.json's test split {source.test_path} is not a file this checkout's {source.manifest} pins ({fix})"
    for manifest, pins in ([(source.manifest, named)] if named is not None else sorted(manifests.items())):
        pinned = pins.get(test_path)
        if pinned is not None and pinned != source.sha256:
            return (f"run.json pins {source.test_path} with sha256 {source.sha256[:12]}…, this checkout's "
                    f"{manifest} with {pinned[:12]}… ({fix})")
    return None


def locate_split(source: SubsetSource, root: Path = REPO_ROOT) -> tuple[Path | None, str]:
    """The split's file with its pinned bytes: the run's path if absolute (the build, on the machine that ran
    it), else under ``root`` (the repository; never outside it); None and why not."""
    path = Path(source.test_path)
    if not path.is_absolute():
        relative = PurePosixPath(source.test_path)
        if ".." in relative.parts:
            return None, f"{source.test_path} leaves the repository"
        path = root / relative
    if not path.is_file():
        return None, f"{source.test_path} is not in this checkout"
    if _sha256(path, path.stat().st_mtime_ns) != source.sha256:
        return None, f"{source.test_path} in this checkout is not the pinned one (sha256 {source.sha256[:12]}…)"
    return path, ""


@lru_cache(maxsize=16)
def _sha256(path: Path, _mtime_ns: int) -> str:
    """``sha256_file``, once per file version: a build judges every job against the same split."""
    return sha256_file(path)


@lru_cache(maxsize=16)
def derived_subset(path: Path, sha256: str, n_prompts: int, task: str = "{}") -> bytes | None:
    """The subset's bytes as the trainer writes them, cut from the split at ``path`` (its bytes' SHA256
    ``sha256``: the cache's key) with the run's field map and reward (``task``, ``SubsetSource.task``); None when
    the split has fewer rows than the evaluation takes (``SplitError`` when it does not read as the run says)."""
    settings = Task.of(json.loads(task))
    user = is_user_reward(settings.reward)
    normalize = BUILTIN_REWARDS[settings.reward][1] if settings.reward in BUILTIN_REWARDS else strip_label
    rows = split_rows(path, settings.fields, normalize)
    if len(rows) < n_prompts:
        return None
    return subset_bytes((r.index, r.question, r.label, *([r.row] if user else [])) for r in rows[:n_prompts])


def subset_difference(stated: bytes, derived: bytes) -> str | None:
    """How a subset file's bytes differ from the subset cut from the pinned split: the first row whose index,
    question or label differs, or the row counts; None when they are the same bytes."""
    if stated == derived:
        return None
    try:
        subset_labels(stated)
        rows = json.loads(stated)
    except ValueError:
        return "is not an evaluation subset"
    want = json.loads(derived)
    for i, (have, expected) in enumerate(zip(rows, want)):
        for field, a, b in zip(("index", "question", "label"), have, expected):
            if a != b:
                return f"row {i}: {field} {_short(a)} is not the pinned test split's {_short(b)}"
    if len(rows) != len(want):
        return f"has {len(rows)} rows, the evaluation takes the pinned test split's first {len(want)}"
    return "its bytes are not the canonical form of the pinned test split's rows"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_subset(stated: bytes, source: SubsetSource, root: Path = REPO_ROOT) -> tuple[str | None, str | None]:
    """(difference, not re-derived because): the subset file's bytes against the subset cut from its run's
    pinned split, that pin held to the checkout's manifests first; both None when they agree."""
    conflict = pin_conflict(source, root)
    if conflict is not None:
        return conflict, None
    path, why = locate_split(source, root)
    if path is None:
        return None, why
    try:
        derived = derived_subset(path, source.sha256, source.n_prompts, source.task)
    except SplitError as exc:
        return f"the pinned test split does not read as the run's workload says ({exc})", None
    if derived is None:
        return f"the pinned test split {source.test_path} has fewer than {source.n_prompts} rows", None
    return subset_difference(stated, derived), None
