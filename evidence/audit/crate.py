"""The payload's RO-Crate (``data/ro-crate-metadata.json``) against the bag, read with ro-crate-py's own reader.

Every data entity it names inside the crate exists in the payload (a File as a file, a Dataset as a
directory) with the size and SHA256 it states; every payload file is named; each input named by digest
(``ni:///sha-256;...``) states that digest; every accepted run of the index is a CreateAction whose result
is its ``runs/<job>/`` and whose object holds each input its run.json pins, and no action is of a run the
index does not accept; the main entity is the sweep's plan, a ComputationalWorkflow, and the crate
conforms to the Workflow Run Crate profile. And since the build writes the crate deterministically from the
bag's own data (``evidence.seal.ro_crate.build_crate``), the audit regenerates it and compares: every entity and
property the crate states (a software version, a seed, an action's status, a name, an extra input or entity,
the root's description, the ``@context``, a removed ``sha256``) is the regenerated one, each difference named.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

from rocrate.rocrate import ROCrate

from evidence.dataset import BundleData
from evidence.fileio import JSONError, read_json, sha256_file
from evidence.problems import Problem
from evidence.seal.ro_crate import (
    RUN_ACTION_PREFIX,
    WORKFLOW_PROFILE,
    build_crate,
    digest_of_uri,
    digest_uri,
    run_action_id,
    run_dataset_id,
)
from evidence.sweep import job_name
from facts.files import RO_CRATE_METADATA, SWEEP_RECORD, payload_relpath

CRATE_FILE = payload_relpath(RO_CRATE_METADATA)
KIND = "crate"
# What ro-crate-py's reader may raise on a crate no build writes.
READ_ERRORS = (ValueError, KeyError, TypeError, AttributeError, OSError)


def _ids(value) -> list[str]:
    """The ``@id`` of each entity (or reference) in a property's value, whatever its shape."""
    items = value if isinstance(value, list) else [value] if value is not None else []
    return [getattr(item, "id", None) or (item.get("@id") if isinstance(item, dict) else None) or "" for item in items]


def _types(entity) -> set[str]:
    kinds = entity.type
    return set(kinds if isinstance(kinds, list) else [kinds])


def _in_crate(ident: str) -> bool:
    """A data entity inside the crate: a relative path (not an absolute URI, not a ``#`` local name)."""
    return not (ident.startswith("#") or "://" in ident or ident.startswith(("ni:", "urn:", "/", "./")))


def _check_entity(data_dir: Path, entity, problems: list[Problem]) -> str | None:
    """One data entity against the payload; the payload path it names (None when not inside the crate)."""
    ident = entity.id
    where = f"@id {ident}"
    if not _in_crate(ident):
        named = digest_of_uri(ident)
        stated = str(entity.get("sha256") or "").lower()
        if named is not None and stated and stated != named:
            problems.append(Problem(CRATE_FILE, f"names {named} but states sha256 {stated}", where, KIND))
        return None
    rel = unquote(ident).rstrip("/")  # an @id is a URI reference: a name with spaces or "+" is percent-encoded
    if ".." in PurePosixPath(rel).parts or not rel:
        problems.append(Problem(CRATE_FILE, "names a path outside the payload", where, KIND))
        return None
    path = data_dir / rel
    is_dataset = "Dataset" in _types(entity)
    if path.is_symlink() or not (path.is_dir() if is_dataset else path.is_file()):
        problems.append(Problem(CRATE_FILE, f"names {payload_relpath(rel)}, which is not a "
                                            f"{'directory' if is_dataset else 'file'} of the bag", where, KIND))
        return None
    if not is_dataset:
        stated, size = entity.get("sha256"), entity.get("contentSize")
        if stated is not None and str(stated).lower() != (actual := sha256_file(path)):
            problems.append(Problem(CRATE_FILE, f"states sha256 {stated} for {payload_relpath(rel)}, the bag's file "
                                                f"has {actual}", where, KIND))
        if size is not None and str(size) != str(path.stat().st_size):
            problems.append(Problem(CRATE_FILE, f"states contentSize {size} for {payload_relpath(rel)}, the bag's "
                                                f"file has {path.stat().st_size} bytes", where, KIND))
    return rel


