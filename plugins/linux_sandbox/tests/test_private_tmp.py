"""The Landlock engine's private TMPDIR is gone however its command ended (issue found in use:
every command killed by its timeout left its TMPDIR, and what it wrote there, in /tmp; 8,910
directories after one CI run), and removing one is safe whatever the command left in it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import anyio
import pytest
from conftest import live_pids_in, require_engine

from codespace.testing import build_app, call_ok, connect
from codespace_linux_sandbox import private_tmp

USER = 1000


@pytest.fixture
def tmp_base(tmp_path, monkeypatch) -> Path:
    base = tmp_path / "tmp"
    base.mkdir()
    monkeypatch.setattr(private_tmp, "TMP", str(base))
    return base


def _made_by_a_killed_helper(run_dir: str) -> str:
    """A directory whose helper died without removing it (the lock goes with the process)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        path, _ = private_tmp.make(run_dir)
        os.write(write, path.encode())
        os._exit(0)
    os.close(write)
    path = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    return path


def _hostile_tree(tmpdir: Path, outside: Path) -> None:
    """What a command may leave: links out, special files, a deep tree, directories it made
    unreadable or unwritable."""
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file").write_text("must survive")
    os.symlink(outside / "keep", tmpdir / "link-to-dir")
    os.symlink(outside / "keep" / "file", tmpdir / "link-to-file")
    os.link(outside / "keep" / "file", tmpdir / "hard-link")
    os.mkfifo(tmpdir / "fifo")
    (tmpdir / b"\xff\xfe-not-utf8".decode("utf-8", "surrogateescape")).write_text("x")
    deep = tmpdir
    for _ in range(300):  # far past DEPTH and past Python's recursion in any naive walk at 1,000
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "bottom").write_text("x")
    os.symlink(outside / "keep", deep / "link-at-the-bottom")
    for name, mode in (("no-access", 0o000), ("read-only", 0o500)):
        (tmpdir / name / "inner").mkdir(parents=True)
        (tmpdir / name / "inner" / "f").write_text("x")
        (tmpdir / name / "inner").chmod(mode)
        (tmpdir / name).chmod(mode)
    tmpdir.chmod(0o500)


def test_a_held_directory_is_not_stale_and_a_dead_helpers_is(tmp_base, tmp_path):
    path, lock = private_tmp.make(str(tmp_path))
    assert Path(path).parent == Path(private_tmp.parent(str(tmp_path)))
    assert oct(os.stat(Path(path).parent).st_mode & 0o777) == "0o711"
    assert private_tmp.stale(str(tmp_path)) == []
    left = _made_by_a_killed_helper(str(tmp_path))
    found = private_tmp.stale(str(tmp_path))
    assert [p for p, _ in found] == [left]
    for p, fd in found:
        private_tmp.remove(p, fd)
    assert not os.path.exists(left) and os.path.isdir(path)
    private_tmp.remove(path, lock)
    assert os.listdir(private_tmp.parent(str(tmp_path))) == []


def test_removal_follows_no_link_and_leaves_nothing(tmp_base, tmp_path):
    left = Path(_made_by_a_killed_helper(str(tmp_path)))
    _hostile_tree(left, tmp_path / "outside")
    for p, fd in private_tmp.stale(str(tmp_path)):
        private_tmp.remove(p, fd)
    assert not left.exists()
    assert (tmp_path / "outside" / "keep" / "file").read_text() == "must survive"


def test_removal_as_an_unprivileged_user(tmp_path):
    """A non-root server owns what its commands made, but not the permissions they took away."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root to become uid 1000 (CI runs as root)")
    python = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"  # a pyenv's lives in /root
    if not os.access(python, os.X_OK):
        pytest.skip(f"needs {python}, which uid {USER} may run")
    # Under /var/tmp, not pytest's 0700 tmp_path: uid 1000 must reach it.
    work = Path(subprocess.check_output(["mktemp", "-d", "/var/tmp/codespace-private-tmp-XXXXXX"], text=True).strip())
    try:
        os.chown(work, USER, USER)
        script = f"""
import site
from pathlib import Path
site.addsitedir({sysconfig.get_paths()["purelib"]!r})
from codespace_linux_sandbox import private_tmp
from test_private_tmp import _hostile_tree, _made_by_a_killed_helper
work = Path({str(work)!r})
(work / "tmp").mkdir()
private_tmp.TMP = str(work / "tmp")
left = Path(_made_by_a_killed_helper(str(work)))
_hostile_tree(left, work / "outside")
found = private_tmp.stale(str(work))
assert [p for p, _ in found] == [str(left)], found
for p, fd in found:
    private_tmp.remove(p, fd)
