"""Errors across the socket come back as what was raised; the remote FileSystem's raw calls
(what a patcher uses) behave as the in-process backend's."""

from __future__ import annotations

import errno
import importlib.util
import json

import pytest

from codespace.contract import BackendMissing, FsError, Refused, ToolError
from codespace_runtime.errors_wire import NotRun, exception_from_wire, map_error

pytestmark = pytest.mark.anyio


class PluginRefused(Refused):
    """A plugin's own subclass (codespace-fs has one): it crosses as its contract type."""


class Unexpected(Exception):
    pass


CASES = [
    FsError("cannot read /w/a: No such file or directory", path="/w/a", errno=errno.ENOENT),
    FsError("stale", path="/w/b", code="stale", details={"expected": "0" * 64}),
    Refused("filesystem.paths['secret']", "refused by policy: ...", details={"path": "/w/secret"}),
    PluginRefused("filesystem.symlinks", "a link was refused"),
    ToolError("Failed to find expected lines", code="patch_lines_not_found", details={"chunk": 1}),
    BackendMissing("no plugin provides a patch backend", details={"backend": "patcher"}),
]


def _crossed(exc: BaseException) -> BaseException:
    error = map_error(exc)
    frame = json.loads(json.dumps(error.model_dump()))  # what the socket carries
    return exception_from_wire(frame["data"]["exception"])


@pytest.mark.parametrize("exc", CASES, ids=lambda e: type(e).__name__ + ":" + e.code)
def test_contract_errors_come_back_with_the_same_type_and_fields(exc):
    back = _crossed(exc)
    expected_type = Refused if isinstance(exc, Refused) else type(exc)
    assert type(back) is expected_type
    assert back.to_dict() == exc.to_dict() and str(back) == str(exc)
    if isinstance(exc, FsError):
        assert (back.errno, back.path) == (exc.errno, exc.path)
    if isinstance(exc, Refused):
        assert back.rule == exc.rule and back == exc


def test_dispatched_says_whether_anything_ran():
    assert map_error(FsError("x", errno=errno.EIO)).dispatched is True
    refused = map_error(NotRun(Refused("path syntax", "refused")))
    assert refused.dispatched is False and refused.code == "refused"


def test_an_internal_error_keeps_its_class_name_and_message():
    back = _crossed(Unexpected("boom"))
    assert type(back).__name__ == "Unexpected" and str(back) == "boom" and not isinstance(back, ToolError)


def test_an_unreadable_error_says_so():
    back = exception_from_wire({"type": "Martian", "message": "?"})
    assert isinstance(back, ToolError) and back.code == "worker_protocol" and "cannot read" in back.message


@pytest.mark.skipif(importlib.util.find_spec("codespace_fs") is None, reason="needs codespace-fs")
async def test_remote_raw_calls_match_the_in_process_backend(make_app, ws):
    (ws / "a.txt").write_bytes(b"abc\n")
    app = make_app(policy='[runtime]\nworker = "child"\n')
    remote, local = app.backends.filesystem(), app.backends.in_process().filesystem()
    assert type(remote).__name__ == "RemoteFileSystem" and type(local).__name__ == "FsBackend"
    try:
        for fs in (local, remote):
            assert await fs.read_bytes(str(ws / "a.txt"), max_bytes=100) == b"abc\n"
            assert await fs.kind(str(ws / "a.txt")) == "file" and await fs.kind(str(ws / "none")) is None
        await remote.write_bytes(str(ws / "d/b.bin"), b"\x00\xff", create_parents=True, durable=False)
        await remote.sync()
        assert (ws / "d" / "b.bin").read_bytes() == b"\x00\xff"
        await remote.delete_file(str(ws / "d/b.bin"))
        assert not (ws / "d" / "b.bin").exists()
        errors = []
        for fs in (local, remote):
            with pytest.raises(FsError) as caught:
                await fs.read_bytes(str(ws / "a.txt"), max_bytes=2)
            errors.append((type(caught.value), caught.value.to_dict(), caught.value.errno))
            with pytest.raises(FsError) as caught:
                await fs.delete_file(str(ws / "d"))
            errors.append((type(caught.value), caught.value.to_dict(), caught.value.errno))
        assert errors[:2] == errors[2:]
    finally:
        await remote.worker.stop()
