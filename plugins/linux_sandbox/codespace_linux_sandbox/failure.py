"""How the helper processes report a failure of their own: one line on stderr, an exit code.

Runs in the warm helper and in per-command helpers, below everything else there (plain
``posix``): every module of the helper side may report through :func:`fail`.
"""

import posix

PROG = "codespace-linux-sandbox"
SETUP_FAILED_EXIT_CODE = 125
"""The handshake is refused or the sandbox cannot be built: the command did not run."""


def fail(message: str, code: int = SETUP_FAILED_EXIT_CODE) -> int:
    """Say ``message`` on stderr, prefixed with the program's name; returns ``code``."""
    try:
        posix.write(2, f"{PROG}: {message}\n".encode("utf-8", "replace"))
    except OSError:
        pass
    return code
