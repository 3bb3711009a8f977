"""network.allow_unix_sockets: a listed host socket is reachable by connect() (the helper
brokers it, see unix_broker.py); nothing else is, whatever the command does to the address
or to the path meanwhile."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest
from codespace_linux_sandbox.backend import interpreter
from test_unix_sockets import _crossings, _probe, host_sockets  # noqa: F401 - fixture

RACE = r"""
import ctypes, socket, sys, threading
allowed, other = sys.argv[1].encode(), sys.argv[2].encode()
size = 2 + max(len(allowed), len(other)) + 1
buf = ctypes.create_string_buffer(size)
def fill(path):
    ctypes.memmove(buf, socket.AF_UNIX.to_bytes(2, sys.byteorder) + path + b"\0" * (size - 2 - len(path)), size)
fill(allowed)
stop = False
def flip():
    while not stop:
        fill(other); fill(allowed)
threading.Thread(target=flip, daemon=True).start()
libc = ctypes.CDLL(None, use_errno=True)
ok = refused = 0
for _ in range(int(sys.argv[3])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if libc.connect(s.fileno(), buf, size) == 0:
        ok += 1
    else:
        refused += 1
    s.close()
stop = True
print(ok, refused)
"""


# A command's own supervisor: its filter answers connect() with USER_NOTIF and lets every call
# CONTINUE. Were it installed, the kernel would hand it the notifications (between equal actions the
# newest filter wins); it refuses a second listener in one filter tree (EBUSY), which this checks.
OWN_SUPERVISOR = r"""
import ctypes, os, socket, struct, sys, threading
machine = os.uname().machine
nr_seccomp, nr_connect = {"x86_64": (317, 42), "aarch64": (277, 203)}[machine]
arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[machine]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
op = lambda code, jt, jf, k: struct.pack("=HBBI", code, jt, jf, k)
prog = b"".join((op(0x20, 0, 0, 4), op(0x15, 0, 3, arch), op(0x20, 0, 0, 0), op(0x15, 0, 1, nr_connect),
                 op(0x06, 0, 0, 0x7FC00000), op(0x06, 0, 0, 0x7FFF0000)))
buf = ctypes.create_string_buffer(prog, len(prog))
fprog = ctypes.create_string_buffer(struct.pack("=H6xQ", len(prog) // 8, ctypes.addressof(buf)), 16)
listener = libc.syscall(ctypes.c_long(nr_seccomp), ctypes.c_uint(1), ctypes.c_uint(8), fprog)
print("installed" if listener >= 0 else f"install refused {ctypes.get_errno()}")
def supervise():
    while True:
        notif = ctypes.create_string_buffer(80)
        if libc.ioctl(listener, 0xC0502100, notif) != 0:
            return
        ident = struct.unpack_from("=Q", notif.raw)[0]
        resp = ctypes.create_string_buffer(struct.pack("=QqiI", ident, 0, 0, 1), 24)  # FLAG_CONTINUE
        libc.ioctl(listener, 0xC0182101, resp)
if listener >= 0:
    threading.Thread(target=supervise, daemon=True).start()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1]); print("connected")
except OSError as e:
    print("errno", e.errno)
"""


def _serve(path: str, log: list[str], label: str) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o666)
    server.listen(512)

    def loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            log.append(label)
            conn.close()

    threading.Thread(target=loop, daemon=True).start()
    return server


def test_only_the_listed_socket_is_reachable(sandbox_env, host_sockets):  # noqa: F811
    targets, log = host_sockets
    listed = targets["stream0600"][0]
    sandbox_env.sandbox.allow_unix_sockets = (listed,)
    result = _probe([], targets, sandbox_env.run)
    crossed = _crossings(log)
    assert result["stream0600:connect"] == "sent", result
    assert crossed and {line.split(":")[0] for line in crossed} == {"stream0600"}, (crossed, result)
    # the listed one only by connect; everything else as with no list at all
    assert not [k for k, v in result.items() if v == "sent" and not k.startswith("stream0600:connect")
                and not k.split(":")[1].startswith("pair-s")], result


def test_a_racing_thread_cannot_redirect_a_brokered_connect(sandbox_env, tmp_path_factory):
    where = tmp_path_factory.mktemp("sockets")
    os.chmod(where, 0o755)
    seen: list[str] = []
    servers = [_serve(str(where / "allowed.sock"), seen, "allowed"), _serve(str(where / "other.sock"), seen, "other")]
    try:
        sandbox_env.sandbox.allow_unix_sockets = (str(where / "allowed.sock"),)
        code, out, err = sandbox_env.run([interpreter(), "-I", "-S", "-c", RACE, str(where / "allowed.sock"),
                                          str(where / "other.sock"), "1500"], timeout=120)
        assert code == 0, err
        ok, refused = map(int, out.split())
        time.sleep(0.3)
        assert "other" not in seen, (ok, refused)
        assert ok > 0 and refused > 0 and seen.count("allowed") == ok, (ok, refused, len(seen))
    finally:
        for server in servers:
            server.close()


def test_a_supervisor_of_the_commands_own_cannot_take_over(sandbox_env, tmp_path_factory):
    where = tmp_path_factory.mktemp("own")
    os.chmod(where, 0o755)
    seen: list[str] = []
    servers = [_serve(str(where / "allowed.sock"), seen, "allowed"), _serve(str(where / "other.sock"), seen, "other")]
    try:
        sandbox_env.sandbox.allow_unix_sockets = (str(where / "allowed.sock"),)
        code, out, err = sandbox_env.run([interpreter(), "-I", "-S", "-c", OWN_SUPERVISOR, str(where / "other.sock")])
        time.sleep(0.2)
        assert code == 0, err
        assert seen == [] and "connected" not in out.split(), (out, seen)
        assert "install refused 16" in out.splitlines(), out  # EBUSY: the broker's listener is there
    finally:
        for server in servers:
            server.close()


def test_a_listed_path_re_pointed_by_the_command_reaches_nothing_else(sandbox_env, tmp_path_factory):
    """A listed socket inside the workspace: the command replaces it with a symbolic link to
    another host socket; the helper follows no link, so the connect fails."""
    outside = tmp_path_factory.mktemp("outside")
    os.chmod(outside, 0o755)
    seen: list[str] = []
    listed = str(sandbox_env.ws / "sub" / "app.sock")
    servers = [_serve(listed, seen, "listed"), _serve(str(outside / "daemon.sock"), seen, "daemon")]
    try:
        sandbox_env.sandbox.allow_unix_sockets = (listed,)
        script = (f"import os, socket\nos.unlink({listed!r})\nos.symlink({str(outside / 'daemon.sock')!r}, {listed!r})\n"
                  f"s = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({listed!r}); print('connected')\n"
                  "except OSError as e:\n    print('errno', e.errno)\n")
        code, out, err = sandbox_env.run([interpreter(), "-I", "-S", "-c", script])
        time.sleep(0.2)
        assert code == 0, err
        assert out.strip() == "errno 40" and seen == [], (out, seen)  # ELOOP
    finally:
        for server in servers:
            server.close()


def test_cannot_enforce_names_how_listed_sockets_are_reached(sandbox_env):
    sandbox_env.sandbox.allow_unix_sockets = ("/run/example.sock",)
    info = sandbox_env.sandbox.info()
    assert [line for line in info.cannot_enforce if "allow_unix_sockets" in line and "SO_PEERCRED" in line], info


@pytest.mark.parametrize("sockets", [{}, {"/x": "/x"}])
def test_the_helper_refuses_a_mismatched_handshake(sandbox_env, sockets):
    """restricted_unix leaves connect() to the broker: without a list (or a list with the plain
    restricted filter) the helper refuses to run, instead of running with connect open."""
    from codespace_linux_sandbox import helper, seccomp
    from codespace_linux_sandbox.backend import _memfd  # noqa: F401 - the same payload path

    hs = sandbox_env.sandbox.handshake(sandbox_env.command(["/bin/true"]), sandbox_env.workspace and
                                       __import__("codespace.sandboxing", fromlist=["layout_for"]).layout_for(
                                           sandbox_env.workspace))
    raw = json.loads(hs.encode())
    raw["options"]["seccomp"] = "restricted" if sockets else "restricted_unix"
    raw["policy"]["allow_unix_sockets"] = sockets
    read, write = os.pipe()
    os.write(write, seccomp.program(raw["options"]["seccomp"]))
    os.close(write)
    assert helper.run(json.dumps(raw).encode(), read) == 125


@pytest.fixture
def listed_socket(tmp_path_factory):
    where = tmp_path_factory.mktemp("listed")
    os.chmod(where, 0o755)
    seen: list[str] = []
    server = _serve(str(where / "agent.sock"), seen, "listed")
    yield str(where / "agent.sock"), seen
    server.close()


@pytest.mark.anyio
async def test_the_policy_knob_reaches_the_sandbox(make_app, engine, mode, listed_socket):
    """[network] allow_unix_sockets in the policy file, through a real MCP session: the command
    connects; workspace_info and doctor name how."""
    from codespace.doctor import run_checks
    from codespace.testing import call_ok, connect

    path, seen = listed_socket
    policy = f'[network]\nallow_unix_sockets = [{path!r}]\n[sandbox]\nengine = "{engine}"\n'.replace("'", '"')
    app = make_app(policy)
    script = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\nprint('connected')\n"
    async with connect(app, mode=mode) as client:
        out = await call_ok(client, "exec", {"command": [interpreter(), "-I", "-S", "-c", script]})
        assert out["sandboxed"] and out["output"] == "connected\n", out
        info = await call_ok(client, "workspace_info")
        assert [line for line in info["sandbox"]["cannot_enforce"] if path in line], info["sandbox"]
    time.sleep(0.2)
    assert seen == ["listed"]
    checks = {c.name: c for c in run_checks(make_app(policy))}
    assert path in checks["sandbox cannot enforce"].detail
