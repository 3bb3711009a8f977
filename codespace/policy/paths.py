"""Path rules: which access a path has, and why a request is refused.

Rules are evaluated on absolute, lexically normalised paths (``..`` removed
without touching the disk, as upstream does). The gateway checks both the path as
written and the path its existing prefix resolves to, so a symbolic link cannot
carry a request somewhere the policy forbids; the file-system backend then makes
the *use* race-free. The same rules drive the sandbox's mounts.
"""

from __future__ import annotations

import os

from ..contract.errors import Refused

# Not typing's TYPE_CHECKING: the patch helper builds these rules, and typing costs it more than its patch.
TYPE_CHECKING = False
if TYPE_CHECKING:  # the rules need no pydantic: a one-shot helper builds them too
    from pathlib import Path
    from typing import Literal

    from .model import Access, FilesystemPolicy

    Need = Literal["read", "write"]

PATH_MAX = 4096
NAME_MAX = 255

# Ties between entries of equal depth go to the more restrictive access.
_RESTRICTIVENESS = {"none": 2, "read": 1, "write": 0}


class PathRule:
    """One entry of the rules: the path (as its parts), its access, and the entry it comes
    from. Immutable, compared and hashed by value. A plain class, not a dataclass: loading
    ``dataclasses`` (and ``inspect`` with it) cost a one-shot helper more than its patch."""

    __slots__ = ("parts", "access", "source")
    parts: tuple[str, ...]
    access: Access
    source: str

    def __init__(self, parts: tuple[str, ...], access: Access, source: str) -> None:
        object.__setattr__(self, "parts", parts)
        object.__setattr__(self, "access", access)
        object.__setattr__(self, "source", source)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: a PathRule is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: a PathRule is immutable")

    def _key(self) -> tuple[tuple[str, ...], str, str]:
        return (self.parts, self.access, self.source)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"PathRule(parts={self.parts!r}, access={self.access!r}, source={self.source!r})"

    @property
    def path(self) -> str:
        return "/" + "/".join(self.parts)


def split_parts(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.split("/") if p)


def normalize(raw: str, base: str) -> str:
    """Join ``raw`` to ``base`` and remove ``.``/``..`` lexically (``..`` at ``/`` stays ``/``)."""
    return "/" + "/".join(normalized_parts(raw, base))


def normalized_parts(raw: str, base: str) -> tuple[str, ...]:
    """``split_parts(normalize(raw, base))``, without joining and splitting again: the rules
    of a workspace are built from ~150 entries by every process that opens it."""
    joined = raw if raw.startswith("/") else f"{base}/{raw}"
    out: list[str] = []
    for part in joined.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        out.append(part)
    return tuple(out)


def validate_agent_path(raw: str) -> str | None:
    """A problem with the path text itself, before any rule applies, or None."""
    if raw == "":
        return "the path is empty; use '.' for the workspace root"
    if "\0" in raw:
        return "the path contains a NUL byte, which no file name can hold"
    encoded = os.fsencode(raw) if _encodable(raw) else None
    if encoded is None:
        return "the path contains characters that cannot be encoded as a file name"
    if len(encoded) >= PATH_MAX:
        return f"the path is {len(encoded)} bytes long; the limit is {PATH_MAX - 1}"
    for part in raw.split("/"):
        if len(os.fsencode(part)) > NAME_MAX:
            return f"a path component is longer than {NAME_MAX} bytes: {part[:40]!r}..."
    return None


def _encodable(raw: str) -> bool:
    try:
        os.fsencode(raw)
    except UnicodeError:
        return False
    return True


