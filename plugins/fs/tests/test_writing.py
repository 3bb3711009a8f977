"""write_file and make_dir through real MCP sessions: atomic, mode-preserving,
stale writes refused, parents on request, links never followed at the leaf."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import subprocess

import pytest

from codespace.contract import FsError
from codespace.testing import call_error, call_ok, connect
from codespace_fs.writing import TMP_SUFFIX

pytestmark = pytest.mark.anyio


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(params=["unnamed", "named"])
def temp_files(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """New content goes to an O_TMPFILE inode, or to a hidden named file where the file
    system has no O_TMPFILE: both must behave alike."""
    if request.param == "named":
        monkeypatch.setattr("codespace_fs.writing._proc_fd_links", lambda: False)
    return request.param


async def test_create_then_replace_reports_hashes(make_app, ws, mode, temp_files):
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "write_file", {"path": "new.txt", "content": "one\n"})
        assert out["created"] and out["previous_sha256"] is None and out["sha256"] == sha(b"one\n") and out["size"] == 4
        out = await call_ok(client, "write_file", {"path": "new.txt", "content": "two\n"})
        assert not out["created"] and out["previous_sha256"] == sha(b"one\n")
    assert (ws / "new.txt").read_text() == "two\n"
    assert not [p for p in os.listdir(ws) if p.endswith(TMP_SUFFIX)]


async def test_mode_is_preserved_and_new_files_follow_umask(make_app, ws, mode, temp_files):
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\n")
    os.chmod(script, 0o751)
    async with connect(make_app(), mode=mode) as client:
        await call_ok(client, "write_file", {"path": "run.sh", "content": "#!/bin/sh\necho hi\n"})
        await call_ok(client, "write_file", {"path": "fresh.txt", "content": "x"})
    assert stat.S_IMODE(os.stat(script).st_mode) == 0o751
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(ws / "fresh.txt").st_mode) == 0o666 & ~umask


async def test_expected_sha256_refuses_a_stale_write_with_the_current_hash(make_app, ws, mode):
    (ws / "f.txt").write_text("v1\n")
    async with connect(make_app(), mode=mode) as client:
        read = await call_ok(client, "read_file", {"path": "f.txt"})
        (ws / "f.txt").write_text("someone else's v2\n")
        error = await call_error(client, "write_file", {"path": "f.txt", "content": "mine\n",
                                                        "expected_sha256": read["sha256"]})
        assert error["code"] == "stale"
        assert sha(b"someone else's v2\n") in error["message"] and "read it again" in error["message"]
        assert error["details"]["current_sha256"] == sha(b"someone else's v2\n")
        assert (ws / "f.txt").read_text() == "someone else's v2\n"
        fresh = await call_ok(client, "read_file", {"path": "f.txt"})
        await call_ok(client, "write_file", {"path": "f.txt", "content": "mine\n", "expected_sha256": fresh["sha256"]})
        assert (ws / "f.txt").read_text() == "mine\n"
        error = await call_error(client, "write_file", {"path": "gone.txt", "content": "x", "expected_sha256": "0" * 64})
        assert error["code"] == "stale" and "does not exist" in error["message"]


async def test_must_not_exist_and_create_parents(make_app, ws, mode, temp_files):
    (ws / "have.txt").write_text("keep")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "write_file", {"path": "have.txt", "content": "x", "must_not_exist": True})
        assert error["code"] == "exists"
        assert (ws / "have.txt").read_text() == "keep"
        await call_ok(client, "write_file", {"path": "brand.txt", "content": "x", "must_not_exist": True})
        error = await call_error(client, "write_file", {"path": "a/b/c.txt", "content": "x"})
        assert error["code"] == "not_found"
        assert not (ws / "a").exists()
        await call_ok(client, "write_file", {"path": "a/b/c.txt", "content": "deep", "create_parents": True})
    assert (ws / "a" / "b" / "c.txt").read_text() == "deep"


async def test_parents_over_a_thousand_levels_deep_are_made(make_app, ws, mode):
    """Creating missing parents one level at a time used to recurse once per level: a
    RecursionError (internal error) past about 990 levels (2,000 fit in PATH_MAX)."""
    try:
        async with connect(make_app(), mode=mode) as client:
            await call_ok(client, "write_file", {"path": "a/" * 1100 + "f.txt", "content": "deep",
                                                 "create_parents": True})
            await call_ok(client, "make_dir", {"path": "b/" * 1100})
        assert (ws / ("a/" * 1100 + "f.txt")).read_text() == "deep"
        assert (ws / ("b/" * 1100)).is_dir()
    finally:  # shutil.rmtree (pytest's clean-up of old runs) recurses per level too
        subprocess.run(["rm", "-rf", str(ws / "a"), str(ws / "b")], check=True)


async def test_base64_content_and_bad_base64(make_app, ws, mode):
    blob = bytes(range(256))
    async with connect(make_app(), mode=mode) as client:
        await call_ok(client, "write_file", {"path": "b.bin", "content": base64.b64encode(blob).decode(), "encoding": "base64"})
        error = await call_error(client, "write_file", {"path": "c.bin", "content": "not base64!", "encoding": "base64"})
        assert error["code"] == "invalid_content"
    assert (ws / "b.bin").read_bytes() == blob and not (ws / "c.bin").exists()


async def test_size_limit(make_app, ws, mode):
    async with connect(make_app("[limits]\nmax_file_bytes = 100\n"), mode=mode) as client:
        error = await call_error(client, "write_file", {"path": "big.txt", "content": "x" * 101})
        assert error["code"] == "too_large" and "limits.max_file_bytes" in error["message"]
    assert not (ws / "big.txt").exists()


async def test_leaf_link_is_never_followed(make_app, ws, mode, resolver):
    (ws / "target.txt").write_text("target\n")
    (ws / "link.txt").symlink_to("target.txt")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "write_file", {"path": "link.txt", "content": "via link"})
        assert error["code"] == "symlink_refused" and "'target.txt'" in error["message"]
    assert (ws / "target.txt").read_text() == "target\n" and (ws / "link.txt").is_symlink()


async def test_directory_and_fifo_targets_refused(make_app, ws, mode):
    (ws / "d").mkdir()
    os.mkfifo(ws / "pipe")
    async with connect(make_app(), mode=mode) as client:
        assert (await call_error(client, "write_file", {"path": "d", "content": "x"}))["code"] == "is_directory"
        error = await call_error(client, "write_file", {"path": "pipe", "content": "x"})
        assert error["code"] == "not_regular" and "FIFO" in error["message"]


async def test_writes_through_an_in_root_parent_link_are_rechecked(make_app, ws, mode, resolver):
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "src").mkdir()
    (ws / "gitdir").symlink_to(".git")
    (ws / "srclink").symlink_to("src")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "write_file", {"path": "gitdir/config", "content": "evil"})
        assert error["code"] == "refused" and "protected" in error["message"]
        await call_ok(client, "write_file", {"path": "srclink/ok.txt", "content": "fine"})
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert (ws / "src" / "ok.txt").read_text() == "fine"


async def test_a_rewritten_file_loses_set_user_id(make_app, backend_factory, ws, mode):
    """New content must not run with the owner's privileges: a root server writes as root,
    which the kernel lets keep set-user-ID (and set-group-ID on a group-executable file),
    so a setuid-root file in the workspace rewritten by write_file (or a patch, through
    write_bytes, in place or replaced) stayed setuid root with the agent's content."""
    files = {"suid": 0o4755, "sgid": 0o2755, "both": 0o6711, "lockmark": 0o2644}  # g+s without g+x: a lock mark
    for name, bits in files.items():
        (ws / name).write_text("#!/bin/sh\n")
        os.chmod(ws / name, bits)
    async with connect(make_app(), mode=mode) as client:
        for name in files:
            await call_ok(client, "write_file", {"path": name, "content": "#!/bin/sh\nid\n"})
    assert {n: stat.S_IMODE(os.stat(ws / n).st_mode) for n in files} == {
        "suid": 0o755, "sgid": 0o755, "both": 0o711, "lockmark": 0o2644}
    backend = backend_factory()
    for in_place in (True, False):
        os.chmod(ws / "suid", 0o4755)
        await backend.write_bytes(str(ws / "suid"), b"#!/bin/sh\nwhoami\n", in_place=in_place)
        assert stat.S_IMODE(os.stat(ws / "suid").st_mode) == 0o755, in_place


