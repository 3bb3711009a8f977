"""Confinement: every path is resolved beneath an open directory fd of its root.

The gateway has checked the agent's path *as text* (and as it resolved at that
moment). Between that check and our use the tree can change: a directory swapped
for a symbolic link, a link retargeted. So nothing here resolves a string and then
opens it. Each operation starts from an fd of the root the policy grants access
under. A path with no link on the way is one ``openat2(RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)``: ``..`` leaving the root and magic links
(``/proc/self/root``...) fail inside the kernel, atomically with the lookup. A path with
a link (that call's ELOOP), and every path on kernels without openat2, is walked one
component at a time with ``openat(O_NOFOLLOW)`` from fds we hold, interpreting links
ourselves (:mod:`.openat_walk`): ``..`` pops our own stack, and after a link each lookup
is judged first (``PathRules.hides``), because the kernel's walk would look names up
inside hidden directories and its answer, found or not, would say what they hold.

Links. Policy ``filesystem.symlinks``:
- ``within_root`` (default): a link is followed when its target stays beneath the
  root (a relative target); the object reached is then checked against the policy
  again, so a link inside the workspace cannot reach ``.git/config`` for a write or a
  ``none`` area for a read. Under the root ``/`` (paths outside the workspace) absolute
  targets stay inside too and are followed from ``/``, then re-checked the same way.
- ``never``: any link met while resolving is refused (``RESOLVE_NO_SYMLINKS``).
Operations that change a name (write, create, move, remove) never follow a link
at the leaf; they act through the parent directory's fd with ``*at`` calls.
"""

from __future__ import annotations

import errno
import os
import stat
from _thread import allocate_lock  # threading.Lock itself; threading costs the patch helper 4 ms

from codespace.contract import FsError
from codespace.contract.records import Fields, field

from . import errors, kernel
from .names import join, readlink_at
from .roots import O_CLOEXEC, O_DIR, O_NOFOLLOW, O_PATH, Root

TYPE_CHECKING = False  # not typing's: typing costs the patch helper (which loads this module) more than its patch
if TYPE_CHECKING:
    from typing import Literal

    from codespace.contract import PathRules, WorkspaceView

    Need = Literal["read", "write"]
    Mode = Literal["openat2", "openat"]

MODE_ENV = "CODESPACE_FS_RESOLVER"


def _log():  # noqa: ANN202 - logging loads where something is logged: it costs the patch helper 5 ms
    import logging

    return logging.getLogger(__name__)


class Opened(Fields):
    """An fd for the object a path reached, and the path the policy judged it by (a tuple
    with named fields, as :class:`.roots.Root` is)."""

    __slots__ = ()
    _fields = ("fd", "path", "followed")

    def __new__(cls, fd: int, path: str, followed: bool) -> Opened:
        return tuple.__new__(cls, (fd, path, followed))

    fd: int = field(0)  # type: ignore[assignment]
    path: str = field(1)  # type: ignore[assignment]
    followed: bool = field(2)  # type: ignore[assignment]


def choose_mode(requested: str | None = None) -> tuple[Mode, str]:
    available, why = kernel.openat2_available()
    requested = (requested or "").strip().lower()
    if requested == "openat":
        return "openat", f"forced by {MODE_ENV}=openat ({why})"
    if requested not in ("", "openat2", "auto"):
        _log().warning("%s=%r is not one of auto, openat2, openat; using auto", MODE_ENV, requested)
    if available:
        return "openat2", why
    return "openat", f"fallback: {why}"


