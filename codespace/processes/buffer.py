"""A bounded output buffer addressed by stream offsets (sequence numbers).

Default mode follows upstream: the first half of the capacity keeps the head of
the stream, the rest is a rolling tail, and the dropped middle is counted. A
reader holding a cursor always learns exactly which bytes it got and how many
were dropped, so nothing is repeated and nothing disappears silently.

Lossless mode keeps no head: the reader of the pipe stops reading while the
buffer is full of bytes nobody has fetched yet, so the child blocks on its write
instead of output being dropped (memory stays bounded either way).
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio


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


class OutputBuffer:
    def __init__(self, capacity: int, *, lossless: bool = False) -> None:
        self.capacity = capacity
        self.lossless = lossless
        self._head_cap = 0 if lossless else capacity // 2
        self._tail_cap = capacity - self._head_cap
        self._head = bytearray()
        self._tail = bytearray()
        self._tail_start = 0
        self.total = 0
        self.consumed = 0  # highest offset any reader has fetched (lossless back-pressure)
        self.eof = False
        self._space = anyio.Event()

    @property
    def omitted(self) -> int:
        """Bytes dropped from the middle of the stream so far."""
        return self._tail_start - len(self._head) if self._tail else 0

    def append(self, data: bytes) -> None:
        if not data:
            return
        if not self._tail and len(self._head) < self._head_cap:
            take = data[: self._head_cap - len(self._head)]
            self._head += take
            self.total += len(take)
            data = data[len(take):]
        if data:
            if not self._tail:
                self._tail_start = self.total
            self._tail += data
            self.total += len(data)
            excess = len(self._tail) - self._tail_cap
            if self.lossless:  # never drop what no reader has fetched yet
                excess = min(excess, self.consumed - self._tail_start)
            if excess > 0:
                del self._tail[:excess]
                self._tail_start += excess

    def close(self) -> None:
        self.eof = True

    def tail_text(self, limit: int = 4096) -> str:
        """The last bytes kept, as text (for scanning an error message)."""
        data = bytes(self._tail[-limit:]) if self._tail else bytes(self._head[-limit:])
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
        if after < head_len:
            data = bytes(self._head[after : after + max_bytes])
            # continue into the tail only when nothing was dropped in between
            if len(data) < max_bytes and self._tail and self._tail_start == head_len:
                data += bytes(self._tail[: max_bytes - len(data)])
            return Window(data, after, 0)
        start = max(after, self._tail_start)
        offset = start - self._tail_start
        return Window(bytes(self._tail[offset : offset + max_bytes]), start, start - after)

    def mark_consumed(self, offset: int) -> None:
        if offset > self.consumed:
            self.consumed = offset
            self._space.set()
            self._space = anyio.Event()
