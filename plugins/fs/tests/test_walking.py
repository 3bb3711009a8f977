"""walk through real MCP sessions: limits and truncation, order, globs, .gitignore,
hidden entries, directory links, per-entry errors, cancellation."""

from __future__ import annotations

import os
import threading
import time

import anyio
import pytest

from codespace.contract import WalkRequest
from codespace.testing import call_error, call_ok, connect

pytestmark = pytest.mark.anyio


def make_tree(root, spec: dict) -> None:
    for name, value in spec.items():
        path = root / name
        if isinstance(value, dict):
            path.mkdir(parents=True, exist_ok=True)
            make_tree(path, value)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value)


TREE = {
    "b.txt": "b", "a.py": "a", ".hidden": "h",
    "src": {"main.py": "m", "util.py": "u", "notes.md": "n", "pkg": {"deep.py": "d", "data.json": "{}"}},
    ".cache": {"junk.bin": "j"},
    "docs": {"index.md": "i"},
}


def paths(result) -> list[str]:
    return [e["path"] for e in result["entries"]]


async def test_breadth_first_sorted_and_deterministic(make_app, ws, mode):
    make_tree(ws, TREE)
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "walk", {})
        again = await call_ok(client, "walk", {"path": "."})
    assert paths(out) == [
        ".cache", ".hidden", "a.py", "b.txt", "docs", "src",
        ".cache/junk.bin", "docs/index.md",
        "src/main.py", "src/notes.md", "src/pkg", "src/util.py",
        "src/pkg/data.json", "src/pkg/deep.py",
    ]
    assert out == again and not out["truncated"] and out["dirs_visited"] == 5
    kinds = {e["path"]: (e["kind"], e["depth"], e.get("size")) for e in out["entries"]}
    assert kinds["src"] == ("directory", 1, None) and kinds["src/pkg/deep.py"] == ("file", 3, None)


async def test_sizes_on_request(make_app, ws, mode):
    make_tree(ws, {"x.txt": "12345", "d": {"y.txt": "1"}})
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "walk", {"sizes": True})
    assert {e["path"]: e.get("size") for e in out["entries"]} == {"x.txt": 5, "d": None, "d/y.txt": 1}


@pytest.mark.parametrize(
    ("args", "reason", "count"),
    [
        ({"max_depth": 1}, "max_depth (1)", 4),
        ({"max_entries": 4}, "max_entries (4)", 4),
        ({"max_dirs": 2}, "max_dirs (2 directories read)", 47),
        ({"max_bytes": 1024}, "max_bytes (1024 bytes of response)", None),
    ],
)
async def test_each_limit_truncates(make_app, ws, mode, args, reason, count):
    make_tree(ws, TREE)
    for i in range(40):
        (ws / f"long-file-name-number-{i:03d}.txt").write_text("")
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "walk", {"path": "src" if "max_depth" in args else ".", **args})
    assert out["truncated"] and out["truncated_reason"].startswith(reason)
    if count is not None:
        assert len(out["entries"]) == count
    if "max_bytes" in args:
        import json
        assert len(json.dumps(out["entries"])) <= 1024


async def test_requests_are_clamped_to_policy_limits(make_app, ws, mode):
    make_tree(ws, {f"f{i}": "" for i in range(30)})
    policy = "[limits]\nwalk_max_entries = 10\nwalk_max_depth = 3\n"
    async with connect(make_app(policy), mode=mode) as client:
        out = await call_ok(client, "walk", {"max_entries": 1000})
        assert len(out["entries"]) == 10 and out["truncated_reason"] == "max_entries (10)"
        listing = await call_ok(client, "list_dir", {"max_entries": 1000})
        assert len(listing["entries"]) == 10 and listing["truncated"]


