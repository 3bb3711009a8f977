"""``codespace.hookimpl``: the mark on a plugin's hook functions, without loading pluggy.

A plugin module marks its hooks at import, so whatever the mark costs every process that
loads a plugin pays: a one-shot helper choosing its file-system backend (see
:mod:`.helper_plugins`) would otherwise load pluggy only to set one attribute. The mark
is the one pluggy's ``HookimplMarker("codespace")`` sets (a ``codespace_impl`` dict with the
same keys and defaults), so the server's ``PluginManager`` reads it as its own; a test
compares the two.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs a helper more than this module

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    F = TypeVar("F", bound=Callable[..., object])

PROJECT = "codespace"


class HookimplMarker:
    """Marks functions as implementations of the ``project_name`` hooks (pluggy's options)."""

    __slots__ = ("project_name",)

    def __init__(self, project_name: str) -> None:
        self.project_name = project_name

    def __call__(
        self, function: F | None = None, hookwrapper: bool = False, optionalhook: bool = False,
        tryfirst: bool = False, trylast: bool = False, specname: str | None = None, wrapper: bool = False,
    ) -> F | Callable[[F], F]:
        def mark(func: F) -> F:
            opts = {"wrapper": wrapper, "hookwrapper": hookwrapper, "optionalhook": optionalhook,
                    "tryfirst": tryfirst, "trylast": trylast, "specname": specname}
            setattr(func, self.project_name + "_impl", opts)
            return func

        return mark if function is None else mark(function)


hookimpl = HookimplMarker(PROJECT)
