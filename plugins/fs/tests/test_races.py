"""A parent directory swapped for a symbolic link while we use it, thousands of times.

A separate process (real parallelism, not the GIL's turns) keeps renaming a
directory inside the workspace away, putting a link to the outside in its place,
and restoring it. Meanwhile writes, moves and removals aim below that directory.
Each may succeed (it then landed inside the workspace, in the directory as it was
when resolved) or be refused; nothing outside may ever change. The counts of both
outcomes are checked, so a run in which the race never happened fails too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from codespace.contract import FsError, MoveRequest, ReadFileRequest, RemoveRequest, WriteFileRequest
from codespace.testing import connect

pytestmark = pytest.mark.anyio

ITERATIONS = 3000
MCP_ITERATIONS = 600

SWAPPER = r"""
import os, signal, sys, time
directory, target = sys.argv[1], sys.argv[2]
real = directory + ".real"
deadline = time.monotonic() + float(sys.argv[3])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
swaps = 0
while time.monotonic() < deadline and not stop:
    try:
        os.rename(directory, real)
    except OSError:
        continue
    try:
        os.symlink(target, directory)
        os.unlink(directory)
    except OSError:
        pass
    os.rename(real, directory)
    swaps += 1
print(swaps)
"""

INNER_SWAPPER = r"""
import os, signal, sys, time
tree, outside = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + float(sys.argv[3])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
swaps = 0
while time.monotonic() < deadline and not stop:
    for i in range(20):
        sub = os.path.join(tree, f"s{i}")
        try:
            os.rename(sub, sub + ".real")
        except OSError:
            continue
        try:
            os.symlink(os.path.join(outside, f"s{i}"), sub)
            time.sleep(0)
            os.unlink(sub)
        except OSError:
            pass
        try:
            os.rename(sub + ".real", sub)
        except OSError:
            pass
        swaps += 1
