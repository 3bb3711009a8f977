"""list_dir, stat, move and remove through real MCP sessions, and names JSON cannot carry."""

from __future__ import annotations

import os

import pytest

from codespace.testing import call_error, call_ok, connect

pytestmark = pytest.mark.anyio


async def test_list_dir_sorted_with_kinds_sizes_and_link_text(make_app, ws, mode):
    (ws / "b.txt").write_text("12345")
    (ws / "a").mkdir()
    (ws / "link").symlink_to("b.txt")
    os.mkfifo(ws / "pipe")
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "list_dir", {"path": "."})
    entries = {e["name"]: e for e in out["entries"]}
    assert [e["name"] for e in out["entries"]] == ["a", "b.txt", "link", "pipe"]
    assert entries["b.txt"]["size"] == 5 and entries["a"]["kind"] == "directory"
    assert entries["link"]["kind"] == "symlink" and entries["link"]["target"] == "b.txt"
    assert entries["pipe"]["kind"] == "fifo" and not out["truncated"] and out["errors"] == []


async def test_stat_no_follow_by_default(make_app, ws, mode):
    (ws / "f.txt").write_text("abc")
    os.chmod(ws / "f.txt", 0o640)
    (ws / "l").symlink_to("f.txt")
    (ws / "dangling").symlink_to("nowhere")
    async with connect(make_app(), mode=mode) as client:
        f = await call_ok(client, "stat", {"path": "f.txt"})
        assert (f["kind"], f["size"], f["mode"], f["is_file"]) == ("file", 3, "0640", True)
        link = await call_ok(client, "stat", {"path": "l"})
        assert link["is_symlink"] and link["target"] == "f.txt" and not link["is_file"]
        target = await call_ok(client, "stat", {"path": "l", "follow_symlinks": True})
        assert target["is_file"] and target["size"] == 3
        assert (await call_ok(client, "stat", {"path": "missing"}))["exists"] is False
        assert (await call_ok(client, "stat", {"path": "dangling"}))["is_symlink"]
        assert (await call_ok(client, "stat", {"path": "dangling", "follow_symlinks": True}))["exists"] is False
        root = await call_ok(client, "stat", {"path": "."})
        assert root["is_directory"]


async def test_non_utf8_names_are_escaped_and_reported(make_app, ws, mode):
    os.mkdir(os.path.join(os.fsencode(ws), b"dir-\xff"))
    with open(os.path.join(os.fsencode(ws), b"dir-\xff", b"caf\xe9.txt"), "w") as f:
        f.write("x")
    (ws / "ok.txt").write_text("")
    async with connect(make_app(), mode=mode) as client:
        result = await client.call_tool("list_dir", {"path": "."})
        assert not result.is_error
        listing = result.structured_content
        text = result.content[0].text  # the text form: one line per entry, escaped names included
        assert text.splitlines()[1:3] == ["dir      dir-\\xff/", "file            0  ok.txt"], text
        walked = await call_ok(client, "walk", {})
        walk_text = (await client.call_tool("walk", {})).content[0].text
    walk_lines = walk_text.splitlines()
    assert walk_lines[1:4] == ["dir-\\xff/", "ok.txt", "dir-\\xff/caf\\xe9.txt"], walk_text
    assert sorted(line.split(": ")[1] for line in walk_lines[4:]) == ["dir-\\xff", "dir-\\xff/caf\\xe9.txt"], walk_text
    assert [e["name"] for e in listing["entries"]] == ["dir-\\xff", "ok.txt"]
    assert listing["errors"][0]["path"] == "dir-\\xff" and "not valid UTF-8" in listing["errors"][0]["message"]
    assert [e["path"] for e in walked["entries"]] == ["dir-\\xff", "ok.txt", "dir-\\xff/caf\\xe9.txt"]
    assert {e["path"] for e in walked["errors"]} == {"dir-\\xff", "dir-\\xff/caf\\xe9.txt"}