class PathRules:
    """The resolved path rules of one workspace."""

    def __init__(self, rules: list[PathRule], protected: list[str]) -> None:
        self.protected_names = {p for p in protected if "/" not in p.strip("/") and not p.startswith("/")}
        self.protected_anchored = [split_parts(p) for p in protected if p not in self.protected_names]
        self._index(rules)

    def _index(self, rules: list[PathRule]) -> None:
        self.rules = sorted(rules, key=lambda r: (len(r.parts), _RESTRICTIVENESS[r.access]), reverse=True)
        # By exact path, the most restrictive first: a lookup costs the path's depth, not
        # the number of entries (the defaults hide ~150 credential paths).
        self._by_parts: dict[tuple[str, ...], PathRule] = {}
        for rule in self.rules:
            self._by_parts.setdefault(rule.parts, rule)
        self._open_dirs: dict[str, bool] = {}  # hides(): directories a rule opens

    def add(self, rule: PathRule) -> None:
        """One more rule (e.g. a file the server holds a secret in, known after start-up)."""
        self._index([*self.rules, rule])

    @classmethod
    def build(
        cls,
        fs: FilesystemPolicy,
        workspace: str | Path,
        home: str,
        extra: list[PathRule] = (),  # type: ignore[assignment]
    ) -> PathRules:
        rules = []
        root = str(workspace)
        for key, access in fs.merged_paths().items():
            if key == "~" or key.startswith("~/"):
                parts = normalized_parts(key[2:] if key != "~" else ".", home)
            else:
                parts = normalized_parts(key, root)
            rules.append(PathRule(parts, access, f"filesystem.paths[{key!r}]"))
        rules.extend(extra)
        return cls(rules, fs.all_protected())

    def match(self, path: str) -> PathRule | None:
        """The most specific rule covering ``path`` (rules are pre-sorted)."""
        parts = split_parts(path)
        index = self._by_parts
        for n in range(len(parts), -1, -1):
            rule = index.get(parts[:n])
            if rule is not None:
                return rule
        return None

    def access(self, path: str) -> Access:
        rule = self.match(path)
        return rule.access if rule else "none"

    def hides(self, directory: str, name: str) -> Refused | None:
        """Why looking ``name`` up inside ``directory`` would tell what a hidden area holds, or
        None. Whether a name exists there is itself what the area hides, so a symbolic link's
        way may not look inside one (``a/secrets/x/../../pub.txt`` was found or not as ``x``
        existed). A name on the way to an open area below is the exception: that way passes
        there (the sandbox's masks let commands pass there too, and nowhere else)."""
        if self._open_dirs.get(directory):
            return None
        rule = self.match(directory)
        if rule is not None and rule.access != "none":
            if len(self._open_dirs) >= _OPEN_DIRS_KEPT:
                self._open_dirs.clear()
            self._open_dirs[directory] = True  # asked once a component of every linked path: kept
            return None
        child = f"{directory.rstrip('/')}/{name}"
        if self.access(child) != "none" or any(r.access != "none" and r.path.startswith(child + "/") for r in self.rules):
            return None
        # The message is where, as the policy names it: "{path} ... into {message}, which the policy hides".
        if rule is None:
            return Refused("filesystem.paths (no entry)", "a path no filesystem.paths entry covers")
        return Refused(rule.source, f"{rule.path} ({rule.source} = 'none')")

    def hidden_way(self, path: str, where: Refused, need: Need) -> Refused:
        """The refusal of ``path``, whose way would look inside what ``where`` (from
        :meth:`hides`) names: the gateway's and a backend's word for word, since which of
        them refused would otherwise tell something (the gateway's resolution of a link that
        loops back, say, goes through the hidden directory to find that out)."""
        text = f"{path} resolves through a symbolic link into {where.message}, which the policy hides"
        return _with_hint(Refused(where.rule, text), need)

    def hidden_on_the_way(self, path: str) -> Refused | None:
        """Why resolving ``path`` as the kernel would (its links followed, as ``realpath``
        does) would look a name up inside a directory the policy hides (:meth:`hides`), or
        None. Stops before that lookup."""
        done = ""  # the real path so far ("" is "/")
        todo = [part for part in reversed(path.split("/")) if part]
        links = steps = 0
        while todo:
            steps += 1
            if steps > MAX_RESOLVE_STEPS:
                raise TooLongAWay(f"more than {MAX_RESOLVE_STEPS} steps")
            name = todo.pop()
            if name == ".":
                continue
            if name == "..":
                done = done.rpartition("/")[0]
                continue
            refusal = self.hides(done or "/", name)
            if refusal is not None:
                return refusal
            here = f"{done}/{name}"
            try:
                target = os.readlink(here)
            except OSError:  # not a link, or missing: realpath goes on by name too
                done = here
                continue
            links += 1
            if links > MAX_LINKS:
                raise TooLongAWay(f"more than {MAX_LINKS} symbolic links")
            if target.startswith("/"):
                done = ""
            todo.extend(part for part in reversed(target.split("/")) if part)
        return None

    def writable_roots(self) -> list[str]:
        return [r.path for r in self.rules if r.access == "write"]

    def protected_part(self, path: str, rule: PathRule) -> str | None:
        """The protected name or anchored path ``path`` falls under, relative to the
        writable rule that grants it, or None."""
        rel = split_parts(path)[len(rule.parts):]
        for part in rel:
            if part in self.protected_names:
                return part
        for anchored in self.protected_anchored:
            if rel[: len(anchored)] == anchored:
                return "/" + "/".join(anchored)
        return None

    def check_exact(self, path: str, need: Need) -> Refused | None:
        """Check ``path`` exactly as given (no link resolution): for a backend that has already
        resolved the object it reached, e.g. from ``/proc/self/fd``."""
        rule = self.match(path)
        if rule is None:
            return Refused(
                "filesystem.paths (no entry)",
                f"no filesystem.paths entry covers {path}; access is none",
            )
        if rule.access == "none":
            return Refused(rule.source, f"{rule.source} = 'none' forbids any access to {path}")
        if need == "write":
            if rule.access == "read":
                return Refused(rule.source, f"{rule.source} = 'read' makes {path} read-only")
            protected = self.protected_part(path, rule)
            if protected is not None:
                return Refused(
                    "filesystem.protected",
                    f"{path} is inside protected path '{protected}' (rule filesystem.protected), "
                    "which stays read-only inside writable roots",
                )
        return None

    def check(
        self, path: str, need: Need, *, follow_leaf: bool | None = None, resolved: dict[str, str] | None = None
    ) -> Refused | None:
        """Check ``path`` as written and as its existing prefix resolves.

        By default a write does not follow a final link (the backend replaces or
        removes the link itself), so only the parent directory is resolved; a write
        that goes through the link (a patch updating a linked file) passes
        ``follow_leaf=True``. ``resolved``: where a caller checking many paths at once
        keeps the resolutions of this check (a patch's targets share a few parents,
        and each resolution costs a system call per component)."""
        refusal = self.check_exact(path, need)
        if refusal is not None:
            return _with_hint(refusal, need)
        follow = need == "read" if follow_leaf is None else follow_leaf
        try:
            if not follow and path != "/":
                parent = _realpath(os.path.dirname(path), resolved)
                real = os.path.join(parent, os.path.basename(path))
                by_name = isinstance(parent, _ByName)
            else:
                real = _realpath_through(path, resolved)
                by_name = isinstance(real, _ByName)
        except (OSError, ValueError):
            return None
        # A link on the way, or a way the kernel could not resolve (a loop, say, which Python's
        # realpath follows by name through whatever lies on it): where did it lead, what did it pass?
        if real != path or by_name:
            try:
                passed = self.hidden_on_the_way(path if follow else os.path.dirname(path))
            except TooLongAWay as too_long:
                # Refused here, whatever lies further: ``real`` was found by a resolution that did
                # not stop at hidden directories, and a refusal naming it could tell what they hold.
                return _with_hint(Refused("filesystem.symlinks", f"{path} takes {too_long} to resolve, more than "
                                          "the kernel follows (ELOOP); use the path its links lead to"), need)
            if passed is not None:
                return self.hidden_way(path, passed, need)
            refusal = self.check_exact(real, need)
            if refusal is not None:
                rule = self.match(real)
                if rule is None or rule.access == "none":
                    # The link leads into what the policy hides: its target (a link there, a
                    # name) would say what lies inside. The rule's own path is the policy's.
                    where = f"{rule.path} ({rule.source} = 'none')" if rule else "a path no filesystem.paths entry covers"
                    text = f"{path} resolves through a symbolic link into {where}, which the policy hides"
                else:
                    text = f"{path} resolves through a symbolic link to {real}: {refusal.message}"
                return _with_hint(Refused(refusal.rule, text), need)
        return None


