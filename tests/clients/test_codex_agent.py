"""Codex 0.171.0 as the agent: ``codex exec`` drives CodeSpace over stdio for a scripted model.

Nothing is mocked but the model: the released codex binary (the pin, fetched by the
patch plugin's oracle into ~/.cache/codespace), a real ``codespace serve`` child of
Codex, and a Responses-API server on loopback (scripted_model.py) that searches for
CodeSpace's tools in plain words, calls them, and keeps every request, so the
assertions read what Codex showed the model. As root the run happens in a
loopback-only network namespace, so Codex cannot reach anything else.

The Codex configuration is the one docs/agent-loops.md gives (the ```toml blocks of
its Codex section), with the command pointed at this checkout's interpreter and a
short ``tool_timeout_sec`` so one call can outlive it. Assertions are about what a
model must be able to read (a file's text, an exit code, the error message), not
about the JSON layout around it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from codespace.tools.command_models import MAX_YIELD_MS

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DOC = REPO / "docs" / "agent-loops.md"
ORACLE = REPO / "plugins" / "patch" / "codespace_patch" / "conformance" / "oracle.py"
IN_CI = os.environ.get("CI", "").lower() in ("true", "1", "yes")
TOOL_TIMEOUT_SEC = 3

# Plain-words searches a model would make, and the CodeSpace tool each must surface
# through Codex's tool_search (BM25 over the deferred tools' names and descriptions).
# docs/agent-loops.md lists the same pairs.
SEARCHES = [
    ("workspace rules and limits", "workspace_info"),
    ("look up an operation", "get_operation"),
    ("list operations", "list_operations"),
    ("read a file", "read_file"),
    ("write a file", "write_file"),
    ("list a directory", "list_dir"),
    ("walk the directory tree", "walk"),
    ("file size and mode", "stat"),
    ("create a directory", "make_dir"),
    ("rename a file", "move"),
    ("remove a file", "remove"),
    ("edit a file", "apply_patch"),
    ("run a shell command", "exec"),
    ("send input to a running command", "write_stdin"),
    ("read output of a running command", "read_output"),
    ("resize the terminal", "resize"),
    ("stop a process", "terminate"),
    ("list running commands", "list_sessions"),
    ("find files", "walk"),
    ("search files by name", "walk"),
    ("kill a running command", "terminate"),
    ("file metadata", "stat"),
    ("mkdir", "make_dir"),
    ("what can I access", "workspace_info"),
]

# Searches docs/agent-loops.md lists as not finding the tool (its description lacks the word).
# When a description gains it, this fails: move the pair to SEARCHES and the doc's table.
GAPS: list[tuple[str, str]] = []

PATCH = """*** Begin Patch
*** Update File: notes/hello.txt
@@
-hello from codex
+hello from the patch
*** End Patch
"""


def codex_binary() -> Path:
    spec = importlib.util.spec_from_file_location("codespace_codex_oracle", ORACLE)
    oracle = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = oracle  # dataclasses look their module up there
    spec.loader.exec_module(oracle)
    try:
        return oracle.ensure_oracle(fetch=IN_CI, log=lambda text: print(text, file=sys.stderr))
    except oracle.OracleUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI must run Codex as the agent, but the pinned binary is unavailable: {exc}")
        pytest.skip(f"pinned codex binary unavailable ({exc}); fetch it with "
                    "`python3 plugins/patch/pin_check.py --ci` or run .ci/run")


@pytest.fixture(scope="module")
def codex() -> Path:
    return codex_binary()


def documented_blocks() -> list[dict[str, Any]]:
    """The ```toml blocks of the Codex section of docs/agent-loops.md."""
    section = DOC.read_text().split("\n## Codex\n", 1)[1].split("\n## ", 1)[0]
    return [tomllib.loads(block) for block in re.findall(r"```toml\n(.*?)```", section, flags=re.S)]


def is_http(block: dict[str, Any]) -> bool:
    return "url" in block.get("mcp_servers", {}).get("codespace", {})


def documented_config() -> dict[str, Any]:
    """The stdio configuration: every Codex block but the HTTP one, merged."""
    config: dict[str, Any] = {}
    for block in (b for b in documented_blocks() if not is_http(b)):
        for key, value in block.items():
            config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    assert "codespace" in config.get("mcp_servers", {}), f"{DOC.name}: no [mcp_servers.codespace] in ## Codex"
    return config


def network_wrapper() -> list[str]:
    """``unshare -n`` with lo up where the test is root; nothing otherwise (see the docstring)."""
    if os.geteuid() != 0:
        return []
    wrapper = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
    probe = subprocess.run([*wrapper, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        message = f"cannot make a loopback-only network namespace: {probe.stderr.strip()}"
        if IN_CI:
            pytest.fail(message)
        print(f"{message}; running Codex in the host's network namespace", file=sys.stderr)
        return []
    return wrapper


def codex_config(tmp: Path, *, delay_start: float = 0, **server: Any) -> dict[str, Any]:
    config = documented_config()
    table = {**config["mcp_servers"]["codespace"], "tool_timeout_sec": TOOL_TIMEOUT_SEC}
    argv = [sys.executable, "-m", "codespace", "serve", "--workspace", str(tmp / "ws"),
            "--state-dir", str(tmp / "state")]
    if delay_start:  # a server slower to answer initialize than Codex is to reach the model
        argv = ["sh", "-c", f'sleep {delay_start}; exec "$0" "$@"', *argv]
    table.update(command=argv[0], args=argv[1:])
    table.update(server)
    config["mcp_servers"] = {"codespace": {k: v for k, v in table.items() if v is not None}}
    config["model"] = "gpt-5.5"  # a catalogue model: Codex defers MCP tools behind tool_search
    return config


def run_codex(codex: Path, tmp: Path, steps: list[dict[str, Any]], config: dict[str, Any],
              **extra: Any) -> dict[str, Any]:
    (tmp / "ws").mkdir(exist_ok=True)
    spec = {"codex": str(codex), "codex_home": str(tmp / "codex-home"), "workspace": str(tmp / "ws"),
            "prompt": "Work in the CodeSpace workspace.", "config": config, "steps": steps, **extra}
    # Codex's HTTP client logs each new connection at debug: the test reads where it went.
    spec["env"] = {"RUST_LOG": "warn,reqwest::connect=debug", **spec.get("env", {})}
    (tmp / "spec.json").write_text(json.dumps(spec))
    cmd = [*network_wrapper(), sys.executable, str(HERE / "codex_run.py"), str(tmp / "spec.json"),
           str(tmp / "result.json")]
    subprocess.run(cmd, check=True, timeout=300)
    result = json.loads((tmp / "result.json").read_text())
    # What the model was shown for each call, kept next to the test's other output.
    print(f"codex exit {result['code']} after {result['seconds']} s; shown to the model:")
    for call_id, text in result["shown"].items():
        print(f"--- {call_id}\n{text[:1500]}")
    print("--- codex stderr (tail)\n" + result["stderr"][-3000:])
    return result


def assert_loopback_only(log: str) -> None:
    """Codex opened connections to loopback only and tried no plugin sync (which runs git against
    github.com when plugins are on); in the namespace anything else would fail, here it must not be tried."""
    targets = re.findall(r"starting new connection: (\S+)", log)
    assert targets and all(t.startswith("http://127.0.0.1:") for t in targets), targets
    assert "plugin sync" not in log, [line for line in log.splitlines() if "plugin sync" in line]


def search(call_id: str, query: str) -> dict[str, Any]:
    return {"kind": "search", "call_id": call_id, "query": query}


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"kind": "call", "call_id": call_id, "name": name, "arguments": arguments}


def found_tools(shown: str) -> list[str]:
    return [t["name"] for ns in json.loads(shown) if ns.get("name") == "mcp__codespace" for t in ns.get("tools", [])]


def first_request_tools(result: dict[str, Any]) -> list[str]:
    body = next(r["body"] for r in result["requests"] if r["method"] == "POST")
    return [t.get("name") or t.get("type") for t in body.get("tools", [])]


def test_documented_config_has_the_lines_codex_needs() -> None:
    table = documented_config()["mcp_servers"]["codespace"]
    assert table.get("required") is True  # else the first model request can go out before CodeSpace is ready
    assert table.get("default_tools_approval_mode") == "approve"  # else destructive tools are refused
    assert table.get("startup_timeout_sec", 0) >= 60  # a first start may install; Codex exits past it
    assert table.get("tool_timeout_sec", 0) > MAX_YIELD_MS / 1000  # a call may wait yield_ms/wait_ms


def test_codex_drives_codespace(codex: Path, tmp_path: Path) -> None:
    steps = [search(f"s{i}", query) for i, (query, _) in enumerate(SEARCHES)] + [
        search(f"g{i}", query) for i, (query, _) in enumerate(GAPS)] + [
        call("write", "write_file", path="notes/hello.txt", content="hello from codex\n", create_parents=True),
        call("patch", "apply_patch", patch=PATCH),
        call("read", "read_file", path="notes/hello.txt"),
        call("exec", "exec", command="echo out-$((6*7)); echo to-stderr >&2; exit 3"),
        call("environ", "read_file", path="/proc/self/environ"),
        call("protected", "write_file", path=".codex/config.toml", content="approval_policy = 'never'\n",
             create_parents=True),
        call("slow", "exec", command="sleep 4; echo finished-late > late.txt", yield_ms=60000, timeout_ms=60000),
        call("wait", "exec", command="sleep 1.5; ls -a"),
        call("after", "list_operations", tool="exec", limit=2),
        {"kind": "say", "text": "All done."},
    ]
    result = run_codex(codex, tmp_path, steps, codex_config(tmp_path))
    shown, ws = result["shown"], tmp_path / "ws"

    assert result["code"] == 0, result["stderr"][-2000:]
    assert all(r["path"].endswith("/responses") for r in result["requests"]), "Codex asked the model host for more"
    assert_loopback_only(result["stderr"])
    offered = first_request_tools(result)
    assert "tool_search" in offered and "exec_command" not in offered and "web_search" not in offered, offered
    for i, (query, tool) in enumerate(SEARCHES):
        assert tool in found_tools(shown[f"s{i}"]), f"tool_search {query!r} did not surface {tool}"
    for i, (query, tool) in enumerate(GAPS):
        assert tool not in found_tools(shown[f"g{i}"]), f"{query!r} finds {tool} now: update the docs' gap list"

    # Codex shows the model "Wall time: ...\nOutput:\n" and then the structured result.
    assert shown["write"].startswith("Wall time:") and "notes/hello.txt" in shown["write"]
    assert "+hello from the patch" in shown["patch"]
    assert "hello from the patch" in shown["read"]
    assert (ws / "notes" / "hello.txt").read_text() == "hello from the patch\n"
    assert "out-42" in shown["exec"] and "to-stderr" in shown["exec"]
    assert re.search(r'exit_code"?\s*[:=]\s*3\b', shown["exec"]), shown["exec"]

    # Refusals: the model reads why, and nothing leaked or was written.
    assert "/proc" in shown["environ"] and "PATH=" not in shown["environ"]
    assert re.search(r"refused|denied|forbid", shown["environ"], re.I), shown["environ"]
    assert re.search(r"protected", shown["protected"], re.I), shown["protected"]
    assert not (ws / ".codex" / "config.toml").exists()

    # The call that outlives tool_timeout_sec: Codex gives up and tells the model so; the README
    # says a cancelled exec is stopped and recorded cancelled, so its late file never appears.
    assert re.search(rf"timed out .*{TOOL_TIMEOUT_SEC}\s*s", shown["slow"]), shown["slow"]
    assert "finished-late" not in shown["slow"]
    # What a model does next, a command right after the timeout, must run although the cancelled one
    # is still being stopped (its sandbox's placeholders for missing protected names go away meanwhile).
    assert re.search(r'exit_code"?\s*[:=]\s*0\b', shown["wait"]) and "bwrap:" not in shown["wait"], shown["wait"]
    assert "cancelled" in shown["after"], shown["after"]  # stopping takes up to 0.5 s: asked 1.5 s later
    time.sleep(2)  # past the cancelled command's 4 s: 3 s timeout + the calls after + this
    assert "late.txt" not in shown["wait"]
    # Nothing but what the agent made: no mount points a sandbox left behind (empty read-only
    # .git, .bashrc, ... for missing protected names), no file from the cancelled command.
    assert sorted(p.name for p in ws.iterdir()) == ["notes"], sorted(p.name for p in ws.iterdir())


def test_without_approval_mode_codex_refuses_destructive_tools(codex: Path, tmp_path: Path) -> None:
    """Why ``default_tools_approval_mode = "approve"`` is in the documented config."""
    steps = [search("s", "write a file"), call("write", "write_file", path="x.txt", content="x\n"),
             {"kind": "say", "text": "done"}]
    result = run_codex(codex, tmp_path, steps, codex_config(tmp_path, default_tools_approval_mode=None))
    assert "requires approval" in result["shown"]["write"]
    assert not (tmp_path / "ws" / "x.txt").exists()


def test_without_required_a_slow_start_leaves_the_model_without_tools(codex: Path, tmp_path: Path) -> None:
    """Why ``required = true`` is there: Codex does not wait for a server that is not required."""
    steps = [search("s", "write a file"), call("write", "write_file", path="x.txt", content="x\n"),
             {"kind": "say", "text": "done"}]
    result = run_codex(codex, tmp_path, steps, codex_config(tmp_path, delay_start=3, required=False))
    assert found_tools(result["shown"]["s"]) == []
    assert "unsupported call" in result["shown"]["write"]
    assert not (tmp_path / "ws" / "x.txt").exists()


def test_with_required_codex_waits_for_a_slow_start(codex: Path, tmp_path: Path) -> None:
    steps = [search("s", "write a file"), call("write", "write_file", path="x.txt", content="x\n"),
             {"kind": "say", "text": "done"}]
    result = run_codex(codex, tmp_path, steps, codex_config(tmp_path, delay_start=3))
    assert result["code"] == 0 and "write_file" in found_tools(result["shown"]["s"])
    assert (tmp_path / "ws" / "x.txt").read_text() == "x\n"


def test_past_startup_timeout_codex_exits(codex: Path, tmp_path: Path) -> None:
    """Why ``startup_timeout_sec`` is generous: a required server past it ends ``codex exec``."""
    result = run_codex(codex, tmp_path, [{"kind": "say", "text": "never asked"}],
                       codex_config(tmp_path, delay_start=3, startup_timeout_sec=1))
    assert result["code"] != 0
    assert "required MCP servers failed to initialize" in result["stderr"]
    assert not [r for r in result["requests"] if r["method"] == "POST"], "the model was asked anyway"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_codex_over_streamable_http(codex: Path, tmp_path: Path) -> None:
    """The documented HTTP block: Codex sends the bearer token from bearer_token_env_var."""
    (table,) = [b["mcp_servers"]["codespace"] for b in documented_blocks() if is_http(b)]
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    token = secrets.token_urlsafe(24)
    token_file = tmp_path / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    server = [sys.executable, "-m", "codespace", "serve", "--transport", "http", "--port", str(port),
              "--workspace", str(tmp_path / "ws"), "--state-dir", str(tmp_path / "state"),
              "--token-file", str(token_file)]
    config = {**documented_config(), "model": "gpt-5.5"}
    config["mcp_servers"] = {"codespace": {**table, "url": url}}
    steps = [search("s", "write a file"),
             call("write", "write_file", path="h.txt", content="over http\n"),
             call("read", "read_file", path="h.txt"),
             {"kind": "say", "text": "done"}]
    result = run_codex(codex, tmp_path, steps, config, background=[server], wait_for=[url],
                       env={table["bearer_token_env_var"]: token})
    assert result["code"] == 0, result["stderr"][-2000:]
    assert_loopback_only(result["stderr"])
    assert "over http" in result["shown"]["read"]
    assert (tmp_path / "ws" / "h.txt").read_text() == "over http\n"
