"""The bundle's RO-Crate (data/ro-crate-metadata.json) through ``python -m evidence build`` and ``audit``: read back
with ro-crate-py's own reader it is a Workflow Run Crate whose every accepted run is an action with its pinned
inputs, its outputs in the bag and its software versions; its file digests are the bag's; its times come from
the job records; the audit refuses a crate that disagrees with the bag, even with the manifests resealed."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import bagit
import pytest
from rocrate.rocrate import ROCrate

from benchmarks.synthetic_sweep import COMMIT, SUBSET_SHA, job_dir, make_sweep, set_job_fields
from facts.repo import REPO_ROOT
from tests.evidence_cli import evidence_in_process, evidence_process
from tests.no_network import no_network_prefix
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
# roc-validator in a venv of its own, its HTTP cache holding the RO-Crate 1.1 context: `make crate-validator`
# (scripts/crate_validator.py); `make test` makes it first.
CRATE_VENV = REPO / ".venv-crate"
VALIDATOR = CRATE_VENV / "bin" / "rocrate-validator"
STARTED = 1768471200.0  # 2026-01-15T10:00:00Z, a job's started_at (Unix time)


# The build and the first audit through `python -m evidence` as processes; the forgeries' audits through the same
# main in this process (tests/evidence_cli.py).
def evidence(*args) -> subprocess.CompletedProcess:
    return evidence_in_process(*args)


def ni(hex_digest: str) -> str:
    """RFC 6920: ni:///sha-256;<base64url of the digest, no padding>."""
    return "ni:///sha-256;" + base64.urlsafe_b64encode(bytes.fromhex(hex_digest)).decode().rstrip("=")