MAX_LINKS = 40  # the kernel's own limit on links followed in one lookup
_OPEN_DIRS_KEPT = 4096
# Components a resolution may take, links' included: a path is at most 4,096 bytes, and the
# kernel follows at most 40 links, so a way past this is made of links' texts full of "d/.."
# (found by testing from outside: 40 links of 4,000 bytes each took a call seconds).
MAX_RESOLVE_STEPS = 4096


class TooLongAWay(Exception):
    """A resolution past MAX_LINKS or MAX_RESOLVE_STEPS: the kernel would refuse it (ELOOP)."""


def _realpath(path: str, resolved: dict[str, str] | None) -> str:
    if resolved is None:
        return realpath(path)
    real = resolved.get(path)
    if real is None:
        real = resolved[path] = realpath(path)
    return real


class _ByName(str):
    """:func:`realpath`'s answer where the kernel could not resolve the whole path: Python's
    realpath, which goes on by name past missing components and loops, through whatever lies on
    the way (found by testing from outside: a link looping back through a hidden directory came
    back as itself, went unjudged, and the errors of what followed told what the directory held)."""


def realpath(path: str) -> str:
    """``os.path.realpath(path)``, asked of the kernel when the whole path exists: one
    ``O_PATH`` open and a readlink of its descriptor instead of an lstat (and a readlink per
    link) per component in Python, about 4x faster on a 5-level path. Every other case (a
    missing component, a loop, an object without a path) is realpath's own answer."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (OSError, ValueError):
        return _ByName(os.path.realpath(path))
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = ""
    finally:
        os.close(fd)
    if not real.startswith("/") or real.endswith(" (deleted)"):
        return _ByName(os.path.realpath(path))
    return real


def _realpath_through(path: str, resolved: dict[str, str] | None) -> str:
    """``os.path.realpath(path)``, from the parent's kept resolution when the last component
    is not a link (what realpath itself does after resolving the parent)."""
    if resolved is None or not path.startswith("/") or path == "/":
        return _realpath(path, resolved)
    parent, name = os.path.split(path)
    if name in ("", ".", ".."):
        return _realpath(path, resolved)
    parent_real = _realpath(parent, resolved)
    candidate = os.path.join(parent_real, name)
    if os.path.islink(candidate):
        return realpath(path)
    return _ByName(candidate) if isinstance(parent_real, _ByName) else candidate


def _with_hint(refusal: Refused, need: Need) -> Refused:
    hint = (
        "write somewhere the policy makes writable (see workspace_info), or ask the operator to change the policy"
        if need == "write"
        else "read only paths the policy allows (see workspace_info), or ask the operator to change the policy"
    )
    return Refused(refusal.rule, f"refused by policy: {refusal.message}. To proceed: {hint}.")
