"""Network 'allowlist' end to end: sandboxed commands (MCP exec, both engines) reach a real
test host only through the egress proxy, and every decision lands in the audit trail.

The test host lives in a network namespace of its own (``ip netns``, a veth pair, an
address in 192.88.99.0/24, which is not among the proxy's blocked ranges) and runs an HTTP
server and a TCP echo server there. Its names are real: lines added to /etc/hosts for the
module and removed afterwards, so the proxy resolves them through the system resolver.
Needs root and iproute2; skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from conftest import require_engine

from codespace.testing import call_ok, connect

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(os.getuid() != 0 or shutil.which("ip") is None,
                       reason="needs root and iproute2 (ip netns) for the test host"),
]
PY = [os.path.realpath(sys.executable), "-I", "-S", "-c"]

HOST_SERVER = """
import http.server, socketserver, sys, threading
log = open(sys.argv[2], "a", buffering=1)
class Web(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        log.write(f"{self.command} {self.path}\\n")
        reply = f"hello from the test host: {self.command} {len(body)}\\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
    do_GET = do_POST = do_PUT = answer
    def log_message(self, *args):
        pass
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)
class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = daemon_threads = True
    request_queue_size = 1024
echo = Server((sys.argv[1], 7), Echo)
threading.Thread(target=echo.serve_forever, daemon=True).start()
class UdpEcho(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        sock.sendto(b"udp echo: " + data, self.client_address)
udp = socketserver.ThreadingUDPServer((sys.argv[1], 7), UdpEcho)
threading.Thread(target=udp.serve_forever, daemon=True).start()
web = Server((sys.argv[1], 80), Web)
print("ready", flush=True)
web.serve_forever()
"""


@dataclass
class NetHost:
    ip: str
    allowed: str
    denied: str
    unlisted: str
    rebind: str
    log: Path

    def hits(self) -> str:
        return self.log.read_text()


def _ip(*args: str, ns: str | None = None) -> None:
    argv = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def test_host(tmp_path_factory):
    tag = f"{os.getpid()}"
    ns, host_if, ns_if = f"cs-test-{tag}", f"cs{tag[-6:]}h", f"cs{tag[-6:]}n"
    block = 4 * (os.getpid() % 60 + 1)  # a /30 of our own: concurrent runs do not collide
    host_ip, ns_ip = f"192.88.99.{block + 1}", f"192.88.99.{block + 2}"
    log = tmp_path_factory.mktemp("test-host") / "requests.log"
    log.touch()
    marker = f"# codespace-test-{tag}"
    names = {kind: f"{kind}-{tag}.codespace.example" for kind in ("allowed", "denied", "unlisted", "rebind")}
    server = None
    try:
        with open("/etc/hosts", "a") as hosts:
            for kind, name in names.items():
                hosts.write(f"{'10.1.2.3' if kind == 'rebind' else ns_ip} {name} {marker}\n")
    except OSError as exc:
        pytest.skip(f"/etc/hosts is not writable here: {exc}")
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("addr", "add", f"{ns_ip}/30", "dev", ns_if, ns=ns)
        _ip("link", "set", ns_if, "up", ns=ns)
        _ip("link", "set", "lo", "up", ns=ns)
        server = subprocess.Popen(["ip", "netns", "exec", ns, os.path.realpath(sys.executable), "-I", "-c", HOST_SERVER,
                                   ns_ip, str(log)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert server.stdout.readline() == b"ready\n", server.stderr.read()
        yield NetHost(ns_ip, names["allowed"], names["denied"], names["unlisted"], names["rebind"], log)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        with open("/etc/hosts") as hosts:
            kept = [line for line in hosts if marker not in line]
        with open("/etc/hosts", "w") as hosts:  # in place: /etc/hosts may be a bind mount
            hosts.writelines(kept)


def _policy(host: NetHost, engine: str, mode: str = "full", udp: bool = False) -> str:
    return textwrap.dedent(f"""
        [network]
        access = "allowlist"
        allowed_domains = ["{host.allowed}", "{host.denied}", "{host.rebind}"]
        denied_domains = ["{host.denied}"]
        mode = "{mode}"
        enable_socks5_udp = {str(udp).lower()}
        [sandbox]
        engine = "{engine}"
        """)


@pytest.fixture
def app_for(make_app, ws, engine, test_host):
    require_engine(engine)

    def make(mode: str = "full", udp: bool = False):
        (ws / "sub").mkdir(exist_ok=True)
        return make_app(_policy(test_host, engine, mode, udp))

    return make


def _service(app):
    service = app.backends.sandbox().proxy
    assert service is not None and service.running
    return service


async def _exec(client, command: str, operation_id: str, **extra) -> dict:
    return await call_ok(client, "exec", {"command": command, "operation_id": operation_id, **extra})


async def _audit(app, operation_id: str) -> list:
    with anyio.fail_after(10):
        while True:
            events = await app.store.network(operation_id=operation_id, limit=1000)
            if events:
                await anyio.sleep(0.3)  # a flush may still be on its way
                return await app.store.network(operation_id=operation_id, limit=1000)
            await anyio.sleep(0.05)


async def test_allowlisted_traffic_goes_through_the_proxy(app_for, test_host, engine):
    app = app_for()
    async with connect(app) as client:
        plain = await _exec(client, f"curl -sS -m 10 'http://{test_host.allowed}/secret/path?token=SECRET'", "op-plain")
        assert plain["exit_code"] == 0 and plain["output"] == "hello from the test host: GET 0\n", plain
        tunnel = await _exec(client, f"curl -sS -m 10 -p http://{test_host.allowed}/via-connect", "op-connect")
        assert tunnel["output"] == "hello from the test host: GET 0\n", tunnel
        socks = await _exec(client, f'curl -sS -m 10 --proxy "$ALL_PROXY" http://{test_host.allowed}/via-socks',
                            "op-socks")
        assert socks["output"] == "hello from the test host: GET 0\n", socks
        script = f"import urllib.request; print(urllib.request.urlopen('http://{test_host.allowed}/py').read().decode())"
        python = await call_ok(client, "exec", {"command": [*PY[:-1], "-c", script], "operation_id": "op-python"})
        assert python["output"].startswith("hello from the test host"), python
        events = {op: await _audit(app, op) for op in ("op-plain", "op-connect", "op-socks", "op-python")}
        shown = await call_ok(client, "get_operation", {"operation_id": "op-plain"})
    assert [(e.decision, e.protocol, e.host, e.port, e.method) for e in events["op-plain"]] == [
        ("allow", "http", test_host.allowed, 80, "GET")]
    assert [(e.decision, e.protocol) for e in events["op-connect"]] == [("allow", "connect")]
    assert [(e.decision, e.protocol) for e in events["op-socks"]] == [("allow", "socks5")]
    assert [e.decision for e in events["op-python"]] == ["allow"]
    assert [(n["decision"], n["host"]) for n in shown["network"]] == [("allow", test_host.allowed)]
    # Never a full URL: host, port and method only.
    dumped = json.dumps([e.model_dump() for es in events.values() for e in es])
    assert "SECRET" not in dumped and "secret/path" not in dumped
    cli = subprocess.run([sys.executable, "-m", "codespace", "ops", "net", "--json", "--workspace", str(app.workspace.root),
                          "--state-dir", str(app.workspace.state_dir), "--operation", "op-socks"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert [(e["operation_id"], e["protocol"]) for e in json.loads(cli.stdout)] == [("op-socks", "socks5")]
    assert "GET /secret/path?token=SECRET" in test_host.hits()


async def test_denied_unlisted_and_rebinding_hosts_are_refused(app_for, test_host, engine):
    app = app_for()
    async with connect(app) as client:
        denied = await _exec(client, f"curl -sS -m 10 -D - http://{test_host.denied}/denied", "op-denied")
        unlisted = await _exec(client, f"curl -sS -m 10 -D - http://{test_host.unlisted}/unlisted", "op-unlisted")
        rebind = await _exec(client, f"curl -sS -m 10 -D - http://{test_host.rebind}/rebind", "op-rebind")
        socks = await _exec(client, f'curl -sS -m 10 --proxy "$ALL_PROXY" http://{test_host.denied}/socks', "op-socks-no")
        connect_denied = await _exec(client, f"curl -sS -m 10 -p http://{test_host.unlisted}/", "op-connect-no")
        events = {op: await _audit(app, op) for op in
                  ("op-denied", "op-unlisted", "op-rebind", "op-socks-no", "op-connect-no")}
    assert denied["output"].startswith("HTTP/1.1 403") and "x-proxy-error: blocked-by-denylist" in denied["output"]
    assert unlisted["output"].startswith("HTTP/1.1 403") and "x-proxy-error: blocked-by-allowlist" in unlisted["output"]
    assert rebind["output"].startswith("HTTP/1.1 403") and "local or private" in rebind["output"]
    assert socks["exit_code"] != 0 and "hello" not in socks["output"]  # SOCKS reply 2: not allowed by ruleset
    assert connect_denied["exit_code"] != 0 and "403" in connect_denied["output"]
    assert [(e.decision, e.reason) for e in events["op-denied"]] == [("deny", "denylist")]
    assert [(e.decision, e.reason) for e in events["op-unlisted"]] == [("deny", "allowlist")]
    assert [(e.decision, e.reason) for e in events["op-rebind"]] == [("deny", "private-address")]
    assert [(e.protocol, e.reason) for e in events["op-socks-no"]] == [("socks5", "denylist")]
    assert [(e.protocol, e.reason) for e in events["op-connect-no"]] == [("connect", "allowlist")]
    assert not any(path in test_host.hits() for path in ("/denied", "/unlisted", "/rebind", "/socks"))


async def test_direct_egress_fails_closed(app_for, test_host, engine):
    """A program that ignores the proxy variables has no way out: no route (bubblewrap's own
    network namespace) or no permission (Landlock's TCP rules, seccomp's socket filter)."""
    probe = textwrap.dedent(f"""
        import socket
        def attempt(name, fn):
            try:
                fn()
                print(name, "CONNECTED")
            except OSError as exc:
                print(name, "refused", exc.errno)
        attempt("tcp", lambda: socket.create_connection(("{test_host.ip}", 80), timeout=3))
        attempt("echo", lambda: socket.create_connection(("{test_host.ip}", 7), timeout=3))
        attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("{test_host.ip}", 53)))
        attempt("unix", lambda: socket.socket(socket.AF_UNIX).connect("/run/codespace-nothing"))
        attempt("localhost", lambda: socket.create_connection(("127.0.0.1", 22), timeout=3))
        attempt("fastopen", lambda: socket.socket().sendto(b"GET /", 0x20000000, ("{test_host.ip}", 80)))
        attempt("sctp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132).connect(("{test_host.ip}", 80)))
        attempt("listen", lambda: socket.socket(socket.AF_INET6).listen())  # unbound: the kernel picks a port
        """)
    app = app_for()
    async with connect(app) as client:
        curl = await _exec(client, f"curl -sS -m 5 --noproxy '*' http://{test_host.allowed}/direct", "op-direct")
        raw = await call_ok(client, "exec", {"command": [*PY, probe], "operation_id": "op-raw"})
        await anyio.sleep(0.5)
        events = await app.store.network(operation_id="op-direct") + await app.store.network(operation_id="op-raw")
    assert curl["exit_code"] != 0 and "hello" not in curl["output"], curl
    lines = dict(line.split(" ", 1) for line in raw["output"].splitlines())
    assert set(lines) == {"tcp", "echo", "udp", "unix", "localhost", "fastopen", "sctp", "listen"}, raw["output"]
    # Under bubblewrap a listener is the command's own network namespace's: nobody outside reaches it.
    assert not any("CONNECTED" in result for name, result in lines.items() if name != "listen"), raw["output"]
    if engine == "landlock":
        # proxy_tcp: EPERM (listen: found by testing, the host's network reached a listener inside)
        assert lines["unix"] == lines["udp"] == lines["fastopen"] == lines["sctp"] == lines["listen"] == "refused 1"
        assert lines["tcp"] == "refused 13"  # Landlock: EACCES
    else:
        assert lines["tcp"] == "refused 101"  # ENETUNREACH: nothing but lo in the sandbox
        assert lines["unix"] == "refused 1"  # proxy-routed seccomp: no AF_UNIX sockets
    assert events == [] and "/direct" not in test_host.hits()


UDP_CLIENT = """
import os, socket, struct, sys
proxy_port = int(os.environ["ALL_PROXY"].rsplit(":", 1)[1])
control = socket.create_connection(("127.0.0.1", proxy_port), timeout=5)
control.sendall(b"\\x05\\x01\\x00")
assert control.recv(2) == b"\\x05\\x00"
control.sendall(b"\\x05\\x03\\x00\\x01" + bytes(6))
reply = control.recv(10)
if reply[1] != 0:
    print("associate refused", reply[1]); sys.exit(0)
relay = (socket.inet_ntoa(reply[4:8]), struct.unpack("!H", reply[8:10])[0])
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.settimeout(3)
for name in sys.argv[1:]:
    udp.sendto(b"\\0\\0\\0\\x03" + bytes([len(name)]) + name.encode() + struct.pack("!H", 7) + b"hi " + name.encode(), relay)
    try:
        data, _ = udp.recvfrom(65535)
        print(name, "answered", data[10:].decode())
    except TimeoutError:
        print(name, "silent")
"""


async def test_socks5_udp_through_the_proxy_when_enabled(app_for, test_host, engine):
    app = app_for(udp=True)
    async with connect(app) as client:
        out = await call_ok(client, "exec", {"command": [*PY, UDP_CLIENT, test_host.allowed, test_host.denied],
                                              "operation_id": "op-udp"})
        events = await _audit(app, "op-udp") if engine == "bubblewrap" else []
    lines = out["output"].splitlines()
    if engine == "landlock":
        # No namespace to keep UDP in: the proxy-tcp filter refuses UDP sockets, so UDP stays off.
        assert out["exit_code"] != 0 and "PermissionError" in out["output"], out
        return
    assert lines == [f"{test_host.allowed} answered udp echo: hi {test_host.allowed}", f"{test_host.denied} silent"], out
    assert sorted((e.protocol, e.host, e.decision) for e in events) == [
        ("socks5-udp", test_host.allowed, "allow"), ("socks5-udp", test_host.denied, "deny")]


async def test_socks5_udp_is_refused_by_default(app_for, test_host, engine):
    if engine == "landlock":
        pytest.skip("the Landlock engine refuses UDP sockets whatever the proxy offers (see the test above)")
    app = app_for()
    async with connect(app) as client:
        out = await call_ok(client, "exec", {"command": [*PY, UDP_CLIENT, test_host.allowed], "operation_id": "op-noudp"})
        events = await _audit(app, "op-noudp")
    assert out["output"].strip() == "associate refused 7", out
    assert [(e.decision, e.reason) for e in events] == [("deny", "socks-udp-disabled")]


async def test_limited_mode_allows_reading_only(app_for, test_host, engine):
    app = app_for("limited")
    async with connect(app) as client:
        get = await _exec(client, f"curl -sS -m 10 http://{test_host.allowed}/read", "op-get")
        post = await _exec(client, f"curl -sS -m 10 -D - -d data=1 http://{test_host.allowed}/write", "op-post")
        tunnel = await _exec(client, f"curl -sS -m 10 -p http://{test_host.allowed}/tunnel", "op-tunnel")
        socks = await _exec(client, f'curl -sS -m 10 --proxy "$ALL_PROXY" http://{test_host.allowed}/sx', "op-sx")
        events = {op: await _audit(app, op) for op in ("op-get", "op-post", "op-tunnel", "op-sx")}
    assert get["output"] == "hello from the test host: GET 0\n"
    assert post["output"].startswith("HTTP/1.1 403") and "x-proxy-error: blocked-by-method-policy" in post["output"]
    assert tunnel["exit_code"] != 0 and socks["exit_code"] != 0  # tunnels hide their requests: refused
    assert [(e.decision, e.method) for e in events["op-post"]] == [("deny", "POST")]
    assert {e.reason for op in ("op-tunnel", "op-sx") for e in events[op]} == {"method"}
    assert "POST /write" not in test_host.hits() and "/tunnel" not in test_host.hits()


TUNNELS = """
import os, socket, sys, threading
proxy = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1].split(":")
payload = os.urandom(32 * 1024)
failures = []
def tunnel():
    try:
        with socket.create_connection((proxy[0], int(proxy[1])), timeout=60) as s:
            s.sendall(f"CONNECT {sys.argv[1]}:7 HTTP/1.1\\r\\n\\r\\n".encode())
            head = b""
            while b"\\r\\n\\r\\n" not in head:
                head += s.recv(4096)
            assert head.startswith(b"HTTP/1.1 200"), head
            s.sendall(payload)
            got = head.split(b"\\r\\n\\r\\n", 1)[1]
            while len(got) < len(payload):
                got += s.recv(65536)
            assert got == payload
    except Exception as exc:
        failures.append(repr(exc))
