"""Signed bundles through ``python -m evidence sign`` and ``audit --public-key``: the signature verifies with the
signer's key; every forgery (another key, a tampered archive, another bundle's signature, an edited statement,
a bundle rebuilt and resealed with a recomputed SHA256) fails on the signature in one finding; unsigned bundles
still audit and say so; bad key input is one line before anything runs.

The signature is checked here independently of securesystemslib: the DSSE pre-authentication encoding is
written from the DSSE spec and verified with pyca/cryptography's Ed25519."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from benchmarks.synthetic_sweep import make_sweep
from facts.repo import REPO_ROOT
from tests.evidence_cli import evidence_in_process, evidence_process

REPO = REPO_ROOT
SIG = ".intoto.jsonl"


# The keys, the build and the first audit through `python -m evidence` as processes; every other call, a forgery
# after another, through the same main in this process (tests/evidence_cli.py).
def evidence(*args) -> subprocess.CompletedProcess:
    return evidence_in_process(*args)


def findings(done: subprocess.CompletedProcess) -> list[str]:
    """The audit's findings: its stdout less the signature's line (first) and the count (last)."""
    return done.stdout.splitlines()[1:-1]


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def envelope_of(archive: Path) -> dict:
    return json.loads(Path(str(archive) + SIG).read_text())


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    """The signer's and a forger's key pairs, made by the CLI."""
    folder = tmp_path_factory.mktemp("keys")
    for who in ("signer", "forger"):
        done = evidence_process("sign", "--generate-key", folder / who)
        assert done.returncode == 0, done.stderr
    return {"signer": folder / "signer", "forger": folder / "forger"}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A sweep built once through the CLI (no figures: the signature does not depend on them)."""
    sweep = make_sweep(tmp_path_factory.mktemp("signed"))
    done = evidence_process("build", sweep, "--no-figures")
    assert done.returncode == 0, done.stdout + done.stderr
    return sweep


@pytest.fixture
def signed(built, keys, tmp_path) -> Path:
    """A private copy of the built sweep whose archive is signed by the signer's key."""
    sweep = Path(shutil.copytree(built, tmp_path / "sweep"))
    done = evidence("sign", sweep / "bundle.tar.gz", "--key", keys["signer"])
    assert done.returncode == 0, done.stderr
    return sweep


def test_generated_keys_sign_and_the_signature_verifies_independently(signed, keys):
    private, public = keys["signer"], Path(str(keys["signer"]) + ".pub")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    key = serialization.load_pem_public_key(public.read_bytes())
    assert isinstance(key, Ed25519PublicKey)
    archive = signed / "bundle.tar.gz"
    envelope = envelope_of(archive)
    assert envelope["payloadType"] == "application/vnd.in-toto+json" and len(envelope["signatures"]) == 1
    payload = base64.b64decode(envelope["payload"])
    key.verify(base64.b64decode(envelope["signatures"][0]["sig"]), pae(envelope["payloadType"], payload))
    statement = json.loads(payload)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"] == [{"name": "bundle.tar.gz",
                                     "digest": {"sha256": hashlib.sha256(archive.read_bytes()).hexdigest()}}]
    with tarfile.open(archive) as tar:
        manifest = tar.extractfile("bundle/manifest-sha256.txt").read()
        tagmanifest = tar.extractfile("bundle/tagmanifest-sha256.txt").read()
    predicate = statement["predicate"]
    assert predicate["bag"] == "bundle"
    assert predicate["manifests"] == {"manifest-sha256.txt": {"sha256": hashlib.sha256(manifest).hexdigest()},
                                      "tagmanifest-sha256.txt": {"sha256": hashlib.sha256(tagmanifest).hexdigest()}}
    assert predicate["payload"] == {path: digest for digest, path in
                                    (line.split(maxsplit=1) for line in manifest.decode().splitlines())}
    done = evidence_process("audit", archive, "--public-key", public)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("signature: verified, bundle.tar.gz.intoto.jsonl signed by ed25519 key ")
    assert lines[1:] == ["clean"]


def test_an_openssh_key_pair_signs_and_verifies(built, tmp_path):
    sweep = Path(shutil.copytree(built, tmp_path / "sweep"))
    private = Ed25519PrivateKey.generate()
    (tmp_path / "id_ed25519").write_bytes(private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
    (tmp_path / "id_ed25519.pub").write_bytes(private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b" reviewer\n")
    assert evidence("sign", sweep / "bundle.tar.gz", "--key", tmp_path / "id_ed25519").returncode == 0
    done = evidence("audit", sweep / "bundle.tar.gz", "--public-key", tmp_path / "id_ed25519.pub")
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "clean", done.stdout + done.stderr


def test_an_unsigned_bundle_audits_and_says_so_unless_a_key_was_asked_for(built, keys):
    archive = built / "bundle.tar.gz"
    done = evidence("audit", archive)
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["unsigned (no bundle.tar.gz.intoto.jsonl beside the archive)", "clean"]
    done = evidence("audit", archive, "--public-key", str(keys["signer"]) + ".pub")
    assert done.returncode == 1
    (finding,) = findings(done)
    assert finding.startswith("bundle.tar.gz: unsigned: no bundle.tar.gz.intoto.jsonl beside it, and the audit was "
                              "given a public key (ed25519 key ")


def test_a_signed_bundle_audited_without_a_key_says_it_is_not_verified(signed):
    done = evidence("audit", signed / "bundle.tar.gz")
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "signed (bundle.tar.gz.intoto.jsonl), not verified: pass --public-key <file> to verify it", "clean"]


