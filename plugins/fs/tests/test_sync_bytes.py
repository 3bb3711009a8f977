"""The blocking byte methods (contract.SyncFileBytes) are the async ones without the loop:
the same confinement, the same refusals with the same messages, the same effects on disk.
And a process that uses only them loads no event loop, no anyio and no pydantic."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from test_hostile import STRICT, WHY_LINK, world  # noqa: F401 - a fixture

from codespace.contract import FileSystem, FsError, SyncFileBytes

pytestmark = pytest.mark.anyio

# name -> (async call, blocking call, words the refusal must hold); paths relative to the workspace.
REFUSED = {
    "read-link-out": (lambda b, p: b.read_bytes(p("link_out_file"), max_bytes=100, follow_symlink=True),
                      lambda b, p: b.read_bytes_sync(p("link_out_file"), max_bytes=100, follow_symlink=True), WHY_LINK),
    "read-chain-out": (lambda b, p: b.read_bytes(p("chain1"), max_bytes=100, follow_symlink=True),
                       lambda b, p: b.read_bytes_sync(p("chain1"), max_bytes=100, follow_symlink=True), WHY_LINK),
    "read-link-unfollowed": (lambda b, p: b.read_bytes(p("link_out_file"), max_bytes=100),
                             lambda b, p: b.read_bytes_sync(p("link_out_file"), max_bytes=100), ("link",)),
    "read-through-dir-link": (lambda b, p: b.read_bytes(p("link_out_dir/secret.txt"), max_bytes=100),
                              lambda b, p: b.read_bytes_sync(p("link_out_dir/secret.txt"), max_bytes=100), WHY_LINK),
    "read-fifo": (lambda b, p: b.read_bytes(p("fifo"), max_bytes=100),
                  lambda b, p: b.read_bytes_sync(p("fifo"), max_bytes=100), ("FIFO",)),
    "read-too-big": (lambda b, p: b.read_bytes(p("a.txt"), max_bytes=3),
                     lambda b, p: b.read_bytes_sync(p("a.txt"), max_bytes=3), ("bytes",)),
    "read-dev-null": (lambda b, p: b.read_bytes("/dev/null", max_bytes=10),
                      lambda b, p: b.read_bytes_sync("/dev/null", max_bytes=10), ("character device",)),
    "write-dangling-out": (lambda b, p: b.write_bytes(p("dangling_out"), b"x", follow_symlink=True),
                           lambda b, p: b.write_bytes_sync(p("dangling_out"), b"x", follow_symlink=True), WHY_LINK),
    "write-in-place-link-out": (
        lambda b, p: b.write_bytes(p("link_out_file"), b"x", follow_symlink=True, in_place=True, durable=False),
        lambda b, p: b.write_bytes_sync(p("link_out_file"), b"x", follow_symlink=True, in_place=True, durable=False),
        WHY_LINK),
    "write-parents-through-link": (
        lambda b, p: b.write_bytes(p("chain_dir/a/b.txt"), b"x", create_parents=True),
        lambda b, p: b.write_bytes_sync(p("chain_dir/a/b.txt"), b"x", create_parents=True), WHY_LINK),
    "write-protected-leaf": (lambda b, p: b.write_bytes(p("gitcfg_link"), b"x", follow_symlink=True),
                             lambda b, p: b.write_bytes_sync(p("gitcfg_link"), b"x", follow_symlink=True),
                             ("protected",)),
    "write-none-via-link": (lambda b, p: b.write_bytes(p("secret_link"), b"x", follow_symlink=True, in_place=True),
                            lambda b, p: b.write_bytes_sync(p("secret_link"), b"x", follow_symlink=True, in_place=True),
                            ("'none'",)),
    "delete-through-link": (lambda b, p: b.delete_file(p("link_out_dir/secret.txt")),
                            lambda b, p: b.delete_file_sync(p("link_out_dir/secret.txt")), WHY_LINK),
    "delete-directory": (lambda b, p: b.delete_file(p("sub")), lambda b, p: b.delete_file_sync(p("sub")),
                         ("directory",)),
    "kind-through-dir-link": (lambda b, p: b.kind(p("link_out_dir/secret.txt")),
                              lambda b, p: b.kind_sync(p("link_out_dir/secret.txt")), WHY_LINK),
}


def test_codespace_fs_offers_the_blocking_byte_methods(backend_factory):
    backend = backend_factory()
    assert isinstance(backend, SyncFileBytes) and isinstance(backend, FileSystem)
    assert not isinstance(object(), SyncFileBytes)


@pytest.mark.parametrize("case_id", sorted(REFUSED))
async def test_blocking_calls_refuse_as_the_async_ones(world, backend_factory, digest, resolver, case_id):  # noqa: F811
    run_async, run_sync, words = REFUSED[case_id]
    backend = backend_factory(STRICT, resolver)
    before = digest(world.outside), digest(world.ws)

    def p(rel: str) -> str:
        return f"{world.ws}/{rel}"

    with anyio.fail_after(10), pytest.raises(FsError) as async_error:
        await run_async(backend, p)
    with pytest.raises(FsError) as sync_error:
        run_sync(backend, p)
    assert any(w in sync_error.value.message for w in words), sync_error.value.message
    assert (sync_error.value.message, sync_error.value.code, sync_error.value.errno) == (
        async_error.value.message, async_error.value.code, async_error.value.errno)
    assert (digest(world.outside), digest(world.ws)) == before


async def test_kind_follows_a_final_link_only_when_asked(world, backend_factory, resolver):  # noqa: F811
    backend = backend_factory(STRICT, resolver)
    ws = world.ws
    assert backend.kind_sync(f"{ws}/gitdir_link") == await backend.kind(f"{ws}/gitdir_link") == "symlink"
    assert backend.kind_sync(f"{ws}/gitdir_link", follow_symlink=True) == "directory"
    assert backend.kind_sync(f"{ws}/secret_link", follow_symlink=False) == "symlink"
    assert backend.kind_sync(f"{ws}/chain2", follow_symlink=False) == "symlink"
    assert backend.kind_sync(f"{ws}/a.txt", follow_symlink=True) == "file"
    assert backend.kind_sync(f"{ws}/missing") is None is await backend.kind(f"{ws}/missing")
    assert backend.kind_sync(f"{ws}/a.txt/below") is None  # a parent that is a file: nothing there
    with pytest.raises(FsError) as error:
        backend.kind_sync(f"{ws}/link_out_file", follow_symlink=True)  # leads out: refused, not "absent"
    assert any(w in error.value.message for w in WHY_LINK)


def _tree(root: Path) -> dict[str, tuple[str, bytes | str, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            content: bytes | str = (os.readlink(full) if os.path.islink(full)
                                    else open(full, "rb").read() if os.path.isfile(full) else "dir")
            out[os.path.relpath(full, root)] = (oct(st.st_mode), content, st.st_nlink)
    return out


def _seed(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "sub" / "b.txt").write_bytes(b"beta\n")
    os.chmod(root / "sub" / "b.txt", 0o600)
    os.symlink("a.txt", root / "to_a")
    os.link(root / "a.txt", root / "a-hard")


async def test_blocking_calls_change_the_disk_as_the_async_ones(tmp_path, resolver):
    """The same sequence of calls, each tree through one road, ends in identical trees."""
    from codespace_fs.backend import FsBackend

    from codespace.testing import open_workspace

    roots = tmp_path / "async", tmp_path / "sync"
    backends = []
    for root in roots:
        _seed(root)
        backends.append(FsBackend(open_workspace(root, state_dir=tmp_path / f"state-{root.name}"), resolver))
    a, s = backends
    pa, ps = (lambda rel: f"{roots[0]}/{rel}"), (lambda rel: f"{roots[1]}/{rel}")
    steps = [
        ("write_bytes", ("to_a", b"through the link\n"), {"follow_symlink": True, "in_place": True, "durable": False}),
        ("write_bytes", ("sub/b.txt", b"beta 2\n"), {"in_place": True, "durable": False}),
        ("write_bytes", ("sub/c.txt", b"gamma\n"), {"durable": True}),
        ("write_bytes", ("new/deep/d.txt", b"delta\n"), {"create_parents": True}),
        ("write_bytes", ("a-hard", b"hard-linked: replaced, not rewritten\n"), {"in_place": True}),
        ("read_bytes", ("to_a",), {"max_bytes": 1000, "follow_symlink": True}),
        ("kind", ("new/deep",), {}),
        ("delete_file", ("to_a",), {}),
        ("delete_file", ("sub/c.txt",), {}),
    ]
    for name, args, kwargs in steps:
        got_async = await getattr(a, name)(pa(args[0]), *args[1:], **kwargs)
        got_sync = getattr(s, name + "_sync")(ps(args[0]), *args[1:], **kwargs)
        assert got_async == got_sync, name
    assert _tree(roots[0]) == _tree(roots[1])
    assert (roots[1] / "sub" / "b.txt").stat().st_mode & 0o777 == 0o600  # rewritten in place keeps the mode


def test_a_process_using_only_the_blocking_calls_loads_no_loop_and_no_pydantic(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "f.txt").write_bytes(b"one\n")
    code = f"""
import sys
from codespace.contract import gate, SyncFileBytes
ws = gate.open_workspace({str(tmp_path / 'ws')!r}, state_dir={str(tmp_path / 'state')!r})
fs, failed = gate.filesystem(ws, [("fs", "codespace_fs.plugin")])
assert isinstance(fs, SyncFileBytes), (fs, failed)
path = {str(tmp_path / 'ws' / 'f.txt')!r}
data = fs.read_bytes_sync(path, max_bytes=100)
fs.write_bytes_sync(path, data + b"two\\n", in_place=True, durable=False)
fs.write_bytes_sync(path + ".new", b"x", durable=False)
assert fs.kind_sync(path) == "file"
fs.delete_file_sync(path + ".new")
print(sorted(m for m in ("asyncio", "anyio", "pydantic", "ctypes", "hashlib", "shutil") if m in sys.modules))
"""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "CODESPACE_PLUGINS_ALLOW": "fs"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"the blocking road loaded {done.stdout.strip()}"
    assert (tmp_path / "ws" / "f.txt").read_bytes() == b"one\ntwo\n" and not (tmp_path / "ws" / "f.txt.new").exists()
