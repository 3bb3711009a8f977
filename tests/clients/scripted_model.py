"""A scripted model: a loopback Responses-API server that plays a fixed list of turns.

Codex talks to it as to any model provider (``POST {base_url}/responses``, answered
with a server-sent-event stream). Each answer is the first step of the script whose
call has no output yet in the request's ``input``, so a request Codex repeats gets
the same step again and the script never runs ahead of what Codex handed back.
Every request is kept, so a test can read exactly what Codex showed the model.

Event shapes follow what Codex 0.171.0 parses: ``response.created``, one
``response.output_item.done`` per item (``function_call`` with a ``namespace`` for
MCP tools, ``tool_search_call`` for deferred-tool search, or an assistant
``message``), then ``response.completed`` with a usage block.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Search:
    """Ask Codex's tool_search (BM25 over deferred tools) for tools, in plain words."""

    call_id: str
    query: str
    limit: int = 8

    def item(self) -> dict[str, Any]:
        return {"type": "tool_search_call", "call_id": self.call_id, "execution": "client",
                "arguments": {"query": self.query, "limit": self.limit}}


@dataclass(frozen=True)
class Call:
    """Call one MCP tool; Codex exposes a server's tools in namespace ``mcp__<server>``."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    namespace: str = "mcp__codespace"

    def item(self) -> dict[str, Any]:
        return {"type": "function_call", "call_id": self.call_id, "namespace": self.namespace,
                "name": self.name, "arguments": json.dumps(self.arguments)}


@dataclass(frozen=True)
class Say:
    """Final assistant message: ends the turn."""

    text: str
    call_id: str = ""

    def item(self) -> dict[str, Any]:
        return {"type": "message", "role": "assistant", "id": "msg_final",
                "content": [{"type": "output_text", "text": self.text}]}


Step = Search | Call | Say
OUTPUT_TYPES = ("function_call_output", "tool_search_output", "custom_tool_call_output")


def answered_ids(body: dict[str, Any]) -> set[str]:
    return {item.get("call_id") for item in body.get("input", []) if item.get("type") in OUTPUT_TYPES}


def output_of(body: dict[str, Any], call_id: str) -> dict[str, Any] | None:
    for item in body.get("input", []):
        if item.get("type") in OUTPUT_TYPES and item.get("call_id") == call_id:
            return item
    return None


def output_text(item: dict[str, Any]) -> str:
    """The text a model reads from a function_call_output (a string or content items)."""
    output = item.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(part.get("text", "") for part in output if isinstance(part, dict))
    if isinstance(output, dict):  # {content, success} on some failures
        return str(output.get("content", ""))
    return json.dumps(output)


def sse(events: list[dict[str, Any]]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def stream_for(step: Step, n: int) -> bytes:
    rid = f"resp_{n}"
    usage = {"input_tokens": 0, "input_tokens_details": None, "output_tokens": 0,
             "output_tokens_details": None, "total_tokens": 0}
    return sse([
        {"type": "response.created", "response": {"id": rid}},
        {"type": "response.output_item.done", "item": step.item()},
        {"type": "response.completed", "response": {"id": rid, "usage": usage}},
    ])


@dataclass
class ScriptedModel:
    steps: list[Step]
    requests: list[dict[str, Any]] = field(default_factory=list)  # every request: method, path, body
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def next_step(self, body: dict[str, Any]) -> Step:
        done = answered_ids(body)
        for step in self.steps:
            if isinstance(step, Say) or step.call_id not in done:
                return step
        return Say("script finished")

    def start(self, host: str = "127.0.0.1") -> int:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reply(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                with model._lock:
                    model.requests.append({"method": "GET", "path": self.path})
                self._reply(404, b'{"error": "the scripted model serves only POST /v1/responses"}',
                            "application/json")

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsed": raw.decode("utf-8", "replace")[:2000]}
                with model._lock:
                    model.requests.append({"method": "POST", "path": self.path, "body": body})
                    n = len(model.requests)
                if not self.path.endswith("/responses"):
                    self._reply(404, b"{}", "application/json")
                    return
                self._reply(200, stream_for(model.next_step(body), n), "text/event-stream")

            def log_message(self, *args: object) -> None:  # keep the test's output clean
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self._server.server_address[1]

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def responses(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["method"] == "POST" and r["path"].endswith("/responses")]

    def shown(self) -> dict[str, str]:
        """call_id -> the text Codex handed back for it (first request that carries it)."""
        seen: dict[str, str] = {}
        for body in self.responses():
            for item in body.get("input", []):
                cid = item.get("call_id")
                if item.get("type") in OUTPUT_TYPES and cid not in seen:
                    seen[cid] = output_text(item) if item["type"] != "tool_search_output" else json.dumps(
                        item.get("tools"))
        return seen