async def test_globs_include_and_exclude(make_app, ws, mode):
    make_tree(ws, TREE)
    async with connect(make_app(), mode=mode) as client:
        py = await call_ok(client, "walk", {"include": ["*.py"]})
        assert paths(py) == ["a.py", "src/main.py", "src/util.py", "src/pkg/deep.py"]
        anchored = await call_ok(client, "walk", {"include": ["/src/*.py"]})
        assert paths(anchored) == ["src/main.py", "src/util.py"]
        pruned = await call_ok(client, "walk", {"exclude": ["src/", "*.md"]})
        assert paths(pruned) == [".cache", ".hidden", "a.py", "b.txt", "docs", ".cache/junk.bin"]
        both = await call_ok(client, "walk", {"include": ["**/pkg/**"], "exclude": ["*.json"]})
        assert paths(both) == ["src/pkg", "src/pkg/deep.py"]  # pathspec: "pkg/**" matches "pkg/" too


async def test_gitignore_nested_negation_and_info_exclude(make_app, ws, mode):
    make_tree(ws, {
        ".git": {"HEAD": "ref", "info": {"exclude": "*.log\n"}},
        ".gitignore": "build/\n*.tmp\n!keep.tmp\n",
        "app.log": "", "a.tmp": "", "keep.tmp": "", "main.c": "",
        "build": {"out.o": ""},
        "lib": {".gitignore": "generated.c\n!*.tmp\n", "generated.c": "", "x.tmp": "", "lib.c": ""},
    })
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "walk", {"gitignore": True})
        plain = await call_ok(client, "walk", {})
        sub = await call_ok(client, "walk", {"path": "lib", "gitignore": True})
    assert paths(out) == [".gitignore", "keep.tmp", "lib", "main.c", "lib/.gitignore", "lib/lib.c", "lib/x.tmp"]
    assert "build/out.o" in paths(plain) and ".git/HEAD" in paths(plain)
    # Walking a subdirectory still applies the ignore files above it, up to the repository top.
    assert paths(sub) == [".gitignore", "lib.c", "x.tmp"]


async def test_ignore_files_past_the_walks_pattern_budget_are_reported_not_compiled(make_app, ws, mode):
    """Found by testing: a 1 MiB .gitignore of 48,678 patterns, which any command can write,
    took one walk 24 s of the server's CPU (pathspec compiles each pattern). A walk compiles at
    most 10,000 now; an ignore file past that is not applied, and the walk's errors say so."""
    from codespace_fs.ignore import MAX_WALK_PATTERNS

    many = "".join(f"dir{i}/**/*.x{i}\n" for i in range(MAX_WALK_PATTERNS + 1))
    half = MAX_WALK_PATTERNS // 2
    make_tree(ws, {
        ".gitignore": "*.tmp\n# a comment is not a pattern\n",
        "a.tmp": "", "main.c": "",
        "big": {".gitignore": many, "x.tmp": "", "y.c": ""},
        "half": {".gitignore": "".join(f"h{i}.log\n" for i in range(half - 1)), "h1.log": "", "k.c": ""},
        "next": {".gitignore": "*.c\n" + "".join(f"n{i}.log\n" for i in range(half)), "n.c": "", "n.txt": ""},
    })
    async with connect(make_app(), mode=mode) as client:
        start = time.monotonic()
        out = await call_ok(client, "walk", {"gitignore": True})
        elapsed = time.monotonic() - start
    assert elapsed < 10, elapsed
    # Root's file (1 pattern) and half's fit in the budget; big's does not, nor next's after them.
    assert paths(out) == [".gitignore", "big", "half", "main.c", "next", "big/.gitignore", "big/y.c",
                          "half/.gitignore", "half/k.c", "next/.gitignore", "next/n.c", "next/n.txt"]
    errors = {e["path"]: e["message"] for e in out["errors"]}
    assert set(errors) == {"big/.gitignore", "next/.gitignore"}, errors
    assert f"it holds {MAX_WALK_PATTERNS + 1} patterns, and one walk compiles at most {MAX_WALK_PATTERNS}" \
        in errors["big/.gitignore"] and "gitignore=false" in errors["big/.gitignore"]
    assert f"it holds {half + 1} patterns" in errors["next/.gitignore"]
    assert f"({MAX_WALK_PATTERNS - half} were left)" in errors["next/.gitignore"]