async def test_write_bytes_follow_symlink_for_the_patcher(backend_factory, ws, resolver):
    backend = backend_factory()
    (ws / "t.txt").write_text("old")
    (ws / "l.txt").symlink_to("t.txt")
    await backend.write_bytes(str(ws / "l.txt"), b"new", follow_symlink=True)
    assert (ws / "t.txt").read_text() == "new" and (ws / "l.txt").is_symlink()
    await backend.write_bytes(str(ws / "x" / "y.txt"), b"made", create_parents=True)
    assert (ws / "x" / "y.txt").read_text() == "made"
    assert await backend.kind(str(ws / "l.txt")) == "symlink"
    assert await backend.kind(str(ws / "nope")) is None
    await backend.delete_file(str(ws / "l.txt"))
    assert not (ws / "l.txt").exists() and (ws / "t.txt").exists()
    with pytest.raises(FsError) as info:
        await backend.delete_file(str(ws / "x"))
    assert info.value.errno == 21  # EISDIR


async def test_write_bytes_in_place_keeps_the_inode_and_refuses_what_a_replace_refuses(
    backend_factory, ws, outside, resolver
):
    backend = backend_factory()
    target = ws / "t.txt"
    target.write_bytes(b"a much longer old content\n")
    os.chmod(target, 0o640)
    before = target.stat()
    for data in (b"short\n", b"longer than before, " * 1000, b""):
        await backend.write_bytes(str(target), data, in_place=True, durable=False)
        after = target.stat()
        assert target.read_bytes() == data
        assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    await backend.sync()
    # Another hard link (perhaps from outside the root) is never written through.
    os.link(outside / "secret.txt", ws / "linked.txt")
    await backend.write_bytes(str(ws / "linked.txt"), b"changed", in_place=True)
    assert (ws / "linked.txt").read_text() == "changed" and (outside / "secret.txt").read_text() == "TOP SECRET\n"
    # Links: in the root followed on request, leaving it refused, a leaf link refused otherwise.
    (ws / "l.txt").symlink_to("t.txt")
    await backend.write_bytes(str(ws / "l.txt"), b"via link", in_place=True, follow_symlink=True)
    assert target.read_bytes() == b"via link" and target.stat().st_ino == before.st_ino
    with pytest.raises(FsError):
        await backend.write_bytes(str(ws / "l.txt"), b"x", in_place=True)
    (ws / "out.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(FsError):
        await backend.write_bytes(str(ws / "out.txt"), b"x", in_place=True, follow_symlink=True)
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"
    # Special files are refused without blocking; absent files are created.
    os.mkfifo(ws / "fifo")
    with pytest.raises(FsError):
        await backend.write_bytes(str(ws / "fifo"), b"x", in_place=True)
    await backend.write_bytes(str(ws / "new" / "n.txt"), b"made", in_place=True, create_parents=True)
    assert (ws / "new" / "n.txt").read_bytes() == b"made"


async def test_make_dir(make_app, ws, mode):
    (ws / "file").write_text("")
    (ws / "dlink").symlink_to("somewhere")
    async with connect(make_app(), mode=mode) as client:
        assert (await call_ok(client, "make_dir", {"path": "a/b/c"}))["created"]
        assert not (await call_ok(client, "make_dir", {"path": "a/b/c"}))["created"]
        error = await call_error(client, "make_dir", {"path": "a/b/c", "exist_ok": False})
        assert error["code"] == "exists"
        error = await call_error(client, "make_dir", {"path": "p/q", "parents": False})
        assert error["code"] == "not_found" and "parents=true" in error["message"]
        error = await call_error(client, "make_dir", {"path": "file"})
        assert error["code"] == "exists" and "a file" in error["message"]
        error = await call_error(client, "make_dir", {"path": "dlink"})
        assert "symbolic link" in error["message"]
        assert not (await call_ok(client, "make_dir", {"path": "."}))["created"]
    assert (ws / "a" / "b" / "c").is_dir() and not (ws / "p").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only a server running as root creates files for another user")
async def test_as_root_what_is_created_takes_the_owner_of_its_directory(make_app, ws, mode, temp_files):
    """Found by testing: a root server serving a user's workspace left every file the agent
    created owned by root, which the user's commands (the sandbox runs them as the workspace
    owner) could not change."""
    os.chown(ws, 1000, 1001)
    (ws / "rootdir").mkdir()  # root's own directory: what is made in it stays root's
    (ws / "theirs.txt").write_text("x")
    os.chown(ws / "theirs.txt", 1002, 1002)
    async with connect(make_app(), mode=mode) as client:
        await call_ok(client, "write_file", {"path": "new.txt", "content": "one\n"})
        await call_ok(client, "write_file", {"path": "a/b/c.txt", "content": "deep\n", "create_parents": True})
        await call_ok(client, "make_dir", {"path": "d"})
        await call_ok(client, "write_file", {"path": "theirs.txt", "content": "y"})
        await call_ok(client, "write_file", {"path": "rootdir/r.txt", "content": "r"})
        patched = await client.call_tool("apply_patch", {"patch": "*** Begin Patch\n*** Add File: p/q.txt\n+x\n*** End Patch\n"})
    owners = {rel: (os.stat(ws / rel).st_uid, os.stat(ws / rel).st_gid)
              for rel in ("new.txt", "a", "a/b", "a/b/c.txt", "d", "theirs.txt", "rootdir/r.txt")}
    assert owners == {"new.txt": (1000, 1001), "a": (1000, 1001), "a/b": (1000, 1001), "a/b/c.txt": (1000, 1001),
                      "d": (1000, 1001), "theirs.txt": (1002, 1002), "rootdir/r.txt": (0, 0)}, owners
    if not patched.is_error:  # where the patch plugin is installed
        assert {(os.stat(ws / p).st_uid, os.stat(ws / p).st_gid) for p in ("p", "p/q.txt")} == {(1000, 1001)}
