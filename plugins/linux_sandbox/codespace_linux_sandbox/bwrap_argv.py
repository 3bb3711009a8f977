"""bubblewrap's argv for a handshake: upstream's mount layout, in upstream's order.

Runs in the per-command helper (bubblewrap engine); the Landlock engine's helper uses
:func:`check_links`.

Mount order (a later mount wins over an earlier one on the same or a deeper path):

1. ``--ro-bind / /`` (or each readable root when ``/`` is not readable);
2. ``--dev /dev``: a minimal dev (null, zero, full, random, urandom, tty, pts, shm);
3. the rest sorted by path depth, shallowest first, so the most specific policy entry wins
   like it does for the gateway: private tmpfs at ``/tmp`` (and ``$TMPDIR``), ``--bind`` of
   each writable root and of each directory above a protected or deny-read path inside one
   (:func:`pinned_parents`), ``--ro-bind`` of protected paths inside writable roots, a read-only
   empty tmpfs over each missing protected name, and deny-read masks (an empty mode-0000
   tmpfs over a directory, ``/dev/null`` over a file);
4. namespaces and the rest: ``--unshare-user --unshare-pid --unshare-ipc [--unshare-net]
   --proc /proc --cap-drop ALL``.

The policy's deny-read of ``/proc`` and ``/dev`` is satisfied by the sandbox's own proc and
minimal dev, which replace the host's. A protected or deny-read path that crosses a
symbolic link living inside a writable root is refused (fail closed): the command could
otherwise re-point the link between runs and move the mask away from what it protects.

Only ``posix`` is imported: this runs on every sandboxed command.
"""


import posix

S_IFMT, S_IFDIR, S_IFLNK, S_IFREG = 0o170000, 0o040000, 0o120000, 0o100000
REPLACED = ("/proc", "/dev")  # the sandbox gets its own; never masked, never bound


class SetupError(Exception):
    """The sandbox cannot be built as the policy says (the command does not run)."""


