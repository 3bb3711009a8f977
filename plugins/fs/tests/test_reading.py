"""read_file through real MCP sessions: windows, caps, continuation, encodings, binary."""

from __future__ import annotations

import base64
import ctypes
import hashlib
import mmap
import os

import pytest

from codespace.contract import FsError, ReadFileRequest
from codespace.testing import call_error, call_ok, connect
from codespace_fs import reading

pytestmark = pytest.mark.anyio

LINES = "".join(f"line {i}\n" for i in range(1, 101))


async def test_whole_file_with_hash_and_line_count(make_app, ws, mode):
    (ws / "a.txt").write_text(LINES)
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "read_file", {"path": "a.txt"})
    assert out["content"] == LINES
    assert (out["start_line"], out["end_line"], out["total_lines"]) == (1, 100, 100)
    assert out["sha256"] == hashlib.sha256(LINES.encode()).hexdigest()
    assert out["size"] == len(LINES) and not out["truncated"] and out.get("next_offset") is None


async def test_line_window_and_continuation(make_app, ws, mode):
    (ws / "a.txt").write_text(LINES)
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "read_file", {"path": "a.txt", "offset": 10, "limit": 5})
        assert out["content"] == "".join(f"line {i}\n" for i in range(10, 15))
        assert (out["start_line"], out["end_line"], out["total_lines"]) == (10, 14, 100)
        assert out["truncated"] and out["next_offset"] == 15
        result = await client.call_tool("read_file", {"path": "a.txt", "offset": 98, "limit": 5})
        last = result.structured_content
        assert last["content"] == "line 98\nline 99\nline 100\n" and not last["truncated"]
        assert "truncated" not in result.content[0].text


async def test_byte_cap_cuts_at_a_line_and_hints(make_app, ws, mode):
    (ws / "a.txt").write_text(LINES)
    async with connect(make_app(), mode=mode) as client:
        result = await client.call_tool("read_file", {"path": "a.txt", "max_bytes": 30})
        out = result.structured_content
        assert out["content"] == "line 1\nline 2\nline 3\nline 4\n"
        assert out["truncated"] and out["next_offset"] == 5 and out["end_line"] == 4
        assert "call read_file with offset=5 to continue" in result.content[0].text
        # Follow the hint to the end: every line exactly once.
        seen, offset = [], 1
        while offset is not None:
            page = await call_ok(client, "read_file", {"path": "a.txt", "offset": offset, "max_bytes": 64})
            seen.append(page["content"])
            offset = page.get("next_offset")
        assert "".join(seen) == LINES


async def test_policy_default_cap_and_override_clamped(make_app, ws, mode):
    (ws / "big.txt").write_text("x" * 99 + "\n" + "y" * 3000 + "\n")
    policy = "[limits]\nmax_read_bytes = 1024\nmax_file_bytes = 2048\n"
    async with connect(make_app(policy), mode=mode) as client:
        error = await call_error(client, "read_file", {"path": "big.txt"})
        assert error["code"] == "too_large" and "limits.max_file_bytes" in error["message"] and "2048" in error["message"]
        (ws / "mid.txt").write_text(("z" * 99 + "\n") * 15)
        out = await call_ok(client, "read_file", {"path": "mid.txt"})
        assert out["end_line"] == 10 and out["truncated"]  # 1024-byte default cap
        out = await call_ok(client, "read_file", {"path": "mid.txt", "max_bytes": 100_000})
        assert out["end_line"] == 15 and not out["truncated"]  # clamped to max_file_bytes, which fits


async def test_single_overlong_line_still_progresses(make_app, ws, mode):
    (ws / "long.txt").write_text("é" * 100 + "\nnext\n")
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "read_file", {"path": "long.txt", "max_bytes": 51})
    assert out["content"] == "é" * 25  # cut at a character boundary, never mid-sequence
    assert out["truncated"] and out["next_offset"] == 2


async def test_offset_past_end_and_empty_file(make_app, ws, mode):
    (ws / "a.txt").write_text("one\ntwo")
    (ws / "empty.txt").write_text("")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "read_file", {"path": "a.txt", "offset": 5})
        assert error["code"] == "out_of_range" and "has 2 line(s)" in error["message"]
        out = await call_ok(client, "read_file", {"path": "a.txt"})
        assert out["total_lines"] == 2 and out["content"] == "one\ntwo"
        empty = await call_ok(client, "read_file", {"path": "empty.txt"})
        assert (empty["content"], empty["total_lines"], empty["start_line"], empty["size"]) == ("", 0, 0, 0)


async def test_crlf_is_kept(make_app, ws, mode):
    (ws / "dos.txt").write_bytes(b"a\r\nb\r\n")
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "read_file", {"path": "dos.txt"})
    assert out["content"] == "a\r\nb\r\n" and out["total_lines"] == 2


