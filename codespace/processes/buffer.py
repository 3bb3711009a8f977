"""A bounded output buffer addressed by stream offsets (sequence numbers).

Default mode follows upstream: the first half of the capacity keeps the head of
the stream, the rest is a rolling tail, and the dropped middle is counted. A
reader holding a cursor always learns exactly which bytes it got and how many
were dropped, so nothing is repeated and nothing disappears silently.

Lossless mode keeps no head: the reader of the pipe stops reading while the
buffer is full of bytes nobody has fetched yet, so the child blocks on its write
instead of output being dropped (memory stays bounded either way).

The tail is a ring, so appending costs the copy of the chunk whatever the fill.
:func:`take_text` reads from a cursor across the head/tail gap as text cut on a
character boundary.
"""

from __future__ import annotations

import codecs
import time
from dataclasses import dataclass

import anyio

MAX_CHUNK = 65536  # the largest read a pump makes; lossless rings leave room for one more


@dataclass(frozen=True)
class Window:
    data: bytes
    start: int  # stream offset of data[0]
    dropped: int  # bytes skipped between the requested cursor and start

    @property
    def end(self) -> int:
        return self.start + len(self.data)


def complete_utf8_prefix(data: bytes) -> int:
    """Length of ``data`` without a trailing, incomplete UTF-8 sequence."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead
            continue
        if byte & 0x80 == 0:
            return n
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
        return n if back >= need else n - back
    return n


class _Ring:
    """The last ``size`` bytes written."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data = bytearray(size)
        self.length = 0
        self._end = 0  # next write position

    def write(self, chunk: bytes) -> None:
        n = len(chunk)
        if n >= self.size:
            self._data[:] = chunk[-self.size:]
            self._end = 0
            self.length = self.size
            return
        first = min(n, self.size - self._end)
        self._data[self._end:self._end + first] = chunk[:first]
        if first < n:
            self._data[: n - first] = chunk[first:]
        self._end = (self._end + n) % self.size
        self.length = min(self.size, self.length + n)

    def read(self, offset: int, count: int) -> bytes:
        """``count`` bytes from ``offset`` (0 = the oldest byte kept)."""
        count = max(0, min(count, self.length - offset))
        start = (self._end - self.length + offset) % self.size
        first = min(count, self.size - start)
        return bytes(self._data[start:start + first]) + bytes(self._data[: count - first])


class OutputBuffer:
    def __init__(self, capacity: int, *, lossless: bool = False) -> None:
        self.capacity = capacity
        self.lossless = lossless
        self._head_cap = 0 if lossless else capacity // 2
        self._head = bytearray()
        self._tail = _Ring(capacity + MAX_CHUNK if lossless else capacity - self._head_cap)
        self.total = 0
        self.consumed = 0  # highest offset any reader has fetched (lossless back-pressure)
        self.held_at = float("-inf")
        """When the buffer last had no room (monotonic): its pump may not have read since."""
        self.eof = False
        self._space = anyio.Event()

    @property
    def _tail_start(self) -> int:
        return self.total - self._tail.length

    @property
    def omitted(self) -> int:
        """Bytes dropped from the middle of the stream so far."""
        return self._tail_start - len(self._head)

    def gap_at(self, offset: int) -> bool:
        """Whether bytes were dropped right after ``offset`` (the head's end): a character cut
        there will never be completed."""
        return offset == len(self._head) and self.omitted > 0

    def append(self, data: bytes) -> None:
        if not data:
            return
        if self._tail.length == 0 and len(self._head) < self._head_cap:
            take = data[: self._head_cap - len(self._head)]
            self._head += take
            self.total += len(take)
            data = data[len(take):]
        if data:
            self._tail.write(data)
            self.total += len(data)

    def close(self) -> None:
        self.eof = True

    def tail_text(self, limit: int = 4096) -> str:
        """The last bytes kept, as text (for scanning an error message)."""
        if self._tail.length:
            keep = min(limit, self._tail.length)
            data = self._tail.read(self._tail.length - keep, keep)
        else:
            data = bytes(self._head[-limit:])
        return data.decode("utf-8", "replace")

    def has_room(self) -> bool:
        return not self.lossless or self.total - self.consumed < self.capacity

    async def wait_for_room(self) -> None:
        while not self.has_room():
            await self._space.wait()

    def read(self, after: int, max_bytes: int) -> Window:
        """Up to ``max_bytes`` from offset ``after``; never repeats, reports what was dropped."""
        after = max(0, min(after, self.total))
        head_len = len(self._head)
        tail_start = self._tail_start
        if after < head_len:
            data = bytes(self._head[after : after + max_bytes])
            # continue into the tail only when nothing was dropped in between
            if len(data) < max_bytes and self._tail.length and tail_start == head_len:
                data += self._tail.read(0, max_bytes - len(data))
            return Window(data, after, 0)
        start = max(after, tail_start)
        return Window(self._tail.read(start - tail_start, max_bytes), start, start - after)

    def readable_end(self) -> int:
        """``total`` less the first bytes of a character still being written, which no read can
        show yet (found by testing from outside: counted as output, they made read_output's
        wait_ms return at once, empty, and a client polling it spun)."""
        if self.eof or not self.total:
            return self.total
        last = self.read(self.total - min(3, self.total), 3)
        return self.total - (len(last.data) - complete_utf8_prefix(last.data))

    def mark_consumed(self, offset: int) -> None:
        if offset > self.consumed:
            if not self.has_room():
                self.held_at = time.monotonic()
            self.consumed = offset
            self._space.set()
            self._space = anyio.Event()


