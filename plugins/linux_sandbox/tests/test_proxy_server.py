"""The egress proxy with real sockets and real upstream servers on loopback."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import socketserver
import struct
import sys
import threading

import anyio
import pytest

from codespace_linux_sandbox.proxy.rules import DomainRules
from codespace_linux_sandbox.proxy.server import EgressProxy

pytestmark = pytest.mark.anyio


class _Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str, bytes]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding") == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(length)
        _Upstream.seen.append((self.command, self.path, self.headers.get("Host", ""), body))
        reply = f"{self.command} {self.path} {len(body)}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_POST = do_HEAD = do_OPTIONS = _answer

    def log_message(self, *args: object) -> None:
        pass


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _Server(socketserver.ThreadingTCPServer):
    request_queue_size = 512  # the default backlog of 5 drops connections when 200 arrive at once


@pytest.fixture
def upstream():
    _Upstream.seen = []
    server = _Server(("127.0.0.1", 0), _Upstream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def echo():
    server = _Server(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class Resolver:
    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.table[host]


def _proxy(allowed, denied=(), *, local=True, limited=False, table=None, udp=False):
    events = []
    resolver = Resolver(table or {"allowed.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    proxy = EgressProxy(DomainRules(list(allowed), list(denied), limited=limited, allow_local_binding=local),
                        events.append, resolver, udp=udp)
    return proxy, events, resolver


async def _exchange(port: int, data: bytes, *, read_until: bytes = b"", timeout: float = 10) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(data)
        received = b""
        with anyio.move_on_after(timeout):
            while True:
                try:
                    received += await stream.receive()
                except anyio.EndOfStream:
                    break
                if read_until and read_until in received:
                    break
        return received


async def test_http_absolute_form_allowed_and_rewritten(upstream):
    proxy, events, _ = _proxy(["allowed.test"])
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        reply = await _exchange(port, f"GET http://allowed.test:{upstream}/p?q=1 HTTP/1.1\r\nHost: allowed.test\r\n"
                                      "Proxy-Connection: keep-alive\r\nConnection: close\r\n\r\n".encode())
        tg.cancel_scope.cancel()
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"GET /p?q=1 0")
    assert _Upstream.seen[0][:3] == ("GET", "/p?q=1", f"allowed.test:{upstream}")  # the target's, always
    assert [(e.decision, e.protocol, e.host, e.port, e.method) for e in events] == [
        ("allow", "http", "allowed.test", upstream, "GET")]


@pytest.mark.parametrize("target, header, allowed, denied", [
    ("http://blocked.test/", "blocked-by-allowlist", ["allowed.test"], []),
    ("http://deny.allowed.test/", "blocked-by-denylist", ["**.allowed.test"], ["deny.allowed.test"]),
    ("http://nothing.test/", "blocked-by-allowlist", [], []),
])
async def test_http_blocked_gets_403_with_reason(target, header, allowed, denied):
    proxy, events, _ = _proxy(allowed, denied)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        reply = await _exchange(port, f"GET {target} HTTP/1.1\r\n\r\n".encode())
        tg.cancel_scope.cancel()
    assert reply.startswith(b"HTTP/1.1 403")
    assert f"x-proxy-error: {header}".encode() in reply
    assert events[0].decision == "deny" and "/" not in events[0].host


async def test_limited_mode_pins_and_rechecks_every_request(upstream):
    proxy, events, _ = _proxy(["allowed.test"], limited=True)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        pipelined = (f"GET http://allowed.test:{upstream}/one HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
                     f"POST http://allowed.test:{upstream}/two HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc").encode()
        reply = await _exchange(port, pipelined, read_until=b"blocked-by-method-policy")
        tg.cancel_scope.cancel()
    assert b"GET /one 0" in reply and b"x-proxy-error: blocked-by-method-policy" in reply
    assert [s[:2] for s in _Upstream.seen] == [("GET", "/one")]
    assert [(e.decision, e.reason, e.method) for e in events] == [("allow", "allowed", "GET"), ("deny", "method", "POST")]


async def test_one_destination_per_connection(upstream):
    proxy, _, _ = _proxy(["allowed.test", "other.test"])
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        reply = await _exchange(port, (f"GET http://allowed.test:{upstream}/a HTTP/1.1\r\n\r\n"
                                       f"GET http://other.test:{upstream}/b HTTP/1.1\r\n\r\n").encode(),
                                read_until=b"one destination")
        tg.cancel_scope.cancel()
    assert b"GET /a 0" in reply and b"400 Bad Request" in reply
    assert [s[1] for s in _Upstream.seen] == ["/a"]


async def test_chunked_and_sized_bodies_are_forwarded(upstream):
    proxy, _, _ = _proxy(["allowed.test"])
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        reply = await _exchange(port, (
            f"POST http://allowed.test:{upstream}/c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
            f"POST http://allowed.test:{upstream}/s HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
        ).encode(), read_until=b"POST /s 5")
        tg.cancel_scope.cancel()
    assert b"POST /c 7" in reply and b"POST /s 5" in reply
    assert [s[3] for s in _Upstream.seen] == [b"abcdefg", b"hello"]


async def test_the_host_header_is_the_targets(upstream):
    """Found by testing: the client's Host went through, so an allowed name could front for
    another site on a shared server (RFC 9112 3.2.2: a proxy replaces it)."""
    proxy, _, _ = _proxy(["allowed.test"])
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        reply = await _exchange(port, f"GET http://allowed.test:{upstream}/ HTTP/1.1\r\nHost: other.test\r\n"
                                      f"host: third.test\r\nConnection: close\r\n\r\n".encode())
        tg.cancel_scope.cancel()
    assert reply.startswith(b"HTTP/1.1 200")
    assert [seen[2] for seen in _Upstream.seen] == [f"allowed.test:{upstream}"]


@pytest.mark.parametrize("headers", [
    "Content-Length: 0\r\nContent-Length: 40",
    "Content-Length: 40\r\nTransfer-Encoding: chunked",
    "Transfer-Encoding: gzip, chunked",
    "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
    "Content-Length: +40",
    "Content-Length: \u00b2",
])
@pytest.mark.parametrize("first", [True, False])
async def test_a_body_framed_two_ways_is_refused(upstream, headers, first):
    """Found by testing: with two Content-Length headers the proxy took the last, and what it
    forwarded as a body the destination read as a second request, never judged."""
    proxy, _, _ = _proxy(["allowed.test"])
    smuggled = f"DELETE /smuggled HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
    request = f"GET http://allowed.test:{upstream}/x HTTP/1.1\r\n{headers}\r\n\r\n{smuggled}"
    if not first:
        request = f"GET http://allowed.test:{upstream}/before HTTP/1.1\r\n\r\n" + request
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        reply = await _exchange(port, request.encode("latin-1"), read_until=b"\n\n", timeout=5)
        tg.cancel_scope.cancel()
    assert b"400 Bad Request" in reply, reply
    assert [seen[1] for seen in _Upstream.seen] == ([] if first else ["/before"])


@pytest.mark.parametrize("body", ["Content-Length: {n}\r\n\r\n{smuggled}",
                                  "Transfer-Encoding: chunked\r\n\r\n{n:x}\r\n{smuggled}\r\n0\r\n\r\n"])
async def test_limited_mode_forwards_no_request_body(upstream, body):
    """Found by testing: a GET's body reached the destination, which took it for a POST."""
    proxy, events, _ = _proxy(["allowed.test"], limited=True)
    smuggled = "POST /smuggled HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 0\r\n\r\n"
    request = f"GET http://allowed.test:{upstream}/x HTTP/1.1\r\n" + body.format(n=len(smuggled), smuggled=smuggled)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        reply = await _exchange(port, request.encode(), read_until=b"without a body", timeout=5)
        tg.cancel_scope.cancel()
    assert reply.startswith(b"HTTP/1.1 403") and b"x-proxy-error: blocked-by-method-policy" in reply, reply
    assert _Upstream.seen == []
    assert [(e.decision, e.reason, e.method) for e in events] == [("deny", "method", "GET")]


