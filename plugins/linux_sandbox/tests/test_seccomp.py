"""The seccomp programs: upstream's three modes, compiled once with libseccomp."""

from __future__ import annotations

import pytest
from codespace_linux_sandbox import seccomp


def _names(mode):
    return {name for name, _ in seccomp.rules(mode)}


def test_restricted_mode_matches_upstream():
    assert {"connect", "accept", "accept4", "bind", "listen", "getpeername", "getsockname", "shutdown", "sendto",
            "sendmmsg", "recvmmsg", "getsockopt", "setsockopt", "ptrace", "process_vm_readv", "process_vm_writev",
            "io_uring_setup", "io_uring_enter", "io_uring_register", "socket", "socketpair"} <= _names("restricted")
    assert not {"sendmsg", "recvmsg", "recvfrom", "read", "write"} & _names("restricted")


def test_proxy_routed_and_vsock_modes():
    assert "connect" not in _names("proxy_routed") and "ptrace" in _names("proxy_routed")
    socket_rules = [c for name, c in seccomp.rules("proxy_routed") if name == "socket"]
    assert [(0, "LT", 2, 0)] in socket_rules and [(0, "GT", 10, 0)] in socket_rules
    assert [(0, "EQ", 2, 0)] not in socket_rules and [(0, "EQ", 10, 0)] not in socket_rules
    assert seccomp.rules("vsock_restricted")[0] == ("socket", [(0, "EQ", seccomp.AF_VSOCK, 0)])
    assert "ptrace" not in _names("vsock_restricted")


def test_mode_choice():
    assert seccomp.mode_for("off") == "restricted"
    assert seccomp.mode_for("proxy") == "proxy_routed"
    assert seccomp.mode_for("on") == "vsock_restricted"
    assert seccomp.mode_for("on", full_write=True) == "none"


@pytest.mark.parametrize("mode", seccomp.MODES)
def test_programs_compile_and_are_cached(mode):
    if seccomp.available() is not None:
        pytest.skip(seccomp.available())
    program = seccomp.program(mode)
    assert program and len(program) % 8 == 0
    assert seccomp.program(mode) is program
