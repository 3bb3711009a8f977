"""Network modes and the two deliberate seccomp differences from upstream."""

from __future__ import annotations

from codespace_linux_sandbox.backend import interpreter
from conftest import make_env

PY = [interpreter(), "-I", "-S", "-c"]


def test_asyncio_thread_wakeups_work(sandbox_env):
    """send() on a socketpair is sendto(..., NULL, 0); upstream denies it and asyncio hangs."""
    code, out, err = sandbox_env.run([*PY, "import asyncio; print(asyncio.run(asyncio.to_thread(lambda: 'woke')))"],
                                     timeout=30)
    assert (code, out) == (0, "woke\n"), err


def test_sendto_an_address_is_still_denied(sandbox_env):
    # A stream socket (datagram ones cannot be made at all with the network off: test_unix_sockets.py)
    script = ("import socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
              "try:\n    s.sendto(b'x', '/dev/log')\nexcept OSError as e:\n    print(e.errno)\n")
    _code, out, _ = sandbox_env.run([*PY, script])
    assert out.strip() == "1"  # EPERM


def test_bash_does_not_take_stdin_for_a_network_connection(sandbox_env):
    """getpeername fails with ENOTSOCK: with EPERM, bash without SHLVL sources ~/.bashrc."""
    home = sandbox_env.base / "home"
    (home / ".bashrc").write_text("echo SOURCED-BASHRC\n")
    _code, out, _ = sandbox_env.run(["/bin/bash", "-c", "echo plain"], env={"HOME": str(home)})
    assert out == "plain\n"


def test_network_on(base, engine):
    env = make_env(base, engine, '[network]\naccess = "on"\n')
    script = ("import socket\nfor fam in (socket.AF_INET, socket.AF_INET6, 40):\n"
              "    try:\n        socket.socket(fam, socket.SOCK_STREAM).close(); print('ok')\n"
              "    except OSError as e:\n        print(e.errno)\n")
    _code, out, _ = env.run([*PY, script])
    assert out.split() == ["ok", "ok", "1"]  # vsock-restricted: AF_VSOCK is refused


def test_network_allowlist_fails_closed_without_a_running_proxy(base, engine):
    """No proxy service (the server did not start one): no route, so no egress at all."""
    env = make_env(base, engine, '[network]\naccess = "allowlist"\nallowed_domains = ["example.com"]\n')
    script = ("import socket\ntry:\n    socket.create_connection(('93.184.215.14', 80), timeout=3); print('CONNECTED')\n"
              "except OSError as e:\n    print('refused', e.errno)\n"
              "try:\n    socket.socket(socket.AF_UNIX); print('unix ok')\nexcept OSError as e:\n    print('unix', e.errno)\n")
    _code, out, _ = env.run([*PY, script], timeout=30)
    assert "CONNECTED" not in out and "refused" in out
    if engine == "bubblewrap":
        assert "unix 1" in out  # proxy-routed seccomp: only AF_INET/AF_INET6 sockets, inside a netns
    else:
        assert "unix ok" in out  # no netns to route through: the restricted filter instead
