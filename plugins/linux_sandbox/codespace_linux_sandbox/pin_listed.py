"""The deliberate differences from upstream (rust-v0.171.0), each with its reason.

README.md ("Pin check") lists the same reasons word for word; tests/test_pin_listed.py keeps the two
in step. A difference the check finds that is not here fails the check.
"""

from __future__ import annotations

import fnmatch
import os

PRIVATE_TMP = "CodeSpace's policy does not make /tmp writable; the command gets a private tmpfs instead"
MASK = "the missing-name mask is a mode-0555 tmpfs (no remount: 6x cheaper in bwrap), so EACCES not EROFS"
LANDLOCK_ERRNO = "Landlock refuses with EACCES where a read-only mount gives EROFS"
SPLIT = "Landlock cannot take rights back inside the workspace root, so the root is split around protected names"
LANDLOCK_TMP = "no mount namespace: the host's /tmp stays read-only, the command gets a private TMPDIR"
NO_MASK = "no mount namespace: the missing name is refused directly (mkdir fails), so the path stays missing"
HOST_ROOT = ("run as root, codex leaves the command host uid 0 (user namespace mapped to 0) and bwrap leaves "
             "/proc/sys writable; ours runs as an unprivileged uid and binds /proc/sys read-only")

# (engine, policy) -> probe -> (ours, upstream's, why)
PROBE_DIFFERENCES: dict[tuple[str, str], dict[str, tuple[str, str, str]]] = {
    ("bubblewrap", "read-only"): {"write_tmp": ("ok", "EROFS", PRIVATE_TMP)},
    ("bubblewrap", "workspace-write"): {"create_codex": ("EACCES", "EROFS", MASK)},
    ("landlock", "read-only"): {
        "write_outside": ("EACCES", "EROFS", LANDLOCK_ERRNO),
        "write_cwd": ("EACCES", "EROFS", LANDLOCK_ERRNO),
        "write_cwd_subdir": ("EACCES", "EROFS", LANDLOCK_ERRNO),
        "write_tmp": ("EACCES", "EROFS", LANDLOCK_ERRNO),
        "write_git": ("EACCES", "EROFS", LANDLOCK_ERRNO),
        "mkdir_codex": ("EACCES", "EROFS", LANDLOCK_ERRNO),
    },
    ("landlock", "workspace-write"): {
        "write_outside": ("EACCES", "EROFS", LANDLOCK_ERRNO),
        "write_cwd": ("EACCES", "ok", SPLIT),
        "write_tmp": ("EACCES", "ok", LANDLOCK_TMP),
        "write_git": ("EACCES", "EROFS", LANDLOCK_ERRNO),
        "create_codex": ("ENOENT", "EROFS", NO_MASK),
        "mkdir_codex": ("EACCES", "EEXIST", NO_MASK),
    },
}


AS_ROOT_LANDLOCK_AGREES = ("write_cwd", "write_git", "create_codex", "mkdir_codex")
LANDLOCK_TMP_VIEW = ("CodeSpace's policy does not make /tmp writable: a root server's Landlock commands see the "
                     "host read-only outside the writable roots, and get a private TMPDIR")


def probe_differences(engine: str, policy: str, root: bool | None = None) -> dict[str, tuple[str, str, str]]:
    """The listed rows for one engine and policy; as root, the sysctl row too (see HOST_ROOT)."""
    rows = dict(PROBE_DIFFERENCES[(engine, policy)])
    if os.geteuid() == 0 if root is None else root:
        rows["open_sysctl"] = ("EACCES", "ok", HOST_ROOT)
        if engine == "landlock":
            # As root the Landlock child keeps protected names with read-only mounts, as upstream's
            # bwrap does (landlock_mounts), and sees the host through a read-only view but for the
            # writable roots (identity): a read-only mount's EROFS, upstream's answer too.
            for name in [*AS_ROOT_LANDLOCK_AGREES, *(n for n, (_o, _u, why) in rows.items() if why == LANDLOCK_ERRNO)]:
                rows.pop(name, None)
            if "write_tmp" in rows:
                rows["write_tmp"] = ("EROFS", rows["write_tmp"][1], LANDLOCK_TMP_VIEW)
    return rows