async def test_invalid_utf8_is_reported_not_replaced(make_app, ws, mode):
    (ws / "latin1.txt").write_bytes(b"ok line\ncaf\xe9 au lait\nand \xff\xfe more\n")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "read_file", {"path": "latin1.txt"})
        assert error["code"] == "invalid_utf8"
        assert "byte 11" in error["message"] and "line 2" in error["message"] and "errors='replace'" in error["message"]
        result = await client.call_tool("read_file", {"path": "latin1.txt", "errors": "replace"})
        out = result.structured_content
        assert out["content"] == "ok line\ncaf\ufffd au lait\nand \ufffd\ufffd more\n"
        assert out["invalid_utf8"] == {"count": 3, "first_byte_offset": 11}
        assert "3 invalid UTF-8 sequence(s)" in result.content[0].text
        # Only the window is judged: the first line alone is valid.
        first = await call_ok(client, "read_file", {"path": "latin1.txt", "limit": 1})
        assert first["content"] == "ok line\n" and first.get("invalid_utf8") is None


async def test_binary_refused_in_text_and_returned_as_base64(make_app, ws, mode):
    blob = bytes(range(256)) * 40
    (ws / "blob.bin").write_bytes(blob)
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "read_file", {"path": "blob.bin"})
        assert error["code"] == "binary" and "encoding='base64'" in error["message"]
        got, offset = b"", 0
        while offset is not None:
            page = await call_ok(client, "read_file", {"path": "blob.bin", "encoding": "base64", "byte_offset": offset,
                                                       "max_bytes": 4096})
            assert len(page["content"]) <= 4096 and page["total_lines"] is None
            got += base64.b64decode(page["content"])
            offset = page.get("next_byte_offset")
        assert got == blob
        error = await call_error(client, "read_file", {"path": "blob.bin", "encoding": "base64", "byte_offset": 10**6})
        assert error["code"] == "out_of_range"


async def test_directory_and_missing_file(make_app, ws, mode):
    (ws / "d").mkdir()
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "read_file", {"path": "d"})
        assert error["code"] == "is_directory" and "list_dir" in error["message"]
        error = await call_error(client, "read_file", {"path": "nope.txt"})
        assert error["code"] == "not_found" and "list_dir or walk" in error["message"]
        error = await call_error(client, "read_file", {"path": "nope/deeper.txt"})
        assert error["code"] == "not_found"


async def test_links_inside_the_root_are_followed_and_rechecked(make_app, ws, mode, resolver):
    (ws / "real.txt").write_text("real\n")
    (ws / "docs").mkdir()
    (ws / "docs" / "guide.md").write_text("guide\n")
    (ws / "secret").mkdir()
    (ws / "secret" / "key").write_text("k\n")
    (ws / "alias.txt").symlink_to("real.txt")
    (ws / "docs" / "up.txt").symlink_to("../real.txt")
    (ws / "doclink").symlink_to("docs")
    (ws / "to-secret").symlink_to("secret/key")
    policy = '[filesystem.paths]\n"secret" = "none"\n'
    async with connect(make_app(policy), mode=mode) as client:
        assert (await call_ok(client, "read_file", {"path": "alias.txt"}))["content"] == "real\n"
        assert (await call_ok(client, "read_file", {"path": "docs/up.txt"}))["content"] == "real\n"
        assert (await call_ok(client, "read_file", {"path": "doclink/guide.md"}))["content"] == "guide\n"
        error = await call_error(client, "read_file", {"path": "to-secret"})
        assert error["code"] == "refused" and "'none'" in error["message"]


async def test_read_bytes_for_other_backends(backend_factory, ws, resolver):
    backend = backend_factory()
    (ws / "a.bin").write_bytes(b"\x00\x01" * 10)
    (ws / "l").symlink_to("a.bin")
    assert await backend.read_bytes(str(ws / "a.bin"), max_bytes=100) == b"\x00\x01" * 10
    assert await backend.read_bytes(str(ws / "l"), max_bytes=100, follow_symlink=True) == b"\x00\x01" * 10
    with pytest.raises(FsError) as info:
        await backend.read_bytes(str(ws / "l"), max_bytes=100)
    assert info.value.errno == 40  # ELOOP: a link at the leaf is not followed unless asked
    with pytest.raises(FsError) as info:
        await backend.read_bytes(str(ws / "a.bin"), max_bytes=5)
    assert info.value.code == "too_large"
    big = ws / "big.bin"
    big.write_bytes(b"b" * (600 * 1024))  # above the inline threshold: read on a worker thread
    assert await backend.read_bytes(str(big), max_bytes=10**7) == b"b" * (600 * 1024)


