"""The upstream probe matrix (docs/upstream-0.171.0.md), for read-only and workspace-write policies, in both engines.

Rows that differ from upstream are listed in README.md ("Probe matrix") with the reason;
the expectations here are the full tables, not just the rows that agree.
"""

from __future__ import annotations

import os

import pytest
from conftest import READ_ONLY, WORKSPACE_WRITE, make_env

COMMON = {
    "read_passwd": "ok",
    "socket_inet": "EPERM",
    "socket_inet6": "EPERM",
    "socket_netlink": "EPERM",
    "socket_unix": "ok",
    "socketpair": "ok",
    "ptrace": "EPERM",
    "io_uring_setup": "EPERM",
    "open_sysctl": "EACCES",  # never host root (as root, upstream: ok, see README)
    "NoNewPrivs": "1",
    "Seccomp": "2",
    "CapEff": "0000000000000000",
}

EXPECTED = {
    ("bubblewrap", "read-only"): {
        **COMMON, "write_outside": "EROFS", "write_cwd": "EROFS", "write_cwd_subdir": "EROFS",
        "write_tmp": "ok",  # private tmpfs (upstream: EROFS)
        "write_git": "EROFS", "create_codex": "ENOENT", "mkdir_codex": "EROFS",
    },
    ("bubblewrap", "workspace-write"): {
        **COMMON, "write_outside": "EROFS", "write_cwd": "ok", "write_cwd_subdir": "ok",
        "write_tmp": "ok",
        "write_git": "EROFS",
        "create_codex": "EACCES",  # mode-0555 tmpfs mask (upstream: a read-only one, EROFS)
        "mkdir_codex": "EEXIST",  # the mask's mount point
    },
    ("landlock", "read-only"): {
        **COMMON, "write_outside": "EACCES", "write_cwd": "EACCES", "write_cwd_subdir": "EACCES",
        "write_tmp": "EACCES",  # no mount namespace: /tmp stays the host's, read-only; TMPDIR is private
        "write_git": "EACCES", "create_codex": "ENOENT", "mkdir_codex": "EACCES",
    },
    ("landlock", "workspace-write"): {
        **COMMON, "write_outside": "EACCES",
        "write_cwd": "EACCES",  # the workspace root is split around its protected names
        "write_cwd_subdir": "ok",
        "write_tmp": "EACCES", "write_git": "EACCES",
        "create_codex": "ENOENT",  # no mask: .codex stays missing, and creating it is refused (next row)
        "mkdir_codex": "EACCES",
    },
}


# A root server's Landlock child protects the names with read-only mounts (landlock_mounts), and
# its commands see the host through a read-only view but for the writable roots (identity): a
# read-only mount answers EROFS before Landlock's EACCES, as upstream's bwrap does.
LANDLOCK_RW_AS_ROOT = {"write_cwd": "ok", "write_git": "EROFS", "create_codex": "EROFS", "mkdir_codex": "EEXIST",
                       "write_outside": "EROFS", "write_tmp": "EROFS"}
LANDLOCK_RO_AS_ROOT = dict.fromkeys(("write_outside", "write_cwd", "write_cwd_subdir", "write_tmp", "write_git",
                                     "mkdir_codex"), "EROFS")


def _expected(engine: str, policy: str) -> dict[str, str]:
    rows = dict(EXPECTED[(engine, policy)])
    if engine == "landlock" and os.geteuid() == 0:
        rows.update(LANDLOCK_RW_AS_ROOT if policy == "workspace-write" else LANDLOCK_RO_AS_ROOT)
    return rows


@pytest.mark.parametrize("policy", ["read-only", "workspace-write"])
def test_probe_matrix(base, engine, policy, start):
    env = make_env(base, engine, READ_ONLY if policy == "read-only" else WORKSPACE_WRITE, start)
    result = env.probe()
    assert result == _expected(engine, policy)
    # Whatever the sandbox allowed or refused, the host changed only where the policy allows.
    assert not (env.outside / "probe-outside.txt").exists()
    assert not (env.ws / ".git" / "probe-git").exists()
    assert not (env.ws / ".codex").exists()  # the placeholder is gone too
    assert (env.ws / "probe-cwd.txt").exists() == (result["write_cwd"] == "ok")