class Plan:
    """bwrap's arguments (without argv[0]) and the placeholders to create and remove."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self.placeholders: list[str] = []
        self.terminal = ""  # the session's terminal (/dev/pts/N) when the command runs on one


def _lstat_mode(path: str) -> int | None:
    try:
        return posix.lstat(path).st_mode & S_IFMT
    except OSError:
        return None


def _is_dir(path: str) -> bool:
    try:
        return posix.stat(path).st_mode & S_IFMT == S_IFDIR
    except OSError:
        return False


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/") or root == "/"


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def _owning_root(path: str, roots: list[str]) -> str | None:
    best = None
    for root in roots:
        if path != root and _inside(path, root) and (best is None or len(root) > len(best)):
            best = root
    return best


def _walk_below(root: str, path: str) -> tuple[str | None, str | None]:
    """From ``root`` (exclusive) down to ``path``: the first symbolic link, and the first
    missing component."""
    current = root.rstrip("/")
    for part in path[len(root):].strip("/").split("/"):
        current = f"{current}/{part}"
        mode = _lstat_mode(current)
        if mode is None:
            return None, current
        if mode == S_IFLNK:
            return current, None
    return None, None


def pinned_parents(policy: dict, writable: list[str]) -> list[str]:
    """The existing directories strictly between a writable root and a protected or deny-read
    path below it, but not inside one: each is bound onto itself, and a mount point is what
    rename(2) and rmdir(2) refuse (EBUSY). The rules name paths, and a mask or read-only bind
    moves with its directory: a command that renamed ``a`` to ``b`` had ``a/secrets`` at
    ``b/secrets``, a path no rule names, for the file tools and the next command to read and
    write. (A path directly in a writable root needs none: the root is a mount point.)"""
    ruled = [*policy["protected"], *policy["deny_read"]]
    pins: set[str] = set()
    for path in ruled:
        root = _owning_root(path, writable)
        if root is None:
            continue
        current = root.rstrip("/")
        for part in path[len(current):].strip("/").split("/")[:-1]:
            current = f"{current}/{part}"
            if current in pins:
                continue
            if _lstat_mode(current) != S_IFDIR:
                break  # missing (a placeholder covers the path) or a link (check_links refused it)
            pins.add(current)
    # Never inside a mask or a read-only bind below the pin's own writable root: a bind there would
    # open what it hides or make it writable again (and nothing can be renamed inside either). One
    # above that root is covered by the root's own bind (found by testing from outside: with
    # home = "hidden" and the workspace in the home, no directory was pinned at all).
    return sorted(p for p in pins if p not in writable and not any(
        _inside(p, r) and _inside(r, root) and r != root for r in ruled for root in (_owning_root(p, writable),)))


def check_links(policy: dict) -> None:
    """Refuse (fail closed) when a protected or deny-read path crosses a symbolic link that
    lives inside a writable root: the command could re-point the link between runs."""
    writable = [w for w in policy["writable"] if _is_dir(w)]
    for kind, paths in (("protected", policy["protected"]), ("deny-read", policy["deny_read"])):
        for path in paths:
            root = _owning_root(path, writable)
            if root is None:
                continue
            link, _ = _walk_below(root, path)
            if link is not None:
                raise SetupError(
                    f"{kind} path {path} crosses the symbolic link {link} inside the writable root {root}; "
                    "refusing to run (remove or replace the link)"
                )


def _terminal(handshake: dict) -> str:
    """The host pty the command runs on (its stdin), if any and if seccomp denies TIOCSTI."""
    if handshake["options"].get("seccomp", "none") == "none" or not posix.isatty(0):
        return ""
    try:
        name = posix.ttyname(0)
    except OSError:
        return ""
    return name if name.startswith("/dev/pts/") and name[9:].isdigit() else ""


def private_tmp_dirs(policy: dict, env: dict) -> list[str]:
    """Directories that get a private tmpfs: ``/tmp`` and ``$TMPDIR``, unless the policy
    makes them writable (then the command writes the host's, as the policy says)."""
    out = []
    for candidate in ("/tmp", env.get("TMPDIR", "")):
        path = candidate.rstrip("/") or candidate
        if not path.startswith("/") or path == "/" or path in out:
            continue
        if any(_inside(path, w) for w in policy["writable"]) or not _is_dir(path):
            continue
        out.append(path)
    return out


def runtime_under(private: list[str], runtime, policy: dict, writable: list[str]) -> list[str]:
    """Of ``runtime`` (the server's runtime directories, and the roots the policy names
    readable), those a private tmpfs would hide which the policy lets the command read: bound
    back read-only (deny-read masks still go on top)."""
    readable = policy["readable"]
    return [
        path for path in dict.fromkeys(runtime)
        if any(_inside(path, tmp) for tmp in private)
        and not any(_inside(path, w) for w in writable)
        and ("/" in readable or any(_inside(path, r) for r in readable))
        and not any(_inside(path, d) for d in policy["deny_read"])
        and _bindable(path)
    ]


def _bindable(path: str) -> bool:
    try:
        return posix.stat(path).st_mode & S_IFMT in (S_IFDIR, S_IFREG)
    except OSError:
        return False


def masked_deny_paths(deny_read: list[str], *, own_uid: bool) -> list[tuple[str, int]]:
    """(path, file type) of each deny-read path that gets a mask: it exists, and the sandbox does
    not replace it (/proc, /dev). ``own_uid``: the helper is not root, so the command runs as its
    uid with no capability over the host's files, and a path that uid can neither read nor search
    (``/etc/shadow`` for most users) hides nothing behind a mask: it gets none (each costs bwrap
    a mount; the five system secrets cost such a server's commands 1.7-1.9 ms). ``access`` checks
    the real ids and, for a uid other than 0, no capabilities: the command's view."""
    masked = []
    for path in deny_read:
        if any(_inside(path, replaced) for replaced in REPLACED):
            continue
        try:
            mode = posix.stat(path).st_mode & S_IFMT
        except OSError:
            continue  # nothing there to hide
        if own_uid and not (posix.access(path, posix.R_OK) or posix.access(path, posix.X_OK)):
            continue
        masked.append((path, mode))
    return masked


def build(handshake: dict) -> Plan:
    policy, command, options = handshake["policy"], handshake["command"], handshake["options"]
    check_links(policy)
    plan = Plan()
    args = plan.args
    plan.terminal = _terminal(handshake)
    # --new-session stops TIOCSTI injection into the host's terminal, but it also takes the
    # command's controlling terminal away. On a terminal of its own (a tty session) the command
    # keeps it, for job control; the seccomp filter denies TIOCSTI and TIOCLINUX instead.
    args += ["--die-with-parent"] if plan.terminal else ["--new-session", "--die-with-parent"]
    readable = policy["readable"]
    if "/" in readable:
        args += ["--ro-bind", "/", "/"]
    else:
        for root in sorted(readable, key=_depth):
            if _is_dir(root) or _lstat_mode(root) is not None:
                args += ["--ro-bind", root, root]
    args += ["--dev", "/dev"]
    if plan.terminal:
        # Only the session's own terminal, at its host name (``tty`` shows /dev/pts/N): binding
        # the host's devpts would open every other terminal of the same uid to the command.
        args += ["--tmpfs", "/dev/pts", "--dev-bind", plan.terminal, plan.terminal]

    writable = [w for w in policy["writable"] if _is_dir(w)]
    ops: list[tuple[int, int, list[str]]] = []  # (depth, kind order, args)
    private = private_tmp_dirs(policy, command["env"])
    for path in private:
        ops.append((_depth(path), 0, ["--tmpfs", path]))
    # Bound back read-only below the private tmpfs: the server's runtime, and what the policy names
    # readable there (found by testing from outside: "/tmp/x" = "read" was readable by the file tools
    # and missing for commands).
    named = [r for r in policy["readable"] if r != "/" and r not in private]
    for path in runtime_under(private, [*options.get("runtime", ()), *named], policy, writable):
        ops.append((_depth(path), 1, ["--ro-bind", path, path]))
    for root in writable:
        ops.append((_depth(root), 1, ["--bind", root, root]))
    for path in pinned_parents(policy, writable):
        ops.append((_depth(path), 1, ["--bind", path, path]))

    masked: set[str] = set()
    for path in policy["protected"]:
        root = _owning_root(path, writable)
        if root is None:
            continue  # outside every writable root: already read-only
        _, missing = _walk_below(root, path)
        if missing is None:
            ops.append((_depth(path), 2, ["--ro-bind", path, path]))
        elif missing not in masked:
            # Creating the name must fail: an empty tmpfs, mode 0555, over a placeholder that
            # exists on the host only while commands run (removed by the last one out).
            masked.add(missing)
            plan.placeholders.append(missing)
            ops.append((_depth(missing), 2, ["--perms", "0555", "--tmpfs", missing]))

    for path, mode in masked_deny_paths(policy["deny_read"], own_uid=options.get("run_as") is None):
        if mode == S_IFDIR:
            # Roots the policy opens inside a hidden directory (the workspace, toolchains under
            # a hidden home) stay reachable: the mask lets a command pass through, and readable
            # ones are bound back on top of it (writable ones already are).
            inner = [r for r in (*readable, *writable) if r != path and _inside(r, path)]
            ops.append((_depth(path), 3, ["--perms", "0711" if inner else "0000", "--tmpfs", path]))
            for root in inner:
                if root not in writable and _lstat_mode(root) is not None:
                    ops.append((_depth(root), 1, ["--ro-bind", root, root]))
        else:
            ops.append((_depth(path), 3, ["--ro-bind", "/dev/null", path]))

    for _, _, op in sorted(ops, key=lambda item: (item[0], item[1])):
        args += op

    args += ["--unshare-user", "--unshare-pid", "--unshare-ipc"]
    if policy["network"] != "on":
        args.append("--unshare-net")
    if options.get("mount_proc", True):
        args += ["--proc", "/proc"]
    args += ["--cap-drop", "ALL", "--chdir", command["cwd"], "--clearenv"]
    for key, value in command["env"].items():
        args += ["--setenv", key, value]
    return plan


def finish(plan: Plan, *, seccomp_fd: int | None, info_fd: int, block_fd: int = -1) -> list[str]:
    """The option list, once the descriptor numbers are known (the command follows ``--`` on
    bwrap's real argv: options read with ``--args`` cannot carry it). ``block_fd``: bwrap waits
    for a byte on it after building the sandbox and before running the command."""
    extra = ["--info-fd", str(info_fd)]
    if block_fd >= 0:
        extra += ["--block-fd", str(block_fd)]
    if seccomp_fd is not None:
        extra += ["--seccomp", str(seccomp_fd)]
    return [*plan.args, *extra]