def _check_actions(crate: ROCrate, data: BundleData, problems: list[Problem]) -> None:
    actions = {a.id: a for a in crate.get_by_type("CreateAction")}
    accepted = {job_name(arm, seed): (arm, seed) for arm, seed in data.accepted}
    for job, run_key in accepted.items():
        action = actions.get(run_action_id(job))
        where = f"run {job}"
        if action is None:
            problems.append(Problem(CRATE_FILE, "accepted in index.csv but no CreateAction of the crate describes it",
                                    where, KIND))
            continue
        if run_dataset_id(job) not in _ids(action.get("result")):
            problems.append(Problem(CRATE_FILE, f"its action's result is not {run_dataset_id(job)}", where, KIND))
        pins = (data.runs.get(run_key) or {}).get("inputs")
        objects = set(_ids(action.get("object")))
        for path, digest in sorted(pins.items()) if isinstance(pins, dict) else []:
            digest = str(digest).lower()
            if len(digest) == 64 and digest_uri(digest) not in objects:
                problems.append(Problem(CRATE_FILE, f"its action's object lacks the input {path} "
                                                    f"(sha256 {digest}, as run.json pins it)", where, KIND))
    for ident in sorted(actions):
        job = ident[len(RUN_ACTION_PREFIX):] if ident.startswith(RUN_ACTION_PREFIX) else None
        if job is not None and job not in accepted:
            problems.append(Problem(CRATE_FILE, f"a CreateAction describes run {job}, which index.csv does not accept",
                                    f"@id {ident}", KIND))


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def _check_regenerated(data_dir: Path, data: BundleData, problems: list[Problem]) -> None:
    """The crate as stated against the crate the build writes from this bag: each entity and property."""
    try:
        stated = read_json(data_dir / RO_CRATE_METADATA)
    except JSONError as exc:
        problems.append(Problem(CRATE_FILE, f"not readable JSON ({exc})", kind=KIND))
        return
    expected = build_crate(data_dir, data)
    stated = stated if isinstance(stated, dict) else {}
    for key in sorted(set(stated) | set(expected)):
        if key != "@graph" and stated.get(key) != expected.get(key):
            problems.append(Problem(CRATE_FILE, f"states {key} {_short(stated.get(key))}, the build writes "
                                                f"{_short(expected.get(key))}", key, KIND))
    graph = stated.get("@graph") if isinstance(stated.get("@graph"), list) else []
    have: dict[str, dict] = {}
    for entity in graph:
        ident = entity.get("@id") if isinstance(entity, dict) else None
        if not isinstance(ident, str) or ident in have:
            problems.append(Problem(CRATE_FILE, f"an entity without a single @id: {_short(entity)}", "@graph", KIND))
            continue
        have[ident] = entity
    want = {e["@id"]: e for e in expected.get("@graph", [])}
    for ident in sorted(set(have) | set(want)):
        where = f"@id {ident}"
        if ident not in want:
            problems.append(Problem(CRATE_FILE, "an entity the build does not write from this bag", where, KIND))
        elif ident not in have:
            problems.append(Problem(CRATE_FILE, "lacks this entity, which the build writes from this bag", where,
                                    KIND))
        else:
            for key in sorted(set(have[ident]) | set(want[ident])):
                if have[ident].get(key) != want[ident].get(key):
                    problems.append(Problem(CRATE_FILE, f"states {key} {_short(have[ident].get(key))}, the build "
                                                        f"writes {_short(want[ident].get(key))}", where, KIND))


def check_crate(data_dir: Path, data: BundleData) -> list[Problem]:
    """The crate against the bag (see the module's docstring); [] when they agree."""
    if not (data_dir / RO_CRATE_METADATA).is_file():
        return [Problem(CRATE_FILE, "missing: the build writes the bundle's RO-Crate (rebuild the bundle)", kind=KIND)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            crate = ROCrate(data_dir)
    except READ_ERRORS as exc:
        return [Problem(CRATE_FILE, f"not a readable RO-Crate ({exc.__class__.__name__}: {exc})", kind=KIND)]
    problems: list[Problem] = []
    profiles = set(_ids(crate.root_dataset.get("conformsTo")))
    if WORKFLOW_PROFILE not in profiles:
        problems.append(Problem(CRATE_FILE, f"the root does not conform to {WORKFLOW_PROFILE}", "@id ./", KIND))
    main = crate.mainEntity
    if main is None or main.id != SWEEP_RECORD or "ComputationalWorkflow" not in _types(main):
        problems.append(Problem(CRATE_FILE, f"its mainEntity is not {SWEEP_RECORD} as a ComputationalWorkflow",
                                "@id ./", KIND))
    # Every File or Dataset of the graph, also one no hasPart reaches (the reader keeps it as a contextual entity).
    described = [e for e in crate.get_entities() if e is not crate.root_dataset and e is not crate.metadata
                 and _types(e) & {"File", "Dataset"}]
    named = {rel for entity in described if (rel := _check_entity(data_dir, entity, problems)) is not None}
    for path in sorted(data_dir.rglob("*")):
        rel = path.relative_to(data_dir).as_posix()
        if path.is_file() and rel != RO_CRATE_METADATA and rel not in named:
            problems.append(Problem(CRATE_FILE, f"does not name {payload_relpath(rel)}, a file of the bag", kind=KIND))
    _check_actions(crate, data, problems)
    _check_regenerated(data_dir, data, problems)
    return problems
