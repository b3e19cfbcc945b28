"""The payload's RO-Crate: ``data/ro-crate-metadata.json``, a Workflow Run Crate written with ro-crate-py.

The crate's root is the bag's payload directory (RO-Crate 1.1, "RO-Crate and BagIt"). It names every
payload file with its size and SHA256 (``sha256``: the Workflow Run terms), every directory as a Dataset,
and the sweep as the workflow that ran: ``sweep.json`` is the crate's main entity, a ComputationalWorkflow
(the plan of jobs), and one CreateAction per accepted run says what it read and wrote:

    instrument  the trainer as run (source commit, and each library version run.json records)
    object      the pinned inputs of run.json (model and data files, by digest: ``ni:///sha-256;...``
                identifiers, RFC 6920), the evaluation subset's digest, the algo and seed
    result      the run's directory in the bag, ``runs/<job>/``
    startTime / endTime   from the job's record (``started_at``, ``elapsed_s``), when it has them

plus one CreateAction of the whole sweep with the workflow as instrument. Nothing here reads a clock:
the crate's ``datePublished`` is the sweep's ``created``, so rebuilding gives the same bytes. The audit
checks it against the bag (``evidence.audit.crate``).

It meets the REQUIRED level of RO-Crate 1.1, Workflow RO-Crate 1.0 and Workflow Run Crate 0.5 as
roc-validator checks them (tests/evidence/seal/test_crate.py runs it): the root's ``license`` is the
sweep's (``sweep.json``'s ``license``, the launcher's ``license=`` setting; ``facts.license.DEFAULT_LICENSE``
for a sweep that records none) as an SPDX contextual entity; the root conforms to the three profiles; an
action's ``actionStatus`` is the plain schema.org value; every file has an ``encodingFormat`` (a fixed table by
file name, never the machine's MIME database, so every machine writes the same bytes). The one Workflow Run
term used, ``sha256``, is defined inline in the ``@context`` (RO-Crate 1.1's way of adding a term), so a reader
resolves only the RO-Crate context.
"""

from __future__ import annotations

import base64
import hashlib
import json
import warnings
from datetime import datetime, timezone
from pathlib import Path

from rocrate.model.computerlanguage import ComputerLanguage
from rocrate.model.contextentity import ContextEntity
from rocrate.model.softwareapplication import SoftwareApplication
from rocrate.rocrate import ROCrate

from evidence.dataset import BundleData
from evidence.fileio import JSONError, dumps_json, read_json, sha256_file, write_text
from evidence.sweep import job_name
from facts.containers import APPTAINER, CONTAINER_FIELD, IMAGE_DIGEST_FIELD, PODMAN, PYXIS
from facts.files import BUNDLE_RUNS_DIR, JOB_RECORD, RO_CRATE_METADATA, SWEEP_RECORD
from facts.license import DEFAULT_LICENSE, LICENSE_FIELD, license_url

RO_CRATE_VERSION = "1.1"
# The Workflow Run vocabulary's one term the crate uses, defined inline (what its remote context defines it as).
WORKFLOW_RUN_TERMS = {"sha256": "https://w3id.org/ro/terms/workflow-run#sha256"}
# The Workflow Run Crate version written for RO-Crate 1.1 (0.6 moves to RO-Crate 1.3), the profiles it extends.
PROFILES = {"https://w3id.org/ro/wfrun/process/0.5": "Process Run Crate",
            "https://w3id.org/ro/wfrun/workflow/0.5": "Workflow Run Crate",
            "https://w3id.org/workflowhub/workflow-ro-crate/1.0": "Workflow RO-Crate"}
WORKFLOW_PROFILE = "https://w3id.org/ro/wfrun/workflow/0.5"
# A payload file's encodingFormat by its name's ending (IANA media types; JSON Lines has none registered:
# its own site's application/jsonl); anything else is application/octet-stream.
ENCODING_FORMATS = {".json": "application/json", ".jsonl": "application/jsonl", ".csv": "text/csv",
                    ".md": "text/markdown", ".yaml": "application/yaml", ".yml": "application/yaml",
                    ".txt": "text/plain", ".log": "text/plain", ".png": "image/png", ".svg": "image/svg+xml",
                    ".pdf": "application/pdf", ".html": "text/html"}