@dataclass
class Taken:
    """Output handed to a client by one call."""

    text: str
    start: int
    end: int
    dropped: int
    stderr_text: str | None = None
    stderr_start: int | None = None
    stderr_end: int | None = None
    stderr_dropped: int = 0


def take_text(buffer: OutputBuffer, cursor: int, max_bytes: int) -> tuple[str, int, int, int]:
    """Up to ``max_bytes`` from ``cursor`` across the head/tail gap, as text cut on a
    character boundary: (text, start, end, bytes dropped). The dropped bytes lie between start
    and end, where the text says so; start is the cursor, or the end of a character the cursor
    fell inside (found by testing from outside: a read from the gap's first byte started at
    its last, one from the byte before at the cursor)."""
    parts: list[str] = []
    dropped = 0
    cut = 0  # bytes of a character cut by the dropped middle, counted with it
    cursor = position = cursor + _rest_of_character(buffer, cursor)
    while max_bytes > 0:
        window = buffer.read(position, max_bytes)
        if not window.data:
            break
        data, begin = window.data, window.start
        if window.dropped:
            # The tail can begin inside a character whose first bytes went with the middle.
            lead = _continuation_bytes(buffer.read(window.start, 3).data)
            data, begin = data[lead:], begin + lead
            cut += lead
        keep = complete_utf8_prefix(data)
        if keep == 0 and data:  # one character wider than max_bytes, or the cursor could never move
            window = buffer.read(position, max_bytes + 3)
            data = window.data[begin - window.start:]
            keep = complete_utf8_prefix(data)
        ends = begin + len(data)
        if buffer.eof and ends == buffer.total:
            keep = len(data)  # nothing more will come to complete a character
        elif keep < len(data) and buffer.gap_at(ends):
            # Found by testing from outside: a character cut at the head's end held the cursor
            # there for good (a client following next_seq looped). Its bytes join the omitted ones.
            cut += len(data) - keep
            if keep:
                parts.append(codecs.decode(data[:keep], "utf-8", "replace"))
            max_bytes -= len(data)
            position = ends
            continue
        if keep == 0 and not window.dropped:
            break  # a character still being written: the next read takes it whole
        if window.dropped or cut:
            parts.append(f"... {window.dropped + cut} bytes omitted ...\n")
            dropped += window.dropped + cut
            cut = 0
        parts.append(codecs.decode(data[:keep], "utf-8", "replace"))
        position = begin + keep
        max_bytes -= keep + (begin - window.start)
        if keep < len(data):
            break
    if cut:  # the window ended at the gap: the cut character is told of now, the gap by the next read
        parts.append(f"... {cut} bytes omitted ...\n")
        dropped += cut
    return "".join(parts), cursor, position, dropped


def _rest_of_character(buffer: OutputBuffer, cursor: int) -> int:
    """How many bytes at ``cursor`` finish a character begun before it: a cursor a client counted
    itself can fall inside one (found by testing from outside: U+FFFD for its last bytes). Only
    the bytes a lead byte before the cursor calls for: others that are not UTF-8 are shown."""
    before, after = buffer.read(max(0, cursor - 3), min(3, cursor)), buffer.read(cursor, 3)
    if before.dropped or after.dropped or before.start + len(before.data) != cursor:
        return 0  # at the start, or next to the dropped middle (whose cut characters are counted there)
    for back, byte in enumerate(reversed(before.data), 1):
        if byte & 0xC0 != 0x80:
            needs = 2 if 0xC0 <= byte < 0xE0 else 3 if 0xE0 <= byte < 0xF0 else 4 if 0xF0 <= byte < 0xF8 else 1
            return min(max(0, needs - back), _continuation_bytes(after.data))
    return 0


def _continuation_bytes(data: bytes) -> int:
    """How many of ``data``'s first bytes (at most 3) continue a character begun before it."""
    n = 0
    while n < min(3, len(data)) and data[n] & 0xC0 == 0x80:
        n += 1
    return n
