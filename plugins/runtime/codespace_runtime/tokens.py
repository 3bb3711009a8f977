"""The token file whose HMAC proves a client may talk to the worker.

It must be a regular file (no link followed), mode 0600 or stricter, owned by the reading uid,
and hold at least 16 bytes: a token anyone else can read or replace proves nothing.
"""

from __future__ import annotations

import os
import secrets
import stat

MIN_TOKEN_BYTES = 16


class TokenError(Exception):
    """The token file cannot be used; the message names it, the rule and the fix."""


def load_token(path: str | os.PathLike[str]) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise TokenError(f"token file {path}: {exc.strerror}. To proceed: pass --token-file with a readable "
                         "0600 file (codespace-worker start creates one).") from None
    try:
        info = os.fstat(fd)
        problem = _problem(info)
        if problem is not None:
            raise TokenError(f"token file {path} refused: {problem}.")
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    token = data.strip()
    if len(token) < MIN_TOKEN_BYTES:
        raise TokenError(f"token file {path} refused: it holds {len(token)} bytes, at least {MIN_TOKEN_BYTES} are "
                         "needed. To proceed: write a random token (e.g. 64 hex digits) into it.")
    return token


def _problem(info: os.stat_result) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if info.st_uid != os.geteuid():
        return (f"it belongs to uid {info.st_uid}, not to uid {os.geteuid()} that reads it. "
                f"To proceed: chown {os.geteuid()} it")
    if info.st_mode & 0o077:
        return (f"its mode is {stat.S_IMODE(info.st_mode):04o}, so others may read or change it. "
                "To proceed: chmod 600 it")
    return None


def create_token(path: str | os.PathLike[str]) -> bool:
    """Write a fresh random token to ``path`` (0600) unless a file is there; True if written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, (secrets.token_hex(32) + "\n").encode())
    finally:
        os.close(fd)
    return True
