"""bubblewrap argv, upstream's against ours: split into operations, normalised, compared.

An operation is one bwrap option with its arguments (a ``--perms`` or ``--size`` joins the mount it
modifies). Normalised: the tree's paths become ``<ws>``, ``<base>``, upstream's helper ``<helper>``,
descriptor numbers ``<fd>``, modes octal without leading zeros, ``--setenv NAME`` loses its value,
our interpreter's own directories (bound back under the private ``/tmp``) become ``<runtime>``.
What bwrap runs after ``--`` is one more operation, ``run: ...`` (the command itself becomes ``<command>``).
Then: an operation only one side has is a difference; so is a change in the order of the shared ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

ARITY = {
    "--args": 1, "--userns": 1, "--userns2": 1, "--pidns": 1, "--uid": 1, "--gid": 1, "--hostname": 1,
    "--chdir": 1, "--unsetenv": 1, "--setenv": 2, "--lock-file": 1, "--sync-fd": 1, "--perms": 1, "--size": 1,
    "--bind": 2, "--bind-try": 2, "--dev-bind": 2, "--dev-bind-try": 2, "--ro-bind": 2, "--ro-bind-try": 2,
    "--bind-fd": 2, "--ro-bind-fd": 2, "--remount-ro": 1, "--overlay-src": 1, "--overlay": 3, "--tmp-overlay": 1,
    "--ro-overlay": 1, "--exec-label": 1, "--file-label": 1, "--proc": 1, "--dev": 1, "--tmpfs": 1, "--mqueue": 1,
    "--dir": 1, "--file": 2, "--bind-data": 2, "--ro-bind-data": 2, "--symlink": 2, "--seccomp": 1,
    "--add-seccomp-fd": 1, "--block-fd": 1, "--userns-block-fd": 1, "--info-fd": 1, "--json-status-fd": 1,
    "--cap-add": 1, "--cap-drop": 1, "--chmod": 2, "--argv0": 1,
}
"""bwrap's options that take arguments (bubblewrap 0.8-0.11); any other ``--flag`` takes none."""

_FD_OPTIONS = {"--args", "--sync-fd", "--seccomp", "--add-seccomp-fd", "--block-fd", "--userns-block-fd",
               "--info-fd", "--json-status-fd", "--userns", "--userns2", "--pidns", "--file", "--bind-data",
               "--ro-bind-data", "--bind-fd", "--ro-bind-fd"}
_MODIFIERS = ("--perms", "--size")


def operations(argv: list[str]) -> tuple[list[list[str]], list[str]]:
    """(bwrap's options as operations, the command line after ``--``)."""
    ops, i, pending = [], 0, []
    while i < len(argv) and argv[i] != "--":
        width = ARITY.get(argv[i], 0)
        op = argv[i:i + 1 + width]
        i += 1 + width
        if op[0] in _MODIFIERS:
            pending += op
            continue
        ops.append([*pending, *op])
        pending = []
    if pending:
        ops.append(pending)
    return ops, argv[i + 1:]


class Names:
    """The replacements that make two runs' paths comparable: longest first."""

    def __init__(self, pairs: Iterable[tuple[str, str]], runtime: Iterable[str] = ()) -> None:
        self.pairs = sorted(((p, n) for p, n in pairs if p), key=lambda pn: -len(pn[0]))
        self.runtime = set(runtime)

    def path(self, text: str) -> str:
        for prefix, name in self.pairs:
            if text == prefix or text.startswith(prefix + "/"):
                return name + text[len(prefix):]
        for prefix, name in self.pairs:  # paths quoted inside a JSON argument
            text = text.replace(f'"{prefix}"', f'"{name}"').replace(f'"{prefix}/', f'"{name}/')
        return text


def _mode(text: str) -> str:
    return format(int(text, 8), "o") if re.fullmatch(r"[0-7]+", text) else text


def normalise_op(op: list[str], names: Names) -> str:
    out, i = [], 0
    while i < len(op):
        flag = op[i]
        args = op[i + 1:i + 1 + ARITY.get(flag, 0)]
        i += 1 + len(args)
        if flag in _FD_OPTIONS and args:
            args = ["<fd>", *[names.path(a) for a in args[1:]]]
        elif flag == "--perms":
            args = [_mode(a) for a in args]
        elif flag == "--setenv":
            args = args[:1]
        elif flag == "--ro-bind" and len(args) == 2 and args[0] == args[1] and args[0] in names.runtime:
            args = ["<runtime>", "<runtime>"]
        else:
            args = [names.path(a) for a in args]
        out += [flag, *args]
    return " ".join(out)


def normalise_run(tail: list[str], command: list[str], names: Names) -> str:
    """What bwrap starts: the command itself, or upstream's inner stage before it."""
    if tail[-len(command):] == command:
        tail = [*tail[:-len(command)], "<command>"]
    words = []
    for word in tail:
        if word.startswith("{"):
            try:  # a policy in JSON: compare its structure, with the tree's paths named
                word = json.dumps(json.loads(names.path(word)), sort_keys=True, separators=(",", ":"))
            except ValueError:
                pass
        words.append(names.path(word))
    return "run: " + " ".join(words)


def normalised(argv: list[str], command: list[str], names: Names) -> list[str]:
    ops, tail = operations(argv)
    return [normalise_op(op, names) for op in ops] + [normalise_run(tail, command, names)]


_MOUNTS = {"--bind", "--bind-try", "--dev-bind", "--dev-bind-try", "--ro-bind", "--ro-bind-try", "--remount-ro",
           "--proc", "--dev", "--tmpfs", "--mqueue", "--dir", "--file", "--bind-data", "--ro-bind-data", "--symlink",
           "--chmod", "--overlay", "--tmp-overlay", "--ro-overlay"}


def _target(op: str) -> str | None:
    """Where a mount operation acts (its last argument), or None for an option that mounts nothing."""
    words = [w for w in op.split(" ") if w not in ("--perms", "--size")]
    flag = next((w for w in words if w.startswith("--")), None)
    return words[-1] if flag in _MOUNTS and len(words) > 1 else None


def _covers(outer: str, inner: str) -> bool:
    return outer == inner or inner.startswith(outer.rstrip("/") + "/")


def compare(theirs: list[str], ours: list[str]) -> list[tuple[str, str]]:
    """(operation, what differs) for each operation one side lacks, and for each pair of shared mounts
    on nested paths (the later one wins there) that the two sides run in opposite order."""
    found = [(op, "upstream only") for op in dict.fromkeys(theirs) if op not in ours]
    found += [(op, "ours only") for op in dict.fromkeys(ours) if op not in theirs]
    shared = [op for op in dict.fromkeys(theirs) if op in ours and _target(op) is not None]
    for i, first in enumerate(shared):
        for second in shared[i + 1:]:
            a, b = _target(first), _target(second)
            if (_covers(a, b) or _covers(b, a)) and ours.index(first) > ours.index(second):
                found.append((f"order: {first} / {second}", "upstream runs the first before the second, ours after"))
    return found
