"""What each engine cannot enforce, stated for ``workspace_info`` and ``codespace doctor``.

Runs in the server.
"""

from __future__ import annotations

# Both engines (bubblewrap binds existing protected names read-only, Landlock keeps them out
# of the writable grant; neither can hold back a name that does not exist yet below the top).
PROTECTED_BELOW = (
    "protected names that do not exist yet below the top of a writable root (e.g. sub/.git in a directory "
    "without one) can be created by a command; existing ones at any depth are read-only, as are missing ones at "
    "the top of each writable root"
)
BUBBLEWRAP: list[str] = [PROTECTED_BELOW]

LANDLOCK_PROXY = [
    ("network 'allowlist': Landlock's TCP rules name ports, not addresses, so a command may open a TCP "
     "connection to any host on its own proxy port number (the number is in its proxy variables); every other "
     "port, UDP and every other kind of socket are refused (so SOCKS5 UDP through the proxy, "
     "network.enable_socks5_udp, is not available under Landlock)"),
    ("network 'allowlist': a command cannot listen on TCP ports (no private network namespace would keep them "
     "to itself)"),
]

LANDLOCK_SPLIT = (
    "entries directly inside a writable root that holds protected names, and inside every directory on the way "
    "to an existing protected name below it (sub/ for sub/.git), cannot be created, removed or renamed "
    "(Landlock cannot take rights away inside a granted directory); work in a subdirectory or use write_file")
# The server as root with CAP_SYS_ADMIN: read-only mounts keep the protected names
# (landlock_mounts), and only deny-read paths still split a writable root.
LANDLOCK_SPLIT_BY_DENY_READ = (
    "entries directly inside a writable root that holds deny-read paths, and inside every directory on the way to "
    "one, cannot be created, removed or renamed (Landlock cannot take rights away inside a granted directory); "
    "work in a subdirectory or use write_file")

LANDLOCK = [
    # Found by testing from outside: "hide their contents" read as more than Landlock does for a directory.
    ("no mount or PID namespace: files at deny-read paths inside readable roots (the server's state directory "
     "among them) cannot be opened, but names stay listable: theirs in the parent directory, and inside a "
     "hidden directory the names, sizes and times of everything in it (ls works there, cat does not)"),
    LANDLOCK_SPLIT,
    PROTECTED_BELOW,
    "/tmp is read-only: the command gets a private TMPDIR, removed after the run",
    ("the host's /proc is visible (other processes' command lines); their environment and memory stay protected by "
    "Landlock's ptrace scoping"),
    ("network 'off' is enforced by seccomp (socket families, connect/bind...) and Landlock TCP rules, not by a "
    "separate network namespace"),
    ("a process that calls setsid() and outlives a helper killed with SIGKILL escapes the clean-up "
    "(no PID namespace)"),
]


BUBBLEWRAP_WITHOUT_PID_NAMESPACE = (
    "a helper killed with SIGKILL while bwrap builds the sandbox (its first milliseconds: a timeout of a few ms, "
    "an early terminate) can leave the command running, confined, until it ends: without CAP_SYS_ADMIN or a user "
    "namespace of its own the helper cannot make bwrap PID 1 of a PID namespace of its own, and bwrap's init asks to "
    "die with it only once the sandbox is built; and Ctrl-C on a terminal session can end the sandbox (bwrap dies "
    "of it) instead of reaching only the command"
)


def _common(unix_sockets: tuple[str, ...], walk_cut: list[str]) -> list[str]:
    out = []
    if unix_sockets:
        out.append("network.allow_unix_sockets (" + ", ".join(unix_sockets) + "): the helper connects to the "
                   "listed sockets on the command's behalf, so their server sees the helper (the server's user) "
                   "as the peer (SO_PEERCRED), not the command; only connect() is brokered: datagram sockets "
                   "stay refused, and a listed path must not cross a symbolic link a command can change")
    for root in walk_cut:
        out.append(f"protected names below {root}: the walk that finds them has not covered the whole tree (it is "
                   "still going on in the background, or stopped at its limit of directories); ones in the rest "
                   "are not read-only")
    return out


# RLIMIT_NPROC counts a uid's processes per user namespace: a Landlock command gets one of its own
# (landlock_child) where the kernel lets the server make user namespaces. Without it a limit would
# count every process of the command's uid on the host.
LANDLOCK_NO_PROCESS_LIMIT = (
    "[sandbox] max_processes ({}): not enforced by the Landlock engine here (this server cannot make user "
    "namespaces, and the limit needs one per command to count its processes in): a command can fork until the "
    "host's limits stop it")


# Without a mount namespace of its own (landlock_mounts: a root server with CAP_SYS_ADMIN) the
# command could only share the host's /dev/shm, which would be a channel between commands.
LANDLOCK_NO_SHM = (
    "/dev/shm is not writable (no private one without a mount namespace): POSIX shared memory and named "
    "semaphores fail (shm_open, sem_open; Python's multiprocessing locks and queues)")


# Landlock has no right for these; a root server's commands see the host through a read-only
# idmapped view instead (identity.py), which keeps them from every file outside the writable roots.
LANDLOCK_METADATA = (
    "changing the mode, owner, extended attributes or times of the command's own files (those of the uid "
    "it runs as) outside the writable roots: Landlock has no right for chmod, chown, setxattr or utimes")


def cannot_enforce(engine: str, abi: int | None, *, mount_proc: bool = True, pid_namespace: bool = True,
                   unix_sockets: tuple[str, ...] = (), walk_cut: list[str] = (),
                   protected_by_mounts: bool = False, read_only_view: bool = False, max_processes: int = 0,
                   user_namespaces: bool = True) -> list[str]:
    """``protected_by_mounts``: the Landlock engine's helpers are root with CAP_SYS_ADMIN;
    ``read_only_view``: commands see the host through the read-only idmapped view;
    ``max_processes``: [sandbox] max_processes (0: none asked for); ``user_namespaces``: the
    server may make user namespaces (the Landlock engine's process limit needs them)."""
    if engine == "bubblewrap":
        out = [*BUBBLEWRAP, *_common(unix_sockets, walk_cut)]
        if not mount_proc:
            out.insert(0, "a fresh /proc: bwrap cannot mount proc here, so the host's /proc is visible read-only")
        if not pid_namespace:
            out.append(BUBBLEWRAP_WITHOUT_PID_NAMESPACE)
        return out
    out = [*LANDLOCK, *_common(unix_sockets, walk_cut)]
    if not read_only_view:
        out.append(LANDLOCK_METADATA)
    if max_processes and not user_namespaces:
        out.append(LANDLOCK_NO_PROCESS_LIMIT.format(max_processes))
    if not protected_by_mounts:
        out.append(LANDLOCK_NO_SHM)
    if protected_by_mounts:
        out[out.index(LANDLOCK_SPLIT)] = LANDLOCK_SPLIT_BY_DENY_READ
    if abi is not None and abi >= 4:
        out += LANDLOCK_PROXY
    if abi is not None and abi < 6:
        out.append(f"Landlock ABI {abi} < 6: signals to processes outside the sandbox are not blocked (abstract "
                   "Unix sockets outside it are, by seccomp, with the network off)")
    if abi is not None and abi < 4:
        out.append(f"Landlock ABI {abi} < 4: TCP is restricted by seccomp only, and network 'allowlist' cannot be "
                   "confined to the proxy: allowlisted commands get no network at all (fail closed)")
    if abi is not None and abi < 3:
        out.append(f"Landlock ABI {abi} < 3: truncating files in read-only places is not controlled")
    return out