async def test_a_huge_chunk_is_streamed_not_held(echo):
    """Found by testing: one chunk-size line of FFFFFFFFFFFF and the proxy held everything sent
    after it (the server at 2 GB). The echo server sends what it gets back as the 'response'."""
    proxy, _, _ = _proxy(["allowed.test"])
    piece = b"x" * 65536
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(f"POST http://allowed.test:{echo}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "FFFFFFFFFFFF\r\n".encode())
            received = 0
            with anyio.fail_after(20):
                for _ in range(64):  # 4 MiB of a chunk that never ends
                    await stream.send(piece)
                while received < 3 * 1024 * 1024:
                    received += len(await stream.receive())
        tg.cancel_scope.cancel()
    assert received >= 3 * 1024 * 1024


async def test_a_silent_client_is_let_go(monkeypatch, echo):
    from codespace_linux_sandbox.proxy import connections

    monkeypatch.setattr(connections, "REQUEST_TIMEOUT_S", 0.5)
    proxy, _, _ = _proxy(["allowed.test"])
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        start = anyio.current_time()
        silent = await _exchange(port, b"", timeout=10)
        half_head = await _exchange(port, b"GET http://allowed.test/ HTTP/1.1\r\n", timeout=10)
        half_socks = await _exchange(port, b"\x05\x01\x00\x05\x01", timeout=10)
        tunnel = await _exchange(port, f"CONNECT allowed.test:{echo} HTTP/1.1\r\n\r\n".encode(), timeout=1.5)
        elapsed = anyio.current_time() - start
        tg.cancel_scope.cancel()
    assert silent == half_head == b"" and half_socks == b"\x05\x00"
    assert tunnel.startswith(b"HTTP/1.1 200")  # a tunnel, once open, may stay quiet
    assert elapsed < 6, elapsed


async def test_one_route_cannot_take_every_connection(monkeypatch, echo):
    """Found by testing: one command's 20,000 idle connections to its route exhausted the
    server's descriptors (read_file: EMFILE). A route gets a share; the rest wait."""
    from codespace_linux_sandbox.proxy import server

    monkeypatch.setattr(server, "connection_limits", lambda: (12, 6))
    proxy, _, _ = _proxy(["allowed.test"])
    async with anyio.create_task_group() as tg:
        first = await tg.start(proxy.serve_tcp)
        second = await tg.start(proxy.serve_tcp)
        idle = [await anyio.connect_tcp("127.0.0.1", first) for _ in range(10)]
        await anyio.sleep(0.3)
        assert proxy.active == 6
        other = await _exchange(second, f"CONNECT allowed.test:{echo} HTTP/1.1\r\n\r\nping".encode(),
                                read_until=b"ping", timeout=5)
        assert other.endswith(b"ping")  # another route still has its share
        for stream in idle:
            await stream.aclose()
        again = await _exchange(first, f"CONNECT allowed.test:{echo} HTTP/1.1\r\n\r\nping".encode(),
                                read_until=b"ping", timeout=5)
        tg.cancel_scope.cancel()
    assert again.endswith(b"ping")


async def test_https_absolute_form_is_refused():
    proxy, _, _ = _proxy(["allowed.test"])
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        reply = await _exchange(port, b"GET https://allowed.test/ HTTP/1.1\r\n\r\n")
        tg.cancel_scope.cancel()
    assert reply.startswith(b"HTTP/1.1 400") and b"CONNECT" in reply


async def test_connect_tunnel_and_refusal(echo):
    proxy, events, _ = _proxy(["allowed.test"])
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        reply = await _exchange(port, f"CONNECT allowed.test:{echo} HTTP/1.1\r\n\r\nping".encode(), read_until=b"ping")
        refused = await _exchange(port, f"CONNECT blocked.test:{echo} HTTP/1.1\r\n\r\n".encode())
        tg.cancel_scope.cancel()
    assert reply == b"HTTP/1.1 200 Connection Established\r\n\r\nping"
    assert refused.startswith(b"HTTP/1.1 403") and b"blocked-by-allowlist" in refused
    assert [(e.protocol, e.decision) for e in events] == [("connect", "allow"), ("connect", "deny")]


def _socks_connect(host: str, port: int) -> bytes:
    if host.replace(".", "").isdigit():
        return b"\x05\x01\x00\x01" + socket.inet_aton(host) + struct.pack("!H", port)
    return b"\x05\x01\x00\x03" + bytes([len(host)]) + host.encode() + struct.pack("!H", port)


async def test_socks5_connect_and_replies(echo):
    proxy, events, _ = _proxy(["allowed.test", "127.0.0.1"])
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        ok = await _exchange(port, b"\x05\x01\x00" + _socks_connect("allowed.test", echo) + b"hi", read_until=b"hi")
        by_ip = await _exchange(port, b"\x05\x01\x00" + _socks_connect("127.0.0.1", echo) + b"yo", read_until=b"yo")
        denied = await _exchange(port, b"\x05\x01\x00" + _socks_connect("blocked.test", 80))
        udp = await _exchange(port, b"\x05\x01\x00\x05\x03\x00\x01" + socket.inet_aton("127.0.0.1") + b"\x00\x35")
        no_auth = await _exchange(port, b"\x05\x01\x02")
        tg.cancel_scope.cancel()
    assert ok[:4] == b"\x05\x00\x05\x00" and ok.endswith(b"hi")
    assert by_ip.endswith(b"yo")
    assert denied[2:4] == b"\x05\x02"  # connection not allowed by ruleset
    assert udp[2:4] == b"\x05\x07"  # UDP ASSOCIATE: command not supported
    assert no_auth == b"\x05\xff"
    assert [e.decision for e in events] == ["allow", "allow", "deny", "deny"]


async def test_rebinding_to_private_addresses_is_blocked(upstream):
    table = {"rebind.test": ["10.0.0.5"], "mixed.test": ["192.88.99.1", "127.0.0.1"],
             "mapped.test": ["::ffff:127.0.0.1"]}
    proxy, events, _ = _proxy(["rebind.test", "mixed.test", "mapped.test", "127.0.0.1"], local=False, table=table)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        replies = [await _exchange(port, f"GET http://{h}:{upstream}/ HTTP/1.1\r\n\r\n".encode())
                   for h in ("rebind.test", "mixed.test", "mapped.test", "127.0.0.1")]
        tg.cancel_scope.cancel()
    for reply in replies:
        assert reply.startswith(b"HTTP/1.1 403") and b"local or private" in reply
    assert {e.reason for e in events} == {"private-address"}
    assert _Upstream.seen == []


async def test_resolution_happens_once_and_the_checked_address_is_used(upstream):
    class Flipping(Resolver):
        async def __call__(self, host, port):
            self.calls.append(host)
            return ["127.0.0.1"] if len(self.calls) == 1 else ["10.9.9.9"]

    events = []
    resolver = Flipping({})
    proxy = EgressProxy(DomainRules(["allowed.test"], [], allow_local_binding=True), events.append, resolver)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        reply = await _exchange(port, (f"GET http://allowed.test:{upstream}/1 HTTP/1.1\r\n\r\n"
                                       f"GET http://allowed.test:{upstream}/2 HTTP/1.1\r\nConnection: close\r\n\r\n"
                                       ).encode(), read_until=b"GET /2 0")
        tg.cancel_scope.cancel()
    assert b"GET /1 0" in reply and b"GET /2 0" in reply
    assert resolver.calls == ["allowed.test"]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_200_concurrent_tunnels_leave_nothing_behind(echo):
    proxy, events, _ = _proxy(["allowed.test"])
    payload = os.urandom(32 * 1024)
    async with anyio.create_task_group() as outer:
        port = await outer.start(proxy.serve_tcp)
        await anyio.sleep(0.05)
        fds_before, tasks_before = _open_fds(), len(anyio.get_running_tasks())

        async def tunnel() -> None:
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(f"CONNECT allowed.test:{echo} HTTP/1.1\r\n\r\n".encode())
                head = b""
                while b"\r\n\r\n" not in head:
                    head += await stream.receive()
                assert head.startswith(b"HTTP/1.1 200")
                await stream.send(payload)
                got = head.split(b"\r\n\r\n", 1)[1]
                while len(got) < len(payload):
                    got += await stream.receive()
                assert got == payload

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(200):
                    tg.start_soon(tunnel)
        with anyio.fail_after(10):
            while proxy.active or _open_fds() > fds_before or len(anyio.get_running_tasks()) > tasks_before:
                await anyio.sleep(0.05)
        outer.cancel_scope.cancel()
    assert len(events) == 200 and {e.decision for e in events} == {"allow"}


@pytest.fixture
def udp_echo():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                data, peer = sock.recvfrom(65535)
            except OSError:
                continue
            sock.sendto(b"echo:" + data, peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join()
    sock.close()


def _udp_header(host: str, port: int) -> bytes:
    if host.replace(".", "").isdigit():
        return b"\0\0\0\x01" + socket.inet_aton(host) + struct.pack("!H", port)
    return b"\0\0\0\x03" + bytes([len(host)]) + host.encode() + struct.pack("!H", port)


async def _associate(port: int):
    stream = await anyio.connect_tcp("127.0.0.1", port)
    await stream.send(b"\x05\x01\x00\x05\x03\x00\x01" + bytes(4) + bytes(2))
    reply = b""
    while len(reply) < 12:
        reply += await stream.receive()
    return stream, reply


async def test_socks5_udp_relays_allowed_datagrams_and_drops_the_rest(udp_echo):
    proxy, events, _ = _proxy(["allowed.test"], ["denied.test"], udp=True,
                              table={"allowed.test": ["127.0.0.1"], "denied.test": ["127.0.0.1"]})
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        stream, reply = await _associate(port)
        assert reply[:2] == b"\x05\x00" and reply[2:4] == b"\x05\x00" and reply[4:6] == b"\x00\x01"
        relay = (socket.inet_ntoa(reply[6:10]), struct.unpack("!H", reply[10:12])[0])
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.settimeout(5)
        try:
            for n in range(3):  # one verdict per destination, whatever the number of datagrams
                client.sendto(_udp_header("allowed.test", udp_echo) + f"ping{n}".encode(), relay)
                answer, _ = await anyio.to_thread.run_sync(client.recvfrom, 65535)  # the proxy shares this loop
                assert answer == _udp_header("127.0.0.1", udp_echo) + f"echo:ping{n}".encode()
            client.sendto(_udp_header("denied.test", udp_echo) + b"secret", relay)
            client.sendto(_udp_header("unlisted.test", udp_echo) + b"secret", relay)
            client.sendto(b"\0\0\x01\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", udp_echo) + b"frag", relay)
            client.settimeout(1)
            with pytest.raises(TimeoutError):
                await anyio.to_thread.run_sync(client.recvfrom, 65535)
        finally:
            client.close()
        await stream.aclose()  # the association ends with its TCP connection
        await anyio.sleep(0.2)
        tg.cancel_scope.cancel()
    assert [(e.protocol, e.host, e.decision, e.reason) for e in events] == [
        ("socks5-udp", "allowed.test", "allow", "allowed"),
        ("socks5-udp", "denied.test", "deny", "denylist"),
        ("socks5-udp", "unlisted.test", "deny", "allowlist"),
    ]
    assert proxy.active == 0


async def test_socks5_udp_is_refused_unless_enabled():
    proxy, events, _ = _proxy(["allowed.test"])
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        stream, reply = await _associate(port)
        await stream.aclose()
        tg.cancel_scope.cancel()
    assert reply[2:4] == b"\x05\x07"
    assert [(e.decision, e.reason) for e in events] == [("deny", "socks-udp-disabled")]


async def test_socks5_udp_in_limited_mode_is_refused(udp_echo):
    proxy, events, _ = _proxy(["allowed.test"], udp=True, limited=True)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        stream, reply = await _associate(port)
        relay = (socket.inet_ntoa(reply[6:10]), struct.unpack("!H", reply[10:12])[0])
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.settimeout(1)
        try:
            client.sendto(_udp_header("allowed.test", udp_echo) + b"x", relay)
            with pytest.raises(TimeoutError):
                await anyio.to_thread.run_sync(client.recvfrom, 65535)
        finally:
            client.close()
        await stream.aclose()
        tg.cancel_scope.cancel()
    assert [(e.decision, e.reason) for e in events] == [("deny", "method")]


# -- the proxy's own listeners and this host's own addresses ---------------------------------


async def test_the_proxy_is_never_its_own_destination(echo):
    """Found by testing: with allow_local_binding on, `CONNECT localhost:<proxy port>` reached
    the proxy through itself, and the requests inside that tunnel were judged without the
    command's identity (the audit showed only localhost:<proxy port>)."""
    proxy, events, _ = _proxy(["*"], table={"self.test": ["127.0.0.1"], "allowed.test": ["127.0.0.1"]})
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        other = await tg.start(proxy.serve_tcp)  # a second listener (a Landlock route's) is the proxy too
        inner = f"CONNECT allowed.test:{echo} HTTP/1.1\r\n\r\nping"
        tunnels = [await _exchange(port, f"CONNECT {target} HTTP/1.1\r\n\r\n{inner}".encode(), read_until=b"\n\n",
                                   timeout=5)
                   for target in (f"127.0.0.1:{port}", f"self.test:{port}", f"0.0.0.0:{port}",
                                  f"[::ffff:127.0.0.1]:{port}", f"127.0.0.1:{other}")]
        plain = await _exchange(port, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n".encode())
        socks = await _exchange(port, b"\x05\x01\x00" + _socks_connect("127.0.0.1", port))
        echoed = await _exchange(port, f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\nping".encode(), read_until=b"ping")
        tg.cancel_scope.cancel()
    for reply in (*tunnels, plain):
        assert reply.startswith(b"HTTP/1.1 403") and b"x-proxy-error: blocked-by-loop-policy" in reply, reply
        assert b"the destination is this proxy itself" in reply
    assert socks[2:4] == b"\x05\x02"  # connection not allowed by ruleset
    assert echoed.endswith(b"ping")  # other local destinations stay allowed with allow_local_binding
    assert [(e.decision, e.reason, e.port) for e in events] == [("deny", "proxy-itself", port)] * 4 + [
        ("deny", "proxy-itself", other), ("deny", "proxy-itself", port), ("deny", "proxy-itself", port),
        ("allow", "allowed", echo)]
    assert not proxy.checkpoint.own_ports  # nothing is left refused once the listeners are gone


async def test_a_udp_relay_is_never_its_own_destination():
    """The relay an association gets on this host is the proxy too: a datagram sent to it
    through itself would be judged again."""
    proxy, events, _ = _proxy(["*"], udp=True)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        stream, reply = await _associate(port)
        relay = (socket.inet_ntoa(reply[6:10]), struct.unpack("!H", reply[10:12])[0])
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            inner = _udp_header("127.0.0.1", 9) + b"x"
            client.sendto(_udp_header("127.0.0.1", relay[1]) + inner, relay)
            with anyio.fail_after(5):
                while not events:
                    await anyio.sleep(0.02)
            await anyio.sleep(0.2)  # an inner datagram, had it been relayed, would be judged by now
        finally:
            client.close()
        await stream.aclose()
        tg.cancel_scope.cancel()
    assert [(e.protocol, e.port, e.decision, e.reason) for e in events] == [
        ("socks5-udp", relay[1], "deny", "proxy-itself")]


NAMESPACED = r"""
import json, socket, struct, subprocess, sys, threading
import anyio
from codespace_linux_sandbox.proxy.rules import DomainRules
from codespace_linux_sandbox.proxy.server import EgressProxy

def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)

service = socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
def answer():
    while True:
        conn, _ = service.accept()
        conn.sendall(b"a host service\n")
        conn.close()
threading.Thread(target=answer, daemon=True).start()
port = service.getsockname()[1]

async def resolver(host, _port):
    return {"self.test": ["192.88.99.1"]}[host]

async def exchange(proxy_port, data):
    async with await anyio.connect_tcp("127.0.0.1", proxy_port) as stream:
        await stream.send(data)
        received = b""
        with anyio.move_on_after(5):
            while True:
                try:
                    received += await stream.receive()
                except anyio.EndOfStream:
                    break
        return received.decode("latin-1")

async def main():
    events = []
    proxy = EgressProxy(DomainRules(["*"], []), events.append, resolver)
    async with anyio.create_task_group() as tg:
        proxy_port = await tg.start(proxy.serve_tcp)
        connect = lambda host: exchange(proxy_port, f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
        before = await connect("192.88.99.1")  # not this host's yet: nothing answers there
        ip("addr", "add", "192.88.99.1/32", "dev", "cs0")
        ip("addr", "add", "2001:db8:1::1/128", "dev", "cs0", "nodad")
        added = [await connect(host) for host in ("192.88.99.1", "[2001:db8:1::1]", "[::ffff:192.88.99.1]",
                                                   "self.test")]
        socks = await exchange(proxy_port, b"\x05\x01\x00\x05\x01\x00\x01" + socket.inet_aton("192.88.99.1")
                               + struct.pack("!H", port))
        ip("addr", "del", "192.88.99.1/32", "dev", "cs0")
        removed = await connect("192.88.99.1")
        tg.cancel_scope.cancel()
    print(json.dumps({"before": before, "added": added, "socks": socks.encode("latin-1").hex(), "removed": removed,
                      "events": [(e.host, e.decision, e.reason) for e in events]}))

ip("link", "set", "lo", "up")
ip("link", "add", "cs0", "type", "veth", "peer", "name", "cs1")  # veth: kernels without the dummy module have it
ip("link", "set", "cs0", "up")
ip("link", "set", "cs1", "up")
anyio.run(main)
"""


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"),
                    reason="needs root, iproute2 and unshare for a network namespace of the test's own")
async def test_this_hosts_own_addresses_are_local():
    """Found by testing: with allowed_domains = ["*"], `CONNECT <the host's own public
    address>:<port>` reached a host service bound to 0.0.0.0: only fixed ranges were local.
    In a network namespace of its own (so the addresses are really the host's, and may come
    and go): an interface gets an address outside every fixed range while the proxy runs."""
    result = await anyio.run_process(["unshare", "--net", "--", sys.executable, "-c", NAMESPACED], check=False)
    assert result.returncode == 0, result.stderr.decode()
    seen = json.loads(result.stdout)
    assert seen["before"].startswith("HTTP/1.1 502"), seen  # allowed, but nothing answers there
    for reply in seen["added"]:
        assert reply.startswith("HTTP/1.1 403") and "x-proxy-error: blocked-by-allowlist" in reply, seen
        assert "the destination is a local or private address" in reply and "a host service" not in reply
    assert bytes.fromhex(seen["socks"])[2:4] == b"\x05\x02", seen
    assert seen["removed"].startswith("HTTP/1.1 502"), seen  # no longer this host's: judged remote again
    assert [tuple(e) for e in seen["events"]] == [
        ("192.88.99.1", "allow", "allowed"), ("192.88.99.1", "deny", "private-address"),
        ("2001:db8:1::1", "deny", "private-address"), ("::ffff:c058:6301", "deny", "private-address"),
        ("self.test", "deny", "private-address"), ("192.88.99.1", "deny", "private-address"),
        ("192.88.99.1", "allow", "allowed")]