class Confinement:
    """Resolution of policy-checked absolute paths, confined to their roots."""

    def __init__(self, workspace: WorkspaceView, mode: Mode) -> None:
        self.workspace_root = workspace.root_str  # not str(root): a Path, and pathlib costs the patch helper
        self.rules: PathRules = workspace.paths
        self.follow_links = workspace.policy.filesystem.symlinks == "within_root"
        # Decided by the core policy; the read path only applies it.
        self.refuse_hardlinks = bool(getattr(workspace, "refuse_hardlinks", False))
        self.mode: Mode = mode
        self._ws_fd: int | None = None
        self._lock = allocate_lock()
        self._ws_prefix = self.workspace_root.rstrip("/") + "/"

    # -- roots -------------------------------------------------------------------

    def _workspace_fd(self) -> int:
        fd = self._ws_fd
        # Held for the server's life so a root path later swapped for a link is not
        # re-resolved; reopened only if the directory itself was deleted.
        if fd is not None and os.fstat(fd).st_nlink > 0:
            return fd
        with self._lock:
            if self._ws_fd is None or os.fstat(self._ws_fd).st_nlink == 0:
                # The old fd is deliberately not closed: another thread may hold it.
                self._ws_fd = os.open(self.workspace_root, O_PATH | O_DIR | O_CLOEXEC)
            return self._ws_fd

    def root_for(self, path: str) -> Root:
        if path == self.workspace_root or path.startswith(self._ws_prefix):
            return Root(self.workspace_root, self._workspace_fd(), owned=False)
        rule = self.rules.match(path)
        if rule is None or rule.access == "none":
            # The gateway refuses these first; this keeps the backend safe on its own.
            rule_name = rule.source if rule is not None else "filesystem.paths (no entry)"
            raise errors.refused(
                f"no policy entry grants access to {path} ({rule_name})", path=path, rule=rule_name,
                hint="use paths the policy allows (see workspace_info)",
            )
        candidate = rule.path
        while True:
            try:
                fd = os.open(candidate, O_PATH | O_DIR | O_CLOEXEC)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR) or candidate == "/":
                    raise errors.os_error(exc, candidate, "open the policy root") from exc
                # The entry names a file or a directory yet to be created: confine to
                # its nearest existing directory instead.
                candidate = os.path.dirname(candidate)
                continue
            return Root(candidate, fd, owned=True)

    # -- resolution ----------------------------------------------------------------

    def open(self, path: str, flags: int, *, need: Need, follow_last: bool, action: str) -> Opened:
        """Open ``path`` with ``flags`` (O_PATH, O_RDONLY|O_DIRECTORY...), links inside
        the root followed per policy; re-check the object reached when a link was
        followed."""
        root = self.root_for(path)
        try:
            return self._open_in(root, path, root.rel(path), flags, need=need, follow_last=follow_last, action=action)
        finally:
            root.close()

    def open_parent(self, path: str, *, need: Need, action: str) -> tuple[Opened, str]:
        """An ``O_RDONLY|O_DIRECTORY`` fd of ``path``'s parent and the leaf name; the
        returned ``Opened.path`` is the path the leaf will have (for messages and the
        policy)."""
        root = self.root_for(path)
        try:
            rel = root.rel(path)
            if not rel:
                raise errors.root_refused(path, action)
            parent_rel, _, name = rel.rpartition("/")
            parent = self._open_in(
                root, root.join(parent_rel), parent_rel, os.O_RDONLY | O_DIR, need=need, follow_last=True,
                action=action, leaf=name,
            )
            return parent, name
        finally:
            root.close()

    def _open_in(
        self, root: Root, path: str, rel: str, flags: int, *, need: Need, follow_last: bool, action: str,
        leaf: str | None = None,
    ) -> Opened:
        if not follow_last:
            flags |= O_NOFOLLOW
        try:
            fd = self._openat2(root, rel, flags) if self.mode == "openat2" else None
            if fd is not None:
                followed, real_rel = False, rel
            else:
                # A link on the way (or no openat2): one component at a time, and once a link is
                # followed each lookup is judged first. The kernel's own walk would look names up
                # inside hidden directories and say by its answer whether they exist there.
                from . import openat_walk

                try:
                    fd, followed, real_rel = openat_walk.walk(
                        root, rel, flags, follow_last, self.follow_links, self.rules.hides)
                except openat_walk.HiddenWay as hidden:
                    shown = path if leaf is None else join(path, leaf)
                    refusal = self.rules.hidden_way(shown, hidden.refusal, need)  # the gateway's words
                    raise errors.PolicyRefused(refusal.rule, refusal.message, path=shown) from None
                if followed and self.mode == "openat2":
                    real_rel = self._real_rel(root, fd)  # where the object is now, as the kernel names it
        except OSError as exc:
            raise self._explain(exc, root, rel, path if leaf is None else f"{path.rstrip('/')}/{leaf}", action) from exc
        if not followed:
            return Opened(fd, path if leaf is None else join(path, leaf), False)
        target = root.join(real_rel)
        if leaf is not None:
            target = join(target, leaf)
        refusal = self.rules.check_exact(target, need)
        if refusal is not None:
            os.close(fd)
            shown = path if leaf is None else join(path, leaf)
            raise errors.refused(
                f"{shown} leads through a symbolic link to {target}: {refusal.message}",
                path=shown, rule=refusal.rule,
                hint=("write somewhere the policy makes writable (see workspace_info)" if need == "write"
                      else "read only paths the policy allows (see workspace_info)"),
            )
        return Opened(fd, target, True)

    def _openat2(self, root: Root, rel: str, flags: int) -> int | None:
        """The fd, when no link lies on the way (the common case: one system call); None
        when one does (ELOOP) and the policy lets links be followed."""
        path = os.fsencode(rel) if rel else b"."
        base = kernel.RESOLVE_NO_MAGICLINKS | (kernel.RESOLVE_IN_ROOT if root.is_fs_root else kernel.RESOLVE_BENEATH)
        try:
            return kernel.openat2(root.fd, path, flags, base | kernel.RESOLVE_NO_SYMLINKS)
        except OSError as exc:
            if exc.errno != errno.ELOOP or not self.follow_links:
                raise
        return None

    def _real_rel(self, root: Root, fd: int) -> str:
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
            root_real = os.readlink(f"/proc/self/fd/{root.fd}")
        except OSError as exc:
            os.close(fd)
            raise OSError(errno.ELOOP, "cannot tell where a symbolic link led: /proc/self/fd is unavailable") from exc
        if root_real == "/":
            return real.lstrip("/")
        if real == root_real:
            return ""
        if not real.startswith(root_real + "/"):  # a directory on the way moved out of the root meanwhile
            os.close(fd)
            raise OSError(errno.EXDEV, f"resolved outside the root: {real}")
        return real[len(root_real) + 1:]

    # -- messages ------------------------------------------------------------------

    def _explain(self, exc: OSError, root: Root, rel: str, path: str, action: str) -> FsError:
        code = exc.errno
        if code == errno.EAGAIN:
            return FsError(
                f"cannot {action} {path}: the path kept changing while it was resolved (a directory on it was "
                "replaced concurrently); nothing was done. To proceed: retry.", path=path, errno=code,
                code="changed",
            )
        if code == errno.EXDEV:
            link = _first_link(root, rel)
            where = f": {root.join(link[0])!r} -> {link[1]!r}" if link else ""
            return errors.refused(
                f"{path} goes through a symbolic link that is absolute or leads out of {root.path}{where}; links are "
                f"followed only when they stay inside the root (policy filesystem.symlinks = 'within_root')",
                path=path, rule="filesystem.symlinks", errno_=errno.EXDEV,
                hint="use the link's target path directly, so the policy can check it",
            )
        if code == errno.ELOOP:
            from .openat_walk import TooLongAWay

            if isinstance(exc, TooLongAWay):  # the walk's own bounds, whatever the path's last component is
                what = (f"too many levels of symbolic links ({exc.what}; a loop?)" if "links" in exc.what
                        else f"it takes {exc.what} to resolve, more than the kernel would (ELOOP)")
                return errors.refused(f"{path}: {what}", path=path, rule="filesystem.symlinks", errno_=errno.ELOOP,
                                      hint="fix the link loop or use the path its links lead to")
            link = _first_link(root, rel)
            if link is None:
                return errors.refused(
                    f"{path}: too many levels of symbolic links", path=path, rule="filesystem.symlinks",
                    errno_=errno.ELOOP, hint="fix the link loop or use the real path",
                )
            sub, target = link
            shown = f"{root.join(sub)!r} -> {target!r}"
            if root.join(sub).startswith("/proc/"):
                return errors.refused(
                    f"{path} goes through a /proc magic link ({shown}), which can lead anywhere", path=path,
                    rule="filesystem.symlinks", errno_=errno.ELOOP, hint="use the real path instead",
                )
            if not self.follow_links:
                return errors.refused(
                    f"{path} goes through a symbolic link ({shown}) and policy filesystem.symlinks = 'never' "
                    "refuses every link", path=path, rule="filesystem.symlinks", errno_=errno.ELOOP,
                    hint="use the real path without links",
                )
            if sub == rel:
                return errors.leaf_link(path, target, action)
            return errors.refused(
                f"{path}: too many levels of symbolic links, starting at {shown} (a loop?)", path=path,
                rule="filesystem.symlinks", errno_=errno.ELOOP, hint="fix the link loop or use the real path",
            )
        return errors.os_error(exc, path, action)


def _first_link(root: Root, rel: str) -> tuple[str, str] | None:
    """For the message only (the refusal has already happened): the first link on
    the path and its text. Best effort, by plain lstat."""
    parts = [p for p in rel.split("/") if p]
    for i in range(1, len(parts) + 1):
        sub = "/".join(parts[:i])
        try:
            st = os.stat(sub, dir_fd=root.fd, follow_symlinks=False)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return sub, readlink_at(root.fd, sub) or "?"
    return None