async def test_move_refuses_to_overwrite_unless_asked(make_app, ws, mode):
    (ws / "a.txt").write_text("A")
    (ws / "b.txt").write_text("B")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "move", {"source": "a.txt", "destination": "b.txt"})
        assert error["code"] == "exists" and "overwrite=true" in error["message"]
        assert (ws / "b.txt").read_text() == "B"
        out = await call_ok(client, "move", {"source": "a.txt", "destination": "b.txt", "overwrite": True})
        assert out["overwritten"] and (ws / "b.txt").read_text() == "A" and not (ws / "a.txt").exists()
        (ws / "sub").mkdir()
        out = await call_ok(client, "move", {"source": "b.txt", "destination": "sub/c.txt"})
        assert out["overwritten"] is False and (ws / "sub" / "c.txt").read_text() == "A"
        error = await call_error(client, "move", {"source": "missing", "destination": "x"})
        assert error["code"] == "not_found"


async def test_move_moves_links_and_refuses_root_and_self_nesting(make_app, ws, mode, resolver):
    (ws / "t.txt").write_text("t")
    (ws / "l").symlink_to("t.txt")
    (ws / "d").mkdir()
    async with connect(make_app(), mode=mode) as client:
        await call_ok(client, "move", {"source": "l", "destination": "l2"})
        assert os.readlink(ws / "l2") == "t.txt" and (ws / "t.txt").read_text() == "t"
        error = await call_error(client, "move", {"source": ".", "destination": "elsewhere"})
        assert error["code"] == "refused" and "root" in error["message"]
        error = await call_error(client, "move", {"source": "d", "destination": "d/inner"})
        assert "into itself" in error["message"]


async def test_move_refuses_trees_holding_protected_paths(make_app, ws, mode):
    (ws / "vendor" / "lib" / ".git").mkdir(parents=True)
    (ws / "vendor" / "lib" / ".git" / "config").write_text("[core]")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "move", {"source": "vendor", "destination": "vendor2"})
    assert error["code"] == "refused" and ".git" in error["message"] and "protected" in error["message"]
    assert (ws / "vendor" / "lib" / ".git" / "config").exists()


async def test_remove_file_link_dir_and_force(make_app, ws, mode, outside):
    (ws / "f").write_text("")
    (ws / "l").symlink_to(outside)
    (ws / "empty").mkdir()
    (ws / "full" / "x" / "y").mkdir(parents=True)
    (ws / "full" / "x" / "y" / "z.txt").write_text("")
    (ws / "full" / "inner-link").symlink_to(outside / "secret.txt")
    async with connect(make_app(), mode=mode) as client:
        assert (await call_ok(client, "remove", {"path": "f"}))["entries_removed"] == 1
        # (a link to the outside is refused by the gateway, which resolves it; the
        # backend removes such links itself, see test_hostile)
        (ws / "l").unlink()
        assert (await call_ok(client, "remove", {"path": "empty"}))["removed"]
        error = await call_error(client, "remove", {"path": "full"})
        assert error["code"] == "not_empty" and "recursive=true" in error["message"]
        out = await call_ok(client, "remove", {"path": "full", "recursive": True})
        assert out["entries_removed"] == 5
        error = await call_error(client, "remove", {"path": "gone"})
        assert error["code"] == "not_found" and "force=true" in error["message"]
        assert (await call_ok(client, "remove", {"path": "gone", "force": True}))["removed"] is False
        error = await call_error(client, "remove", {"path": ".", "recursive": True})
        assert error["code"] == "refused"
    assert os.listdir(ws) == [] and (outside / "secret.txt").read_text() == "TOP SECRET\n"


async def test_recursive_remove_refuses_protected_and_none_contents_whole(make_app, ws, mode):
    (ws / "proj" / "sub" / ".git").mkdir(parents=True)
    (ws / "proj" / "a.txt").write_text("")
    (ws / "area" / "keys").mkdir(parents=True)
    (ws / "area" / "keys" / "k").write_text("")
    (ws / "area" / "b.txt").write_text("")
    async with connect(make_app('[filesystem.paths]\n"area/keys" = "none"\n'), mode=mode) as client:
        error = await call_error(client, "remove", {"path": "proj", "recursive": True})
        assert error["code"] == "refused" and "proj/sub/.git" in error["message"]
        error = await call_error(client, "remove", {"path": "area", "recursive": True})
        assert error["code"] == "refused" and "'none'" in error["message"]
    # Refused whole: nothing was removed before the protected entry was found.
    assert (ws / "proj" / "a.txt").exists() and (ws / "area" / "b.txt").exists()
