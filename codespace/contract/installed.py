"""The installed plugins' entry points, read without importlib.metadata.

A helper started by hand (``codespace-apply-patch`` typed in a shell, as an agent does)
is not handed the installed plugins by a server, and looking them up with
``importlib.metadata`` loaded zipfile, email, csv and pathlib: about 30 ms, more than the
released binary's whole run on a big patch. This module reads the same files the same
way for the common case: directories on ``sys.path`` holding ``*.dist-info`` or
``*.egg-info`` directories, each distribution counted once (the first found under its
normalised name, as ``importlib.metadata.entry_points()`` dedupes), the
``entry_points.txt`` lines parsed as importlib.metadata parses them. Anything it does not
read (a zip or egg on the path, another finder that lists distributions, a line
importlib would reject) answers None, and the caller asks importlib.metadata. A test
compares the two on this environment and on constructed trees.

Even so, reading a few dozen metadata directories is 1-1.5 ms of such a run, so a
one-shot process may keep the answer (:func:`scan_to_keep`) and use it next time while
everything it was read from is unchanged (:func:`kept_answer`); the patch command keeps
it in its code cache.
"""

from __future__ import annotations

import os
import sys
import time

GROUP = "codespace.plugins"
_SUFFIXES = (".dist-info", ".egg-info")


def _normalized(name: str) -> str:
    """importlib.metadata's ``Prepared.normalize``: runs of ``-``, ``_`` and ``.`` become one
    ``_``, lower case (without ``re``, which a helper does not otherwise load)."""
    out: list[str] = []
    for ch in name.lower():
        if ch in "-_.":
            if not out or out[-1] != "_":
                out.append("_")
        else:
            out.append(ch)
    return "".join(out)


def _standard_finders_only() -> bool:
    """True when no finder but the path finder lists distributions (a setuptools editable
    finder does not; a custom one could, and importlib.metadata would ask it)."""
    for finder in sys.meta_path:
        if getattr(finder, "find_distributions", None) is None:
            continue
        if getattr(finder, "__module__", None) != "_frozen_importlib_external" or finder.__name__ != "PathFinder":
            return False
    return True


def _distributions(path: list[str]) -> list[str] | None:
    """The metadata directories importlib.metadata would use, in its order, first of each name."""
    seen: set[str] = set()
    found: list[str] = []
    for entry in path:
        root = entry or "."
        if os.path.basename(root).lower().endswith(".egg"):
            return None
        try:
            children = os.listdir(root)
        except OSError:
            if os.path.isfile(root):
                return None  # a zip on the path: importlib.metadata reads inside it
            continue
        infos: dict[str, list[str]] = {}  # grouped by normalised name, as importlib's Lookup does
        for child in children:
            low = child.lower()
            if low.endswith(_SUFFIXES):
                infos.setdefault(_normalized(low.rpartition(".")[0].partition("-")[0]), []).append(child)
        for group in infos.values():
            for child in group:
                stem, ext = os.path.splitext(child)
                if ext not in _SUFFIXES:
                    return None  # e.g. NAME.DIST-INFO: importlib.metadata reads the name from its METADATA
                key = _normalized(stem.partition("-")[0])
                if key not in seen:
                    seen.add(key)
                    found.append(os.path.join(root, child))
    return found


def _entry_points(text: str) -> list[tuple[str, str, str]] | None:
    """(group, name, value) of an ``entry_points.txt``, as importlib.metadata reads it."""
    out: list[tuple[str, str, str]] = []
    section = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is None:
            continue
        name, sep, value = line.partition("=")
        if not sep:
            return None  # importlib.metadata raises here: let it say so
        out.append((section, name.strip(), value.strip()))
    return out


def entry_points(group: str = GROUP, path: list[str] | None = None) -> list[tuple[str, str]] | None:
    """(name, value) of every entry point in ``group`` of the distributions on ``path``
    (default ``sys.path``), in importlib.metadata's order; None when only importlib.metadata
    can tell."""
    found = located_entry_points(group, path)
    return None if found is None else [(name, value) for name, value, _ in found]


def located_entry_points(group: str = GROUP, path: list[str] | None = None) -> list[tuple[str, str, str]] | None:
    """The same, each with the metadata directory of the distribution that declares it."""
    scanned = _scan(group, path)
    return None if scanned is None else scanned[0]


