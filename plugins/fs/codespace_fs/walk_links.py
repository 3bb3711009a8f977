"""A walk's links to directories (``follow_dir_links``): each resolved by the confinement, so
the kernel keeps it inside the root, re-checked against the policy, and walked once however
many links lead to it."""

from __future__ import annotations

import errno
import os
import stat

from codespace.contract import FsError

from .resolve import O_DIR, O_PATH

MAX_FOLLOWED_LINKS = 256


def follow_link(conf, real, raw, shown, depth, scopes, seen, owned, problems):  # noqa: ANN001, ANN202
    """Queue item for a link to a directory inside the root, resolved by the
    confinement (so the kernel keeps it inside) and re-checked against the policy."""
    if not conf.follow_links:
        problems.append({"path": shown, "message": "not followed: policy filesystem.symlinks = 'never'"})
        return None
    if len(owned) > MAX_FOLLOWED_LINKS:
        problems.append({"path": shown, "message": f"not followed: more than {MAX_FOLLOWED_LINKS} links"})
        return None
    try:
        opened = conf.open(real, O_PATH | O_DIR, need="read", follow_last=True, action="walk")
    except FsError as exc:
        if exc.errno == errno.ENOTDIR:
            return None  # a link to a file: listed, nothing to walk
        problems.append({"path": shown, "message": f"not followed: {exc.message}"})
        return None
    st = os.fstat(opened.fd)
    if not stat.S_ISDIR(st.st_mode):  # pragma: no cover - O_DIRECTORY guarantees it
        os.close(opened.fd)
        return None
    if (st.st_dev, st.st_ino) in seen:
        os.close(opened.fd)
        problems.append({"path": shown, "message": "not followed: it leads to a directory already walked (a loop)"})
        return None
    owned.append(opened.fd)
    return (opened.fd, "", raw, shown, depth + 1, opened.path, scopes)
