"""The runtime plugin's deliberate differences from upstream (rust-v0.171.0), each with its reason.

README.md ("Pin check") lists the same reasons word for word; tests/test_pin_listed.py keeps the two
in step. A difference the check finds that is not here fails the check.
"""

from __future__ import annotations

PLACEMENT = ("ours binds the socket in the directory it checked (a long path is reached through "
             "/proc/self/fd/<dirfd>); upstream binds it in /tmp/codex-daemon-<uid>/ and puts a symlink at the path")
OPEN_DIR = ("ours refuses a socket directory that others may enter (group or other bits set) instead of "
            "serving in it; upstream serves when others cannot write to it")
LINKED_DIR = ("ours opens the socket directory without following a symlink and refuses one, so the directory "
              "it checked is the one it binds in; upstream follows the link")
LD_BLOCK = ("ours starts itself again without LD_* when any is set, so even the start-up environment "
            "(/proc/<pid>/environ) has none; upstream unsets them in its running environment only")
PEER_UID = ("ours checks the peer's uid (SO_PEERCRED) against an allow-list on every accept, before reading a "
            "byte; upstream has no peer check")

# case -> (ours, upstream's, why); outcomes as pin_uds.Outcome.compared() prints them
UDS_DIFFERENCES: dict[str, tuple[str, str, str]] = {
    "directory 0755": ("refused; dir 0755", "serving; dir 0755", OPEN_DIR),
    "directory a symlink to a 0700 directory": ("refused; link", "serving; link", LINKED_DIR),
}
PLACEMENTS = ("socket 0700 at the path", "link to a socket 0600 in /tmp/codex-daemon-<uid> (0700)")
"""(ours, upstream's) where the listening socket is, in every case both serve."""

# effect -> (ours, upstream's, why)
HARDENING_DIFFERENCES: dict[str, tuple[str, str, str]] = {
    "LD_* in /proc/<pid>/environ": ("no", "yes", LD_BLOCK),
}

HARDENED_EXECUTABLES: dict[str, bool] = {
    "codex": False,
    "codex-code-mode-host": False,
    "codex-voice-host": True,
}
"""Which of the package's long-running executables harden themselves, as observed at rust-v0.171.0;
the hardened ones are the oracle for ours."""

# An item of the Unix-socket surface upstream's binary shows -> ("equivalent", what of ours) or ("listed", why)
SURFACE: dict[str, tuple[str, str]] = {
    "codex app-server --listen unix://": ("listed", "upstream's default control socket in its home; ours has "
                                          "one place per workspace (<state dir>/worker/worker.sock)"),
    "codex app-server --listen unix://PATH": ("equivalent", "codespace-worker serve --socket PATH"),
    "codex app-server proxy --sock": ("equivalent", "the server's attachment to a daemon worker "
                                      "(sockets.connect; [runtime] worker = \"daemon\")"),
}
"""At rust-v0.171.0. ``codex stdio-to-uds`` (relay stdio to a Unix socket, 0.169.0) is gone in that
release, so it is not here: a binary that offers it shows as an unlisted difference."""


def all_reasons() -> set[str]:
    """Every reason the check can report: what README.md's "Pin check" section must list."""
    reasons = {why for _o, _u, why in UDS_DIFFERENCES.values()} | {PLACEMENT, PEER_UID}
    reasons |= {why for _o, _u, why in HARDENING_DIFFERENCES.values()}
    reasons |= {why for kind, why in SURFACE.values() if kind == "listed"}
    return reasons