def _scan(group: str, path: list[str] | None) -> tuple[list[tuple[str, str, str]], list[str], list[str]] | None:
    """The entry points, the metadata directories looked in and the ``entry_points.txt``
    files read."""
    if path is None:
        if not _standard_finders_only():
            return None
        path = sys.path
    distributions = _distributions(path)
    if distributions is None:
        return None
    found: list[tuple[str, str, str]] = []
    files: list[str] = []
    for directory in distributions:
        file = os.path.join(directory, "entry_points.txt")
        try:
            with open(file, encoding="utf-8") as f:
                text = f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            continue  # importlib.metadata reads these as "no entry points" too
        except (OSError, UnicodeDecodeError):
            return None
        parsed = _entry_points(text)
        if parsed is None:
            return None
        files.append(file)
        found.extend((name, value, directory) for section, name, value in parsed if section == group)
    return found, distributions, files


# A scan's answer is kept only when every file and directory it read is older than this: a
# change made within the same tick of the file system's clock as the scan would leave the
# same time behind (git's "racily clean" entries, the same problem).
SETTLED_NS = 2_000_000_000


def file_stamp(path: str) -> tuple[int, int, int] | None:
    """(modification time, size, inode) of ``path``, None when it cannot be read: what a kept
    answer checks to tell that a file it was read from is unchanged."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def scan_to_keep(group: str = GROUP) -> tuple[list[tuple[str, str]] | None, tuple | None]:
    """:func:`entry_points` on ``sys.path``, and a record of the answer with what it was read
    from, for a one-shot process to keep until :func:`kept_answer` finds a change (None when
    the answer cannot be kept: no answer, or inputs changed too recently to tell).

    What the answer depends on: each directory on the path (a distribution installed or
    removed changes its listing, hence its time), each distribution's metadata directory (an
    ``entry_points.txt`` added or removed) and each ``entry_points.txt`` read (edited in place).
    The record holds only strings, ints, tuples and None (``marshal`` can write it)."""
    scanned = _scan(group, None)
    if scanned is None:
        return None, None
    found, distributions, files = scanned
    answer = [(name, value) for name, value, _ in found]
    path = tuple(sys.path)
    stamps = tuple((p, file_stamp(p or ".")) for p in (*path, *distributions, *files))
    newest = max((stamp[0] for _, stamp in stamps if stamp is not None), default=0)
    if newest > time.time_ns() - SETTLED_NS:
        return answer, None
    return answer, (tuple(answer), path, stamps)


def kept_answer(record: object) -> list[tuple[str, str]] | None:
    """The answer in a record of :func:`scan_to_keep` while nothing it was read from has
    changed and the path is the same, else None (so is anything not such a record)."""
    try:
        answer, path, stamps = record  # type: ignore[misc]
        if path != tuple(sys.path) or not _standard_finders_only():
            return None
        return unchanged_pairs(answer, stamps)
    except (TypeError, ValueError):
        return None


def unchanged_pairs(pairs: object, stamps: object) -> list[tuple[str, str]] | None:
    """A kept answer's (name, value) pairs while every (path, stamp) it was read from still
    holds, else None; TypeError or ValueError for what is not such a record."""
    for path, stamp in stamps:  # type: ignore[attr-defined]
        if file_stamp(path or ".") != stamp:
            return None
    if all(type(name) is str and type(value) is str for name, value in pairs):  # type: ignore[attr-defined]
        return list(pairs)  # type: ignore[call-overload]
    return None


def load_value(value: str) -> object:
    """What an entry point's ``value`` (``module`` or ``module:attribute``) names, as
    importlib.metadata's ``EntryPoint.load`` finds it: ``__import__`` and ``sys.modules``, as
    importlib.import_module does, without loading importlib."""
    module, _, attribute = value.partition(":")
    __import__(module.strip())
    loaded: object = sys.modules[module.strip()]
    for part in filter(None, attribute.strip().split(".")):
        loaded = getattr(loaded, part)
    return loaded


class EntryPoint:
    """An entry point found here, with what ``codespace.plugins`` reads of importlib.metadata's:
    ``name``, ``value``, ``load()``, and ``dist``, the distribution, made on first use (a server
    shows plugin versions only when asked)."""

    __slots__ = ("name", "value", "directory", "_dist")

    def __init__(self, name: str, value: str, directory: str) -> None:
        self.name, self.value, self.directory = name, value, directory
        self._dist: object = None

    @property
    def dist(self):  # noqa: ANN201 - an importlib.metadata.Distribution
        if self._dist is None:
            from importlib.metadata import Distribution

            self._dist = Distribution.at(self.directory)
        return self._dist

    def load(self) -> object:
        return load_value(self.value)

    def __repr__(self) -> str:
        return f"EntryPoint(name={self.name!r}, value={self.value!r})"


def discovered(group: str = GROUP) -> list[EntryPoint] | None:
    """The plugins' entry points on ``sys.path`` for ``codespace.plugins.Plugins.load``, or None."""
    found = located_entry_points(group)
    return None if found is None else [EntryPoint(*entry) for entry in found]
