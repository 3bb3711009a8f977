"""Run ``codex exec`` against CodeSpace and a scripted model; write what happened as JSON.

    python codex_run.py SPEC.json RESULT.json

Meant to run inside a loopback-only network namespace (the test wraps it in
``unshare -n`` when it is root), so the scripted model, Codex and CodeSpace all live
in the same namespace and Codex can reach nothing else. SPEC holds the script (the
steps of scripted_model), the codex binary, CODEX_HOME, the workspace, the server
command and the ``[mcp_servers.codespace]`` table to use; RESULT gets Codex's exit
code, its output and every request the model received.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scripted_model import Call, ScriptedModel, Say, Search  # noqa: E402

KEY_ENV = "CODESPACE_SCRIPTED_MODEL_KEY"
# What keeps Codex on loopback and quiet, besides the scripted provider: no analytics or
# feedback upload, no OpenTelemetry export, no update check, no plugins or apps (with them on,
# 0.171.0 runs git against github.com/openai/plugins and connects to api.github.com and
# chatgpt.com at start), no prompt history on disk.
ISOLATION: dict[str, Any] = {
    "check_for_update_on_startup": False,
    "analytics": {"enabled": False},
    "feedback": {"enabled": False},
    "otel": {"exporter": "none", "trace_exporter": "none", "metrics_exporter": "none"},
    "history": {"persistence": "none"},
    "features": {"plugins": False, "apps": False, "remote_plugin": False, "in_app_updates": False},
}


def provider(port: int) -> dict[str, Any]:
    return {"name": "scripted model on loopback", "base_url": f"http://127.0.0.1:{port}/v1",
            "wire_api": "responses", "env_key": KEY_ENV, "request_max_retries": 0,
            "stream_max_retries": 0, "supports_websockets": False}


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def to_toml(table: dict[str, Any], prefix: str = "") -> str:
    """Keys first, then sub-tables (TOML wants a table's keys before its first sub-table)."""
    keys = [f"{k} = {toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    head = [f"[{prefix}]"] if prefix and keys else []
    parts = ["\n".join(head + keys)] if keys else []
    for k, v in table.items():
        if isinstance(v, dict):
            parts.append(to_toml(v, f"{prefix}.{k}" if prefix else k))
    return "\n\n".join(p for p in parts if p)


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def config_toml(port: int, config: dict[str, Any]) -> str:
    full = merge(merge(ISOLATION, config), {"model_provider": "scripted",
                                            "model_providers": {"scripted": provider(port)}})
    return to_toml(full) + "\n"


def wait_for(url: str, timeout: float = 60) -> None:
    """Until something accepts connections at url's host and port."""
    parts = urlsplit(url)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((parts.hostname, parts.port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def load_steps(raw: list[dict[str, Any]]) -> list[Search | Call | Say]:
    kinds = {"search": Search, "call": Call, "say": Say}
    return [kinds[step.pop("kind")](**step) for step in (dict(s) for s in raw)]


def main(spec_path: str, result_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    model = ScriptedModel(load_steps(spec["steps"]))
    port = model.start()
    home = Path(spec["codex_home"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(config_toml(port, spec["config"]))
    env = {"RUST_LOG": os.environ.get("RUST_LOG", "warn"), "CODEX_HOME": str(home), "HOME": str(home),
           "PATH": os.environ.get("PATH", "/usr/bin:/bin"), KEY_ENV: "dummy-key-for-loopback", "LANG": "C.UTF-8",
           **spec.get("env", {})}
    # A server Codex connects to rather than starts (HTTP), started here so it shares the namespace.
    background = [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=open(home / "background.log", "w")) for argv in spec.get("background", [])]
    for url in spec.get("wait_for", []):
        wait_for(url)
    cmd = [spec["codex"], "exec", "--strict-config", "--skip-git-repo-check", "--color", "never",
           "-C", spec["workspace"], spec["prompt"]]
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=spec.get("timeout", 240))
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = "timeout", exc.stdout or "", exc.stderr or ""
        out, err = (s.decode() if isinstance(s, bytes) else s for s in (out, err))
    model.stop()
    for proc in background:
        proc.terminate()
        proc.wait(timeout=10)
    result = {"code": code, "stdout": out, "stderr": err, "seconds": round(time.monotonic() - started, 2),
              "config": (home / "config.toml").read_text(), "requests": model.requests, "shown": model.shown()}
    Path(result_path).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
