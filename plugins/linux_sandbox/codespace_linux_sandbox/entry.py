"""The helper executable's entry point: it becomes the warm helper or one command's helper.

``python -I -S .../codespace_linux_sandbox/__main__.py`` (and the ``codespace-linux-sandbox``
console script) run :func:`main`. With ``CODESPACE_FD_ZYGOTE`` in its environment the process
is the server's warm helper (:mod:`.zygote`); otherwise it is a per-command helper started
alone (:mod:`.helper`). Either way ``LD_*`` leave its environment first.
"""


import posix
import sys

from .core_hardening import contract_hardening
from .failure import fail


def main(argv: list[str] | None = None) -> int:
    try:
        contract_hardening().remove_ld_variables()
    except ImportError as exc:
        return fail(f"cannot harden this process: {exc}")
    zygote = posix.environ.get(b"CODESPACE_FD_ZYGOTE")
    if zygote is not None:
        from .zygote import serve

        return serve(zygote, posix.environ.get(b"CODESPACE_ZYGOTE_PARENT", b""))
    from .helper import run_started_alone

    return run_started_alone(argv if argv is not None else sys.argv[1:])
