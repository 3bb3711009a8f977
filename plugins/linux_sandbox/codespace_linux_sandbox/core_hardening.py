"""The core's process hardening (:mod:`codespace.contract.hardening`), in the helper processes.

The helpers run with ``python -I -S`` and only this package on their import path. An
ordinary ``import codespace.contract.hardening`` would need the core there too, and would
run the core's package ``__init__`` modules first (``typing`` and more: several
milliseconds on every sandboxed command). That module is a leaf importing only ``posix``,
so it is loaded from its file: the server names the file in :data:`ENV` for every helper
it starts (:func:`.launcher.helper_environment`). A helper started without it (by hand, or
as the ``codespace-linux-sandbox`` console script) imports it the ordinary way.

Runs in the warm helper (once; its children inherit the loaded module) and in
per-command helpers started alone.
"""

import posix

from .failure import SETUP_FAILED_EXIT_CODE, fail

ENV = "CODESPACE_HARDENING_MODULE"
_NAME = "codespace.contract.hardening"
_loaded = None


def contract_hardening():
    """:mod:`codespace.contract.hardening`, loaded once per process (not put in ``sys.modules``:
    its package is not imported here). Raises ImportError, saying what is missing."""
    global _loaded
    if _loaded is None:
        path = posix.environ.get(ENV.encode())
        if path is None:
            try:
                import codespace.contract.hardening as module
            except ImportError as exc:
                raise ImportError(f"{_NAME} is not importable and {ENV} is not set ({exc})") from None
        else:
            # importlib.machinery's SourceFileLoader, from the frozen module the interpreter has
            # already loaded (importing importlib.machinery costs most of a millisecond).
            from _frozen_importlib_external import SourceFileLoader

            module = type(posix)(_NAME)
            module.__file__ = path.decode("utf-8", "surrogateescape")
            try:
                SourceFileLoader(_NAME, module.__file__).exec_module(module)
            except OSError as exc:
                raise ImportError(f"cannot load {_NAME} from {module.__file__} ({ENV}): {exc}") from None
        _loaded = module
    return _loaded


def harden() -> tuple[str, int] | None:
    """Harden this process: None, or (message, exit code) of what failed (upstream's codes; 125
    when the hardening module cannot be loaded)."""
    try:
        hardening = contract_hardening()
    except ImportError as exc:
        return f"cannot harden this process: {exc}", SETUP_FAILED_EXIT_CODE
    try:
        hardening.harden_process()
    except hardening.HardeningError as exc:
        return str(exc), exc.exit_code
    return None


def harden_or_fail() -> int:
    """Harden this process; 0, or the failure's exit code once reported (:func:`.failure.fail`)."""
    problem = harden()
    return 0 if problem is None else fail(*problem)