def _rebuild_with_an_edited_metric(sweep: Path) -> None:
    """A consistent forgery of everything: a run's number changed at the source, the bundle rebuilt and
    resealed by the real build (manifests, crate, tables, report, sidecar SHA256 all recomputed)."""
    log = sweep / "jobs" / "grpo-42" / "run" / "metrics.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    records[-1]["rollout/raw_reward"] = 0.99
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = evidence("build", sweep, "--no-figures")
    assert done.returncode == 0, done.stdout + done.stderr


def _tamper_archive(sweep: Path) -> None:
    """One payload file of the archive edited, the archive rewritten and its sidecar recomputed (the bag's
    own manifests are left as they were)."""
    from evidence.seal.bundle import write_archive

    report = sweep / "bundle" / "data" / "report.md"
    report.write_text(report.read_text().replace("GRPO", "GRPO (best)", 1))
    write_archive(sweep / "bundle", sweep / "bundle.tar.gz")


def _edit_statement(sweep: Path) -> None:
    """The forgery rebuilt, then the signed statement's subject edited to its SHA256 without re-signing."""
    envelope = envelope_of(sweep / "bundle.tar.gz")
    _rebuild_with_an_edited_metric(sweep)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"][0]["digest"]["sha256"] = hashlib.sha256((sweep / "bundle.tar.gz").read_bytes()).hexdigest()
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    Path(str(sweep / "bundle.tar.gz") + SIG).write_text(json.dumps(envelope) + "\n")


def _another_bundle(sweep: Path, keys) -> None:
    """The signer's genuine signature of another bundle (another sweep's), put beside this archive."""
    other = make_sweep(sweep.parent / "other", seeds=(7, 8))
    assert evidence("build", other, "--no-figures").returncode == 0
    assert evidence("sign", other / "bundle.tar.gz", "--key", keys["signer"]).returncode == 0
    shutil.copyfile(str(other / "bundle.tar.gz") + SIG, str(sweep / "bundle.tar.gz") + SIG)


def _resigned_by_the_forger(sweep: Path, keys) -> None:
    _rebuild_with_an_edited_metric(sweep)
    assert evidence("sign", sweep / "bundle.tar.gz", "--key", keys["forger"]).returncode == 0