async def test_a_walk_slowed_by_an_agent_written_ignore_file_stops_at_its_time_limit(make_app, ws, mode):
    """Found by testing: within the pattern budget, each entry below an ignore file is still
    matched against every one of its patterns (2-4 ms an entry for 1,999 of them), so 20,000
    files below one took a walk 40 s or more of the server's CPU. A walk stops at
    limits.walk_max_ms, within a directory too, and answers what it found, truncated, saying
    what to do."""
    from codespace_fs.ignore import MAX_WALK_PATTERNS

    (ws / ".gitignore").write_text("".join(f"dir{i}/**/*.x{i}\n" for i in range(MAX_WALK_PATTERNS - 1)))
    (ws / "a").mkdir()
    for i in range(5000):  # 10-20 s of matching unbounded
        (ws / "a" / f"f{i:04}.c").touch()
    async with connect(make_app("[limits]\nwalk_max_ms = 3000\n"), mode=mode) as client:
        start = time.monotonic()
        out = await call_ok(client, "walk", {"gitignore": True})
        elapsed = time.monotonic() - start
        # Still serving, and the same walk without the ignore file's patterns is whole.
        plain = await call_ok(client, "walk", {"gitignore": False})
    assert out["truncated"] is True
    assert out["truncated_reason"].startswith("walk_max_ms (3000 ms of walking)")
    assert "gitignore=false" in out["truncated_reason"]
    listed = paths(out)
    assert listed[:2] == [".gitignore", "a"], listed[:3]  # breadth first: the top is whole
    assert len(listed) < 2 + 5000, len(listed)  # cut within the directory, not after it
    assert elapsed < 7, elapsed
    assert plain["truncated"] is False and len(plain["entries"]) == 5002
    assert "truncated_reason" not in plain or plain["truncated_reason"] is None


async def test_a_walk_with_the_costliest_globs_allowed_stops_at_its_time_limit(make_app, ws, mode):
    """Found by testing from outside: 256 include and 256 exclude globs, each as long and with as
    many '*' as allowed, cost 0.1-0.2 s an entry over long paths; the clock was read every 64
    entries, so a walk with walk_max_ms 10 s ran 16-22 s. It is read at every matched entry, and
    it starts before the globs are compiled (1.3 s for 256 of these here, twice that when loaded)."""
    from codespace.contract.globs import MAX_GLOB_CHARS, MAX_GLOB_STARS, MAX_GLOBS

    head = "*a" * MAX_GLOB_STARS
    globs = [(head + "b" * MAX_GLOB_CHARS)[:MAX_GLOB_CHARS - len(str(i))] + str(i) for i in range(MAX_GLOBS)]
    deep = ws / ("d" * 100) / ("e" * 100)
    deep.mkdir(parents=True)
    for i in range(200):  # 20-40 s of matching unbounded
        (deep / f"{'f' * 80}{i}.txt").touch()
    async with connect(make_app("[limits]\nwalk_max_ms = 1000\n"), mode=mode) as client:
        start = time.monotonic()
        out = await call_ok(client, "walk", {"include": globs, "exclude": globs})
        elapsed = time.monotonic() - start
    assert out["truncated_reason"].startswith("walk_max_ms (1000 ms of walking)"), out["truncated_reason"]
    assert elapsed < 8, elapsed  # 1 s, compiling twice 256 globs, an entry's matching; 13 s and more before


