"""A bundle's signature: an in-toto statement over the archive's SHA256 and its bag's manifests, in a DSSE envelope.

``python -m evidence sign bundle.tar.gz --key <private key>`` writes ``bundle.tar.gz.intoto.jsonl`` beside
the archive: one line, a DSSE envelope (payload type ``application/vnd.in-toto+json``) whose payload is an
in-toto Statement v1 with the archive as its subject (name and sha256) and, as its predicate, the bag's
root, the SHA256 of ``manifest-sha256.txt`` and ``tagmanifest-sha256.txt`` and every payload file's digest
as that manifest states it. The envelope, its pre-authentication encoding and the signature check are
securesystemslib's (``dsse.Envelope``, ``CryptoSigner``, ``SSlibKey``: the reference implementation that
in-toto and python-tuf use); keys are PEM (PKCS#8 private, SubjectPublicKeyInfo public) or OpenSSH files,
read with pyca/cryptography. Everything is offline: no transparency log, no certificate authority.

The audit verifies the envelope with the public key a reviewer names, then that its subject is the audited
archive and its manifests the bag's (``evidence.audit.signature``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import FormatError, VerificationError
from securesystemslib.signer import CryptoSigner, Key, SSlibKey

from evidence.fileio import sha256_file
from evidence.problems import SigningError
from facts.files import signature_path

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# The predicate: what the bag's manifests say, as signed. A URN: the type names a format, not a place.
PREDICATE_TYPE = "urn:proofgrid:bagit-manifests:v1"
MANIFEST = "manifest-sha256.txt"
TAGMANIFEST = "tagmanifest-sha256.txt"
SIGNED_MANIFESTS = (MANIFEST, TAGMANIFEST)
# A manifest bigger than this is not a bundle's (a million payload files): not read into memory.
MAX_MANIFEST_BYTES = 64 * 2**20
PUBLIC_SUFFIX = ".pub"
GENERATE_HINT = "make a key pair with: python -m evidence sign --generate-key <path>"


# ---- keys -----------------------------------------------------------------------------------------

def _read_key_file(path: Path, role: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise SigningError(f"{role} {path}: no such file; {GENERATE_HINT}") from None
    except IsADirectoryError:
        raise SigningError(f"{role} {path}: is a directory, not a key file") from None
    except OSError as exc:
        raise SigningError(f"{role} {path}: unreadable ({exc.__class__.__name__})") from None


def _looks_private(data: bytes) -> bool:
    return b"PRIVATE KEY-----" in data


def _looks_public(data: bytes) -> bool:
    return b"PUBLIC KEY-----" in data or data.lstrip().startswith((b"ssh-", b"ecdsa-sha2-"))


SUPPORTED = "Ed25519, ECDSA (P-256, P-384, P-521) or RSA"


def _key_kind(key) -> str:
    """A key's algorithm as cryptography names its class: ``X25519`` for ``X25519PublicKey``."""
    name = type(key).__name__
    for suffix in ("PublicKey", "PrivateKey"):
        name = name.removesuffix(suffix)
    return name


def load_public_key(path: str | Path) -> Key:
    """The public key in ``path`` (PEM SubjectPublicKeyInfo or an OpenSSH ``ssh-ed25519 ...`` line) as
    securesystemslib's ``SSlibKey``; ``SigningError`` (one line) for anything else."""
    path = Path(path)
    data = _read_key_file(path, "--public-key")
    if _looks_private(data):
        raise SigningError(f"--public-key {path} is a private key: give the reviewer (and the audit) its public "
                           f"half, {path.name}{PUBLIC_SUFFIX}, and keep this file secret")
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_ssh_public_key(data.strip())
    except (ValueError, UnsupportedAlgorithm, TypeError):
        raise SigningError(f"--public-key {path}: not a public key file (PEM '-----BEGIN PUBLIC KEY-----' or an "
                           f"OpenSSH 'ssh-ed25519 ...' line); {GENERATE_HINT}") from None
    try:
        return SSlibKey.from_crypto(key)
    except ValueError:
        raise SigningError(f"--public-key {path}: an {_key_kind(key)} key, which cannot verify this signature; "
                           f"it needs {SUPPORTED}") from None


