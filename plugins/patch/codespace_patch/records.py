"""A base for the package's mutable value classes, without dataclasses' cost at import.

``@dataclass`` compiles each class's methods with ``exec`` when its module loads, 1-2 ms
a class here; the helper process (``codespace-apply-patch``) loaded eleven of them, about
as long as it then took to parse and rewrite a 20,000-line file. Immutable values are
``NamedTuple``s instead; mutable ones derive from :class:`Record`, write their own
``__init__`` and get equality and a repr from their ``__slots__``: plain methods,
nothing generated.
"""

from __future__ import annotations


class Record:
    """Equal when of the same class with equal slots, as a dataclass is; unhashable, as a
    mutable dataclass is. A subclass lists its fields, in order, as ``__slots__``."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"