async def test_a_walk_cut_by_its_time_limit_follows_no_more_links(make_app, ws, mode, outside):
    """Found in review: a directory cut short by walk_max_ms still had its links to directories
    resolved and queued (up to 256 opens, each a confinement check) after the time was up.
    Links listed before the cut are shown, and nothing more is done with them."""
    from codespace_fs.ignore import MAX_WALK_PATTERNS

    (ws / ".gitignore").write_text("".join(f"dir{i}/**/*.x{i}\n" for i in range(MAX_WALK_PATTERNS - 1)))
    for i in range(20):  # first in name order, and in the first directory: listed however slow the machine
        (ws / f"0out{i:02}").symlink_to(outside)
    for i in range(3000):  # 6-12 s of matching unbounded
        (ws / f"f{i:04}.c").touch()
    async with connect(make_app("[limits]\nwalk_max_ms = 2000\n"), mode=mode) as client:
        out = await call_ok(client, "walk", {"gitignore": True, "follow_dir_links": True})
    assert out["truncated_reason"].startswith("walk_max_ms (2000 ms of walking)"), out["truncated_reason"]
    kinds = {e["path"]: e["kind"] for e in out["entries"]}
    assert all(kinds[f"0out{i:02}"] == "symlink" for i in range(20))
    assert len(kinds) < 1 + 20 + 3000, len(kinds)  # cut within the directory
    assert [e for e in out["errors"] if e["path"].startswith("0out")] == []  # not one link resolved


async def test_a_walk_through_many_slow_links_stops_at_its_time_limit(make_app, ws, mode, resolver):
    """Found by testing from outside: 300 links to a 40-link chain of 4,000-byte "d/../" texts took
    a walk with follow_dir_links 2 minutes, past walk_max_ms, since following links read no clock.
    Each resolution now stops at 4,096 steps (ELOOP), and the walk at its limit."""
    (ws / "d").mkdir()
    for i in range(40):
        (ws / f"c{i}").symlink_to("d/../" * 790 + f"c{i + 1}")
    (ws / "c40").symlink_to("d")
    (ws / "many").mkdir()
    for i in range(2000):  # 2-4 ms each (it was 400 at 1500 ms, till a faster machine walked them all in time)
        (ws / "many" / f"m{i:04}").symlink_to("../c0")
    async with connect(make_app("[limits]\nwalk_max_ms = 1000\n"), mode=mode) as client:
        started = time.monotonic()
        out = await call_ok(client, "walk", {"path": "many", "follow_dir_links": True})
        elapsed = time.monotonic() - started
    assert out.get("truncated_reason", "").startswith("walk_max_ms (1000 ms of walking)"), out.get("truncated_reason")
    assert elapsed < 6, elapsed
    messages = {e["message"] for e in out["errors"]}
    assert messages and all("4096 steps to resolve" in m for m in messages), messages


async def test_hidden_entries_and_pruning(make_app, ws, mode):
    make_tree(ws, TREE)
    async with connect(make_app(), mode=mode) as client:
        no_hidden = await call_ok(client, "walk", {"include_hidden": False})
        pruned = await call_ok(client, "walk", {"prune_hidden_dirs": True})
        listing = await call_ok(client, "list_dir", {"include_hidden": False})
    assert not [p for p in paths(no_hidden) if "/." in "/" + p]
    assert ".cache" in paths(pruned) and ".hidden" in paths(pruned) and ".cache/junk.bin" not in paths(pruned)
    assert [e["name"] for e in listing["entries"]] == ["a.py", "b.txt", "docs", "src"]


async def test_directory_links_not_followed_unless_asked(make_app, ws, mode, resolver):
    make_tree(ws, {"real": {"inner.txt": "i"}})
    (ws / "alias").symlink_to("real")
    (ws / "real" / "loop").symlink_to("..")
    async with connect(make_app(), mode=mode) as client:
        plain = await call_ok(client, "walk", {})
        followed = await call_ok(client, "walk", {"follow_dir_links": True})
    assert paths(plain) == ["alias", "real", "real/inner.txt", "real/loop"]
    assert {e["path"]: e["kind"] for e in plain["entries"]}["alias"] == "symlink"
    assert "alias/inner.txt" in paths(followed)
    messages = {e["path"]: e["message"] for e in followed["errors"]}
    assert "already walked" in messages["real/loop"]  # the loop is detected, not walked forever


