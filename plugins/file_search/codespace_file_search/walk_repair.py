"""Mend a kept walk where inotify says the tree changed, instead of walking it all again.

Each directory the walk read is watched (``walk_index``), so an event names the directory it
happened in. Two kinds of mending: a directory whose entries changed (one created, removed or
renamed) is listed again alone, descending only into subdirectories it did not hold before;
a directory whose reading changed (an ignore file or ``.git`` inside it written, created or
removed, or its own or a subdirectory's mode changed) is walked again whole. What was below
the old entries that are gone (removed directories, links that were entered) is dropped with
them. The result is the walk a fresh walk would give, in another order (ranking does not
depend on it); anything this cannot mend (the root itself, a bound reached) answers None, and
the caller walks again from the top. Since entries are only dropped in place and appended to, the
mended walk also says which (``memo["mended_from"]``), so the ranking mends its path buffer
alike instead of building it whole (``prefilter.Buffer.mended``).
"""

from __future__ import annotations

import os
import re
import threading
from bisect import bisect_right
from itertools import compress, repeat
from operator import contains, itemgetter, methodcaller, not_, or_

from .walk import Bounds, Walked, walk_below


def _top_most(rels: set[str]) -> set[str]:
    """``rels`` without those below another of them."""
    kept: set[str] = set()
    for rel in sorted(rels, key=len):
        if not any(rel.startswith(top + "/") for top in kept if top) and "" not in kept:
            kept.add(rel)
    return kept


def _below(rel: str) -> str:
    return re.escape(rel + "/") if rel else ""


def _real_children(contexts: dict, parents: set[str]) -> set[str]:
    """The directories read directly below one of ``parents`` by their own path (not through a link)."""
    found = set()
    for rel, context in contexts.items():
        parent, _, name = rel.rpartition("/")
        if rel and parent in parents and context[0] == contexts[parent][0].rstrip("/") + "/" + name:
            found.add(rel)
    return found


def _without(entries: list, gone: re.Pattern, relist: set[str], rewalk: set[str], contexts: dict,
             keep_below: set[str], buffer) -> tuple[list, list[int]]:  # noqa: ANN001 - prefilter.Buffer
    """``entries`` but those ``gone`` matches, and the indices of those (ascending). Only the
    entries that may lie below a directory read again are tried against the pattern: those the
    ranking's ``buffer`` of these entries finds (one pattern search in C), else those a prefix
    test (in C too, but a call per entry) places there."""
    starts = [r + "/" for r in relist | rewalk if r]
    if "" in relist:  # the root's direct entries hold no '/'; below its children, only links entered go
        starts += [k + "/" for k in contexts if k and "/" not in k and k not in keep_below]
    if buffer is not None and "" not in relist and starts:
        maybe = buffer.starting(starts)
    else:
        maybe = _starting(entries, starts, "" in relist)
    removed = [n for n in maybe if gone.fullmatch(entries[n][0])]
    kept, at = [], 0
    for n in removed:
        kept += entries[at:n]
        at = n + 1
    kept += entries[at:]
    return kept, removed


def _starting(entries: list, starts: list[str], root: bool) -> list[int]:
    """Indices of the entries whose path starts with one of ``starts`` (or, with ``root``, holds no '/')."""
    paths = list(map(itemgetter(0), entries))
    maybe = list(map(methodcaller("startswith", tuple(starts)), paths)) if starts else [False] * len(paths)
    if root:
        maybe = list(map(or_, maybe, map(not_, map(contains, paths, repeat("/")))))
        maybe[0] = False  # the root's own entry
    return list(compress(range(len(paths)), maybe))


def _reached(rel: str, relist: set[str], keep_below: set[str]) -> bool:
    """Whether every directory listed again above ``rel`` keeps the path down to it."""
    child, parent = rel, rel.rpartition("/")[0]
    while child:
        if parent in relist and child not in keep_below:
            return False
        child, parent = parent, parent.rpartition("/")[0]
    return True


def _ancestors(root: str, rel: str, contexts: dict) -> set[tuple[int, int]] | None:
    """(device, inode) of each directory from the root down to ``rel``'s parent: a link met
    below ``rel`` that leads to one of them is a loop, as in a full walk."""
    found = set()
    parts = rel.split("/")[:-1]
    for k in range(len(parts) + 1):
        at = "/".join(parts[:k])
        context = contexts.get(at)
        if context is None:
            return None
        try:
            st = os.stat(context[0])
        except OSError:
            return None
        found.add((st.st_dev, st.st_ino))
    return found