def ids(value) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [item.id for item in items]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A 3 x 3 sweep with one job rejected (a truncated metrics log) and start times in the job records."""
    sweep = make_sweep(tmp_path_factory.mktemp("crate"))
    for index, (algo, seed) in enumerate((a, s) for a in ("grpo", "rpp", "rppb") for s in (42, 1234, 2026)):
        set_job_fields(sweep, algo, seed, started_at=STARTED + 60 * index)
    log = job_dir(sweep, "rppb", 2026) / "run" / "metrics.jsonl"
    log.write_text(log.read_text()[:-40])
    done = evidence_process("build", sweep, "--no-figures")
    assert done.returncode == 0, done.stdout + done.stderr
    return sweep


def test_the_crate_is_a_workflow_run_crate_of_every_accepted_run(built):
    data = built / "bundle" / "data"
    crate = ROCrate(data)  # ro-crate-py's own reader
    raw = json.loads((data / "ro-crate-metadata.json").read_text())
    assert raw["@context"] == ["https://w3id.org/ro/crate/1.1/context",
                               {"sha256": "https://w3id.org/ro/terms/workflow-run#sha256"}]
    assert crate.version == "1.1"
    assert crate.mainEntity.id == "sweep.json"
    assert {"File", "SoftwareSourceCode", "ComputationalWorkflow"} <= set(crate.mainEntity.type)
    assert set(ids(crate.root_dataset["conformsTo"])) == {
        "https://w3id.org/ro/wfrun/process/0.5", "https://w3id.org/ro/wfrun/workflow/0.5",
        "https://w3id.org/workflowhub/workflow-ro-crate/1.0"}
    # The sweep records no license (an older sweep.json): the documented default, as an SPDX entity.
    assert crate.root_dataset["license"].id == "https://spdx.org/licenses/CC-BY-4.0"
    assert crate.root_dataset["license"]["identifier"] == "CC-BY-4.0"
    assert crate.root_dataset["datePublished"] == "2026-01-15T10:00:00Z"  # the sweep's record, not the build's clock

    accepted = [f"{a}-{s}" for a in ("grpo", "rpp", "rppb") for s in (42, 1234, 2026) if (a, s) != ("rppb", 2026)]
    actions = {a.id: a for a in crate.get_by_type("CreateAction")}
    assert set(actions) == {"#sweep"} | {f"#run-{job}" for job in accepted}  # the rejected job is no action
    for job in accepted:
        action = actions[f"#run-{job}"]
        assert ids(action["result"]) == [f"runs/{job}/"]
        assert action["actionStatus"] == "http://schema.org/CompletedActionStatus"  # the value, not an @id
        run = json.loads((data / "runs" / job / "run.json").read_text())
        inputs = {ni(d) for d in run["inputs"].values()} | {ni(SUBSET_SHA)}
        assert inputs <= set(ids(action["object"]))
        for entity in action["object"]:
            if entity.id.startswith("ni:"):
                assert ni(entity["sha256"]) == entity.id
        instrument = action["instrument"]
        assert instrument["softwareVersion"] == COMMIT
        assert {(lib["name"], lib["softwareVersion"]) for lib in instrument["softwareRequirements"]} == {
            (name, version) for name, version in run["versions"].items()}
        start = STARTED + 60 * [f"{a}-{s}" for a in ("grpo", "rpp", "rppb") for s in (42, 1234, 2026)].index(job)
        record = json.loads((data / "runs" / job / "job.json").read_text())
        assert action["startTime"] == datetime.fromtimestamp(start, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00")
        assert action["endTime"] == datetime.fromtimestamp(start + record["elapsed_s"], timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S+00:00")
    assert set(ids(actions["#sweep"]["result"])) == {f"runs/{job}/" for job in accepted}
    assert actions["#sweep"]["instrument"].id == "sweep.json"


def test_the_crate_names_every_payload_file_with_the_bags_digest_and_the_manifest_covers_it(built):
    bag = built / "bundle"
    data = bag / "data"
    crate = ROCrate(data)
    files = {e.id: e for e in crate.data_entities if "File" in e.type and not e.id.startswith("ni:")}
    on_disk = {p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file()} - {"ro-crate-metadata.json"}
    assert set(files) == on_disk
    for rel, entity in files.items():
        content = (data / rel).read_bytes()
        assert (entity["sha256"], entity["contentSize"]) == (hashlib.sha256(content).hexdigest(), len(content)), rel
        expected_format = {".json": "application/json", ".jsonl": "application/jsonl", ".csv": "text/csv",
                           ".md": "text/markdown", ".yaml": "application/yaml", ".log": "text/plain",
                           ".txt": "text/plain", ".png": "image/png"}
        assert entity["encodingFormat"] == expected_format.get(Path(rel).suffix, "application/octet-stream"), rel
    manifest = dict(reversed(line.split(maxsplit=1)) for line in (bag / "manifest-sha256.txt").read_text().splitlines())
    assert manifest["data/ro-crate-metadata.json"] == hashlib.sha256((data / "ro-crate-metadata.json").read_bytes()).hexdigest()
    assert evidence_process("audit", built / "bundle.tar.gz").returncode == 0


def _graph_edit(bag: Path, edit) -> None:
    path = bag / "data" / "ro-crate-metadata.json"
    crate = json.loads(path.read_text())
    crate["@graph"] = edit(crate["@graph"])
    path.write_text(json.dumps(crate, indent=2))


def _set(graph, ident, **fields):
    for entity in graph:
        if entity["@id"] == ident:
            entity.update(fields)
    return graph


def _set_first(graph, prefix, **fields):
    next(e for e in graph if e["@id"].startswith(prefix)).update(fields)
    return graph


def _crate_edit(bag: Path, edit) -> None:
    path = bag / "data" / "ro-crate-metadata.json"
    crate = json.loads(path.read_text())
    edit(crate)
    path.write_text(json.dumps(crate, indent=2))


def _strip_digests(graph):
    for entity in graph:
        entity.pop("sha256", None)
        entity.pop("contentSize", None)
    return graph


def _add_file(bag: Path) -> None:
    (bag / "data" / "CLAIM.md").write_text("rpp wins\n")


CRATE_FORGERIES = {
    "a file's digest restated": (
        lambda bag: _graph_edit(bag, lambda g: _set(g, "runs/grpo-42/eval.json", sha256="0" * 64)),
        "data/ro-crate-metadata.json: @id runs/grpo-42/eval.json: states sha256 0000000000000000000000000000000000000000000000000000000000000000 "
        "for data/runs/grpo-42/eval.json, the bag's file has "),
    "an accepted run's action removed": (
        lambda bag: _graph_edit(bag, lambda g: [e for e in g if e["@id"] != "#run-rpp-42"]),
        "data/ro-crate-metadata.json: run rpp-42: accepted in index.csv but no CreateAction of the crate describes it"),
    "an action for the rejected run": (
        lambda bag: _graph_edit(bag, lambda g: g + [{**next(e for e in g if e["@id"] == "#run-rpp-42"),
                                                     "@id": "#run-rppb-2026"}]),
        "data/ro-crate-metadata.json: @id #run-rppb-2026: a CreateAction describes run rppb-2026, which index.csv "
        "does not accept"),
    "a run's pinned input dropped": (
        lambda bag: _graph_edit(bag, lambda g: _set(g, "#run-grpo-42", object=[{"@id": "#grpo-42-seed"}])),
        "data/ro-crate-metadata.json: run grpo-42: its action's object lacks the input model/model.safetensors"),
    "a file the bag does not hold": (
        lambda bag: _graph_edit(bag, lambda g: g + [{"@id": "runs/grpo-42/best.safetensors", "@type": "File",
                                                     "sha256": "1" * 64}]),
        "data/ro-crate-metadata.json: @id runs/grpo-42/best.safetensors: names data/runs/grpo-42/best.safetensors, "
        "which is not a file of the bag"),
    "a file added to the bag only": (
        _add_file, "data/ro-crate-metadata.json: does not name data/CLAIM.md, a file of the bag"),
    # What the crate states about the runs (B9): the audit regenerates the crate from the bag and compares.
    "a library's version restated": (
        lambda bag: _graph_edit(bag, lambda g: _set_first(g, "#software-", softwareVersion="2.5.0")),
        "data/ro-crate-metadata.json: @id #software-"),
    "a run's seed restated": (
        lambda bag: _graph_edit(bag, lambda g: _set(g, "#rpp-42-seed", value=1)),
        "data/ro-crate-metadata.json: @id #rpp-42-seed: states value 1, the build writes 42"),
    "a run's status set to failed": (
        lambda bag: _graph_edit(bag, lambda g: _set(g, "#run-rpp-42",
                                                    actionStatus="http://schema.org/FailedActionStatus")),
        'data/ro-crate-metadata.json: @id #run-rpp-42: states actionStatus "http://schema.org/FailedActionStatus", '
        'the build writes "http://schema.org/CompletedActionStatus"'),
    "the license changed": (
        lambda bag: _graph_edit(bag, lambda g: _set(g, "./", license={"@id": "https://spdx.org/licenses/CC0-1.0"})),
        'data/ro-crate-metadata.json: @id ./: states license {"@id": "https://spdx.org/licenses/CC0-1.0"}, the build '
        'writes {"@id": "https://spdx.org/licenses/CC-BY-4.0"}'),
    "a file's encodingFormat restated": (
        lambda bag: _graph_edit(bag, lambda g: _set(g, "runs/grpo-42/eval.json", encodingFormat="text/plain")),
        'data/ro-crate-metadata.json: @id runs/grpo-42/eval.json: states encodingFormat "text/plain", the build writes '
        '"application/json"'),
    "a run's name rewritten": (
        lambda bag: _graph_edit(bag, lambda g: _set(g, "#run-rpp-42", name="training run rpp-42 (Qwen3-8B, 64 H100s)")),
        'data/ro-crate-metadata.json: @id #run-rpp-42: states name "training run rpp-42 (Qwen3-8B, 64 H100s)"'),
    "the trainer's name rewritten": (
        lambda bag: _graph_edit(bag, lambda g: _set_first(g, "#trainer-", name="Qwen3-8B trainer")),
        "data/ro-crate-metadata.json: @id #trainer-"),
    "an extra input on a run": (
        lambda bag: _graph_edit(bag, lambda g: _set(g, "#run-rpp-42", object=[
            *next(e for e in g if e["@id"] == "#run-rpp-42")["object"], {"@id": "https://huggingface.co/Qwen/Qwen3-8B"}])),
        "data/ro-crate-metadata.json: @id #run-rpp-42: states object "),
    "an unpinned digest input on a run": (
        lambda bag: _graph_edit(bag, lambda g: _set(g, "#run-rpp-42", object=[
            *next(e for e in g if e["@id"] == "#run-rpp-42")["object"], {"@id": ni("a" * 64)}]) + [
            {"@id": ni("a" * 64), "@type": "File", "name": "trainer/assets/qwen3-8b/model.safetensors",
             "sha256": "a" * 64}]),
        f"data/ro-crate-metadata.json: @id {ni('a' * 64)}: an entity the build does not write from this bag"),
    "a claim in the root description": (
        lambda bag: _graph_edit(bag, lambda g: _set(g, "./", description="REINFORCE++ wins, p<0.001 (replicated)")),
        'data/ro-crate-metadata.json: @id ./: states description "REINFORCE++ wins, p<0.001 (replicated)"'),
    "a claim entity added": (
        lambda bag: _graph_edit(bag, lambda g: g + [{"@id": "#claim", "@type": "CreativeWork", "name": "rpp wins"}]),
        "data/ro-crate-metadata.json: @id #claim: an entity the build does not write from this bag"),
    "every sha256 and contentSize removed": (
        lambda bag: _graph_edit(bag, _strip_digests),
        "data/ro-crate-metadata.json: @id runs/grpo-42/eval.json: states sha256 null, the build writes "),
    "the @context replaced": (
        lambda bag: _crate_edit(bag, lambda c: c.update({"@context": "https://evil.example.org/ctx.jsonld"})),
        'data/ro-crate-metadata.json: @context: states @context "https://evil.example.org/ctx.jsonld", the build '
        'writes ["https://w3id.org/ro/crate/1.1/context"'),
    "the crate deleted": (
        lambda bag: (bag / "data" / "ro-crate-metadata.json").unlink(),
        "data/ro-crate-metadata.json: missing: the build writes the bundle's RO-Crate (rebuild the bundle)"),
}


@pytest.mark.parametrize("forgery", list(CRATE_FORGERIES))
def test_a_crate_that_disagrees_with_the_bag_is_a_finding_even_resealed(built, tmp_path, forgery):
    bag = Path(shutil.copytree(built / "bundle", tmp_path / "bundle"))
    edit, expected = CRATE_FORGERIES[forgery]
    edit(bag)
    bagit.Bag(str(bag)).save(manifests=True)  # the manifests agree with the edit: only the crate check can notice
    done = evidence("audit", bag)
    assert done.returncode == 1, done.stdout + done.stderr
    assert any(line.startswith(expected) for line in done.stdout.splitlines()), done.stdout


def test_reseal_bag_restates_the_crate_as_a_forger_would(built, tmp_path):
    """The tests' reseal helper (tests/sweeps.py) keeps the crate's digests with the edit, so that the other
    content checks are tested alone; the crate check itself is then satisfied."""
    bag = Path(shutil.copytree(built / "bundle", tmp_path / "bundle"))
    log = bag / "data" / "runs" / "grpo-42" / "logs" / "runtime.log"
    log.write_text(log.read_text() + "one more line\n")
    reseal_bag(bag)
    done = evidence("audit", bag)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "clean", done.stdout


def validate(crate_dir: Path, profile: str, severity: str) -> dict:
    """roc-validator's JSON report of ``crate_dir`` against ``profile`` at ``severity``, with no network (its
    cache answers the context's URL; a fetch of anything else fails)."""
    if not VALIDATOR.is_file():
        pytest.fail(f"roc-validator is not installed in {CRATE_VENV.name}/: run make crate-validator")
    report = crate_dir.parent / f"validation-{profile}-{severity}.json"
    cache = crate_dir.parent / f"http-cache-{severity}"  # a copy: parallel tests never share the SQLite file
    shutil.copyfile(CRATE_VENV / "http-cache.sqlite", cache.with_name(cache.name + ".sqlite"))
    done = subprocess.run([*no_network_prefix(), str(VALIDATOR), "--no-interactive", "--disable-color", "validate",
                           "--offline", "--cache-path", str(cache), "--no-paging",
                           "-p", profile, "-l", severity, "-f", "json", "-o", str(report), str(crate_dir)],
                          capture_output=True, text=True, timeout=300)
    assert report.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(report.read_text())


