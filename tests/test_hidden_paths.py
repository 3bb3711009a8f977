"""What the default policy hides, tried as an agent would: other workspaces' state (a running HTTP
server's bearer token, its operation store), credential stores of common tools, the whole home
with ``home = "hidden"``, and hard links to hidden files with ``hardlinks = "refuse"``. Each
through real ``codespace serve`` subprocesses, by ``read_file`` and by a sandboxed ``exec cat`` in
both engines, with the server as root and as an unprivileged user. HOME is a temporary directory."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from mcp import Client

from codespace import kernel
from codespace.testing import call_error, call_ok

from .servers import UNPRIVILEGED, make_dir, serve_params, shared_tmp

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-do-not-leak"
# The paths issue 12 found readable, and a few more of the same kinds.
CREDENTIALS = [
    ".config/gh/hosts.yml", ".git-credentials", ".npmrc", ".pypirc", ".codex/auth.json",
    ".claude/.credentials.json", ".azure/msal_token_cache.json", ".cargo/credentials.toml",
    ".password-store/web/site.gpg", ".vault-token", ".pgpass", ".bash_history",
    ".terraform.d/credentials.tfrc.json", ".docker/config.json", ".config/containers/auth.json",
    ".local/share/keyrings/login.keyring", ".mozilla/firefox/p/cookies.sqlite", ".python_history",
    ".m2/settings.xml", ".kube/config", ".ssh/id_ed25519",
]
UIDS = [None, UNPRIVILEGED]


def _engines() -> list[str]:
    found = []
    if kernel.bubblewrap().ok and kernel.user_namespaces().ok:
        found.append("bubblewrap")
    if kernel.landlock_abi().ok:
        found.append("landlock")
    return found


ENGINES = _engines() or ["none"]


def _tree(uid: int | None) -> tuple[Path, Path, Path]:
    base = shared_tmp("cs-hidden-", uid)
    home = make_dir(base / "home", uid)
    for rel in CREDENTIALS:
        path = home / rel
        for parent in reversed(path.relative_to(home).parents):
            make_dir(home / parent, uid)
        path.write_text(f"{SECRET} {rel}\n")
        if uid is not None:
            os.chown(path, uid, uid)
    return base, home, make_dir(base / "ws", uid)


def _policy(base: Path, engine: str, extra: str = "") -> Path:
    path = base / "policy.toml"
    mode = "required" if engine != "none" else "off"
    path.write_text(f'[sandbox]\nmode = "{mode}"\nengine = "{engine if engine != "none" else "auto"}"\n{extra}')
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_http_neighbour(base: Path, home: Path, uid: int | None) -> tuple[subprocess.Popen, Path]:
    """Another workspace's HTTP server with the default state directory: its token and store
    land under HOME's CodeSpace state root."""
    other = make_dir(base / "other", uid)
    params = serve_params(other, base / "unused", home, uid=uid)
    args = [a for a in params.args]
    cut = args.index("--state-dir")
    del args[cut:cut + 2]  # the default state directory, under HOME
    proc = subprocess.Popen([params.command, *args, "--transport", "http", "--port", str(_free_port())],
                            env=params.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    root = home / ".local" / "state" / "codespace" / "workspaces"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        tokens = list(root.glob("*/http-token")) if root.is_dir() else []
        stores = list(root.glob("*/operations.sqlite3")) if root.is_dir() else []
        if tokens and stores:
            return proc, tokens[0]
        if proc.poll() is not None:
            raise AssertionError(f"the neighbour HTTP server exited: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the neighbour HTTP server wrote no token")


def _cat_script(paths: list[str]) -> str:
    """One command that tries to read every path and prints what it got."""
    quoted = " ".join(f"'{p}'" for p in paths)
    return f"for f in {quoted}; do cat \"$f\" 2>/dev/null && echo \"READ $f\"; done; echo END"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("uid", UIDS, ids=["root", "user"])
async def test_other_state_and_credentials_are_hidden(engine, uid):
    base, home, ws = _tree(uid)
    neighbour, token = _start_http_neighbour(base, home, uid)
    try:
        store = token.parent / "operations.sqlite3"
        # /etc/shadow: found by testing, a root server's default policy read it out
        targets = [str(home / rel) for rel in CREDENTIALS] + [str(token), str(store), "/etc/shadow", "/etc/gshadow"]
        params = serve_params(ws, base / "state", home, uid=uid, policy=_policy(base, engine))
        async with Client(params) as client:
            for target in targets:
                err = await call_error(client, "read_file", {"path": target})
                assert "refused by policy" in err["message"], (target, err)
            listing = await client.call_tool("list_dir", {"path": str(token.parent.parent)})
            assert listing.is_error, "another workspace's state directory must not even be listed"
            if engine != "none":
                ran = await call_ok(client, "exec", {"command": _cat_script(targets), "timeout_ms": 60000})
                out = ran["output"]
                assert "END" in out and SECRET not in out and "READ" not in out, out[-3000:]
                assert ran["sandboxed"]
    finally:
        neighbour.kill()
        neighbour.wait()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("uid", UIDS, ids=["root", "user"])
async def test_home_hidden_keeps_only_workspace_and_toolchains(engine, uid):
    base, home, _ = _tree(uid)
    ws = make_dir(home / "projects" / "app", uid)  # the workspace lies inside the hidden home
    tools = make_dir(home / "tools" / "bin", uid)
    (tools / "tool.txt").write_text("toolchain\n")
    (home / "notes.txt").write_text(f"{SECRET} notes\n")
    (home / "tools" / ".credentials").write_text(f"{SECRET} inside a readable dir\n")
    for path in (tools / "tool.txt", home / "notes.txt", home / "tools" / ".credentials"):
        if uid is not None:
            os.chown(path, uid, uid)
    extra = '[filesystem]\nhome = "hidden"\nhome_readable = ["~/tools"]\npaths = { "~/tools/.credentials" = "none" }\n'
    params = serve_params(ws, base / "state", home, uid=uid, policy=_policy(base, engine, extra))
    try:
        async with Client(params) as client:
            for target in (home / "notes.txt", home / "projects", home / ".bash_history", home / "tools" / ".credentials"):
                err = await call_error(client, "read_file", {"path": str(target)}) if target.is_file() else \
                    await call_error(client, "list_dir", {"path": str(target)})
                assert "refused by policy" in err["message"], (target, err)
            assert (await call_ok(client, "read_file", {"path": str(tools / "tool.txt")}))["content"] == "toolchain\n"
            await call_ok(client, "write_file", {"path": "made.txt", "content": "ok"})
            if engine != "none":
                secret_paths = [str(home / "notes.txt"), str(home / ".git-credentials"),
                                str(home / "tools" / ".credentials")]
                # The workspace and the toolchain stay reachable through the hidden home.
                script = _cat_script(secret_paths) + f"; cat '{tools / 'tool.txt'}'; cat made.txt; ls"
                ran = await call_ok(client, "exec", {"command": script, "timeout_ms": 60000})
                out = ran["output"]
                assert SECRET not in out and "READ" not in out, out[-3000:]
                assert "toolchain" in out and "ok" in out and "made.txt" in out, out[-3000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("uid", UIDS, ids=["root", "user"])
async def test_hard_link_to_a_hidden_file(uid):
    base, home, ws = _tree(uid)
    os.link(home / ".git-credentials", ws / "innocent.txt")  # made before the server starts
    (ws / "plain.txt").write_text("plain\n")
    # An ignore file that is another name of a hidden one: its lines decide what walks list.
    make_dir(ws / ".git", uid)
    os.link(home / ".vault-token", ws / ".gitignore")
    probe = f"{SECRET} .vault-token"  # the hidden file's line, as a name
    (ws / probe).write_text("")
    hidden_size = (home / ".git-credentials").stat().st_size
    try:
        # Default (documented): the link is the same file and is read through.
        params = serve_params(ws, base / "state", home, uid=uid, policy=_policy(base, "none"))
        async with Client(params) as client:
            assert SECRET in (await call_ok(client, "read_file", {"path": "innocent.txt"}))["content"]
            assert (await call_ok(client, "stat", {"path": "innocent.txt"}))["size"] == hidden_size
            walked = await call_ok(client, "walk", {"path": ".", "gitignore": True})
            assert probe not in [e["path"] for e in walked["entries"]]  # the hidden line applied
        # The opt-in refuses it, names the rule, and still reads singly-linked files.
        policy = _policy(base, "none", '[filesystem]\nhardlinks = "refuse"\n')
        params = serve_params(ws, base / "state2", home, uid=uid, policy=policy)
        async with Client(params) as client:
            err = await call_error(client, "read_file", {"path": "innocent.txt"})
            assert "filesystem.hardlinks" in err["message"] and SECRET not in err["message"], err
            assert "2 hard links" in err["message"]
            assert (await call_ok(client, "read_file", {"path": "plain.txt"}))["content"] == "plain\n"
            view = await client.call_tool("read_file", {"path": "innocent.txt", "encoding": "base64"})
            assert view.is_error
            # Nor is its hash told by a write (found by testing from outside: previous_sha256 was the
            # hidden file's), and expected_sha256 cannot be checked against it; the write replaces the
            # name, and the hidden file keeps its content.
            import hashlib

            digest = hashlib.sha256((home / ".git-credentials").read_bytes()).hexdigest()
            guessed = await call_error(client, "write_file", {"path": "innocent.txt", "content": "x",
                                                              "expected_sha256": digest})
            assert "filesystem.hardlinks" in guessed["message"] and "expected_sha256" in guessed["message"], guessed
            # Nor are its size and times told (found by testing from outside: stat, list_dir and
            # walk showed the hidden file's length); the entry says which rule withholds them.
            described = await call_ok(client, "stat", {"path": "innocent.txt"})
            assert described["exists"] and described["kind"] == "file", described
            assert [described.get(k) for k in ("size", "mtime_ms", "ctime_ms", "mode")] == [None] * 4, described
            assert "filesystem.hardlinks" in described["withheld"] and "2 hard links" in described["withheld"]
            assert (await call_ok(client, "stat", {"path": "plain.txt"}))["size"] == 6
            listed = {e["name"]: e for e in (await call_ok(client, "list_dir", {"path": "."}))["entries"]}
            assert listed["innocent.txt"] == {"name": "innocent.txt", "kind": "file", "withheld": "filesystem.hardlinks"}
            assert listed["plain.txt"]["size"] == 6 and "withheld" not in listed["plain.txt"]
            shown = (await client.call_tool("list_dir", {"path": "."})).content[0].text.splitlines()
            assert "file     withheld  innocent.txt" in shown, shown  # not a size of 0 (found from outside)
            walked = await call_ok(client, "walk", {"path": ".", "sizes": True, "gitignore": True})
            sizes = {e["path"]: e.get("size") for e in walked["entries"]}
            assert sizes["innocent.txt"] is None and sizes["plain.txt"] == 6, sizes
            # The linked ignore file is not read: the name it would hide is listed, and the walk says why.
            assert probe in sizes, sizes
            assert any(e["path"] == ".gitignore" and "filesystem.hardlinks" in e["message"] for e in walked["errors"])
            found = await call_ok(client, "find_files", {"query": "vault-token"})
            assert probe in str(found), found
            written = await call_ok(client, "write_file", {"path": "innocent.txt", "content": "mine\n"})
            assert written["previous_sha256"] is None, written
            assert SECRET in (home / ".git-credentials").read_text()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_readme_lists_every_hidden_credential_path():
    from codespace.policy.credentials import CREDENTIAL_PATHS

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    missing = [p for p in CREDENTIAL_PATHS if f"`{p}`" not in readme]
    assert not missing, f"README's policy section does not list {missing}"


def test_many_missing_credential_entries_cost_nothing_per_lookup():
    """The defaults carry ~150 entries; a lookup is by path prefix, so its cost does not grow
    with them (the linear scan it replaced did)."""
    from codespace.workspace import Workspace

    ws = Workspace.open(os.getcwd())
    rules = ws.paths
    assert len(rules.rules) > 100
    few = type(rules)([r for r in rules.rules if r.access != "none"][:4], [])
    target = os.path.join(os.getcwd(), "a", "b", "c.txt")

    def per_call(r) -> float:
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(2000):
                r.match(target)
            best = min(best, time.perf_counter() - t)
        return best

    assert per_call(rules) < 3 * per_call(few) + 0.002
