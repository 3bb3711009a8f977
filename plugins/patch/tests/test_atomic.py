"""Atomic mode: nothing changes unless every section succeeds, and a crash during the
commit is rolled back (or completed) at the next start, never left half-applied."""

from __future__ import annotations

import errno
import fcntl
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TEST_PLUGINS, patch_of, write

from codespace.contract import FsError
from codespace.testing import build_app, call_ok, connect, server_pids
from codespace_patch.journal import Journal, commit, pending, record_for, recover, settle, stage
from codespace_patch.stores import Change
from codespace_patch.conformance.helper import helper_argv, helper_env, real_fs_installed
from codespace_patch.conformance.trees import snapshot

pytestmark = pytest.mark.anyio
MAX = 1 << 26


@pytest.fixture
def fs(ws: Path, test_plugins: Path):
    from codespace_patch_testfs import TestFileSystem

    return TestFileSystem(str(ws))


class FailingWrites:
    """A FileSystem whose n-th write fails, as a full disk would."""

    def __init__(self, inner, fail_at: int) -> None:
        self.inner, self.fail_at, self.writes = inner, fail_at, 0

    def __getattr__(self, name):  # noqa: ANN204
        return getattr(self.inner, name)

    async def write_bytes(self, path, data, **kwargs):  # noqa: ANN001, ANN201
        self.writes += 1
        if self.writes == self.fail_at:
            raise FsError(f"cannot write {path}: No space left on device", path=path, errno=errno.ENOSPC)
        return await self.inner.write_bytes(path, data, **kwargs)


def _changes(ws: Path) -> tuple[list[Change], list[str]]:
    changes = [
        Change(str(ws / "a.txt"), b"a\n", b"A\n"),
        Change(str(ws / "b.txt"), b"b\n", None),
        Change(str(ws / "new/deep/c.txt"), None, b"C\n"),
        Change(str(ws / "d.txt"), b"d\n", b"D\n"),
    ]
    return changes, [str(ws / "new"), str(ws / "new/deep")]


def _old_tree(ws: Path) -> None:
    write(ws, {"a.txt": "a\n", "b.txt": "b\n", "d.txt": "d\n"})


async def test_commit_applies_everything_and_settle_drops_the_journal(ws, state, fs):
    _old_tree(ws)
    changes, dirs = _changes(ws)
    journal = await commit(fs, stage(Journal(state / "j"), changes, dirs), MAX)
    assert (ws / "a.txt").read_text() == "A\n" and not (ws / "b.txt").exists()
    assert (ws / "new/deep/c.txt").read_text() == "C\n" and (ws / "d.txt").read_text() == "D\n"
    # Until settled, the sealed journal stays, locked: a recovery leaves it alone.
    assert pending(state / "j") == [journal.path] and journal.path.suffix == ".slot"
    assert (await recover(fs, state / "j", MAX)).busy == [str(journal.path)]
    await settle(fs, journal)
    assert pending(state / "j") == []


async def test_a_server_start_removes_the_journal_files_stopped_servers_left(ws, state, fs, make_app, mode):
    """Each Patcher keeps one journal file for its whole life and leaves it, void, when its
    server stops; the next start removes those (a file still locked belongs to a live server)."""
    from codespace.workspace import PATCH_JOURNAL_DIR as JOURNAL_DIR

    _old_tree(ws)
    changes, dirs = _changes(ws)
    stopped = await commit(fs, stage(Journal(state / JOURNAL_DIR), changes, dirs), MAX)
    await settle(fs, stopped)
    stopped.keep()  # its server is gone: the file is void and unlocked
    live = Journal(state / JOURNAL_DIR)
    live.arm(record_for([], []))
    live.sealed_blocking()
    live.disarm()  # void, but still locked by its (live) owner
    async with connect(make_app(), mode=mode):
        pass
    assert not stopped.path.exists() and live.path.exists()
    live.close()