def failed_checks(report: dict) -> dict[str, str]:
    return {issue["check"]["identifier"]: issue["message"] for issue in report["issues"]}


def test_roc_validator_passes_the_crate_at_the_required_level_of_each_profile_it_conforms_to(built, tmp_path):
    """Workflow Run Crate 0.5 inherits Process Run Crate 0.5, Workflow RO-Crate 1.0 and RO-Crate 1.1: each one's
    REQUIRED checks hold; and of the RECOMMENDED ones, those the independent client found failing (the license as
    an entity, the profiles in conformsTo, actionStatus's value, every file's encodingFormat) hold too."""
    crate_dir = Path(shutil.copytree(built / "bundle" / "data", tmp_path / "data"))
    required = validate(crate_dir, "workflow-run-crate-0.5", "REQUIRED")
    assert set(required["statistics"]["profiles"]) >= {"ro-crate-1.1", "workflow-ro-crate-1.0", "process-run-crate-0.5",
                                                        "workflow-run-crate-0.5"}
    assert required["skipped_checks"] == 0 and required["statistics"]["total_checks"] > 40
    assert required["passed"], failed_checks(required)
    recommended = failed_checks(validate(crate_dir, "workflow-run-crate-0.5", "RECOMMENDED"))
    for check in ("ro-crate-1.1_22.1",  # the license, a contextual entity
                  "workflow-run-crate-0.5_6.1",  # conformsTo names Process Run Crate and Workflow RO-Crate
                  "process-run-crate-0.5_8.7",  # actionStatus is schema.org's CompletedActionStatus
                  "process-run-crate-0.5_8.3",  # every action has a description
                  "ro-crate-1.1_27.1"):  # every File has an encodingFormat
        assert check not in recommended, recommended[check]


def test_roc_validator_fails_a_crate_without_license_or_with_a_status_as_an_id(built, tmp_path):
    """The validator run above can fail: the two defects the client reported, put back, are each found."""
    crate_dir = Path(shutil.copytree(built / "bundle" / "data", tmp_path / "data"))
    path = crate_dir / "ro-crate-metadata.json"
    crate = json.loads(path.read_text())
    for entity in crate["@graph"]:
        if entity["@id"] == "./":
            del entity["license"]
        if entity.get("actionStatus"):
            entity["actionStatus"] = {"@id": entity["actionStatus"]}
    path.write_text(json.dumps(crate, indent=2))
    required = validate(crate_dir, "workflow-run-crate-0.5", "REQUIRED")
    assert not required["passed"] and {"ro-crate-1.1_8.3", "workflow-ro-crate-1.0_5.1"} <= set(failed_checks(required))
    assert "process-run-crate-0.5_8.7" in failed_checks(validate(crate_dir, "workflow-run-crate-0.5", "RECOMMENDED"))