OCTET_STREAM = "application/octet-stream"
SWEEP_LANGUAGE = "#proofgrid-sweep"
# The Workflow Run Crate's kinds of container image (its ``additionalType``), by the runtime that ran it.
IMAGE_KINDS = {APPTAINER: "SIFImage", PODMAN: "DockerImage", PYXIS: "DockerImage"}
SWEEP_ACTION = "#sweep"
EVAL_SUBSET = "evaluation subset (prompts and labels)"
COMPLETED = "http://schema.org/CompletedActionStatus"  # an accepted run completed (the plain value, not an @id)


def encoding_format(name: str) -> str:
    """A payload file's media type by its name (``ENCODING_FORMATS``), the same on every machine."""
    suffix = name[name.rfind("."):].lower() if "." in name else ""
    return ENCODING_FORMATS.get(suffix, OCTET_STREAM)


def digest_uri(sha256_hex: str) -> str:
    """The RFC 6920 name of content by its SHA256: ``ni:///sha-256;<base64url digest, unpadded>``."""
    raw = bytes.fromhex(sha256_hex)
    return "ni:///sha-256;" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def digest_of_uri(uri: str) -> str | None:
    """The SHA256 hex digest an ``ni:///sha-256;`` URI names, or None for any other identifier."""
    prefix = "ni:///sha-256;"
    if not uri.startswith(prefix):
        return None
    text = uri[len(prefix):]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        return None
    return raw.hex() if len(raw) == 32 else None


RUN_ACTION_PREFIX = "#run-"


def run_action_id(job: str) -> str:
    """The crate identifier of an accepted run's CreateAction: ``#run-<job>``."""
    return f"{RUN_ACTION_PREFIX}{job}"


def run_dataset_id(job: str) -> str:
    """The crate identifier of a run's directory in the payload: ``runs/<job>/``."""
    return f"{BUNDLE_RUNS_DIR}/{job}/"


def iso_time(unix_seconds: float) -> str:
    """A Unix time as ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(unix_seconds, timezone.utc).isoformat(timespec="seconds")


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _entity_id(path: Path, data_dir: Path) -> str:
    """A payload path's crate identifier: relative to the crate's root, a directory's ending in ``/``."""
    rel = path.relative_to(data_dir).as_posix()
    return rel + "/" if path.is_dir() else rel


def _payload_entities(crate: ROCrate, data_dir: Path) -> dict[str, object]:
    """Every payload file (size, SHA256) and directory (its direct parts): ``{id: entity}``."""
    entities: dict[str, object] = {}
    paths = sorted((p for p in data_dir.rglob("*") if p != data_dir / RO_CRATE_METADATA),
                   key=lambda p: p.relative_to(data_dir).as_posix())
    for path in paths:
        if path.is_file():
            entities[_entity_id(path, data_dir)] = crate.add_file(dest_path=_entity_id(path, data_dir), properties={
                "name": path.name, "contentSize": path.stat().st_size, "sha256": sha256_file(path),
                "encodingFormat": encoding_format(path.name)})
    # Deepest directories first, so that each one's parts exist when it is added.
    for path in sorted((p for p in paths if p.is_dir()), key=lambda p: (-len(p.relative_to(data_dir).parts), p)):
        parts = [entities[i] for i in (_entity_id(c, data_dir) for c in sorted(path.iterdir())) if i in entities]
        entities[_entity_id(path, data_dir)] = crate.add_dataset(
            dest_path=_entity_id(path, data_dir), properties={"name": path.name, "hasPart": parts})
    return entities


