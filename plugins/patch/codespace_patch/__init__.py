"""codespace-patch: V4A patches exactly as Codex 0.171.0 applies them, plus an
all-or-nothing (atomic) mode with crash recovery.

The parser and the text rewriting are pure and importable on their own; the
Patcher backend (:mod:`codespace_patch.backend`) and the helper executable
(:mod:`codespace_patch.cli`) load the host's modules when used.
"""

# The names load on first use: the helper imports this package first, to serve the rest of
# its modules from one file (code_cache), so the package itself must not import them.
_EXPORTS = {
    "Rewrite": "applying", "rewrite": "applying",
    "ApplyError": "errors", "ParseError": "errors", "PatchError": "errors",
    "AddFile": "parser", "Chunk": "parser", "DeleteFile": "parser", "Patch": "parser", "UpdateFile": "parser",
    "parse_patch": "parser",
}

__version__ = "0.2.2"
UPSTREAM_RELEASE = "rust-v0.171.0"

__all__ = [
    "AddFile",
    "ApplyError",
    "Chunk",
    "DeleteFile",
    "ParseError",
    "Patch",
    "PatchError",
    "Rewrite",
    "UPSTREAM_RELEASE",
    "UpdateFile",
    "__version__",
    "parse_patch",
    "rewrite",
]


def __getattr__(name: str):  # noqa: ANN202
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