AS_PID_1 = ("ours keeps bwrap's own PID 1, which reaps orphans and ends with the command's status, "
            "under a helper that forwards signals; upstream's command is PID 1 itself")
DAEMON_DIR = "upstream hides its own daemon directory; CodeSpace has none (its state directory is masked instead)"
REMOUNT = "masks are mode-0555 tmpfs without a read-only remount (6x cheaper in bwrap), see Mount order"
UPSTREAM_TMP = "upstream's workspace-write makes /tmp writable and protects names at its top; ours gives a private /tmp"
SYNTHETIC = "upstream keeps mount points for missing names under /tmp; ours makes them as placeholders in the workspace"
INNER_STAGE = ("upstream runs its helper again inside bwrap to install seccomp and exec; ours has bwrap do it "
               "(--seccomp FD, --chdir, --clearenv --setenv) and runs the command directly")
OUR_TMP = "CodeSpace's policy does not make /tmp writable; the command gets a private /tmp (and TMPDIR) tmpfs"
RUNTIME = "the interpreter's own directories hidden by the private /tmp are bound back read-only"
DENY_READ = "CodeSpace's default policy hides /sys and its state directory from commands (deny-read masks)"
SYSTEM_SECRETS = ("CodeSpace's default policy hides the system's secrets (/etc/shadow, host keys) from commands "
                  "(deny-read masks)")
MORE_NAMES = "CodeSpace's default protected names (filesystem.protected) are more than upstream's .git .agents .codex .aws"
NO_INNER = "without an inner stage, bwrap sets the command's directory, environment and seccomp filter itself"
INFO_FD = "the helper reads the sandbox's PID 1 from --info-fd to forward signals to its group"
PROCESS_LIMIT = ("bwrap waits on --block-fd until the helper has set the command's process limit ([sandbox] "
                 "max_processes) on the sandbox's PID 1; upstream sets no limit")
NEVER_ROOT = ("the command is never host root: ids 0 inside map to an unprivileged host uid, and /proc/sys is "
              "bound read-only")

# (pattern over a normalised operation, side) -> why; side is "upstream only" or "ours only"
ARGV_DIFFERENCES: list[tuple[str, str, str]] = [
    ("--as-pid-1", "upstream only", AS_PID_1),
    ("--perms 0 --tmpfs /tmp/codex-daemon-*", "upstream only", DAEMON_DIR),
    ("--remount-ro /tmp/codex-daemon-*", "upstream only", DAEMON_DIR),
    ("--remount-ro <ws>/*", "upstream only", REMOUNT),
    ("--bind /tmp /tmp", "upstream only", UPSTREAM_TMP),
    ("--perms 555 --tmpfs /tmp/.*", "upstream only", UPSTREAM_TMP),
    ("--remount-ro /tmp/.*", "upstream only", UPSTREAM_TMP),
    ("--ro-bind /tmp/codex-bwrap-synthetic-mount-targets-* /tmp/codex-bwrap-synthetic-mount-targets-*",
     "upstream only", SYNTHETIC),
    ("run: <helper> --sandbox-policy-cwd <ws> --command-cwd <ws> --permission-profile {*} "
     "--apply-seccomp-then-exec -- <command>", "upstream only", INNER_STAGE),
    ("--tmpfs /tmp", "ours only", OUR_TMP),
    ("--ro-bind <runtime> <runtime>", "ours only", RUNTIME),
    ("--perms 0 --tmpfs /sys", "ours only", DENY_READ),
    ("--perms 0 --tmpfs <base>/state", "ours only", DENY_READ),
    ("--ro-bind /dev/null /etc/*", "ours only", SYSTEM_SECRETS),
    ("--perms 555 --tmpfs <ws>/.*", "ours only", MORE_NAMES),
    ("run: <command>", "ours only", NO_INNER),
    ("--chdir <ws>", "ours only", NO_INNER),
    ("--clearenv", "ours only", NO_INNER),
    ("--setenv *", "ours only", NO_INNER),
    ("--seccomp <fd>", "ours only", NO_INNER),
    ("--info-fd <fd>", "ours only", INFO_FD),
    ("--block-fd <fd>", "ours only", PROCESS_LIMIT),
    ("--ro-bind /proc/sys /proc/sys", "ours only", NEVER_ROOT),
    ("--uid 0", "ours only", NEVER_ROOT),
    ("--gid 0", "ours only", NEVER_ROOT),
]