print(swaps)
"""


class Swapper:
    def __init__(self, script: str, *args: str, seconds: float = 120.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", script, *args, str(seconds)], stdout=subprocess.PIPE, text=True)
        time.sleep(0.1)  # let it start swapping

    def stop(self) -> int:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=30)
        return int(out.strip() or 0)


@pytest.fixture
def arena(tmp_path: Path, ws: Path, outside: Path):
    (ws / "dir").mkdir()
    # Names an escaped operation would create or destroy outside, to make it visible.
    for i in range(3 * ITERATIONS):
        (outside / f"r{i}").write_text("outside original")
    return ws, outside


def _names_inside(ws: Path, prefix: str) -> set[str]:
    found = set()
    for d in (ws / "dir", ws / "dir.real"):
        if d.is_dir() and not d.is_symlink():
            found |= {n for n in os.listdir(d) if n.startswith(prefix)}
    return found


@pytest.mark.parametrize("target", ["absolute", "relative"])
async def test_write_move_remove_under_a_swapped_parent(arena, backend_factory, digest, resolver, target):
    ws, outside = arena
    backend = backend_factory()
    link = str(outside) if target == "absolute" else "../outside"
    before = digest(outside)
    for i in range(3 * ITERATIONS):
        (ws / "dir" / f"r{i}").write_text("inside")
        (ws / f"src{i}").write_text("to move")
    outcomes = {"write": [0, 0], "move": [0, 0], "remove": [0, 0]}  # [succeeded, refused]
    codes: Counter[str] = Counter()
    swapper = Swapper(SWAPPER, str(ws / "dir"), link)
    i = -1
    try:
        # ITERATIONS rounds, and more (up to 3x) until every operation met both outcomes and
        # some call met the link itself (a loaded machine can give only missing directories).
        while i + 1 < ITERATIONS or (not (all(ok and no for ok, no in outcomes.values()) and codes["refused"])
                                     and i + 1 < 3 * ITERATIONS):
            i += 1
            for op, method, request in (
                ("write", backend.write_file, WriteFileRequest(path=f"{ws}/dir/w{i}", content="x")),
                ("move", backend.move, MoveRequest(source=f"{ws}/src{i}", destination=f"{ws}/dir/m{i}")),
                ("remove", backend.remove, RemoveRequest(path=f"{ws}/dir/r{i}")),
            ):
                try:
                    await method(request)
                    outcomes[op][0] += 1
                except FsError as exc:
                    assert exc.code in ("refused", "not_found", "symlink_refused", "changed"), exc.message
                    outcomes[op][1] += 1
                    codes[exc.code] += 1
    finally:
        swaps = swapper.stop()
    # The directory may end up renamed: the swapper restores it.
    assert digest(outside) == before, "an operation reached the outside"
    assert not [n for n in os.listdir(outside) if n[0] in "wm"], "a write or move landed outside"
    assert len(_names_inside(ws, "w")) == outcomes["write"][0]
    assert len(_names_inside(ws, "m")) == outcomes["move"][0]
    total = sum(ok + no for ok, no in outcomes.values())
    assert total == 3 * (i + 1) and i + 1 >= ITERATIONS and swaps > 100
    print(f"backend race {resolver}/{target}: {i + 1} rounds, [ok, refused] {outcomes}, {dict(codes)}, {swaps} swaps")
    assert codes["refused"] > 0  # some calls met the link itself, not just a missing directory
    # The race really happened, both ways, for every operation.
    for op, (ok, no) in outcomes.items():
        assert ok > 0 and no > 0, (op, outcomes, swaps)


async def test_reads_never_follow_a_swapped_in_link_out(ws, outside, backend_factory, resolver):
    """With the default policy the outside is readable: only the confinement (not the
    policy re-check) can stop a read through a link that leaves the root."""
    backend = backend_factory()
    (ws / "dir").mkdir()
    (ws / "dir" / "same.txt").write_text("inside")
    (outside / "same.txt").write_text("OUTSIDE")
    read = refused = n = 0
    codes: Counter[str] = Counter()
    swapper = Swapper(SWAPPER, str(ws / "dir"), "../outside")
    try:
        # openat2 leaves the race a single syscall wide: go on past ITERATIONS until
        # both outcomes were seen (or give up, and fail, at 10x).
        while n < ITERATIONS or (not (read and codes["refused"]) and n < 10 * ITERATIONS):
            n += 1
            try:
                out = await backend.read_file(ReadFileRequest(path=f"{ws}/dir/same.txt"))
            except FsError as exc:
                assert exc.code in ("refused", "not_found", "changed"), exc.message
                refused += 1
                codes[exc.code] += 1
                continue
            assert out.content == "inside", "a read went through the link to the outside"
            read += 1
    finally:
        swaps = swapper.stop()
    print(f"read race {resolver}: {n} reads, {read} inside, {refused} refused {dict(codes)}, {swaps} swaps")
    assert read > 0 and codes["refused"] > 0 and swaps > 100


async def test_recursive_remove_cannot_be_steered_outside(tmp_path, ws, outside, backend_factory, digest, resolver):
    backend = backend_factory()
    for i in range(20):
        (outside / f"s{i}").mkdir()
        for j in range(5):
            (outside / f"s{i}" / f"f{j}").write_text("outside original")
    before = digest(outside)
    rounds, removed = 40, 0
    planted = 20 * (2 + 2 * 5)  # per round: s{i}, s{i}/deeper and ten files each
    for _ in range(rounds):
        tree = ws / "tree"
        for i in range(20):
            (tree / f"s{i}" / "deeper").mkdir(parents=True, exist_ok=True)
            for j in range(5):
                (tree / f"s{i}" / f"f{j}").write_text("inside")
                (tree / f"s{i}" / "deeper" / f"f{j}").write_text("inside")
        swapper = Swapper(INNER_SWAPPER, str(tree), str(outside))
        try:
            await backend.remove(RemoveRequest(path=str(tree), recursive=True))
        except FsError as exc:
            assert exc.code in ("not_empty", "not_found", "changed"), exc.message
        finally:
            swapper.stop()
        if tree.exists():
            # A refused round still removed what it reached before the swap: count what is gone
            # (the swapper's links are not entries of the tree).
            left = sum(1 for p in tree.rglob("*") if not p.is_symlink())
            removed += max(0, planted - left)
            import shutil
            shutil.rmtree(tree)
        else:
            removed += planted
        assert digest(outside) == before, "the recursive removal reached the outside"
    print(f"rmtree race {resolver}: {rounds} rounds, {removed} entries removed")
    assert removed > rounds * 10  # the removal really ran during the swaps, not just failed at once


async def test_race_through_mcp_sessions(arena, make_app, digest, mode, resolver):
    ws, outside = arena
    before = digest(outside)
    ok = refused = 0
    swapper = Swapper(SWAPPER, str(ws / "dir"), "../outside")
    try:
        async with connect(make_app(), mode=mode) as client:
            i = -1
            while i + 1 < MCP_ITERATIONS or (not (ok and refused) and i + 1 < 3 * MCP_ITERATIONS):
                i += 1
                result = await client.call_tool("write_file", {"path": f"dir/w{i}", "content": "x"})
                if result.is_error:
                    text = result.content[0].text
                    assert "refused" in text or "No such file" in text or "kept changing" in text, text
                    refused += 1
                else:
                    ok += 1
    finally:
        swaps = swapper.stop()
    assert digest(outside) == before
    assert not [n for n in os.listdir(outside) if n.startswith("w")]
    print(f"mcp race {mode}/{resolver}: {ok} written inside, {refused} refused, {swaps} swaps")
    assert len(_names_inside(ws, "w")) == ok and ok + refused == i + 1 >= MCP_ITERATIONS
    assert ok > 0 and refused > 0 and swaps > 100
