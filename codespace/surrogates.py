"""Lone surrogates in decoded JSON.

JSON's ``\\udcXX`` escapes can name half of a UTF-16 pair, which UTF-8 cannot carry:
such a string can become neither a file name, nor a command, nor a stored record, and
fails deep inside whatever touches it first. The gateway refuses it up front, naming
the argument.
"""

from __future__ import annotations

from typing import Any


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def find_lone_surrogate(value: Any, where: str = "") -> str | None:
    """The dotted location of the first string (or key) in ``value`` holding a lone
    surrogate, or None; ``where`` prefixes the location."""
    stack = [(value, where)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, str):
            if not encodable(node):
                return at or "(the value)"
        elif isinstance(node, dict):
            for key, child in node.items():
                name = f"{at}.{key}" if at else str(key)
                if isinstance(key, str) and not encodable(key):
                    return f"{at or 'arguments'} (the name of a key)"
                stack.append((child, name))
        elif isinstance(node, list):
            stack.extend((child, f"{at}[{i}]") for i, child in enumerate(node))
    return None


def describe(tool: str, location: str) -> str:
    return (f"invalid arguments for {tool}: argument {location!r} holds a lone surrogate (a \\udXXX escape that "
            "is half of a UTF-16 pair), which is not valid Unicode and cannot be a path, a command or stored text. "
            "To proceed: send the text as valid UTF-8 (escape the whole pair, e.g. \\ud83d\\ude00, or the character itself)")
