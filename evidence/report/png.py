"""PNG files as the bundle reads them (its figures' raster twins): their chunks, checked, and the text they carry.

A PNG is an 8-byte signature, then chunks of (length, type, data, CRC-32 of type and data), IHDR first and IEND
last (the PNG specification, ISO/IEC 15948, section 5). Its pixels are compressed binary, not text: the leak scans
read what text it carries (``text``: its tEXt, zTXt and iTXt chunks) instead of decoding the pixels as if they
were words. Standard library only.
"""

from __future__ import annotations

import contextlib
import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
SUFFIX = ".png"


class PNGError(ValueError):
    """Why some bytes are not a well-formed PNG (one line)."""


def chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """Every chunk's (type, data), in order; ``PNGError`` for a missing signature, a chunk cut short, a CRC that
    does not match, no IHDR first, no IEND last or bytes after it."""
    if not data.startswith(SIGNATURE):
        raise PNGError("not a PNG (no PNG signature)")
    out, at = [], len(SIGNATURE)
    while at < len(data):
        if at + 12 > len(data):
            raise PNGError(f"a chunk is cut short at byte {at}")
        (length,), kind = struct.unpack(">I", data[at:at + 4]), data[at + 4:at + 8]
        end = at + 12 + length
        if end > len(data):
            raise PNGError(f"chunk {kind!r} at byte {at} is cut short")
        body, (crc,) = data[at + 8:end - 4], struct.unpack(">I", data[end - 4:end])
        if zlib.crc32(kind + body) != crc:
            raise PNGError(f"chunk {kind.decode('latin-1')!r} at byte {at}: its CRC does not match")
        out.append((kind, body))
        at = end
        if kind == b"IEND":
            break
    if not out or out[0][0] != b"IHDR":
        raise PNGError("its first chunk is not IHDR")
    if out[-1][0] != b"IEND":
        raise PNGError("it does not end with IEND")
    if at != len(data):
        raise PNGError(f"{len(data) - at} byte(s) after IEND")
    return out


def _chunk_text(kind: bytes, body: bytes) -> str:
    """A text chunk's keyword and text (zTXt and compressed iTXt inflated; undecodable parts replaced)."""
    keyword, _, rest = body.partition(b"\0")
    if kind == b"zTXt":
        with contextlib.suppress(zlib.error):
            rest = zlib.decompress(rest[1:])
    elif kind == b"iTXt":
        compressed, rest = rest[:1] == b"\1", rest[2:]
        _, _, rest = rest.partition(b"\0")  # language tag
        _, _, rest = rest.partition(b"\0")  # translated keyword
        if compressed:
            with contextlib.suppress(zlib.error):
                rest = zlib.decompress(rest)
    return f"{keyword.decode('latin-1')}: {rest.decode('utf-8', errors='replace')}"


def text(data: bytes) -> str:
    """The text a PNG carries, one text chunk a line; bytes that are not a well-formed PNG are read as text
    (UTF-8, undecodable bytes replaced), so that nothing escapes a scan for being malformed."""
    try:
        found = chunks(data)
    except PNGError:
        return data.decode("utf-8", errors="replace")
    return "\n".join(_chunk_text(kind, body) for kind, body in found if kind in TEXT_CHUNKS)


def document_text(name: str, data: bytes) -> str:
    """A bundle file's text as the leak scans read it: a PNG's text chunks (``text``), anything else decoded."""
    return text(data) if name.endswith(SUFFIX) else data.decode("utf-8", errors="replace")


def problem(data: bytes) -> str | None:
    """Why a PNG is not a figure: malformed (``chunks``), or carrying text (a figure is pixels only); None if fine."""
    try:
        found = chunks(data)
    except PNGError as exc:
        return str(exc)
    kinds = sorted({kind.decode("latin-1") for kind, _ in found if kind in TEXT_CHUNKS})
    return f"carries text chunks ({', '.join(kinds)}): a figure is pixels only" if kinds else None