async def test_a_failed_flush_keeps_the_journal_for_recovery(ws, state, fs):
    _old_tree(ws)
    changes, dirs = _changes(ws)
    journal = await commit(fs, stage(Journal(state / "j"), changes, dirs), MAX)

    class FailingSync:
        async def sync(self) -> None:
            raise OSError(errno.EIO, "Input/output error")

    await settle(FailingSync(), journal)  # type: ignore[arg-type]
    assert pending(state / "j") == [journal.path]
    outcome = await recover(fs, state / "j", MAX)  # unlocked now; every target holds its new content
    assert outcome.completed == [str(journal.path)] and pending(state / "j") == []
    assert (ws / "a.txt").read_text() == "A\n"


@pytest.mark.parametrize("fail_at", [1, 2, 3])
async def test_a_failing_write_mid_commit_is_rolled_back_at_once(ws, state, fs, fail_at):
    _old_tree(ws)
    before = snapshot(ws)
    changes, dirs = _changes(ws)
    with pytest.raises(FsError, match="No space left"):
        await commit(FailingWrites(fs, fail_at), stage(Journal(state / "j"), changes, dirs), MAX)
    assert snapshot(ws) == before
    assert pending(state / "j") == []


async def test_a_failing_write_among_many_is_rolled_back(ws, state, fs):
    write(ws, {f"f{i}.txt": f"{i}\n" for i in range(20)})
    before = snapshot(ws)
    changes = [Change(str(ws / f"f{i}.txt"), f"{i}\n".encode(), f"{i} new\n".encode()) for i in range(20)]
    changes.append(Change(str(ws / "fresh/n.txt"), None, b"n\n"))
    with pytest.raises(FsError, match="No space left"):
        await commit(FailingWrites(fs, 9), stage(Journal(state / "j"), changes, [str(ws / "fresh")]), MAX)
    assert snapshot(ws) == before
    await settle(fs, await commit(fs, stage(Journal(state / "j"), changes, [str(ws / "fresh")]), MAX))
    assert (ws / "f19.txt").read_text() == "19 new\n" and (ws / "fresh/n.txt").exists()


async def test_an_update_whose_directory_went_away_fails_and_is_not_recreated(ws, state, fs):
    """Found by testing: a file a patch updates, whose directory a command removed between the
    patch's read and its commit, was written back with the directory re-created."""
    write(ws, {"a.txt": "a\n"})
    before = snapshot(ws)
    changes = [Change(str(ws / "a.txt"), b"a\n", b"A\n"), Change(str(ws / "gone" / "b.txt"), b"b\n", b"B\n")]
    with pytest.raises(FsError, match="No such file or directory"):
        await commit(fs, stage(Journal(state / "j"), changes, []), MAX)
    assert snapshot(ws) == before and not (ws / "gone").exists()
    assert pending(state / "j") == []


async def _half_applied(ws: Path, state: Path, fs, steps: int) -> Journal:
    """A journal whose writer died after ``steps`` operations (the lock is released)."""
    _old_tree(ws)
    changes, dirs = _changes(ws)
    journal = Journal.write(state / "j", record_for(changes, dirs))
    done = 0
    for change in changes:  # the commit's order: deletions, directories, writes
        if change.new is None and done < steps:
            await fs.delete_file(change.path)
            done += 1
    for change in changes:
        if change.new is not None and done < steps:
            await fs.write_bytes(change.path, change.new, create_parents=True)
            done += 1
    journal.keep()
    return journal


@pytest.mark.parametrize("steps", [0, 1, 2, 3])
async def test_recovery_rolls_a_partial_commit_back_idempotently(ws, state, fs, steps):
    _old_tree(ws)
    old = snapshot(ws)
    await _half_applied(ws, state, fs, steps)
    outcome = await recover(fs, state / "j", MAX)
    assert len(outcome.rolled_back) == 1 and not outcome.completed
    assert snapshot(ws) == old
    again = await recover(fs, state / "j", MAX)
    assert not again.rolled_back and not again.completed
    assert snapshot(ws) == old