threads = [threading.Thread(target=tunnel) for _ in range(200)]
for t in threads: t.start()
for t in threads: t.join()
print("failures", len(failures), failures[:3])
"""


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.in_process  # reads the proxy object of this process's sandbox
async def test_200_tunnels_from_inside_leave_nothing_behind(app_for, test_host, engine):
    app = app_for()
    async with connect(app) as client:
        service = _service(app)
        await _exec(client, "true", "op-warm-up")  # the warm helper and the first route come and go
        await anyio.sleep(0.3)
        fds, tasks = _open_fds(), len(anyio.get_running_tasks())
        out = await call_ok(client, "exec", {"command": [*PY, TUNNELS, test_host.allowed], "operation_id": "op-200",
                                             "timeout_ms": 120_000})
        assert out["exit_code"] == 0 and out["output"].startswith("failures 0 "), out
        with anyio.fail_after(10):
            while service.proxy.active or _open_fds() > fds or len(anyio.get_running_tasks()) > tasks:
                await anyio.sleep(0.05)
        events = await _audit(app, "op-200")
        assert not service._routes and not list(service.socket_dir.glob("*.sock"))
    assert len(events) == 200 and {(e.decision, e.protocol) for e in events} == {("allow", "connect")}


@pytest.mark.in_process  # reads the proxy object of this process's sandbox
async def test_routes_belong_to_one_command(app_for, test_host, engine):
    """Each command's route ends with it; under Landlock, one command cannot use another's port."""
    app = app_for()
    async with connect(app) as client:
        service = _service(app)
        first = await call_ok(client, "exec", {"command": 'echo "$HTTP_PROXY"; sleep 30', "yield_ms": 500,
                                               "operation_id": "op-first"})
        assert first["running"] and len(service._routes) == 1
        port = int(first["output"].strip().rsplit(":", 1)[1])
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')"
        other = await call_ok(client, "exec", {"command": [*PY, probe], "operation_id": "op-other"})
        await call_ok(client, "terminate", {"session_id": first["session_id"]})
        with anyio.fail_after(5):
            while service._routes:
                await anyio.sleep(0.05)
    assert not list(service.socket_dir.glob("*.sock"))
    if engine == "landlock":
        assert "CONNECTED" not in other["output"] and "Permission denied" in other["output"], other
    else:  # its own namespace: the port is its own listener, attributed to itself
        assert port == 3128 and "CONNECTED" in other["output"]


@pytest.mark.in_process  # reads the proxy object of this process's sandbox
@pytest.mark.skipif(importlib.util.find_spec("codespace_pty") is None, reason="codespace-pty is not installed")
async def test_terminal_sessions_use_the_proxy_too(make_app, ws, engine, test_host):
    """tty sessions take ``wrap`` (the host spawns the helper): the route is released when the
    helper's registration ends, not by the host."""
    require_engine(engine)
    (ws / "sub").mkdir()
    app = make_app(_policy(test_host, engine), plugins=("linux_sandbox", "pty"))
    async with connect(app) as client:
        service = _service(app)
        out = await call_ok(client, "exec", {"command": f"curl -sS -m 10 http://{test_host.allowed}/tty", "tty": True,
                                             "yield_ms": 15000, "operation_id": "op-tty"})
        assert "hello from the test host: GET 0" in out["output"] and out["exit_code"] == 0, out
        events = await _audit(app, "op-tty")
        with anyio.fail_after(5):
            while service._routes:
                await anyio.sleep(0.05)
    assert [(e.decision, e.host) for e in events] == [("allow", test_host.allowed)]
    assert not list(service.socket_dir.glob("*.sock"))


async def test_a_long_operation_id_still_gets_a_route_and_its_audit(app_for, test_host, engine):
    """The route's socket was named after the operation id: an agent's 128-character id pushed
    its path past sun_path's 108 bytes, and exec failed with an internal error."""
    app = app_for()
    operation_id = "op-" + "l" * 125
    async with connect(app) as client:
        out = await _exec(client, f"curl -sS -m 10 'http://{test_host.allowed}/long'", operation_id)
        assert out["exit_code"] == 0 and out["output"].startswith("hello from the test host"), out
        events = await _audit(app, operation_id)
        assert [e.decision for e in events] == ["allow"], events
