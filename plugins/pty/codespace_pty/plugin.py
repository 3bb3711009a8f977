"""Hooks of the pty plugin.

Imported by every process that loads plugins, one-shot helpers included: the terminal's
modules load in the hooks that need them."""

from __future__ import annotations

import os

from codespace import hookimpl

# Every hook below is defined unconditionally: a one-shot helper may keep which hooks this
# module has while its package's files are unchanged (codespace.contract.helper_plugins).
CODESPACE_STATIC_HOOKS = True


@hookimpl
def codespace_terminal(workspace):  # noqa: ANN001, ANN201
    from .terminal import PtyTerminal

    return PtyTerminal()


@hookimpl
def codespace_doctor(workspace):  # noqa: ANN001, ANN201
    from codespace.contract import Check

    try:
        fd = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
    except OSError as exc:
        return [Check("pseudo-terminals", False, f"/dev/ptmx: {exc.strerror}", "mount devpts (tty: true needs it)")]
    os.close(fd)
    return [Check("pseudo-terminals", True, "/dev/ptmx opens")]


@hookimpl
def codespace_pin_checks():  # noqa: ANN201
    from .pin_compare import PIN_CHECK  # loads only in pin-check runs, never in the server

    return [PIN_CHECK]
