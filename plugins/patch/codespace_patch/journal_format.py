"""The journal's record and its bytes on disk: what a commit writes before it touches
a file, and what recovery reads back (the protocol: :mod:`codespace_patch.journal`).

A record (a version-1 journal) is :data:`MAGIC`, one JSON header line (every target's
path, where its old content lies among the blobs, the SHA-256 of its new content, the
new directories), then the old contents one after the other. In a slot file the record
follows a head holding :data:`SLOT_MAGIC`, the record's length and its CRC-32; a void
slot starts with zeros.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from dataclasses import dataclass

MAGIC = b"codespace-patch-journal 1\n"
SUFFIX = ".journal"  # one-shot journals (codespace-patch 0.1.1): still recovered
TMP_SUFFIX = ".tmp"
SLOT_SUFFIX = ".slot"
SLOT_MAGIC = b"cspjslot"
SLOT_HEAD = struct.Struct("<8sQI4x")


@dataclass(frozen=True, slots=True)
class JournalEntry:
    path: str
    old: bytes | None
    new_sha256: str | None
    in_place: bool = False  # rewritten on its inode: a crash may leave it torn


@dataclass(slots=True)
class JournalRecord:
    entries: list[JournalEntry]
    dirs: list[str]
    created: float = 0.0
    pid: int = 0


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode(record: JournalRecord) -> list[bytes]:
    """The journal's bytes, as pieces: joining a big file's old content into one
    buffer would only copy it once more."""
    blobs: list[bytes] = []
    offset = 0
    entries = []
    for entry in record.entries:
        old = None
        if entry.old is not None:
            old = [offset, len(entry.old)]
            blobs.append(entry.old)
            offset += len(entry.old)
        entries.append({"path": entry.path, "old": old, "new_sha256": entry.new_sha256, "in_place": entry.in_place})
    header = json.dumps(
        {"created": record.created, "pid": record.pid, "entries": entries, "dirs": record.dirs},
        ensure_ascii=False, separators=(",", ":"),
    ).encode("utf-8", "surrogateescape")
    return [MAGIC + header + b"\n", *blobs]


def decode(data: bytes) -> JournalRecord:
    if not data.startswith(MAGIC):
        raise ValueError("not a codespace-patch journal")
    end = data.index(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC):end].decode("utf-8", "surrogateescape"))
    blobs = memoryview(data)[end + 1:]
    entries = []
    for item in header["entries"]:
        old = None if item["old"] is None else bytes(blobs[item["old"][0]:item["old"][0] + item["old"][1]])
        entries.append(JournalEntry(item["path"], old, item["new_sha256"], bool(item.get("in_place", False))))
    return JournalRecord(entries, list(header["dirs"]), header.get("created", 0.0), header.get("pid", 0))


def slot_pieces(record: JournalRecord) -> list[bytes]:
    """An armed slot's bytes for ``record``, as pieces: the head, then the record."""
    payload = encode(record)
    size = sum(map(len, payload))
    crc = 0
    for piece in payload:
        crc = zlib.crc32(piece, crc)
    return [SLOT_HEAD.pack(SLOT_MAGIC, size, crc), *payload]


def slot_record(data: bytes) -> JournalRecord | None:
    """The armed record of a slot's bytes; None when it is void or was cut short (its
    commit never reached a file: files are touched only once the record is flushed)."""
    if len(data) < SLOT_HEAD.size:
        return None
    magic, size, crc = SLOT_HEAD.unpack_from(data)
    payload = data[SLOT_HEAD.size:SLOT_HEAD.size + size]
    if magic != SLOT_MAGIC or len(payload) != size or zlib.crc32(payload) != crc:
        return None
    return decode(payload)
