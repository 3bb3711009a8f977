"""The plugin as the host sees it: entry point, upstream pin, hooks, doctor, backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import distribution

import pytest

from codespace.contract import FileSystem
from codespace.testing import call_ok, connect
import codespace_fs
from codespace_fs import kernel
from codespace_fs.plugin import codespace_doctor
from codespace_fs.resolve import MODE_ENV, choose_mode

pytestmark = pytest.mark.anyio

FILE_TOOLS = {"read_file", "write_file", "list_dir", "walk", "stat", "make_dir", "move", "remove"}


def _cli(*args: str, ws, state) -> subprocess.CompletedProcess:
    env = dict(os.environ, CODESPACE_PLUGINS_ALLOW="fs")
    return subprocess.run(
        [sys.executable, "-m", "codespace", *args, "--workspace", str(ws), "--state-dir", str(state), "--json"],
        capture_output=True, text=True, env=env, timeout=60,
    )


def test_codespace_plugins_shows_the_upstream_pin(ws, state):
    out = _cli("plugins", ws=ws, state=state)
    assert out.returncode == 0, out.stderr
    (fs,) = [p for p in json.loads(out.stdout) if p["name"] == "fs"]
    assert fs["status"] == "loaded" and fs["distribution"] == "codespace-fs" and fs["version"] == codespace_fs.__version__
    assert fs["pin"] == {
        "project": "openai/codex", "release": "rust-v0.171.0",
        "components": ["codex-file-system", "codex-exec-server", "codex-utils-absolute-path", "codex-utils-path-uri"],
    }
    assert fs["hooks"] == ["codespace_doctor", "codespace_filesystem", "codespace_pin_checks"] and fs["error"] is None


def test_metadata_declares_dependencies_and_component_urls():
    meta = distribution("codespace-fs").metadata
    requires = meta.get_all("Requires-Dist")
    assert any(r.startswith("codespace") and "<0.3" in r for r in requires)
    assert any(r.startswith("pathspec") for r in requires)
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    for label, url in urls.items():
        if label.startswith("upstream "):
            assert url.startswith("https://github.com/openai/codex/tree/rust-v0.171.0/codex-rs/"), url


def test_doctor_reports_openat2_and_the_mode(ws, state):
    out = _cli("doctor", ws=ws, state=state)
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]} if out.stdout.startswith("{") else \
        {c["name"]: c for c in json.loads(out.stdout)}
    available, _ = kernel.openat2_available()
    assert checks["fs openat2"]["ok"] is available
    assert checks["fs resolution"]["detail"].startswith("openat2" if available else "openat")
    assert checks["backend filesystem"]["ok"] and "fs" in checks["backend filesystem"]["detail"]


def test_doctor_hook_and_forced_fallback(workspace, monkeypatch):
    names = [c.name for c in codespace_doctor(workspace)]
    assert {"fs openat2", "fs resolution", "fs /proc/self/fd", "fs renameat2", "fs symlink policy"} <= set(names)
    assert choose_mode("openat")[0] == "openat" and "forced" in choose_mode("openat")[1]
    if kernel.openat2_available()[0]:
        assert choose_mode(None)[0] == "openat2"


@pytest.mark.in_process
async def test_backend_implements_the_contract_and_serves_the_file_tools(make_app, mode, resolver):
    app = make_app()
    backend = app.backends.filesystem()
    assert isinstance(backend, FileSystem)
    assert backend.mode == os.environ[MODE_ENV]
    assert app.backends.providers()["filesystem"] == "fs"
    async with connect(app, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert FILE_TOOLS <= set(tools)
        assert "sizes" in tools["walk"].input_schema["properties"]
        info = await call_ok(client, "workspace_info")
    assert info["root"] == str(app.workspace.root)
