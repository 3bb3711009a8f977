"""network = "off": Unix sockets inside the workspace work (a socketserver pair, seqpacket, relative
paths), datagram socketpairs work, and none of it opens a way out: a link in the workspace to a
host socket, a rename race swapping a workspace socket for such a link, an abstract socket and a
datagram socketpair's sendmsg to a host datagram socket (the kind /dev/log is) all fail, with the
server as root and as an unprivileged user, in both engines and both starts. Host sockets are
served from outside (test_unix_sockets.host_sockets: root-owned 0600 stream, 0666 datagram and
seqpacket, abstract stream and datagram); every message or connection reaching them is logged."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig

import pytest
from codespace_linux_sandbox.backend import LinuxSandbox, interpreter
from conftest import make_env
from test_unix_sockets import TESTS, _crossings, _unprivileged, host_sockets  # noqa: F401 - fixture

PROBE = TESTS / "unix_inside_probe.py"
WORKING = {"socketpair_dgram": "ok", "socketpair_dgram_flags": "ok", "socketserver": "ok", "seqpacket": "ok",
           "socket_dgram": "errno 1"}


def _arguments(targets: dict) -> str:
    return json.dumps({"dir": "{ws}/sub", "targets": targets})


def _check(result: dict, log, engine: str) -> None:
    assert _crossings(log) == [], result
    assert {k: result[k] for k in WORKING} == WORKING, result
    # bubblewrap: the abstract namespace is the sandbox's own; Landlock: listen refuses an abstract name
    assert result["abstract_listen"] == ("ok" if engine == "bubblewrap" else "errno 1"), result
    for label in ("stream0600", "seqpacket0666"):
        assert result[f"{label}:link"] == "errno 40", result  # ELOOP: the broker follows no link
        connected, accepted = (int(w) for w in result[f"{label}:race"].split()[1:5:3])
        assert connected == accepted > 0, result  # every connect that succeeded reached the workspace socket
        assert result[f"{label}:userns-bind"] == "errno 1", result  # no user namespace to mount in
    for label in ("abstract-stream", "abstract-dgram"):
        assert result[f"{label}:connect"] == "errno 1", result
    # the broker's seqpacket pair ignores msg_name: the message goes to the pair's own peer
    assert result["dgram0666:pair-sendmsg"] == result["abstract-dgram:pair-sendmsg"] == "to the peer", result
    assert result["dgram0666:link-sendmsg"] == "to the peer", result


def test_workspace_sockets_work_and_host_sockets_stay_out(sandbox_env, host_sockets):
    targets, log = host_sockets
    code, out, err = sandbox_env.run([interpreter(), "-I", "-S", str(PROBE), _arguments(targets)], timeout=120)
    assert code == 0, err
    _check(json.loads(out), log, sandbox_env.sandbox.choice().engine)


@pytest.mark.parametrize("start", ["wrap", "launch"])
def test_with_the_server_unprivileged_too(base, engine, start, host_sockets):
    targets, log = host_sockets
    uid, gid = _unprivileged()
    os.chown(base, uid, gid)
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None or subprocess.run([python, "-c", f"import sys; sys.exit(sys.version_info[:2] != {sys.version_info[:2]})"],
                                        check=False).returncode:
        pytest.skip("needs a system python3 of the venv's version")
    driver = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", python, "-I",
              str(TESTS / "unix_driver.py"), engine, start, _arguments(targets), PROBE.name]
    done = subprocess.run(driver, capture_output=True, text=True, timeout=180, check=False, cwd=str(base),
                          env={"PATH": os.environ["PATH"], "HOME": str(base), "TMPDIR": str(base),
                               "CODESPACE_TEST_SITE": sysconfig.get_paths()["purelib"]})
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["code"] == 0, run["err"]
    _check(json.loads(run["out"]), log, engine)


def test_a_workspace_socket_the_command_may_not_write_stays_closed(base, engine, start):
    """The broker connects as the command would: the server as root, a workspace owned by uid 1000
    (commands run as 1000, no id mapping) and a root-owned 0600 socket in it: refused, although
    the broker itself (root) could connect; the same socket at 0666 connects (the control)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to serve a socket as another user")
    python = shutil.which("python3", path="/usr/bin:/bin")  # the venv's may be under root's 0700 home
    if python is None:
        pytest.skip("needs a system python3 that uid 1000 can run")
    env = make_env(base, engine, start=start)
    base.chmod(0o755)
    for path in [env.ws, *env.ws.rglob("*")]:
        os.lchown(path, 1000, 1000)
    env.sandbox = LinuxSandbox.for_workspace(env.workspace)
    path = env.ws / "sub" / "root.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    os.chmod(path, 0o600)
    try:
        script = ("import os, socket\ntry:\n    socket.socket(socket.AF_UNIX).connect('sub/root.sock'); print('connected')\n"
                  "except OSError as e:\n    print(e.errno)\nprint(os.getuid())\n")
        code, out, err = env.run([python, "-I", "-S", "-c", script])
        assert code == 0 and out.split() == ["13", "1000"], (out, err)  # EACCES, as without the broker
        os.chmod(path, 0o666)
        code, out, err = env.run([python, "-I", "-S", "-c", script])
        assert code == 0 and out.split() == ["connected", "1000"], (out, err)
    finally:
        server.close()


def test_a_host_socket_bound_back_under_the_private_tmp_stays_closed(base, engine, start):
    """Found by testing from outside: a host directory under /tmp that the policy makes readable
    is bound back read-only under the command's private /tmp, and a host socket in it connected
    (the broker took every path under /tmp for the sandbox's own). A socket there must be on the
    private directory's own file system; one the command makes in its /tmp still connects."""
    import tempfile
    from pathlib import Path

    host = Path(tempfile.mkdtemp(prefix="codespace-host-sockets-", dir="/tmp"))
    host.chmod(0o755)
    path = host / "ro.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    os.chmod(path, 0o666)
    try:
        env = make_env(base, engine, policy=f'[filesystem]\npaths = {{ "{host}" = "read" }}\n', start=start)
        script = (
            "import os, socket, sys, tempfile\n"
            "def attempt(p):\n"
            "    try:\n"
            "        socket.socket(socket.AF_UNIX).connect(p); return 'connected'\n"
            "    except OSError as e:\n"
            "        return str(e.errno)\n"
            f"print(os.path.exists({str(path)!r}), attempt({str(path)!r}))\n"
            "d = tempfile.mkdtemp(); own = socket.socket(socket.AF_UNIX); own.bind(d + '/own.sock')\n"
            "own.listen(1); print(attempt(d + '/own.sock'))\n"
        )
        code, out, err = env.run([interpreter(), "-I", "-S", "-c", script], timeout=60)
        assert code == 0, err
        # EPERM (under Landlock /tmp is the host's, outside the roots); the command's own: connected
        assert out.split() == ["True", "1", "connected"], (out, err)
    finally:
        server.close()
        shutil.rmtree(host, ignore_errors=True)