async def test_none_areas_are_listed_by_name_never_entered(make_app, ws, mode):
    make_tree(ws, {"secret": {"key.pem": "k"}, "open": {"a": "a"}})
    async with connect(make_app('[filesystem.paths]\n"secret" = "none"\n'), mode=mode) as client:
        out = await call_ok(client, "walk", {})
    assert "secret" in paths(out) and "secret/key.pem" not in paths(out)
    assert "'none'" in {e["path"]: e["message"] for e in out["errors"]}["secret"]


def test_walk_globs_and_ignore_files_of_many_stars_finish(ws, tmp_path):
    """pathspec's regex of ``********z`` backtracks: 19 s for one 60-character name, over 120 s
    with ten stars, the server stalled throughout (codespace.contract.globs bounds it). A real
    server, bounded by the subprocess's time-out, not timed."""
    import json
    import subprocess
    import sys

    (ws / ".gitignore").write_text("*a*a*a*a*a*a*a*q\n")
    for n in range(40):
        for end in ("", "z", "q"):
            (ws / f"{'a' * 60}{n:03}{end}").write_text("x")
    calls = [{"include": ["**********z"]}, {"exclude": ["*" * 30 + "z"]}, {"gitignore": True}]
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    lines += [{"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "walk", "arguments": args}}
              for n, args in enumerate(calls, 1)]
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "codespace"), "serve", "--workspace",
                           str(ws), "--state-dir", str(tmp_path / "state")], capture_output=True, timeout=60,
                          input=b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    results = {m["id"]: m["result"]["structuredContent"] for m in map(json.loads, done.stdout.splitlines())
               if m.get("id")}
    names = {n: sorted(e["path"] for e in r["entries"] if e["kind"] == "file") for n, r in results.items()}
    assert len(names[1]) == 40 and all(p.endswith("z") for p in names[1])
    assert len(names[2]) == 80 + 1 and not any(p.endswith("z") for p in names[2])  # and .gitignore
    assert len(names[3]) == 80 + 1 and not any(p.endswith("q") for p in names[3])


async def test_a_pattern_too_long_for_the_matcher_is_refused_by_name(make_app, ws, mode):
    """The bounded matcher is linear, in Python: a 4,000-character pattern took 2.5 s over one
    4 KB path. Such an include or exclude is refused, naming the field and the limit; the same
    line in an ignore file is skipped."""
    (ws / ".gitignore").write_text("*a" * 2000 + "\nskipme\n")
    (ws / "skipme").write_text("x")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "walk", {"include": ["*a" * 2000]})
        walked = await call_ok(client, "walk", {"gitignore": True})
    assert error["code"] == "invalid_pattern" and "include" in error["message"] and "1024" in error["message"]
    assert "skipme" not in {e["path"] for e in walked["entries"]}


async def test_walk_of_a_file_or_missing_path(make_app, ws, mode):
    (ws / "f").write_text("")
    async with connect(make_app(), mode=mode) as client:
        assert (await call_error(client, "walk", {"path": "f"}))["code"] == "not_a_directory"
        assert (await call_error(client, "walk", {"path": "missing"}))["code"] == "not_found"


async def test_directory_replaced_mid_walk_is_an_entry_error(backend_factory, ws, outside, resolver):
    backend = backend_factory()
    make_tree(ws, {f"d{i:02d}": {"f": ""} for i in range(30)})
    # Swap one directory for a link to the outside after the root was listed and
    # before the walk reads that directory.
    original = os.scandir
    calls = 0

    def racing_scandir(fd):
        nonlocal calls
        calls += 1
        if calls == 2:
            os.rename(ws / "d29", ws / "moved")
            os.symlink(outside, ws / "d29")
        return original(fd)

    os.scandir = racing_scandir
    try:
        out = await backend.walk(WalkRequest(path=str(ws)))
    finally:
        os.scandir = original
    listed = paths(out.model_dump())
    assert "d29/secret.txt" not in listed and not any("deep" in p for p in listed)
    assert "replaced" in {e.path: e.message for e in out.errors}["d29"]


