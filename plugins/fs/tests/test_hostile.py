"""Escape attempts, through real MCP sessions (both client modes, both resolvers),
and straight at the backend with the gateway out of the way.

The workspace sits beside ``outside/`` (secrets) and ``ws-evil/`` (prefix
confusion). The policy makes everything outside the workspace ``none``, so any
byte read or written there is an escape. After every attempt the outside trees
must be byte-for-byte unchanged, and a refusal's message must say why.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from codespace.contract import (
    FsError,
    ListDirRequest,
    MakeDirRequest,
    MoveRequest,
    ReadFileRequest,
    RemoveRequest,
    StatRequest,
    WalkRequest,
    WriteFileRequest,
)
from codespace.testing import connect, structured

pytestmark = pytest.mark.anyio

STRICT = """
[filesystem.paths]
"/" = "none"
"secret" = "none"
"/dev" = "read"
"""
DEFAULT = None
# Readable /proc and /dev, so the gateway lets magic-link paths through to the backend.
PROC = """
[filesystem.paths]
"/" = "read"
"/proc" = "read"
"/dev" = "read"
"""


@dataclass
class World:
    tmp: Path
    ws: Path
    outside: Path
    evil: Path

    def fill(self, text: str) -> str:
        return text.replace("{OUT}", str(self.outside)).replace("{EVIL}", str(self.evil)).replace("{WS}", str(self.ws))


@pytest.fixture
def world(tmp_path: Path, ws: Path, outside: Path) -> World:
    evil = tmp_path / "ws-evil"
    evil.mkdir()
    (evil / "secret.txt").write_text("evil twin\n")
    (outside / "hl.txt").write_text("hard-linked original\n")
    (ws / "a.txt").write_text("inside\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "inner.txt").write_text("inner\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "secret").mkdir()
    (ws / "secret" / "key").write_text("private\n")
    links = {
        "link_out_file": f"{outside}/secret.txt",
        "link_out_file_rel": "../outside/secret.txt",
        "link_out_dir": str(outside),
        "link_out_dir_rel": "../outside",
        "chain1": "chain2",
        "chain2": "sub/chain3",
        "sub/chain3": "../../outside/secret.txt",
        "chain_dir": "sub/hop",
        "sub/hop": "../../outside",
        "dangling_out": "../outside/created-by-attack.txt",
        "dangling_abs": f"{outside}/created-abs.txt",
        "loop1": "loop2",
        "loop2": "loop1",
        "zero_link": "/dev/zero",
        "proc_root": "/proc/self/root",
        "gitcfg_link": ".git/config",
        "gitdir_link": ".git",
        "secret_link": "secret/key",
        "secret_dir_link": "secret",
    }
    for name, target in links.items():
        os.symlink(target, ws / name)
    os.link(outside / "hl.txt", ws / "hard")
    os.mkfifo(ws / "fifo")
    return World(tmp_path, ws, outside, evil)


def refused(*words: str) -> Callable[[World, dict], None]:
    def check(world: World, error: dict) -> None:
        assert error is not None, "the call succeeded"
        message = error["message"]
        assert any(w in message for w in words), f"the message does not say why ({words}): {message}"

    check.expects_error = True  # type: ignore[attr-defined]
    return check


def succeeds(check_fn: Callable[[World, dict], None]) -> Callable[[World, dict], None]:
    check_fn.expects_error = False  # type: ignore[attr-defined]
    return check_fn


def _walk_stays_inside(world: World, out: dict) -> None:
    listed = [e["path"] for e in out["entries"]]
    assert not [p for p in listed if "deep.txt" in p or p.endswith("/secret.txt") or "hl.txt" in p]
    assert any("link_out_dir" in e["path"] and "not followed" in e["message"] for e in out["errors"])


def _hard_write(world: World, out: dict) -> None:
    assert (world.ws / "hard").read_text() == "mine\n"
    assert not os.path.samefile(world.ws / "hard", world.outside / "hl.txt")


def _hard_remove(world: World, out: dict) -> None:
    assert not (world.ws / "hard").exists()


def _created_inside(name: str) -> Callable[[World, dict], None]:
    def check(world: World, out: dict) -> None:
        assert (world.ws / name).read_text() == "ok"
        assert out["path"] == f"{world.ws}/{name}"

    return check


def _not_found(world: World, error: dict) -> None:
    assert error is not None and error["code"] == "not_found", error


_not_found.expects_error = True  # type: ignore[attr-defined]

WHY_POLICY = ("refused", "policy")
WHY_LINK = ("symbolic link", "refused")

# (id, tool, arguments, expectation, policy)
CASES: list[tuple[str, str, dict, Callable, str]] = [
    # prefix confusion: /ws vs /ws-evil
    ("prefix-abs-read", "read_file", {"path": "{EVIL}/secret.txt"}, refused(*WHY_POLICY), STRICT),
    ("prefix-rel-read", "read_file", {"path": "../ws-evil/secret.txt"}, refused(*WHY_POLICY), STRICT),
    ("prefix-write", "write_file", {"path": "../ws-evil/new.txt", "content": "x"}, refused(*WHY_POLICY), STRICT),
    ("prefix-list", "list_dir", {"path": "../ws-evil"}, refused(*WHY_POLICY), STRICT),
    ("prefix-walk", "walk", {"path": "{EVIL}"}, refused(*WHY_POLICY), STRICT),
    ("prefix-move", "move", {"source": "a.txt", "destination": "{EVIL}/a.txt"}, refused(*WHY_POLICY), STRICT),
    # .. in every position
    ("dotdot-lead", "read_file", {"path": "../outside/secret.txt"}, refused(*WHY_POLICY), STRICT),
    ("dotdot-middle", "read_file", {"path": "sub/../../outside/secret.txt"}, refused(*WHY_POLICY), STRICT),
    ("dotdot-many", "read_file", {"path": "sub/../../../../../../../../etc/passwd"}, refused(*WHY_POLICY), STRICT),
    ("dotdot-dots", "read_file", {"path": "./sub/./../.././outside/./secret.txt"}, refused(*WHY_POLICY), STRICT),
    ("dotdot-trailing", "list_dir", {"path": "sub/../.."}, refused(*WHY_POLICY), STRICT),
    ("dotdot-abs-middle", "read_file", {"path": "{WS}/sub/../../outside/secret.txt"}, refused(*WHY_POLICY), STRICT),
    ("dotdot-write", "write_file", {"path": "sub/../../outside/x.txt", "content": "x"}, refused(*WHY_POLICY), STRICT),
    ("dotdot-move-dest", "move", {"source": "a.txt", "destination": "../outside/a.txt"}, refused(*WHY_POLICY), STRICT),
    ("dotdot-move-src", "move", {"source": "../outside/secret.txt", "destination": "stolen.txt"}, refused(*WHY_POLICY), STRICT),
    ("dotdot-remove", "remove", {"path": "../outside/secret.txt"}, refused(*WHY_POLICY), STRICT),
    ("dotdot-remove-tree", "remove", {"path": "../outside", "recursive": True}, refused(*WHY_POLICY), STRICT),
    ("dotdot-mkdir", "make_dir", {"path": "../outside/newdir"}, refused(*WHY_POLICY), STRICT),
    ("dotdot-stat", "stat", {"path": ".."}, refused(*WHY_POLICY), STRICT),
    # absolute paths
    ("abs-read", "read_file", {"path": "/etc/passwd"}, refused(*WHY_POLICY), STRICT),
    ("abs-write", "write_file", {"path": "{OUT}/abs.txt", "content": "x"}, refused(*WHY_POLICY), STRICT),
    ("abs-walk-root", "walk", {"path": "/"}, refused(*WHY_POLICY), STRICT),
    # links to an outside file and directory
    ("link-file-abs", "read_file", {"path": "link_out_file"}, refused(*WHY_LINK), STRICT),
    ("link-file-rel", "read_file", {"path": "link_out_file_rel"}, refused(*WHY_LINK), STRICT),
    ("link-dir-abs", "read_file", {"path": "link_out_dir/secret.txt"}, refused(*WHY_LINK), STRICT),
    ("link-dir-rel", "read_file", {"path": "link_out_dir_rel/secret.txt"}, refused(*WHY_LINK), STRICT),
    ("link-dir-write", "write_file", {"path": "link_out_dir/new.txt", "content": "x"}, refused(*WHY_LINK), STRICT),
    ("link-leaf-write", "write_file", {"path": "link_out_file", "content": "x"}, refused(*WHY_LINK), STRICT),
    ("link-dir-list", "list_dir", {"path": "link_out_dir"}, refused(*WHY_LINK), STRICT),
    ("link-dir-walk", "walk", {"path": "link_out_dir_rel"}, refused(*WHY_LINK), STRICT),
    ("link-walk-follow", "walk", {"path": ".", "follow_dir_links": True}, succeeds(_walk_stays_inside), STRICT),
    ("link-dir-mkdir", "make_dir", {"path": "link_out_dir/newdir"}, refused(*WHY_LINK), STRICT),
    ("link-dir-move", "move", {"source": "a.txt", "destination": "link_out_dir_rel/a.txt"}, refused(*WHY_LINK), STRICT),
    ("link-dir-remove", "remove", {"path": "link_out_dir/secret.txt"}, refused(*WHY_LINK), STRICT),
    ("link-stat-follow", "stat", {"path": "link_out_file", "follow_symlinks": True}, refused(*WHY_LINK), STRICT),
    # link chains, dangling links, loops
    ("chain-file", "read_file", {"path": "chain1"}, refused(*WHY_LINK), STRICT),
    ("chain-dir", "read_file", {"path": "chain_dir/secret.txt"}, refused(*WHY_LINK), STRICT),
    ("dangling-read", "read_file", {"path": "dangling_out"}, refused(*WHY_LINK), STRICT),
    ("dangling-write-rel", "write_file", {"path": "dangling_out", "content": "x"}, refused(*WHY_LINK), STRICT),
    ("dangling-write-abs", "write_file", {"path": "dangling_abs", "content": "x"}, refused(*WHY_LINK), STRICT),
    ("link-loop", "read_file", {"path": "loop1"}, refused("too many levels", "symbolic link"), STRICT),
    # hard links to an outside file: writes replace the name, never the shared inode
    ("hardlink-write", "write_file", {"path": "hard", "content": "mine\n"}, succeeds(_hard_write), STRICT),
    ("hardlink-remove", "remove", {"path": "hard"}, succeeds(_hard_remove), STRICT),
    # FIFOs and devices: refused without blocking
    ("fifo-read", "read_file", {"path": "fifo"}, refused("FIFO"), STRICT),
    ("fifo-write", "write_file", {"path": "fifo", "content": "x"}, refused("FIFO"), STRICT),
    ("dev-zero-read", "read_file", {"path": "/dev/zero"}, refused("character device"), STRICT),
    ("dev-zero-base64", "read_file", {"path": "/dev/zero", "encoding": "base64"}, refused("character device"), STRICT),
    ("dev-zero-link", "read_file", {"path": "zero_link"}, refused(*WHY_LINK), STRICT),
    # /proc magic links
    ("proc-root-gateway", "read_file", {"path": "/proc/self/root/etc/passwd"}, refused(*WHY_POLICY), STRICT),
    ("proc-cwd-gateway", "read_file", {"path": "/proc/self/cwd/a.txt"}, refused(*WHY_POLICY), STRICT),
    ("proc-root-link", "read_file", {"path": "proc_root/etc/passwd"}, refused(*WHY_LINK), STRICT),
    ("proc-root-backend", "read_file", {"path": "/proc/self/root/etc/passwd"}, refused("magic link"), PROC),
    ("proc-cwd-backend", "list_dir", {"path": "/proc/self/cwd"}, refused("magic link"), PROC),
    ("proc-fd-backend", "read_file", {"path": "/proc/self/fd/0"}, refused("magic link"), PROC),
    # in-root links to what the policy protects
    ("protected-leaf-link", "write_file", {"path": "gitcfg_link", "content": "x"}, refused(*WHY_LINK, "protected"), STRICT),
    ("protected-dir-link", "write_file", {"path": "gitdir_link/config", "content": "x"}, refused("protected"), STRICT),
    ("none-file-link", "read_file", {"path": "secret_link"}, refused("'none'"), STRICT),
    ("none-dir-link", "list_dir", {"path": "secret_dir_link"}, refused("'none'"), STRICT),
    # with the default policy the outside is readable, so only the kernel's
    # RESOLVE_BENEATH (or the fallback's own walk) stands between a link and it
    ("kernel-link-file-abs", "read_file", {"path": "link_out_file"}, refused("leads out of"), DEFAULT),
    ("kernel-link-file-rel", "read_file", {"path": "link_out_file_rel"}, refused("leads out of"), DEFAULT),
    ("kernel-link-dir-rel", "read_file", {"path": "link_out_dir_rel/secret.txt"}, refused("leads out of"), DEFAULT),
    ("kernel-chain", "read_file", {"path": "chain1"}, refused("leads out of"), DEFAULT),
    ("kernel-chain-dir", "list_dir", {"path": "chain_dir/sub"}, refused("leads out of"), DEFAULT),
    ("kernel-walk-link", "walk", {"path": "link_out_dir"}, refused("leads out of"), DEFAULT),
    ("kernel-stat-follow", "stat", {"path": "link_out_dir_rel", "follow_symlinks": True}, refused("leads out of"), DEFAULT),
    # hostile names
    ("name-nul", "read_file", {"path": "a\x00b"}, refused("NUL"), STRICT),
    ("name-too-long", "write_file", {"path": "x" * 300, "content": "x"}, refused("longer than 255"), STRICT),
    ("path-too-long", "read_file", {"path": "ab/" * 1400}, refused("limit is 4095"), STRICT),
    ("name-newline", "write_file", {"path": "new\nline.txt", "content": "ok"}, succeeds(_created_inside("new\nline.txt")), STRICT),
    ("name-quotes-spaces", "write_file", {"path": " q'u\"o`te $(x) ", "content": "ok"},
     succeeds(_created_inside(" q'u\"o`te $(x) ")), STRICT),
    ("name-three-dots", "read_file", {"path": "..."}, _not_found, STRICT),
    ("name-dotdot-space", "read_file", {"path": ".. /outside/secret.txt"}, _not_found, STRICT),
    ("name-backslashes", "read_file", {"path": "..\\outside\\secret.txt"}, _not_found, STRICT),
    ("name-tilde", "read_file", {"path": "~/.ssh/id_rsa"}, _not_found, STRICT),
]


def _args(world: World, args: dict) -> dict:
    return {k: world.fill(v) if isinstance(v, str) else v for k, v in args.items()}


@pytest.mark.parametrize(("name", "tool", "args", "expect", "policy"), CASES, ids=[c[0] for c in CASES])
async def test_escape_attempt(world, make_app, digest, mode, resolver, name, tool, args, expect, policy):
    tree_digest = digest
    before_out, before_evil = tree_digest(world.outside), tree_digest(world.evil)
    async with connect(make_app(policy), mode=mode) as client:
        with anyio.fail_after(10):  # FIFOs and devices must not block
            result = await client.call_tool(tool, _args(world, args))
    data = structured(result)
    if expect.expects_error:
        assert result.is_error, f"{name}: the call succeeded: {result.content[0].text[:300]}"
        expect(world, data["error"])
    else:
        assert not result.is_error, f"{name}: {result.content[0].text}"
        expect(world, data)
    assert tree_digest(world.outside) == before_out, f"{name}: the outside tree changed"
    assert tree_digest(world.evil) == before_evil, f"{name}: the ws-evil tree changed"
    assert (world.outside / "hl.txt").read_text() == "hard-linked original\n"


def test_the_suite_is_big_enough():
    assert len(CASES) >= 40


# -- the backend alone -----------------------------------------------------------------
#
# The gateway refuses most of the above first. These go straight to the backend
# with the absolute paths the gateway would hand it, so each refusal below is the
# backend's own (a racing agent can reach this state after the gateway's check).


@dataclass
class Direct:
    name: str
    call: Callable
    words: tuple[str, ...] = field(default=("refused",))
    default_policy: bool = False


def _direct_cases(world: World) -> list[Direct]:
    ws, out = world.ws, world.outside

    def p(rel: str) -> str:
        return f"{ws}/{rel}"

    return [
        Direct("read-link-file", lambda b: b.read_file(ReadFileRequest(path=p("link_out_file"))), WHY_LINK),
        Direct("read-link-rel", lambda b: b.read_file(ReadFileRequest(path=p("link_out_file_rel"))), WHY_LINK),
        Direct("read-link-dir", lambda b: b.read_file(ReadFileRequest(path=p("link_out_dir_rel/secret.txt"))), WHY_LINK),
        Direct("read-chain", lambda b: b.read_file(ReadFileRequest(path=p("chain1"))), WHY_LINK),
        Direct("read-outside", lambda b: b.read_file(ReadFileRequest(path=f"{out}/secret.txt")), WHY_POLICY),
        Direct("read-evil", lambda b: b.read_file(ReadFileRequest(path=f"{world.evil}/secret.txt")), WHY_POLICY),
        Direct("read-bytes-link", lambda b: b.read_bytes(p("link_out_file"), max_bytes=100, follow_symlink=True), WHY_LINK),
        Direct("write-dangling", lambda b: b.write_file(WriteFileRequest(path=p("dangling_out"), content="x")), WHY_LINK),
        Direct("write-bytes-dangling", lambda b: b.write_bytes(p("dangling_out"), b"x", follow_symlink=True), WHY_LINK),
        Direct("write-link-dir", lambda b: b.write_file(WriteFileRequest(path=p("link_out_dir/n.txt"), content="x")), WHY_LINK),
        Direct("write-parents-link", lambda b: b.write_file(WriteFileRequest(path=p("chain_dir/a/b.txt"), content="x",
                                                                             create_parents=True)), WHY_LINK),
        Direct("write-protected-via-dir-link", lambda b: b.write_file(WriteFileRequest(path=p("gitdir_link/config"),
                                                                                       content="x")), ("protected",)),
        Direct("write-bytes-protected-leaf", lambda b: b.write_bytes(p("gitcfg_link"), b"x", follow_symlink=True),
               ("protected",)),
        Direct("read-none-via-link", lambda b: b.read_file(ReadFileRequest(path=p("secret_link"))), ("'none'",)),
        Direct("list-none-via-link", lambda b: b.list_dir(ListDirRequest(path=p("secret_dir_link"))), ("'none'",)),
        Direct("walk-link-dir", lambda b: b.walk(WalkRequest(path=p("link_out_dir"))), WHY_LINK),
        Direct("mkdir-link-dir", lambda b: b.make_dir(MakeDirRequest(path=p("link_out_dir_rel/x/y"))), WHY_LINK),
        Direct("move-into-link", lambda b: b.move(MoveRequest(source=p("a.txt"), destination=p("link_out_dir/a.txt"))),
               WHY_LINK),
        Direct("move-from-link", lambda b: b.move(MoveRequest(source=p("link_out_dir/secret.txt"), destination=p("s"))),
               WHY_LINK),
        Direct("remove-through-link", lambda b: b.remove(RemoveRequest(path=p("link_out_dir/secret.txt"))), WHY_LINK),
        Direct("remove-tree-through-link", lambda b: b.remove(RemoveRequest(path=p("chain_dir/sub"), recursive=True)),
               WHY_LINK),
        Direct("stat-follow-out", lambda b: b.stat(StatRequest(path=p("link_out_file"), follow_symlinks=True)), WHY_LINK),
        Direct("delete-through-link", lambda b: b.delete_file(p("link_out_dir/secret.txt")), WHY_LINK),
        Direct("read-fifo", lambda b: b.read_file(ReadFileRequest(path=p("fifo"))), ("FIFO",)),
        Direct("kernel-read-link", lambda b: b.read_file(ReadFileRequest(path=p("link_out_file_rel"))), ("leads out of",),
               default_policy=True),
        Direct("kernel-read-chain-dir", lambda b: b.read_file(ReadFileRequest(path=p("chain_dir/secret.txt"))),
               ("leads out of",), default_policy=True),
        Direct("kernel-list-link", lambda b: b.list_dir(ListDirRequest(path=p("link_out_dir"))), ("leads out of",),
               default_policy=True),
        Direct("read-dev-zero", lambda b: b.read_file(ReadFileRequest(path="/dev/zero")), ("character device",)),
        Direct("read-dev-null", lambda b: b.read_bytes("/dev/null", max_bytes=10), ("character device",)),
        Direct("remove-root", lambda b: b.remove(RemoveRequest(path=str(ws), recursive=True)), ("root",)),
        Direct("move-root", lambda b: b.move(MoveRequest(source=str(ws), destination=p("x"))), ("root",)),
    ]


_DIRECT_IDS = [d.name for d in _direct_cases(World(Path("/t"), Path("/t/ws"), Path("/t/o"), Path("/t/e")))]


@pytest.mark.parametrize("case_id", _DIRECT_IDS)
async def test_backend_refuses_on_its_own(world, backend_factory, digest, resolver, case_id):
    tree_digest = digest
    case = next(c for c in _direct_cases(world) if c.name == case_id)
    backend = backend_factory(None if case.default_policy else STRICT, resolver)
    before = tree_digest(world.outside)
    with anyio.fail_after(10), pytest.raises(FsError) as info:
        await case.call(backend)
    assert any(w in info.value.message for w in case.words), info.value.message
    assert tree_digest(world.outside) == before
    assert (world.ws / ".git" / "config").read_text() == "[core]\n"


async def test_backend_removes_links_never_targets(world, backend_factory, digest, resolver):
    tree_digest = digest
    backend = backend_factory(STRICT, resolver)
    before = tree_digest(world.outside)
    for name in ("link_out_dir", "link_out_file", "dangling_out", "chain_dir"):
        out = await backend.remove(RemoveRequest(path=f"{world.ws}/{name}", recursive=True))
        assert out.entries_removed == 1 and not os.path.lexists(world.ws / name)
    await backend.move(MoveRequest(source=f"{world.ws}/link_out_file_rel", destination=f"{world.ws}/moved"))
    assert os.readlink(world.ws / "moved") == "../outside/secret.txt"
    assert tree_digest(world.outside) == before


async def test_symlinks_never_policy_refuses_even_inside(world, make_app, mode, resolver):
    (world.ws / "inner_link").symlink_to("sub/inner.txt")
    policy = '[filesystem]\nsymlinks = "never"\n'
    async with connect(make_app(policy), mode=mode) as client:
        result = await client.call_tool("read_file", {"path": "inner_link"})
        assert result.is_error and "'never'" in result.content[0].text
        result = await client.call_tool("read_file", {"path": "chain_dir/x"})
        assert result.is_error
        ok = await client.call_tool("read_file", {"path": "sub/inner.txt"})
        assert not ok.is_error


HIDDEN_WAY = '[filesystem.paths]\n"secret" = "none"\n'


@pytest.mark.parametrize("through", ["MCP", "backend"])
async def test_a_link_whose_way_looks_inside_a_hidden_directory_says_nothing_of_it(
        world, make_app, backend_factory, mode, resolver, through):
    """Found by testing from outside: only where a link led was judged, not the way there. A link
    to ``secret/realdir/../../a.txt`` read a.txt while ``secret/nodir/../../a.txt`` failed with
    ENOENT, so the agent learnt which names exist in the hidden ``secret/``. Both are refused
    alike now, by the gateway and by the backend on its own (its walk judges each lookup after a
    link), with either resolver; a way through an open directory still reads."""
    (world.ws / "secret" / "realdir").mkdir()
    for name, target in {"py": "secret/realdir/../../a.txt", "pn": "secret/nodir/../../a.txt",
                         "pk": "secret/key/../../a.txt", "ok": "sub/../a.txt"}.items():
        (world.ws / name).symlink_to(target)
    answers = {}
    if through == "MCP":
        async with connect(make_app(HIDDEN_WAY), mode=mode) as client:
            for name in ("py", "pn", "pk", "ok"):
                result = await client.call_tool("read_file", {"path": name})
                answers[name] = result.content[0].text if result.is_error else structured(result)["content"]
    else:
        backend = backend_factory(HIDDEN_WAY, resolver)
        for name in ("py", "pn", "pk", "ok"):
            try:
                answers[name] = (await backend.read_file(ReadFileRequest(path=f"{world.ws}/{name}"))).content
            except FsError as exc:
                answers[name] = exc.message
    assert answers["ok"] == "inside\n"
    refusals = {answers[name].replace(f"{world.ws}/{name} ", "<link> ") for name in ("py", "pn", "pk")}
    assert len(refusals) == 1, refusals  # one answer, whatever the hidden directory holds
    (refusal,) = refusals
    assert f"resolves through a symbolic link into {world.ws}/secret (filesystem.paths['secret'] = 'none')" \
        in refusal and "which the policy hides" in refusal, refusal


async def test_links_that_loop_back_through_a_hidden_directory_all_get_one_answer(world, make_app, mode, resolver):
    """Found by the next round of testing: the gateway resolved a link that loops back through
    the hidden directory to find out it loops, and let it through to the backend, whose refusal
    was worded differently; so the wording told whether a name there was a link, a directory or
    missing, and how deep a link's target was. Both refuse with one text now."""
    (world.ws / "pub").mkdir()
    (world.ws / "secret" / "real").mkdir()
    (world.ws / "secret" / "lnk").symlink_to("../pub")
    ways = {"loop1": "nodir/../..", "loop2": "lnk/../..", "loop3": "real/../..", "loop4": "lnk/..",
            "loop5": "real/..", "loop6": "nolnk/.."}
    for name, way in ways.items():
        (world.ws / "pub" / name).symlink_to(f"../secret/{way}/pub/{name}")
    answers = set()
    async with connect(make_app(HIDDEN_WAY), mode=mode) as client:
        for name in ways:
            for tool, args in (("read_file", {"path": f"pub/{name}"}), ("stat", {"path": f"pub/{name}", "follow_symlinks": True})):
                result = await client.call_tool(tool, args)
                assert result.is_error, (name, tool)
                answers.add((tool, result.content[0].text.replace(f"{world.ws}/pub/{name} ", "<link> ")))
    assert len(answers) == 2, answers  # one per tool, whatever the hidden directory holds
    assert all("(filesystem.paths['secret'] = 'none'), which the policy hides" in text for _, text in answers)
