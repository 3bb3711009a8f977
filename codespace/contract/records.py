"""Bases for value classes, without dataclasses' or typing's cost at import (part of the
plugin API: a plugin may import this module).

``@dataclass`` compiles each class's methods with ``exec`` when its module loads, 1-2 ms
a class here; the patch helper (``codespace-apply-patch``) loaded eleven of them, about
as long as it then took to parse and rewrite a 20,000-line file. ``typing.NamedTuple``
needs typing, which cost the helper as much again. The core's helper road
(:mod:`.gate`), codespace-fs and codespace-patch build their values on these. Mutable values derive from
:class:`Record`, immutable ones from :class:`Fields`; each writes its own ``__init__`` (or
``__new__``) and gets equality and a repr from its field names: plain methods, nothing
generated.
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


class Fields(tuple):
    """An immutable record as a ``NamedTuple`` is one: a tuple (equal to a plain tuple of the
    same values, unpacked, indexed, hashed) whose fields also have names. A subclass lists
    them as ``_fields``, writes ``__new__`` and reads each through :func:`field`."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __getnewargs__(self) -> tuple[object, ...]:
        return tuple(self)  # pickled (and copied) by value, as a NamedTuple is

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self))
        return f"{type(self).__name__}({shown})"

    def _replace(self, **changes: object) -> Fields:
        values = [changes.pop(name, value) for name, value in zip(self._fields, self)]
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return type(self)(*values)

    def _asdict(self) -> dict[str, object]:
        return dict(zip(self._fields, self))


def field(index: int, doc: str | None = None) -> property:
    """The field at ``index`` of a :class:`Fields` tuple, as an attribute."""
    return property(lambda self: self[index], doc=doc)