async def test_cancelled_walk_stops_its_thread(backend_factory, ws):
    backend = backend_factory()
    make_tree(ws, {f"d{i}": {f"e{j}": {"f": ""} for j in range(20)} for i in range(20)})
    calls = 0
    original = os.scandir

    def slow_scandir(fd):
        nonlocal calls
        calls += 1
        time.sleep(0.05)
        return original(fd)

    os.scandir = slow_scandir
    try:
        with anyio.move_on_after(0.3):
            await backend.walk(WalkRequest(path=str(ws)))
        stopped_at = calls
        time.sleep(0.3)
        assert calls == stopped_at < 100  # the worker stopped when the call was cancelled
    finally:
        os.scandir = original
    assert threading.active_count() < 50


async def test_more_globs_than_the_limit_are_refused_by_name(make_app, ws, mode):
    """Found by testing from outside: 200,000 include globs kept a walk busy for a minute (the
    time bound is read once it walks). At most MAX_GLOBS per argument; that many still walk."""
    from codespace.contract import MAX_GLOBS

    (ws / "src").mkdir()
    (ws / "src" / "a.c7").write_text("")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "walk", {"path": "src", "include": ["*.c"] * (MAX_GLOBS + 1)})
        other = await call_error(client, "walk", {"path": "src", "exclude": ["*.c"] * (MAX_GLOBS + 1)})
        walked = await call_ok(client, "walk", {"path": "src", "include": [f"*.c{i}" for i in range(MAX_GLOBS)]})
    assert error["code"] == "invalid_arguments" and "'include'" in error["message"], error
    assert f"at most {MAX_GLOBS} items" in error["message"] and "'exclude'" in other["message"], other
    assert [e["path"] for e in walked["entries"]] == ["a.c7"]


async def test_invalid_glob_is_a_clear_error(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "walk", {"include": ["a\\"]})
    assert error["code"] == "invalid_pattern" and "include" in error["message"] and "'*.py'" in error["message"]


async def test_entries_below_an_undecodable_directory_name_are_shown_escaped(make_app, ws, mode):
    """The names inside are plain, so the walk lists that directory by its fast path; the
    directory's own name still has to reach the agent escaped, as everywhere else."""
    os.mkdir(os.path.join(os.fsencode(ws), b"bad\xffname"))
    with open(os.path.join(os.fsencode(ws), b"bad\xffname", b"inner.txt"), "w") as f:
        f.write("x")
    async with connect(make_app(), mode=mode) as client:
        result = await call_ok(client, "walk", {"path": "."})
    assert "bad\\xffname" in paths(result) and "bad\\xffname/inner.txt" in paths(result), paths(result)
    assert not [p for p in paths(result) if "\udcff" in p]


async def test_an_ignore_file_that_is_no_regular_file_is_named_in_the_errors(make_app, ws, mode):
    """Found by testing from outside: with gitignore=true a FIFO or a symbolic link as .gitignore
    (or .ignore) was left out without a word; a missing one says nothing, as before."""
    for name, make in (("fifo", lambda p: os.mkfifo(p)), ("link", lambda p: p.symlink_to("../real-ignore")),
                       ("dir", lambda p: p.mkdir())):
        (ws / name).mkdir()
        make(ws / name / ".gitignore")
        (ws / name / "kept.txt").write_text("")
    (ws / "real-ignore").write_text("kept.txt\n")
    (ws / "plain").mkdir()
    (ws / "plain" / "kept.txt").write_text("")
    async with connect(make_app(), mode=mode) as client:
        walked = await call_ok(client, "walk", {"gitignore": True})
    why = {e["path"]: e["message"] for e in walked["errors"]}
    assert "it is a fifo, not a regular file" in why["fifo/.gitignore"], why
    assert "it is a symbolic link" in why["link/.gitignore"] and "it is a directory" in why["dir/.gitignore"], why
    assert not [p for p in why if p.startswith("plain")], why
    listed = {e["path"] for e in walked["entries"]}
    assert {"fifo/kept.txt", "link/kept.txt", "plain/kept.txt"} <= listed, listed