def load_signer(path: str | Path) -> CryptoSigner:
    """The private key in ``path`` (unencrypted PEM PKCS#8 or OpenSSH) as a securesystemslib signer;
    ``SigningError`` (one line) for anything else."""
    path = Path(path)
    data = _read_key_file(path, "--key")
    if _looks_public(data) and not _looks_private(data):
        raise SigningError(f"--key {path} is a public key: sign with its private key (the public one is for "
                           "the audit's --public-key)")
    try:
        if b"OPENSSH PRIVATE KEY" in data:
            key = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except TypeError as exc:  # cryptography: "Password was not given but private key is encrypted"
        raise SigningError(f"--key {path}: {_reason(exc)}; sign with an unencrypted key file (kept private), "
                           f"or {GENERATE_HINT}") from None
    except (ValueError, UnsupportedAlgorithm):
        raise SigningError(f"--key {path}: not a private key file (PEM PKCS#8 or OpenSSH); {GENERATE_HINT}") from None
    try:
        return CryptoSigner(key)
    except ValueError:
        raise SigningError(f"--key {path}: an {_key_kind(key)} key, which cannot sign; it needs {SUPPORTED}") from None


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    return text.rstrip(".")


def generate_key(path: str | Path) -> tuple[Path, Path]:
    """A new Ed25519 key pair: the private key (PEM PKCS#8, mode 0600) at ``path``, its public key (PEM
    SubjectPublicKeyInfo) at ``path.pub``. Never overwrites a file."""
    private, public = Path(path), Path(str(path) + PUBLIC_SUFFIX)
    for target in (private, public):
        if target.exists():
            raise SigningError(f"--generate-key: {target} exists; not overwriting a key (choose another path)")
    if not private.parent.is_dir():
        raise SigningError(f"--generate-key: {private.parent} is not a directory")
    signer = CryptoSigner.generate_ed25519()
    pem = serialization.load_pem_private_key(signer.private_bytes, password=None).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(signer.private_bytes)
    public.write_bytes(pem)
    return private, public


def key_label(key: Key) -> str:
    """How a key is named in a finding: its type and the first 16 hex digits of its key id."""
    return f"{key.keytype} key {key.keyid[:16]}"


# ---- the statement --------------------------------------------------------------------------------

def bag_manifests(archive: Path) -> tuple[str, dict[str, bytes]]:
    """The archive's top-level directory and the bytes of its bag's two manifests, read from the tar
    (nothing is extracted); ``SigningError`` when the archive is not a bundle's."""
    found: dict[str, bytes] = {}
    roots = set()
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            for member in tar:
                parts = [p for p in member.name.split("/") if p not in ("", ".")]
                if parts:
                    roots.add(parts[0])
                if len(parts) == 2 and parts[1] in SIGNED_MANIFESTS and member.isfile() \
                        and member.size <= MAX_MANIFEST_BYTES:
                    handle = tar.extractfile(member)
                    found[parts[1]] = handle.read() if handle is not None else b""
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise SigningError(f"{archive}: not a readable .tar.gz ({exc.__class__.__name__}); sign the bundle.tar.gz "
                           "that python -m evidence build wrote") from None
    missing = [name for name in SIGNED_MANIFESTS if name not in found]
    if len(roots) != 1 or missing:
        raise SigningError(f"{archive}: not a bundle archive (one bag directory with {' and '.join(SIGNED_MANIFESTS)}); "
                           "sign the bundle.tar.gz that python -m evidence build wrote")
    return roots.pop(), found


def manifest_entries(text: str) -> dict[str, str]:
    """``{path: sha256}`` of a BagIt manifest's lines (``<digest> <path>``)."""
    entries = {}
    for line in text.splitlines():
        digest, _, rel = line.strip().partition(" ")
        if rel:
            entries[rel.strip()] = digest.lower()
    return entries