async def test_recovery_completes_a_commit_whose_writes_all_landed(ws, state, fs):
    await _half_applied(ws, state, fs, 4)
    new = snapshot(ws)
    outcome = await recover(fs, state / "j", MAX)
    assert len(outcome.completed) == 1 and not outcome.rolled_back
    assert snapshot(ws) == new and pending(state / "j") == []


async def test_recovery_restores_a_torn_in_place_file_and_keeps_what_it_held(ws, state, fs):
    """An existing file is rewritten in place, so a crash can leave it torn (or someone may
    have edited it since): recovery restores it and keeps the content it found."""
    await _half_applied(ws, state, fs, 2)
    (ws / "a.txt").write_bytes(b"A")  # the new content half written
    outcome = await recover(fs, state / "j", MAX)
    assert len(outcome.skipped_files) == 1 and outcome.skipped_files[0].startswith(f"{ws / 'a.txt'} (restored")
    assert (ws / "a.txt").read_text() == "a\n" and (ws / "b.txt").read_text() == "b\n"
    kept = [p for p in (state / "j").iterdir() if ".found-" in p.name]
    assert [p.read_bytes() for p in kept] == [b"A"]
    assert pending(state / "j") == []


async def test_recovery_leaves_a_new_file_someone_changed_since(ws, state, fs):
    """A file the patch created is written by atomic replace, never torn: a third content
    there is someone's, and stays."""
    await _half_applied(ws, state, fs, 4)
    (ws / "new/deep/c.txt").write_text("edited by hand\n")
    (ws / "a.txt").write_text("a\n")  # force a rollback
    outcome = await recover(fs, state / "j", MAX)
    assert outcome.skipped_files == [str(ws / "new/deep/c.txt")]
    assert (ws / "new/deep/c.txt").read_text() == "edited by hand\n"
    assert (ws / "b.txt").read_text() == "b\n" and (ws / "d.txt").read_text() == "d\n"


async def test_commit_rewrites_existing_files_on_their_inode(ws, state, fs):
    _old_tree(ws)
    inode = (ws / "a.txt").stat().st_ino
    os.link(ws / "d.txt", ws / "d-link.txt")  # another hard link: replaced, never written through
    changes, dirs = _changes(ws)
    await settle(fs, await commit(fs, stage(Journal(state / "j"), changes, dirs), MAX))
    assert (ws / "a.txt").stat().st_ino == inode and (ws / "a.txt").read_text() == "A\n"
    assert (ws / "d.txt").read_text() == "D\n" and (ws / "d-link.txt").read_text() == "d\n"