def _software(crate: ROCrate, run: dict, commit: str) -> SoftwareApplication:
    """The trainer as one run ran it: its source commit and every library version its run.json records
    (one entity per distinct set, named by its digest, so runs of the same build share it)."""
    versions = run.get("versions") if isinstance(run.get("versions"), dict) else {}
    versions = {str(k): str(v) for k, v in sorted(versions.items())}
    key = hashlib.sha256(json.dumps([commit, versions], sort_keys=True).encode()).hexdigest()[:12]
    ident = f"#trainer-{key}"
    existing = crate.get(ident)
    if existing is not None:
        return existing
    requirements = []
    for name, version in versions.items():
        lib = crate.get(f"#software-{name}-{version}") or crate.add(SoftwareApplication(
            crate, f"#software-{name}-{version}", properties={"name": name, "softwareVersion": version}))
        requirements.append(lib)
    return crate.add(SoftwareApplication(crate, ident, properties={
        "name": "proofgrid trainer", "softwareVersion": commit or "unknown", "softwareRequirements": requirements}))


def _inputs(crate: ROCrate, run: dict, evals: dict) -> list:
    """A run's pinned inputs (run.json ``inputs``: relative path -> SHA256) and its evaluation subset, by digest."""
    pins = run.get("inputs") if isinstance(run.get("inputs"), dict) else {}
    named = sorted((str(path), str(digest).lower()) for path, digest in pins.items())
    subset = (evals.get("final") or {}).get("subset_sha256") or (evals.get("initial") or {}).get("subset_sha256")
    if subset:
        named.append((EVAL_SUBSET, str(subset).lower()))
    entities = []
    for name, digest in named:
        if not _is_hex(digest):
            continue  # not a SHA256 digest: nothing to name the input by
        uri = digest_uri(digest)
        entity = crate.get(uri) or crate.add_file(uri, properties={"name": name, "sha256": digest,
                                                                   "encodingFormat": encoding_format(name)})
        if entity not in entities:
            entities.append(entity)
    return entities


def _image(crate: ROCrate, run: dict, record: dict):
    """The container image a run ran in (run.json's digest, job.json's image name and runtime) as a Workflow Run
    Crate ``ContainerImage``, one per digest; None for a run on the host."""
    digest = run.get(IMAGE_DIGEST_FIELD)
    if not isinstance(digest, str) or not digest.startswith("sha256:") or not _is_hex(digest[len("sha256:"):]):
        return None
    ident = f"#image-{digest[len('sha256:'):][:12]}"
    existing = crate.get(ident)
    if existing is not None:
        return existing
    container = record.get(CONTAINER_FIELD) if isinstance(record.get(CONTAINER_FIELD), dict) else {}
    kind = IMAGE_KINDS.get(str(container.get("runtime")), "DockerImage")
    return crate.add(ContextEntity(crate, ident, properties={
        "@type": "ContainerImage", "name": str(container.get("image") or digest), "sha256": digest[len("sha256:"):],
        "additionalType": {"@id": f"https://w3id.org/ro/terms/workflow-run#{kind}"}}))


