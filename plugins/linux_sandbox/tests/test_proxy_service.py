"""The proxy service: per-command Unix sockets, attribution, the audit trail in a real store."""

from __future__ import annotations

import http.server
import os
import socketserver
import threading

import anyio
import pytest

from codespace.store import SQLiteStore
from codespace_linux_sandbox.proxy import DomainRules, ProxyService

pytestmark = pytest.mark.anyio


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Hello)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


async def _get(path: str, url: str) -> bytes:
    async with await anyio.connect_unix(path) as stream:
        await stream.send(f"GET {url} HTTP/1.1\r\nConnection: close\r\n\r\n".encode())
        data = b""
        try:
            while True:
                data += await stream.receive()
        except anyio.EndOfStream:
            return data


async def test_routes_are_attributed_and_audited(tmp_path, upstream):
    store = await SQLiteStore(tmp_path / "ops.sqlite3").open()
    rules = DomainRules(["127.0.0.1"], [], allow_local_binding=True)
    service = ProxyService(rules, store, tmp_path)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await service.wait_started()
        assert service.tcp_port
        first = service.route_for("op-first")
        second = service.route_for("op-second")
        assert os.stat(first).st_mode & 0o777 == 0o600 and first != second
        assert (await _get(first, f"http://127.0.0.1:{upstream}/secret/path?token=x")).endswith(b"hello")
        assert b"403" in (await _get(second, "http://blocked.example/"))[:20]
        service.release(first)
        assert not os.path.exists(first)
        with pytest.raises(OSError):
            await _get(first, f"http://127.0.0.1:{upstream}/")
        await anyio.sleep(0.5)
        tg.cancel_scope.cancel()
    events = await store.network()
    assert {(e.operation_id, e.decision) for e in events} == {("op-first", "allow"), ("op-second", "deny")}
    assert all("secret" not in e.host and "token" not in e.host for e in events)
    assert not list((tmp_path / "proxy").glob("*.sock"))
    await store.close()


async def test_a_route_takes_the_operation_id_the_host_passes(tmp_path):
    """``exec`` passes its operation in ``CommandSpec.operation_id``: the route carries it, so the
    command's decisions are attributed to it."""
    from codespace_linux_sandbox.backend import LinuxSandbox

    from codespace.contract import CommandSpec, SandboxLayout

    store = await SQLiteStore(tmp_path / "ops.sqlite3").open()
    service = ProxyService(DomainRules(["example.com"], []), store, tmp_path)
    sandbox = LinuxSandbox("auto", tmp_path, proxy=service)
    layout = SandboxLayout(readable=["/"], writable=[], deny_read=[], protected=[], protected_names=[],
                           network="proxy")
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await service.wait_started()
        route = sandbox.open_route(CommandSpec(argv=["true"], cwd="/", env={}, operation_id="op-from-host"), layout)
        anonymous = sandbox.open_route(CommandSpec(argv=["true"], cwd="/", env={}), layout)
        assert (route.operation_id, anonymous.operation_id) == ("op-from-host", None)
        service.release(route.path)
        service.release(anonymous.path)
        tg.cancel_scope.cancel()
    await store.close()


async def test_a_route_nobody_registers_is_released(tmp_path, monkeypatch):
    from codespace_linux_sandbox.proxy import service as service_module

    monkeypatch.setattr(service_module, "REGISTRATION_TIMEOUT_S", 0.2)
    store = await SQLiteStore(tmp_path / "ops.sqlite3").open()
    service = ProxyService(DomainRules(["example.com"], []), store, tmp_path)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await service.wait_started()
        route = service.open_route(None, tcp=True)
        assert os.path.exists(route.path) and route.port
        with anyio.fail_after(5):
            while service._routes:
                await anyio.sleep(0.05)
        assert not os.path.exists(route.path)
        tg.cancel_scope.cancel()
    await store.close()


async def _tunnel(port: int, target: str) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        data = b""
        with anyio.move_on_after(5):
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
        return data


async def test_a_command_cannot_reach_the_proxy_through_the_proxy(tmp_path, upstream):
    """Found by testing: with allow_local_binding on, a command tunnelled to the shared listener
    through its own route and its requests inside were judged (and audited) with no operation.
    The shared listener and every Landlock route's listener are refused, and audited as such."""
    store = await SQLiteStore(tmp_path / "ops.sqlite3").open()
    service = ProxyService(DomainRules(["127.0.0.1", "localhost"], [], allow_local_binding=True), store, tmp_path)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await service.wait_started()
        mine, other = service.open_route("op-mine", tcp=True), service.open_route("op-other", tcp=True)
        refused = [await _tunnel(mine.port, f"127.0.0.1:{port}") for port in (service.tcp_port, other.port, mine.port)]
        allowed = await _tunnel(mine.port, f"127.0.0.1:{upstream}")
        service.release(other.path)
        assert ("tcp", other.port) not in service.proxy.checkpoint.own_ports  # a destination like any other again
        service.release(mine.path)
        await anyio.sleep(0.5)
        tg.cancel_scope.cancel()
    for reply in refused:
        assert reply.startswith(b"HTTP/1.1 403") and b"x-proxy-error: blocked-by-loop-policy" in reply, reply
    assert allowed.startswith(b"HTTP/1.1 200")
    events = sorted(await store.network(), key=lambda e: e.at)
    assert [(e.operation_id, e.decision, e.reason, e.port) for e in events] == [
        ("op-mine", "deny", "proxy-itself", service.tcp_port), ("op-mine", "deny", "proxy-itself", other.port),
        ("op-mine", "deny", "proxy-itself", mine.port), ("op-mine", "allow", "allowed", upstream)]
    await store.close()
