"""Rust's notion of whitespace, which every trim in the patch format uses.

Upstream trims with ``str::trim``/``trim_end``, i.e. ``char::is_whitespace``
(Unicode White_Space). Python's argument-less ``str.strip()`` uses a different
set: it also strips U+001C..U+001F, which Rust keeps. Passing the set
explicitly keeps the C-speed ``strip`` with Rust's semantics.
"""

from __future__ import annotations

RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r "
    "\x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def trim(text: str) -> str:
    return text.strip(RUST_WHITESPACE)


def trim_end(text: str) -> str:
    return text.rstrip(RUST_WHITESPACE)


def is_blank(text: str) -> bool:
    return not text.strip(RUST_WHITESPACE)
