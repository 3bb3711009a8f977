"""network = "off": no Unix socket outside the sandbox is reachable, pathname or abstract
(issue: sendmsg with msg_name delivered datagrams to /dev/log-like host sockets in both
engines). Servers run outside the sandbox as root and as an unprivileged user: a root-owned
0600 stream socket, a 0666 datagram socket, a 0666 seqpacket socket and abstract stream and
datagram sockets. Every way of naming a destination is tried: connect, sendto, sendmsg with
msg_name (fresh sockets of each kind and socketpairs), sendmmsg. Zero crossings."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pytest
from codespace_linux_sandbox.backend import interpreter

TESTS = Path(__file__).parent
SERVER_USERS = ("root", "unprivileged")


def _unprivileged() -> tuple[int, int]:
    for name in ("cloudsdk", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    pytest.skip("no unprivileged user to run the socket server as")


@pytest.fixture(params=SERVER_USERS)
def host_sockets(request):
    """Sockets served from outside the sandbox; yields (targets for the probe, path of the log)."""
    if os.geteuid() != 0:
        pytest.skip("serving a root-owned socket and switching users needs root")
    where = Path(tempfile.mkdtemp(prefix="codespace-sock-", dir="/run" if os.access("/run", os.W_OK) else None))
    os.chmod(where, 0o755)
    log = where / "received.log"
    log.touch()
    os.chmod(log, 0o666)
    tag = os.urandom(4).hex()
    served = {
        "stream0600": [str(where / "stream.sock"), "stream", "600"],
        "dgram0666": [str(where / "dgram.sock"), "dgram", "666"],
        "seqpacket0666": [str(where / "seqpacket.sock"), "seqpacket", "666"],
        "abstract-stream": [f"@codespace-test-{tag}-s", "stream", None],
        "abstract-dgram": [f"@codespace-test-{tag}-d", "dgram", None],
    }
    prefix = []
    if request.param == "unprivileged":
        uid, gid = _unprivileged()
        os.chown(where, uid, gid)
        prefix = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    server = subprocess.Popen([*prefix, interpreter(), "-I", str(TESTS / "unix_server.py"), json.dumps(served), str(log)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
    try:
        assert server.stdout.readline() == b"ready\n"
        yield {label: [address, kind] for label, (address, kind, _mode) in served.items()}, log
    finally:
        server.stdin.close()
        server.kill()
        server.wait()
        shutil.rmtree(where, ignore_errors=True)


def _probe(argv_prefix: list[str], targets: dict, run) -> dict[str, str]:
    code, out, err = run([*argv_prefix, interpreter(), "-I", "-S", str(TESTS / "unix_probe.py"), json.dumps(targets)])
    assert code == 0, err
    return json.loads(out)


def _crossings(log: Path) -> list[str]:
    time.sleep(0.3)  # datagrams are queued at once; the server's threads record them
    return [line for line in log.read_text().splitlines() if line]


def test_the_servers_are_reachable_unsandboxed(host_sockets):
    """The control: without the sandbox the same probe reaches every socket (so a pass below
    means the sandbox stopped it, not that the server was unreachable)."""
    targets, log = host_sockets

    def run(argv):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        return done.returncode, done.stdout, done.stderr

    _probe([], targets, run)
    reached = {line.split(":")[0] for line in _crossings(log)}
    assert reached == set(targets), reached


def test_no_unix_socket_outside_the_sandbox_is_reachable(sandbox_env, host_sockets):
    targets, log = host_sockets
    result = _probe([], targets, sandbox_env.run)
    assert _crossings(log) == [], result
    # only socketpairs "send": msg_name is refused (stream) or ignored (seqpacket, and the seqpacket
    # pair the broker hands out for a datagram socketpair), so the message goes to the pair's peer
    assert not [k for k, v in result.items() if v == "sent" and not k.split(":")[1].startswith("pair-")], result
    assert result["socketpair-1"] == result["socketpair-5"] == result["socketpair-2"] == "ping", result


@pytest.mark.parametrize("start", ["wrap", "launch"])
def test_with_the_server_unprivileged_too(base, engine, start, host_sockets):
    """The CodeSpace server as an unprivileged user, the socket server as root or as that same
    user (a user's own daemons: their sockets are the user's, writable from inside)."""
    targets, log = host_sockets
    uid, gid = _unprivileged()
    os.chown(base, uid, gid)
    # The venv's interpreter may live where that user cannot run it (under root's 0700 home): a system
    # python3 of the same version, with the venv's packages, serves instead.
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None or subprocess.run([python, "-c", f"import sys; sys.exit(sys.version_info[:2] != {sys.version_info[:2]})"],
                                        check=False).returncode:
        pytest.skip("needs a system python3 of the venv's version")
    driver = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", python, "-I",
              str(TESTS / "unix_driver.py"), engine, start, json.dumps(targets)]
    done = subprocess.run(driver, capture_output=True, text=True, timeout=120, check=False, cwd=str(base),
                          env={"PATH": os.environ["PATH"], "HOME": str(base), "TMPDIR": str(base),
                               "CODESPACE_TEST_SITE": sysconfig.get_paths()["purelib"]})
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["code"] == 0, run["err"]
    result = json.loads(run["out"])
    assert _crossings(log) == [], result
    assert result["socketpair-1"] == result["socketpair-5"] == result["socketpair-2"] == "ping", result


def test_no_datagram_unix_socket_can_be_made(sandbox_env):
    """The mechanism (see README): socket() makes AF_UNIX sockets of the stream and seqpacket kinds
    only; a datagram socketpair is made, but the broker hands out a seqpacket pair (SO_TYPE 5),
    which ignores msg_name: it cannot send to an address."""
    script = ("import socket\nfor kind in (socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC"
              " | socket.SOCK_NONBLOCK):\n"
              "    try:\n        socket.socket(socket.AF_UNIX, kind); print('socket')\n"
              "    except OSError as e:\n        print(e.errno)\n"
              "    a, b = socket.socketpair(socket.AF_UNIX, kind)\n"
              "    print(a.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE), b.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE))\n")
    code, out, err = sandbox_env.run([interpreter(), "-I", "-S", "-c", script])
    assert code == 0 and out.split() == ["1", "5", "5"] * 3, (out, err)