print("left" if left.exists() else "gone", (work / "outside" / "keep" / "file").read_text())
"""
        out = subprocess.run(["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", python,
                              "-c", script], capture_output=True, text=True, cwd=Path(__file__).parent, check=False)
        assert out.returncode == 0 and out.stdout.split() == ["gone", "must", "survive"], (out.stdout, out.stderr)
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)


def test_sweeps_racing_new_directories_never_take_a_live_one(tmp_base, tmp_path):
    """A sweep may find a directory between its mkdir and its lock: it takes it, and the new one's
    helper must notice and make another, never run a command in a removed directory."""
    stop = threading.Event()

    def sweep() -> None:
        while not stop.is_set():
            for p, fd in private_tmp.stale(str(tmp_path)):
                private_tmp.remove(p, fd)

    sweeper = threading.Thread(target=sweep)
    sweeper.start()
    held = []
    try:
        for _ in range(300):
            path, lock = private_tmp.make(str(tmp_path))
            assert os.fstat(lock).st_nlink and os.path.isdir(path)
            held.append((path, lock))
        time.sleep(0.05)
        assert all(os.path.isdir(path) for path, _ in held)
    finally:
        stop.set()
        sweeper.join()
        for path, lock in held:
            private_tmp.remove(path, lock)


def test_a_parent_someone_else_made_is_not_used(tmp_base, tmp_path):
    squatted = Path(private_tmp.parent(str(tmp_path)))
    squatted.mkdir(mode=0o777)
    squatted.chmod(0o777)  # anybody could plant or remove entries: not a home for our directories
    path, lock = private_tmp.make(str(tmp_path))
    try:
        assert Path(path).parent == tmp_base and Path(path).name.startswith("codespace-sandbox-")
    finally:
        private_tmp.remove(path, lock)
    assert not os.path.exists(path)


@pytest.mark.anyio
async def test_timed_out_and_killed_commands_leave_no_tmpdir(base, mode):
    """Through MCP, Landlock engine: a command that filled its TMPDIR and was killed by its
    timeout, or whose helper was killed, leaves nothing in /tmp."""
    require_engine("landlock")
    ws = base / "ws"
    ws.mkdir()
    app = build_app(ws, state_dir=base / "state", policy='[sandbox]\nengine = "landlock"\n',
                    plugins=("linux_sandbox",))
    marker = "sleep 86392"
    fill = 'echo "$TMPDIR"; mkdir -p "$TMPDIR/a/b/c"; head -c 100000 /dev/zero > "$TMPDIR/a/b/c/f"; chmod 000 "$TMPDIR/a"'
    seen = []
    try:
        async with connect(app, mode=mode) as client:
            for timeout_ms in (300, 600):
                out = await call_ok(client, "exec", {"command": f"{fill}; exec {marker}", "timeout_ms": timeout_ms,
                                                     "yield_ms": 10000})
                assert out["timed_out"] and out["sandboxed"], out
                seen.append(out["output"].split()[0])
            started = await call_ok(client, "exec", {"command": f"{fill}; {marker}", "yield_ms": 500})
            seen.append(started["output"].split()[0])
            os.kill(started["pid"], 9)  # the helper itself: it removes nothing
            with anyio.fail_after(10):
                while (await call_ok(client, "read_output", {"session_id": started["session_id"]}))["running"]:
                    await anyio.sleep(0.05)
            assert (await call_ok(client, "exec", {"command": "echo fine"}))["exit_code"] == 0
            with anyio.move_on_after(5):  # removal runs in a thread after each command
                while any(os.path.exists(p) for p in seen):
                    await anyio.sleep(0.05)
        assert seen and all(p.startswith("/") and not os.path.exists(p) for p in seen), seen
    finally:
        for pid in live_pids_in([marker]):
            os.kill(pid, 9)


@pytest.mark.anyio
async def test_a_killed_servers_tmpdirs_go_at_the_next_start(base, mode, tmp_path):
    require_engine("landlock")
    ws = base / "ws"
    ws.mkdir()
    left = _made_by_a_killed_helper(str(base / "state" / "sandbox"))
    Path(left, "f").write_text("x")
    app = build_app(ws, state_dir=base / "state", policy='[sandbox]\nengine = "landlock"\n',
                    plugins=("linux_sandbox",))
    async with connect(app, mode=mode):
        with anyio.move_on_after(5):
            while os.path.exists(left):
                await anyio.sleep(0.05)
    assert not os.path.exists(left)