def statement(archive_name: str, archive_sha256: str, root: str, manifests: dict[str, bytes]) -> dict:
    """The in-toto Statement v1 a signature carries: the archive as subject, the bag's manifests as predicate."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": archive_name, "digest": {"sha256": archive_sha256}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "bag": root,
            "manifests": {name: {"sha256": hashlib.sha256(manifests[name]).hexdigest()} for name in SIGNED_MANIFESTS},
            "payload": manifest_entries(manifests[MANIFEST].decode("utf-8", errors="replace")),
        },
    }


def sign_archive(archive: str | Path, key_path: str | Path) -> tuple[Path, Key]:
    """Sign ``archive`` with the private key at ``key_path``: writes ``<archive>.intoto.jsonl`` (replacing an
    older signature) and returns its path and the public key that verifies it."""
    archive = Path(archive)
    if not archive.is_file():
        raise SigningError(f"{archive}: no such file; build the bundle first (python -m evidence build <sweep_dir>)")
    signer = load_signer(key_path)  # bad key input is refused before the archive is read
    root, manifests = bag_manifests(archive)
    body = statement(archive.name, sha256_file(archive), root, manifests)
    envelope = Envelope(json.dumps(body, sort_keys=True, separators=(",", ":")).encode(), PAYLOAD_TYPE, {})
    envelope.sign(signer)
    out = signature_path(archive)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(envelope.to_dict(), sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    return out, signer.public_key


# ---- reading and verifying ------------------------------------------------------------------------

@dataclass(frozen=True)
class SignedStatement:
    """A signature file as read: the envelope, and the statement its payload holds (not yet verified)."""

    envelope: Envelope
    statement: dict

    @property
    def subject_sha256(self) -> str:
        return str(self.statement["subject"][0]["digest"]["sha256"]).lower()

    @property
    def subject_name(self) -> str:
        return str(self.statement["subject"][0].get("name", ""))

    @property
    def predicate(self) -> dict:
        return self.statement["predicate"]


def read_signature(path: Path) -> SignedStatement:
    """The envelope and statement in a signature file; ``ValueError`` (its reason) when it is not one
    proofgrid writes: a DSSE envelope of an in-toto statement with one subject and our predicate."""
    try:
        line = path.read_text(encoding="utf-8").strip()
        envelope = Envelope.from_dict(json.loads(line))
        body = json.loads(envelope.payload.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError, FormatError,
            ValueError) as exc:
        raise ValueError(f"not a DSSE envelope of an in-toto statement ({exc.__class__.__name__})") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise ValueError(f"payload type {envelope.payload_type!r}, not {PAYLOAD_TYPE}")
    if not isinstance(body, dict) or body.get("_type") != STATEMENT_TYPE or body.get("predicateType") != PREDICATE_TYPE:
        raise ValueError(f"not an in-toto statement of type {PREDICATE_TYPE}")
    subjects, predicate = body.get("subject"), body.get("predicate")
    if not (isinstance(subjects, list) and len(subjects) == 1 and isinstance(subjects[0], dict)
            and isinstance(subjects[0].get("digest"), dict) and "sha256" in subjects[0]["digest"]
            and isinstance(predicate, dict) and isinstance(predicate.get("manifests"), dict)):
        raise ValueError("the statement has no single subject with a sha256 or no manifests")
    return SignedStatement(envelope, body)


def verify_envelope(signed: SignedStatement, key: Key) -> str | None:
    """Why the envelope is not signed by ``key`` (None when a signature by it verifies over the DSSE
    pre-authentication encoding of the payload)."""
    try:
        signed.envelope.verify([key], 1)
        return None
    except (VerificationError, ValueError):
        if key.keyid not in signed.envelope.signatures:
            others = ", ".join(sorted(k[:16] for k in signed.envelope.signatures)) or "no key"
            return f"not signed by the given {key_label(key)} (signed by key {others})"
        return (f"the signature by {key_label(key)} does not verify: the signed statement was changed after "
                "signing")