def _evict(path) -> None:  # noqa: ANN001
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages cannot be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _resident_pages(fd: int, size: int) -> tuple[int, int]:
    """(pages of the file in memory, pages in all), asked of the kernel with mincore(2)
    on a mapping that is never touched, so asking does not bring pages in."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    try:
        pages = -(-size // mmap.PAGESIZE)
        vector = ctypes.create_string_buffer(pages)
        assert libc.mincore(address, size, vector) == 0, os.strerror(ctypes.get_errno())
        return sum(byte & 1 for byte in vector.raw), pages
    finally:
        libc.munmap(address, size)


def _fs_type(path) -> str:  # noqa: ANN001
    """The type of the mount holding ``path`` (the longest matching mount point)."""
    best = ("", "?")
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            point, kind = fields[4], fields[fields.index("-") + 1]
            if str(path).startswith(point.rstrip("/") + "/") and len(point) >= len(best[0]):
                best = (point, kind)
    return best[1]


async def test_big_reads_inline_only_from_the_page_cache(backend_factory, ws):
    """Between the inline threshold and INLINE_COPY_BYTES, a byte read runs on the loop
    only when the page cache holds the whole file; otherwise (or when the size is not
    what fstat said) it falls back to the worker-thread read, with the same answer.

    Whether the file is whole in memory after eviction is asked of the kernel, not
    assumed: on a file system that lives in memory (tmpfs) nothing can be evicted, and
    reading inline is then right, since no read there waits for a disk."""
    backend = backend_factory()
    data = os.urandom(700 * 1024)
    path = ws / "mid.bin"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert reading.read_cached(fd, len(data)) == data
        assert reading.read_cached(fd, len(data) - 1) is None  # grew since fstat
        assert reading.read_cached(fd, len(data) + 1) is None  # shrank since fstat
        # The read asks the kernel not to wait (RWF_NOWAIT): a file system that cannot promise
        # that refuses, and the read is not made inline. A plain read would answer here.
        proc = os.open("/proc/self/cmdline", os.O_RDONLY)
        try:
            assert reading.read_cached(proc, len(os.pread(proc, 4096, 0))) is None
        finally:
            os.close(proc)
        outcomes = []
        for _ in range(8):  # pages held for a moment elsewhere (a CPU's LRU batch) stay
            _evict(path)
            resident, pages = _resident_pages(fd, len(data))
            if resident < pages:
                outcomes.append(reading.read_cached(fd, len(data)))
                if outcomes[-1] is None:
                    break  # would have waited for the disk: refused
        where = f"{resident} of {pages} pages in memory, file system {_fs_type(path)}"
        # A refusal, or (the kernel's readahead finishing within the non-waiting read, seen on
        # ext4 over a fast virtual disk) exactly the content; never anything else.
        assert all(got is None or got == data for got in outcomes), where
        if not outcomes:  # nothing could be evicted (tmpfs): reading inline is right
            assert reading.read_cached(fd, len(data)) == data, where
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
    finally:
        os.close(fd)
    _evict(path)
    assert await backend.read_bytes(str(path), max_bytes=10**7) == data  # cold: the thread read
    assert await backend.read_bytes(str(path), max_bytes=10**7) == data  # now cached: inline
    with pytest.raises(FsError) as info:
        await backend.read_bytes(str(path), max_bytes=len(data) - 1)
    assert info.value.code == "too_large"


async def test_outside_the_workspace_the_root_is_slash(make_app, ws, outside, mode, resolver):
    """Paths outside the workspace resolve under the deepest policy entry ('/' by
    default), where absolute links stay inside and are followed, then re-checked."""
    (outside / "abs-link").symlink_to(outside / "secret.txt")
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "read_file", {"path": str(outside / "abs-link")})
        assert out["content"] == "TOP SECRET\n"
        listing = await call_ok(client, "list_dir", {"path": str(outside)})
        assert "secret.txt" in [e["name"] for e in listing["entries"]]


async def test_recheck_refuses_a_link_into_a_none_area_outside(backend_factory, outside, state, resolver):
    backend = backend_factory()
    backend.workspace.ensure_state_dir()
    (state / "token").write_text("state secret")
    (outside / "to-state").symlink_to(state / "token")
    with pytest.raises(FsError) as info:
        await backend.read_file(ReadFileRequest(path=str(outside / "to-state")))
    assert info.value.code == "refused" and "CodeSpace state directory" in info.value.message


async def test_reads_without_proc_reopen_by_name(backend_factory, ws, monkeypatch, resolver):
    """No /proc: regular files are reopened by a second no-follow lookup checked to
    reach the same inode; FIFOs are still never opened."""
    def no_proc(fd):
        raise FileNotFoundError("/proc is not mounted")

    monkeypatch.setattr(reading, "reopen_regular", no_proc)
    backend = backend_factory()
    (ws / "a.txt").write_text("hello\n")
    os.mkfifo(ws / "pipe")
    assert (await backend.read_file(ReadFileRequest(path=str(ws / "a.txt")))).content == "hello\n"
    with pytest.raises(FsError) as info:
        await backend.read_file(ReadFileRequest(path=str(ws / "pipe")))
    assert info.value.code == "not_regular"