FORGERIES = {
    # name: (how, the one signature finding, whether it is the audit's only finding)
    "the archive rebuilt and resealed": (lambda s, k: _rebuild_with_an_edited_metric(s),
                                         "bundle.tar.gz.intoto.jsonl: subject: signs bundle.tar.gz with SHA256 ", True),
    "the archive tampered with": (lambda s, k: _tamper_archive(s),
                                  "bundle.tar.gz.intoto.jsonl: subject: signs bundle.tar.gz with SHA256 ", False),
    "another bundle's signature": (_another_bundle,
                                   "bundle.tar.gz.intoto.jsonl: subject: signs bundle.tar.gz with SHA256 ", True),
    "the statement edited after signing": (lambda s, k: _edit_statement(s),
                                           "bundle.tar.gz.intoto.jsonl: the signature by ed25519 key ", True),
    "re-signed by another key": (_resigned_by_the_forger,
                                 "bundle.tar.gz.intoto.jsonl: not signed by the given ed25519 key ", True),
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_each_forgery_fails_on_the_signature_in_one_finding(signed, keys, forgery):
    how, expected, only = FORGERIES[forgery]
    how(signed, keys)
    done = evidence("audit", signed / "bundle.tar.gz", "--public-key", str(keys["signer"]) + ".pub")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "signature: FAILED (bundle.tar.gz.intoto.jsonl)"
    ours = [f for f in findings(done) if f.startswith("bundle.tar.gz.intoto.jsonl") or "unsigned" in f]
    assert len(ours) == 1 and ours[0].startswith(expected), done.stdout
    if only:
        assert findings(done) == ours, done.stdout
    if "subject" in expected:  # the finding names the recomputed digest
        assert hashlib.sha256((signed / "bundle.tar.gz").read_bytes()).hexdigest() in ours[0]


def test_a_wrong_key_fails_on_the_signature(signed, keys):
    done = evidence("audit", signed / "bundle.tar.gz", "--public-key", str(keys["forger"]) + ".pub")
    assert done.returncode == 1
    (finding,) = findings(done)
    assert finding.startswith("bundle.tar.gz.intoto.jsonl: not signed by the given ed25519 key ")
    assert "(signed by key " in finding


def _x25519_files(folder: Path) -> tuple[Path, Path]:
    key = X25519PrivateKey.generate()
    private, public = folder / "x25519.pem", folder / "x25519.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _encrypted(folder: Path) -> Path:
    path = folder / "encrypted.pem"
    path.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    return path


BAD_INPUT = {
    "audit: no such key file": (lambda s, k, t: ("audit", s / "bundle.tar.gz", "--public-key", t / "nothing.pub"),
                                "--public-key", "no such file"),
    "audit: a private key as public": (lambda s, k, t: ("audit", s / "bundle.tar.gz", "--public-key", k["signer"]),
                                       "is a private key", "signer.pub"),
    "audit: a key that cannot verify": (lambda s, k, t: ("audit", s / "bundle.tar.gz", "--public-key",
                                                         _x25519_files(t)[1]), "an X25519 key", "Ed25519"),
    "audit: not a key file": (lambda s, k, t: ("audit", s / "bundle.tar.gz", "--public-key", s / "sweep.json"),
                              "not a public key file", "--generate-key"),
    "audit: a bundle directory with a key": (lambda s, k, t: ("audit", s / "bundle", "--public-key",
                                                              str(k["signer"]) + ".pub"), "covers the bundle's .tar.gz",
                                             "audit the archive"),
    "sign: a public key as --key": (lambda s, k, t: ("sign", s / "bundle.tar.gz", "--key", str(k["signer"]) + ".pub"),
                                    "is a public key", "sign with its private key"),
    "sign: no such key file": (lambda s, k, t: ("sign", s / "bundle.tar.gz", "--key", t / "nothing"),
                               "--key", "no such file"),
    "sign: an encrypted key": (lambda s, k, t: ("sign", s / "bundle.tar.gz", "--key", _encrypted(t)),
                               "encrypted", "unencrypted key file"),
    "sign: a key that cannot sign": (lambda s, k, t: ("sign", s / "bundle.tar.gz", "--key", _x25519_files(t)[0]),
                                     "an X25519 key", "cannot sign"),
    "sign: not a bundle archive": (lambda s, k, t: ("sign", s / "sweep.json", "--key", k["signer"]),
                                   "not a readable .tar.gz", "python -m evidence build"),
    "sign: no such archive": (lambda s, k, t: ("sign", s / "missing.tar.gz", "--key", k["signer"]),
                              "no such file", "build the bundle first"),
    "sign: no --key": (lambda s, k, t: ("sign", s / "bundle.tar.gz"), "needs the archive and --key", "--generate-key"),
    "sign: a key path that exists": (lambda s, k, t: ("sign", "--generate-key", k["signer"]), "exists",
                                     "not overwriting"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_before_anything_runs(built, keys, tmp_path, case):
    argv, *words = BAD_INPUT[case]
    before = {p.name: p.stat().st_mtime_ns for p in built.iterdir()}
    done = evidence(*argv(built, keys, tmp_path))
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("python -m evidence: error: "), done.stderr
    assert all(word in done.stderr for word in words), done.stderr
    assert {p.name: p.stat().st_mtime_ns for p in built.iterdir()} == before  # nothing written beside the bundle


def test_sign_refuses_a_resealed_forgery_the_audit_rejects_in_one_line_unless_forced(built, keys, tmp_path):
    import hashlib
    import tarfile

    from tests.sweeps import reseal_bag

    sweep = Path(shutil.copytree(built, tmp_path / "sweep"))
    run_eval = next((sweep / "bundle" / "data" / "runs").glob("*/eval.json"))
    record = json.loads(run_eval.read_text())
    record["final"]["pass@1"] = 1.0
    run_eval.write_text(json.dumps(record))
    reseal_bag(sweep / "bundle")
    archive = sweep / "bundle.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(sweep / "bundle", arcname="bundle")
    sidecar = Path(str(archive) + ".sha256")
    sidecar.write_text(sidecar.read_text().replace(sidecar.read_text().split()[0],
                                                   hashlib.sha256(archive.read_bytes()).hexdigest()))
    done = evidence("sign", archive, "--key", keys["signer"])
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert f"{archive} fails its audit (" in done.stderr and "not signed; run python -m evidence audit" in done.stderr
    assert "eval.json" in done.stderr and not Path(str(archive) + SIG).exists()
    forced = evidence("sign", archive, "--key", keys["signer"], "--force")
    assert forced.returncode == 0 and Path(str(archive) + SIG).is_file(), forced.stderr