def _is_hex(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def _parameters(crate: ROCrate, job: str, algo: str, seed: int) -> list:
    return [crate.add(ContextEntity(crate, f"#{job}-{name}", properties={
        "@type": "PropertyValue", "name": name, "value": value})) for name, value in (("algo", algo), ("seed", seed))]


def _times(record: dict) -> dict[str, str]:
    start, elapsed = _number(record.get("started_at")), _number(record.get("elapsed_s"))
    if start is None:
        return {}
    return {"startTime": iso_time(start), **({"endTime": iso_time(start + elapsed)} if elapsed is not None else {})}


def build_crate(data_dir: str | Path, data: BundleData) -> dict:
    """The crate of a payload directory whose every other file is written, as JSON-LD (a dict)."""
    data_dir = Path(data_dir)
    crate = ROCrate(version=RO_CRATE_VERSION)
    crate.metadata.extra_terms.update(WORKFLOW_RUN_TERMS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ro-crate-py warns that no entity has a source: the files are in place
        entities = _payload_entities(crate, data_dir)
    language = crate.add(ComputerLanguage(crate, SWEEP_LANGUAGE, properties={
        "name": "proofgrid sweep plan", "alternateName": SWEEP_RECORD}))
    workflow = crate.add_workflow(dest_path=SWEEP_RECORD, main=True, lang=language, properties={
        **{k: v for k, v in entities[SWEEP_RECORD].properties().items() if k in ("contentSize", "sha256", "encodingFormat")},
        **({"version": str(data.sweep["source_commit"])} if data.sweep.get("source_commit") else {}),
        "name": f"proofgrid sweep: {data.sweep.get('workload', 'sweep')}, "
                f"{len(data.sweep.get('seeds') or [])} seeds, {data.sweep.get('n_updates')} updates"})
    profiles = [crate.add(ContextEntity(crate, uri, properties={"@type": "CreativeWork", "name": name,
                                                                "version": uri.rsplit("/", 1)[-1]}))
                for uri, name in PROFILES.items()]
    crate.root_dataset["conformsTo"] = profiles
    spdx = str(data.sweep.get(LICENSE_FIELD) or DEFAULT_LICENSE)
    crate.root_dataset["license"] = crate.add(ContextEntity(crate, license_url(spdx), properties={
        "@type": "CreativeWork", "name": spdx, "identifier": spdx,
        "description": f"The bundle's license (SPDX {spdx}), as the sweep records it (the launcher's license= setting)"}))
    crate.name = f"proofgrid evidence bundle: {data.sweep.get('workload', 'sweep')}"
    crate.description = ("A sweep of RL post-training runs, their accepted evidence, statistics and report "
                         "(a BagIt bag's payload; audit it with python -m evidence audit).")
    created = data.sweep.get("created")
    if created:
        crate.datePublished = str(created)
    else:
        del crate.root_dataset["datePublished"]  # ro-crate-py's default is the build's clock

    actions, sweep_inputs, sweep_results = [], [], []
    for arm, seed in data.accepted:
        job = job_name(arm, seed)
        row = data.index_row(arm, seed)
        run = data.runs.get((arm, seed)) or {}
        try:
            record = read_json(data_dir / BUNDLE_RUNS_DIR / job / JOB_RECORD)
        except JSONError:
            record = {}
        record = record if isinstance(record, dict) else {}
        inputs = _inputs(crate, run, data.evals.get((arm, seed), {}))
        result = entities.get(run_dataset_id(job))
        action = crate.add_action(_software(crate, run, row.get("source_commit", "")), identifier=run_action_id(job),
                                  object=inputs + _parameters(crate, job, row.get("algo", ""), seed),
                                  result=result,
                                  properties={"name": f"training run {job}", "actionStatus": COMPLETED,
                                              "description": f"the training run of arm {arm}, seed {seed}, accepted "
                                                             "by the evidence",
                                              **_times(record)})
        image = _image(crate, run, record)
        if image is not None:  # seed 000's "Image digest": the container the run ran in
            action["containerImage"] = image
        actions.append(action)
        sweep_inputs += [i for i in inputs if i not in sweep_inputs]
        if result is not None:
            sweep_results.append(result)
    starts = sorted(a["startTime"] for a in actions if a.get("startTime"))
    ends = sorted(a["endTime"] for a in actions if a.get("endTime"))
    times = {**({"startTime": starts[0]} if starts else {}), **({"endTime": ends[-1]} if ends else {})}
    sweep_action = crate.add_action(workflow, identifier=SWEEP_ACTION, object=sweep_inputs or None,
                                    result=sweep_results or None, properties={"name": "proofgrid sweep", **times,
                                                "description": "every accepted run of the sweep's plan"})
    crate.root_dataset["mentions"] = [sweep_action, *actions]
    return crate.metadata.generate()


def write_crate(data_dir: str | Path, data: BundleData) -> None:
    """Write ``data/ro-crate-metadata.json`` (last: it names every other payload file with its digest)."""
    write_text(Path(data_dir) / RO_CRATE_METADATA, dumps_json(build_crate(data_dir, data)))
