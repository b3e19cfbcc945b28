"""The archive's signature (``bundle.tar.gz.intoto.jsonl``, ``evidence.seal.signing``): verified with the reviewer's key.

With ``--public-key``: the envelope must carry a signature by that key over its statement, the statement's
subject must be the audited archive's SHA256 and its manifests the bag's; a bundle without a signature is
then a finding. Without a key an unsigned bundle is only said to be unsigned, and a signature whose subject
is another archive is still a finding (the bundle was rebuilt or replaced after it was signed). Each of
these is one problem of the signature file, of kind ``signature``.
"""

from __future__ import annotations

from pathlib import Path

from evidence.fileio import sha256_file
from evidence.problems import Problem
from facts.files import signature_path

KIND = "signature"


def check_signature(archive: Path, key=None):
    """The signature's problems, and its statement (``evidence.seal.signing.SignedStatement``) when the bag's
    manifests remain to be checked against it (verified by ``key``, or as claimed when no key was given).

    The signing library (securesystemslib, pyca/cryptography) is loaded only for a signed archive or a
    given key: an unsigned bundle audits where it is not installed (a GPU image that only trains and seals)."""
    path = signature_path(archive)
    if not path.is_file() and key is None:
        return [], None
    from evidence.seal.signing import key_label, read_signature, verify_envelope

    if not path.is_file():
        return [Problem(archive.name, f"unsigned: no {path.name} beside it, and the audit was given a public key "
                                      f"({key_label(key)})", kind=KIND)], None
    try:
        signed = read_signature(path)
    except ValueError as exc:
        return [Problem(path.name, str(exc), kind=KIND)], None
    if key is not None:
        why = verify_envelope(signed, key)
        if why:
            return [Problem(path.name, why, kind=KIND)], None
    actual = sha256_file(archive)
    if signed.subject_sha256 != actual:
        return [Problem(path.name, f"signs {signed.subject_name or 'an archive'} with SHA256 {signed.subject_sha256}, "
                                   f"but {archive.name} has SHA256 {actual}: not the archive that was signed",
                        where="subject", kind=KIND)], None
    return [], signed


def check_signed_bag(bag: Path, signed, signature_name: str) -> list[Problem]:
    """The extracted bag's manifests are the ones the statement (a ``SignedStatement``) signs: its root
    name, each manifest's SHA256, the payload entries."""
    from evidence.seal.signing import SIGNED_MANIFESTS, manifest_entries

    predicate = signed.predicate
    if predicate.get("bag") != bag.name:
        return [Problem(signature_name, f"signs a bag named {predicate.get('bag')!r}, the archive holds {bag.name!r}",
                        where="predicate", kind=KIND)]
    for name in SIGNED_MANIFESTS:
        claimed = str((predicate["manifests"].get(name) or {}).get("sha256", "")).lower()
        actual = sha256_file(bag / name) if (bag / name).is_file() else "(missing)"
        if claimed != actual:
            return [Problem(signature_name, f"signs {name} with SHA256 {claimed or '(none)'}, the bag's is {actual}",
                            where="predicate", kind=KIND)]
    entries = manifest_entries((bag / SIGNED_MANIFESTS[0]).read_text(encoding="utf-8", errors="replace"))
    if predicate.get("payload") != entries:
        return [Problem(signature_name, f"its payload digests differ from {SIGNED_MANIFESTS[0]}", where="predicate",
                        kind=KIND)]
    return []


def signature_status(path: Path, key, findings: list[Problem]) -> str:
    """The audit's one line about the signature: unsigned, verified, present but not verified, or failed."""
    if path.is_dir():
        return "signature: not checked (a signature covers the bundle's .tar.gz: audit the archive)"
    sig = signature_path(path)
    if any(f.kind == KIND for f in findings):
        return f"signature: FAILED ({sig.name})"
    if not sig.is_file():
        return f"unsigned (no {sig.name} beside the archive)"
    if key is None:
        return f"signed ({sig.name}), not verified: pass --public-key <file> to verify it"
    return f"signature: verified, {sig.name} signed by {key.keytype} key {key.keyid[:16]}"