def argv_reason(op: str, side: str) -> str | None:
    for pattern, listed_side, why in ARGV_DIFFERENCES:
        if side == listed_side and fnmatch.fnmatchcase(op, pattern):
            return why
    return None


NO_TRANSPARENT_TCP = ("not offered: commands reach the network only through the egress proxy's variables, and a "
                      "tool that ignores them fails closed (no route, seccomp)")
CODEX_CONFIG = "codex's own configuration; CodeSpace takes its policy file instead (`codespace serve --policy`)"
NOT_LINUX = "the legacy Windows sandbox; this plugin is Linux only"
HELP = "a command line's help; our helper takes no options (handshake v1 on a descriptor, see Handshake)"

# An item of the sandbox surface upstream's binary shows -> ("equivalent", what of ours) or ("listed", why)
SURFACE: dict[str, tuple[str, str]] = {
    "codex sandbox --config": ("listed", CODEX_CONFIG),
    "codex sandbox --enable": ("listed", CODEX_CONFIG),
    "codex sandbox --disable": ("listed", CODEX_CONFIG),
    "codex sandbox --profile": ("listed", CODEX_CONFIG),
    "codex sandbox --include-managed-config": ("listed", CODEX_CONFIG),
    "codex sandbox --permission-profile": ("equivalent", "the policy's [filesystem.paths] and [network]"),
    "codex sandbox --sandbox-state-json": ("equivalent", "handshake v1's policy (the server hands the helper the layout)"),
    "codex sandbox --sandbox-state-readable-root": ("equivalent", "a \"read\" entry in [filesystem.paths]"),
    "codex sandbox --sandbox-state-disable-network": ("equivalent", "network.access = \"off\" (the default)"),
    "codex sandbox --cd": ("equivalent", "the command's cwd"),
    "codex sandbox --transparent-tcp": ("listed", NO_TRANSPARENT_TCP),
    "codex sandbox --help": ("listed", HELP),
    "codex sandbox uninstall": ("listed", NOT_LINUX),
    "codex sandbox help": ("listed", HELP),
    "codex-linux-sandbox --sandbox-policy-cwd": ("equivalent", "handshake v1's command.cwd and policy roots"),
    "codex-linux-sandbox --no-proc": ("equivalent", "the cached /proc preflight (options.mount_proc)"),
    "codex-linux-sandbox --transparent-tcp": ("listed", NO_TRANSPARENT_TCP),
    "codex-linux-sandbox --help": ("listed", HELP),
}
"""At rust-v0.171.0. ``codex stdio-to-uds`` (relay stdio to a Unix socket) is gone in that release, so it
is not here: a binary that offers it again shows as a difference (unix sockets: the helper's broker)."""


def all_reasons() -> set[str]:
    """Every reason the check can report: what README.md's "Pin check" section must list."""
    reasons = {why for rows in PROBE_DIFFERENCES.values() for _o, _t, why in rows.values()} | {HOST_ROOT,
                                                                                              LANDLOCK_TMP_VIEW}
    reasons |= {why for _p, _s, why in ARGV_DIFFERENCES}
    reasons |= {why for kind, why in SURFACE.values() if kind == "listed"}
    return reasons