async def test_a_journal_whose_writer_is_alive_is_not_touched(ws, state, fs):
    journal = await _half_applied(ws, state, fs, 2)
    fd = os.open(journal.path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: conflicts like another process
        outcome = await recover(fs, state / "j", MAX)
        assert outcome.busy == [str(journal.path)] and not outcome.rolled_back
    finally:
        os.close(fd)


@pytest.mark.in_process  # its FileSystem is a test-only plugin the worker cannot load
async def test_server_start_rolls_back_an_interrupted_commit(ws, state, test_plugins, mode):
    from codespace.workspace import PATCH_JOURNAL_DIR as JOURNAL_DIR
    from codespace_patch_testfs import TestFileSystem

    _old_tree(ws)
    old = snapshot(ws)
    fs = TestFileSystem(str(ws))
    changes, dirs = _changes(ws)
    journal = Journal.write(state / JOURNAL_DIR, record_for(changes, dirs))
    await fs.delete_file(changes[1].path)
    await fs.write_bytes(changes[0].path, changes[0].new)
    journal.keep()
    assert snapshot(ws) != old
    async with connect(build_app(ws, state_dir=state, plugins=("patch", "patch_testfs")), mode=mode) as client:
        assert snapshot(ws) == old  # before the first call is served
        assert pending(state / JOURNAL_DIR) == []
        await call_ok(client, "apply_patch", {"patch": patch_of("*** Update File: a.txt", "-a", "+a2")})
    assert (ws / "a.txt").read_text() == "a2\n"


# -- kill -9 with real processes ---------------------------------------------------------


FILES = 300


def _many(ws: Path) -> tuple[dict[str, str], dict[str, str], str]:
    """Every third file shrinks: rewritten in place, it is torn between the write and the
    truncation, which is what the journal must repair."""
    body = "".join(f"line {i} of a file that is long enough to take a moment to write\n" for i in range(120))
    old = {f"pkg{i % 10}/m{i}.py": f"# module {i}\n{body}" for i in range(FILES)}
    # One big file first: a kill lands in its write (many system calls) more often than not.
    big = "".join(f"row {i:08d} of a big data file\n" for i in range(600_000))
    old = {"data/big.txt": "# header\n" + big, **old}
    new, sections = {"data/big.txt": big}, ["*** Update File: data/big.txt", "@@", "-# header", " row 00000000 of a big data file"]
    for i, path in enumerate(list(old)[1:]):
        if i % 3:
            new[path] = old[path].replace(f"# module {i}\n", f"# module {i} (patched)\n")
            sections += [f"*** Update File: {path}", "@@", f"-# module {i}", f"+# module {i} (patched)"]
        else:
            new[path] = old[path].replace(f"# module {i}\n", "")
            sections += [f"*** Update File: {path}", "@@", f"-# module {i}", " line 0 of a file that is long enough "
                         "to take a moment to write"]
    sections += ["*** Add File: added/new.txt", "+new", "*** Delete File: pkg0/m0.py"]
    new["added/new.txt"] = "new\n"
    del new["pkg0/m0.py"]
    return old, new, patch_of(*sections)


def _state_of(ws: Path, old: dict[str, str], new: dict[str, str]) -> str:
    tree = {os.path.relpath(os.path.join(d, f), ws): open(os.path.join(d, f)).read()
            for d, _, files in os.walk(ws) for f in files}
    if tree == old and not (ws / "added").exists():
        return "old"
    if tree == new:
        return "new"
    odd = sorted(p for p in set(tree) | set(old) | set(new) if tree.get(p) not in (old.get(p), new.get(p)))
    return "mixed" if not odd else f"mixed, and neither old nor new: {odd[:5]}"


def _reset(ws: Path, old: dict[str, str]) -> None:
    for path in list(ws.iterdir()):
        subprocess.run(["rm", "-rf", str(path)], check=True)
    write(ws, old)


@pytest.mark.parametrize("backend", ["test", pytest.param("real", marks=pytest.mark.skipif(
    not real_fs_installed(), reason="codespace-fs is not installed in this venv"))])
async def test_kill_9_during_commit_then_restart_gives_all_old_or_all_new(ws, state, tmp_path, test_plugins, backend):
    from codespace.workspace import PATCH_JOURNAL_DIR as JOURNAL_DIR

    old, new, patch = _many(ws)
    journal_dir = state / JOURNAL_DIR
    env = helper_env(str(state), str(tmp_path), backend, mode="atomic")
    argv = helper_argv(backend)
    rng = random.Random(4)
    seen: dict[str, int] = {"old": 0, "new": 0, "mixed": 0, "torn": 0}

    def start() -> subprocess.Popen:
        _reset(ws, old)
        proc = subprocess.Popen([*argv, patch], cwd=ws, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        # The journal file exists: staging the old contents, then the writes, come next.
        while not any(p.suffix == ".slot" for p in pending(journal_dir)) and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.0005)
        return proc

    # How long staging and the writes take on this machine now (a loaded CI machine stages
    # the big file's old content for far longer than an idle one): the kills spread over it.
    proc = start()
    began = time.monotonic()
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    window = max(0.03, time.monotonic() - began)
    async with connect(build_app(ws, state_dir=state, plugins=("patch", "fs") if backend == "real" else ("patch", "patch_testfs"))):
        pass  # the start-up hook voids the finished journal, as after every run below
    for _ in range(12):
        proc = start()
        time.sleep(rng.uniform(0, window))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        found = _state_of(ws, old, new)
        seen["torn" if found.startswith("mixed, and neither") else found] += 1  # torn: in place, mid-file
        # Restart: the server's start-up hook recovers before serving anything.
        plugins = ("patch", "fs") if backend == "real" else ("patch", "patch_testfs")
        async with connect(build_app(ws, state_dir=state, plugins=plugins)):
            after = _state_of(ws, old, new)
            assert after in ("old", "new"), (after, seen)
        assert pending(journal_dir) == []
    assert seen["mixed"] + seen["torn"] >= 1, f"no kill landed mid-commit, the test proved nothing: {seen}"


async def test_kill_9_of_the_server_during_apply_patch(ws, state, tmp_path):
    """The real server over stdio, killed while it commits; the next server start
    restores the tree and reports the operation interrupted."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from codespace.workspace import PATCH_JOURNAL_DIR as JOURNAL_DIR

    old, new, patch = _many(ws)
    journal_dir = state / JOURNAL_DIR
    env = {**os.environ, "PYTHONPATH": str(TEST_PLUGINS), "CODESPACE_PLUGINS_ALLOW": "patch,patch_testfs"}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "codespace", "serve", "--workspace", str(ws), "--state-dir", str(state)],
        env=env,
    )
    outcomes = []
    for attempt in range(3):
        _reset(ws, old)
        async with Client(params) as client:
            pid = server_pids(state)[0]
            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    try:
                        await client.call_tool("apply_patch", {"patch": patch, "operation_id": f"crash-{attempt}"})
                    except Exception:  # noqa: BLE001 - the connection dies with the server
                        pass

                tg.start_soon(call)
                with anyio.fail_after(60):
                    while not pending(journal_dir):
                        await anyio.sleep(0.0005)
                await anyio.sleep(0.005 * attempt)
                os.kill(pid, signal.SIGKILL)
                tg.cancel_scope.cancel()
        outcomes.append(_state_of(ws, old, new))
        async with Client(params) as client:
            assert _state_of(ws, old, new) in ("old", "new")
            record = await call_ok(client, "get_operation", {"operation_id": f"crash-{attempt}"})
            assert record["status"] == "interrupted"
        assert pending(journal_dir) == []
    assert "old" in outcomes or "mixed" in outcomes  # at least one kill landed before the commit finished


async def test_overlay_journals_the_original_of_a_file_deleted_then_re_added(ws, fs):
    from codespace.policy import normalize
    from codespace_patch import parse_patch
    from codespace_patch.sections import run_sections
    from codespace_patch.stores import OverlayStore

    write(ws, {"a.txt": "old\n", "m.txt": "m\n", "gone": "file that becomes a directory\n"})
    store = OverlayStore(fs, MAX, str(ws))
    await run_sections(parse_patch(patch_of(
        "*** Delete File: a.txt", "*** Add File: a.txt", "+new",
        "*** Update File: m.txt", "*** Move to: n.txt", "-m", "+n", "*** Add File: m.txt", "+again",
        "*** Delete File: gone", "*** Add File: gone/inside.txt", "+x",
    )), lambda p: normalize(p, str(ws)), store)
    changes = {c.path: (c.old, c.new) for c in store.changes()}
    assert changes == {
        str(ws / "a.txt"): (b"old\n", b"new\n"),
        str(ws / "m.txt"): (b"m\n", b"again\n"),
        str(ws / "n.txt"): (None, b"n\n"),
        str(ws / "gone"): (b"file that becomes a directory\n", None),
        str(ws / "gone/inside.txt"): (None, b"x\n"),
    }
    assert store.new_dirs == [str(ws / "gone")]
    await settle(fs, await commit(fs, stage(Journal(ws.parent / "j"), store.changes(), store.new_dirs), MAX))
    assert (ws / "a.txt").read_text() == "new\n" and (ws / "m.txt").read_text() == "again\n"
    assert (ws / "gone/inside.txt").read_text() == "x\n" and (ws / "n.txt").read_text() == "n\n"


async def test_the_flush_follows_the_answer_and_the_next_apply_waits_for_it(ws, state, fs):
    """apply() answers once the files hold the new content; the flush and the journal's
    removal follow in the background, and the next apply waits for them, so two
    journals of one workspace never coexist (recovery would replay them out of order)."""
    from codespace.contract import PatchRequest
    from codespace_patch.backend import PatchBackend

    (ws / "a.txt").write_text("one\n")
    backend = PatchBackend(MAX)
    journal_dir = state / "j"

    def request(old: str, new: str) -> PatchRequest:
        patch = f"*** Begin Patch\n*** Update File: a.txt\n@@\n-{old}\n+{new}\n*** End Patch"
        return PatchRequest(patch=patch, mode="atomic", cwd=str(ws))

    seen: list[list] = []
    original = fs.sync

    async def watching_sync() -> None:
        seen.append(pending(journal_dir))  # the journal of the commit being flushed, and only it
        await original()

    fs.sync = watching_sync
    for old, new in [("one", "two"), ("two", "three"), ("three", "four")]:
        await backend.apply(request(old, new), fs, journal_dir)
        assert (ws / "a.txt").read_text() == f"{new}\n"
    await backend.settled()
    assert [len(journals) for journals in seen] == [1, 1, 1]
    assert len({journals[0] for journals in seen}) == 1  # one file, reused by every commit
    assert pending(journal_dir) == []


async def test_a_journal_that_cannot_be_written_fails_the_call_with_nothing_changed(ws, state, fs):
    from codespace.contract import PatchRequest, ToolError
    from codespace_patch.backend import PatchBackend

    (ws / "a.txt").write_text("one\n")
    state.mkdir(parents=True, exist_ok=True)
    blocked = state / "j"
    blocked.write_text("a file where the journal directory should be\n")
    patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+two\n*** End Patch"
    with pytest.raises(ToolError) as info:
        await PatchBackend(MAX).apply(PatchRequest(patch=patch, mode="atomic", cwd=str(ws)), fs, blocked)
    assert info.value.code == "patch_commit_failed"
    assert str(blocked) in info.value.message and "no file was changed" in info.value.message
    assert (ws / "a.txt").read_text() == "one\n"


async def test_the_journal_file_is_reused_and_a_cut_record_is_dropped(ws, state, fs):
    """One file serves every commit (its blocks allocated once); a record a crash cut
    short fails its CRC and is dropped without touching any file; a file grown for a
    big patch shrinks back once the commit is settled."""
    from codespace_patch import journal as journal_module

    _old_tree(ws)
    journal = Journal(state / "j")
    changes, dirs = _changes(ws)
    await settle(fs, await commit(fs, stage(journal, changes, dirs), MAX))
    first = journal.path
    big = [Change(str(ws / "big.txt"), b"x" * (20 << 20), b"y\n")]
    (ws / "big.txt").write_bytes(b"x" * (20 << 20))
    await settle(fs, await commit(fs, stage(journal, big, []), MAX))
    assert journal.path == first and (ws / "big.txt").read_bytes() == b"y\n"
    assert first.stat().st_size == journal_module._MIN_CAPACITY and journal.capacity == journal_module._MIN_CAPACITY
    # A record cut short: its head says more bytes (or other bytes) than are there.
    (ws / "a.txt").write_text("A\n")
    journal.arm(record_for([Change(str(ws / "a.txt"), b"A\n", b"again\n")], []))
    journal.sealed_blocking()
    with open(first, "r+b") as f:  # the old content's last bytes never reached the disk
        _, size, _ = journal_module._SLOT_HEAD.unpack(f.read(journal_module._SLOT_HEAD.size))
        f.seek(journal_module._SLOT_HEAD.size + size - 2)
        f.write(b"\0\0")
    journal.keep()  # the writer dies
    outcome = await recover(fs, state / "j", MAX)
    assert not outcome.rolled_back and not outcome.completed and not outcome.failed
    assert (ws / "a.txt").read_text() == "A\n" and pending(state / "j") == [] and not first.exists()