def repair(walked: Walked, relist: set[str], rewalk: set[str], root: str, rules,  # noqa: ANN001 - PathRules
           bounds: Bounds, cancel: threading.Event | None, watch) -> Walked | None:  # noqa: ANN001 - _Watcher
    """``walked`` mended: each of ``relist`` listed again, each of ``rewalk`` walked again."""
    contexts = walked.contexts
    rewalk = _top_most({r for r in rewalk if r in contexts})
    if "" in rewalk:
        return None
    relist = {r for r in relist if r in contexts and not any(r == t or r.startswith(t + "/") for t in rewalk)}
    if not relist and not rewalk:
        return walked
    # What goes: below each directory walked again; the direct entries of each listed again,
    # with everything below them but the subdirectories it still holds (kept, not re-read).
    keep_below = _real_children(contexts, relist)
    # A directory below one listed again, reached through an entry that is not kept (a link
    # that was entered), is read again by that listing if it still should be.
    rewalk = {r for r in rewalk if _reached(r, relist, keep_below)}
    relist = {r for r in relist if _reached(r, relist, keep_below)}
    drop = [f"{_below(r)}.+" for r in rewalk]
    drop += [f"{_below(r)}[^/]+" for r in relist]
    for r in relist:
        kept = "|".join(re.escape(k.rpartition("/")[2]) + "/" for k in keep_below if k.rpartition("/")[0] == r)
        drop.append(f"{_below(r)}(?!{kept or '(?!)'})[^/]+/.*")
    gone = re.compile("|".join(f"(?:{d})" for d in drop), re.DOTALL)
    buffer = walked.memo.get("buffer")
    entries, removed = _without(walked.entries, gone, relist, rewalk, contexts, keep_below, buffer)
    start = len(entries)
    new_contexts = {rel: c for rel, c in contexts.items() if rel in keep_below or rel in relist or rel in rewalk
                    or not gone.fullmatch(rel)}
    for rel in set(contexts) - set(new_contexts):
        watch.forget(rel)
    out = Walked(entries=entries, dirs=walked.dirs, contexts=new_contexts, mended=True)
    read: set[str] = set()
    cuts: list[list[int]] = []
    for rel in sorted(rewalk | relist):
        if rel not in out.contexts or rel in read:
            continue  # gone with a directory above it, or read again with it
        kept = {k for k in keep_below if k.rpartition("/")[0] == rel and k in out.contexts} if rel in relist else set()
        if not _mend(out, rel, root, rules, bounds, cancel, watch, kept, read, cuts):
            return None
    out.dirs = len(out.contexts)
    if len(out.entries) > bounds.entries or out.dirs > bounds.dirs:
        return None
    if buffer is not None:
        # Only dropped from in place and appended to: the ranking's buffer can be mended alike.
        out.memo["mended_from"] = (buffer, *_composed(removed, start, cuts))
    return out


def _composed(removed: list[int], start: int, cuts: list[list[int]]) -> tuple[list[int], int]:
    """The old entries' indices dropped, and how many are kept, once ``cuts`` (positions in the
    mended list, each cut after the one before) are dropped too: a position below ``start`` is
    a kept old entry, the ``p``-th not in ``removed``; the others were appended."""
    for cut in cuts:
        old = []
        for p in cut:
            if p >= start:
                break  # ascending: the rest were appended by this mend
            at = p  # the least index with p old entries kept before it
            while (step := p + bisect_right(removed, at)) != at:
                at = step
            old.append(at)
        removed, start = sorted(removed + old), start - len(old)
    return removed, start


def _mend(out: Walked, rel: str, root: str, rules, bounds: Bounds, cancel, watch, skip: set[str],  # noqa: ANN001
          read: set[str], cuts: list[list[int]]) -> bool:
    """Read ``rel`` again (not descending into ``skip``) into ``out``; ``read`` gets every
    directory read, ``cuts`` the positions of entries dropped from ``out`` after the fact.
    False: only a new walk will do."""
    kept = {k: out.contexts[k] for k in skip}
    ancestors = _ancestors(root, rel, out.contexts)
    if ancestors is None:
        return False
    room = Bounds(entries=max(bounds.entries - len(out.entries), 0) + 1, dirs=bounds.dirs, depth=bounds.depth,
                  seconds=bounds.seconds, refuse_hardlinks=bounds.refuse_hardlinks)
    part = walk_below(root, rel, out.contexts[rel], rules, room, cancel, watch, skip, ancestors)
    if part is None:
        # Gone or swapped: its parent's listing (an event there too) settles its own entry.
        out.contexts.pop(rel, None)
        watch.forget(rel)
        return True
    if part.truncated is not None:
        return False
    if any(k in part.contexts for k in kept):
        return False  # a kept subdirectory is now a link that was entered: its old content is mixed in
    out.entries.extend(part.entries)
    out.contexts.update(part.contexts)
    read.update(part.contexts)
    return _kept_still_there(out, kept, watch, cuts)


def _kept_still_there(out: Walked, kept: dict[str, tuple], watch, cuts: list[list[int]]) -> bool:  # noqa: ANN001
    """Drop what was kept below a subdirectory that is gone (their positions go to ``cuts``);
    False when one is now another directory (its content was never read)."""
    gone = []
    for rel, context in kept.items():
        real, *_, key = context
        try:
            st = os.lstat(real)
        except FileNotFoundError:
            gone.append(rel)
            continue
        except OSError:
            return False
        if (st.st_dev, st.st_ino) != key:
            return False
    if gone:
        pattern = re.compile("|".join(re.escape(rel + "/") + ".+" for rel in gone), re.DOTALL)
        hits = list(map(pattern.fullmatch, map(itemgetter(0), out.entries)))
        cuts.append(list(compress(range(len(hits)), hits)))
        out.entries = list(compress(out.entries, map(not_, hits)))
        for rel in [r for r in out.contexts if r in gone or pattern.fullmatch(r)]:
            del out.contexts[rel]
            watch.forget(rel)
    return True
