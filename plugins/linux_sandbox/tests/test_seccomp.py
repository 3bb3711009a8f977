"""The seccomp programs: upstream's three modes, compiled once with libseccomp."""

from __future__ import annotations

import errno

import pytest
from codespace_linux_sandbox import seccomp


def _names(mode):
    return {name for name, _ in seccomp.rules(mode)}


# Upstream's restricted mode also denies these; with the network off CodeSpace allows them on the
# AF_UNIX sockets socket() may make, so that sockets inside the workspace work: connect (and
# datagram socketpairs, and listen under Landlock) go to the helper's broker instead.
ALLOWED_FOR_UNIX_SOCKETS = {"connect", "accept", "accept4", "bind", "listen", "getsockname", "shutdown",
                            "getsockopt", "setsockopt"}


def test_restricted_mode_matches_upstream_but_for_unix_sockets():
    assert {"getpeername", "sendto", "sendmmsg", "recvmmsg", "ptrace", "process_vm_readv", "process_vm_writev",
            "io_uring_setup", "io_uring_enter", "io_uring_register", "socket", "socketpair"} <= _names("restricted")
    assert not {"sendmsg", "recvmsg", "recvfrom", "read", "write", *ALLOWED_FOR_UNIX_SOCKETS} & _names("restricted")
    assert seccomp.rules("restricted") == seccomp.rules("restricted_unix")


def test_proxy_routed_and_vsock_modes():
    assert "connect" not in _names("proxy_routed") and "ptrace" in _names("proxy_routed")
    socket_rules = [c for name, c in seccomp.rules("proxy_routed") if name == "socket"]
    assert [(0, "LT", 2, 0)] in socket_rules and [(0, "GT", 10, 0)] in socket_rules
    assert [(0, "EQ", 2, 0)] not in socket_rules and [(0, "EQ", 10, 0)] not in socket_rules
    assert seccomp.rules("vsock_restricted")[0] == ("socket", [(0, "EQ", seccomp.AF_VSOCK, 0)])
    assert "ptrace" not in _names("vsock_restricted")


def test_proxy_tcp_mode_leaves_only_tcp():
    """Landlock with network 'allowlist' (no network namespace): Landlock's rules cover TCP only,
    so every other socket is refused here, and so are TCP Fast Open sends."""
    rules = seccomp.rules("proxy_tcp")
    socket_rules = [c for name, c in rules if name == "socket"]
    assert [(0, "LT", 2, 0)] in socket_rules and [(0, "GT", 10, 0)] in socket_rules  # AF_INET/AF_INET6 only
    types = {c[0][2] for c in socket_rules if c[0][:2] == (1, "MASKED_EQ")}
    assert types == set(range(16)) - {1}  # every socket type but SOCK_STREAM
    assert [(2, "GT", 6, 0)] in socket_rules and [(2, "EQ", 132, 0)] not in socket_rules  # SCTP: above TCP's 6
    fast_open = {name for name, c in rules if c and c[0][1:] == ("MASKED_EQ", seccomp.MSG_FASTOPEN, seccomp.MSG_FASTOPEN)}
    assert fast_open == {"sendto", "sendmsg", "sendmmsg"}
    assert "connect" not in _names("proxy_tcp") and {"ptrace", "io_uring_setup"} <= _names("proxy_tcp")


@pytest.mark.parametrize("mode", seccomp.MODES)
def test_every_mode_refuses_user_namespaces_and_set_id_bits(mode):
    rules = seccomp.rules(mode)
    new_user = (0, "MASKED_EQ", seccomp.CLONE_NEWUSER, seccomp.CLONE_NEWUSER)
    assert ("unshare", [new_user]) in rules and ("clone", [new_user]) in rules
    assert ("clone3", []) in rules and ("openat2", []) in rules
    assert seccomp.ERRNO["clone3"] == seccomp.ERRNO["openat2"] == errno.ENOSYS
    for name, arg in {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "openat": 3, "mknodat": 2}.items():
        for bit in (0o4000, 0o2000):
            assert (name, [(arg, "MASKED_EQ", bit, bit)]) in rules, (name, bit)


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
