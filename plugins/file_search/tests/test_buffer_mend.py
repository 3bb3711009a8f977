"""The ranking's buffer mended where the walk was mended (entries dropped in place, new ones
appended) answers exactly what a buffer built afresh on the same entries answers: each pattern,
the entries it does not hold, the blank-edged ones, the prefix search the mend itself uses; and
rank() on a mended walk of a real tree, changed on disk and heard through inotify, equals rank()
on a fresh walk."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from codespace_file_search import prefilter
from codespace_file_search import query as q
from codespace_file_search.prefilter import NAME, NAME_FUZZY, Buffer
from codespace_file_search.ranking import rank
from codespace_file_search.walk import walk
from codespace_file_search.walk_index import WalkIndex
from codespace_file_search.walk_repair import _composed

PARTS = ["main", "Main", "ma", "in", "rs", ".rs", "_", "a", "src", "SRC", " ", "\t", "\n", "é", "Ü", "m", "1", "/"]
NEEDLES = ["main", "ma", "rs", "src", "m", "a", "in", " ", "1", "é", "src/m", "a/"]
KINDS = [q.FUZZY, q.SUBSTRING, q.PREFIX, q.POSTFIX, q.EXACT, NAME, NAME_FUZZY]
QUERIES = ["main", "rs$", "^ma", "'src", "m", "ma in", "main !src", "é", "^ src", "a"]
TREE_QUERIES = ["main_1", "rs$", "^src", "'src/m", "ma in_4", "main_3 !src", "é", "^ src"]  # few matches each


def _entry(rng: random.Random) -> tuple[str, str, bool]:
    path = "".join(rng.choice(PARTS) for _ in range(rng.randint(1, 4))).strip("/") or "x"
    return path, path.rpartition("/")[2], rng.random() < 0.3


def _same(mended: Buffer, fresh: Buffer) -> None:
    assert mended.size == fresh.size
    assert mended.other == fresh.other and mended.other_set == fresh.other_set
    assert mended.ascii_lines() == fresh.ascii_lines()
    assert mended.blank_edged() == fresh.blank_edged()
    for kind in KINDS:
        for needle in NEEDLES:
            assert mended.matching(kind, needle) == fresh.matching(kind, needle), (kind, needle)
    for prefixes in (["src/"], ["SRC/", "main/"], ["é/"], ["ma"]):
        assert mended.starting(prefixes) == fresh.starting(prefixes)


@pytest.mark.parametrize("seed", range(40))
def test_a_mended_buffer_is_a_fresh_one(seed):
    rng = random.Random(seed)
    block = rng.choice([1, 2, 3, 7, 16])
    entries = [_entry(rng) for _ in range(rng.randint(0, 120))]
    buffer = Buffer(entries, block)
    for _ in range(5):  # mends upon mends, as a session's changes come
        removed = sorted(rng.sample(range(len(entries)), rng.randint(0, min(len(entries), 12))))
        if rng.random() < 0.2:
            removed = list(range(len(entries)))  # everything goes
        gone = set(removed)
        kept = [e for n, e in enumerate(entries) if n not in gone]
        entries = kept + [_entry(rng) for _ in range(rng.randint(0, 3 * block + 2))]
        buffer = buffer.mended(entries, removed, len(kept))
        _same(buffer, Buffer(entries, block))
        for text in QUERIES:
            query = q.parse(text)
            memo = {"mended_from": (Buffer(kept, block), [], len(kept))}
            assert rank(query, entries, memo=memo) == rank(query, entries), text


def test_a_mend_that_does_not_add_up_builds_afresh():
    entries = [(f"d/f{n}", f"f{n}", False) for n in range(10)]
    buffer = Buffer(entries, 4)
    wrong = buffer.mended(entries[:8], [1], 9)  # 10 - 1 kept is 9, but only 8 entries are given
    _same(wrong, Buffer(entries[:8], 4))


@pytest.mark.parametrize("seed", range(300))
def test_later_cuts_are_composed_into_the_old_indices(seed):
    """A mend drops old entries, appends, then may drop more (a kept subdirectory found gone):
    the composed cut names exactly the old entries left out, and where the appended begin."""
    rng = random.Random(seed)
    old = list(range(rng.randint(0, 40)))
    removed = sorted(rng.sample(old, rng.randint(0, len(old))))
    now = [n for n in old if n not in set(removed)]
    start = len(now)
    cuts = []
    for round_ in range(rng.randint(0, 3)):
        now += [f"new {round_} {k}" for k in range(rng.randint(0, 3))]
        cut = sorted(rng.sample(range(len(now)), rng.randint(0, len(now))))
        cuts.append(cut)
        now = [x for k, x in enumerate(now) if k not in set(cut)]
    composed, kept = _composed(removed, start, cuts)
    assert now[:kept] == [n for n in old if n not in set(composed)]
    assert all(isinstance(x, str) for x in now[kept:])


@pytest.fixture
def small_blocks(monkeypatch):
    """Buffers of 64 entries a block, so that a small tree spans many."""
    monkeypatch.setattr(prefilter, "BLOCK", 64)


def _tree(base) -> str:  # noqa: ANN001
    """Many buffer blocks of entries, with names that differ only in case and non-ASCII ones."""
    root = base / "root"
    for d in range(50):
        for here in [root / "src" / f"m{d}"] + [root / "Src" / f"m{d}"] * (d % 10 == 1) if d % 2 else [root / f"main{d}"]:
            here.mkdir(parents=True, exist_ok=True)
            for f in range(12):
                open(here / f"main_{d}_{f}.rs", "w").close()
    (root / "ünï").mkdir()
    (root / "ünï" / "mainé.rs").touch()
    (root / " src ").mkdir()
    (root / " src " / "main.rs").touch()
    return os.path.realpath(root)


def _changes(root: str, rng: random.Random, made: list) -> None:
    dirs = sorted(d for d, _, _ in os.walk(root))
    for _ in range(rng.randint(1, 4)):
        here = rng.choice(dirs)
        what = rng.random()
        if what < 0.4:
            made.append(os.path.join(here, f"main_new_{len(made)}.rs"))
            open(made[-1], "w").close()
        elif what < 0.6:
            files = sorted(f for f in os.listdir(here) if os.path.isfile(os.path.join(here, f)))
            if files:
                os.unlink(os.path.join(here, rng.choice(files)))
        elif what < 0.8:
            os.makedirs(os.path.join(here, f"Main_dir_{len(made)}", "src"), exist_ok=True)
            made.append(os.path.join(here, f"Main_dir_{len(made)}", "src", "main.rs"))
            open(made[-1], "w").close()
        elif here != root:
            shutil.rmtree(here)
            return


@pytest.mark.parametrize("seed", range(8))
def test_ranking_on_a_mended_walk_equals_a_fresh_walk(tmp_path, seed, small_blocks):
    rng = random.Random(seed)
    root = _tree(tmp_path)
    index = WalkIndex()
    walked, _ = index.walk(root)
    assert len(walked.entries) > 8 * 64
    rank(q.parse("main"), walked.entries, memo=walked.memo)  # the buffer a mend starts from
    made: list = []
    buffers_mended = 0
    for _ in range(5):
        _changes(root, rng, made)
        walked, from_memory = index.walk(root)
        assert walked.mended and not from_memory
        buffers_mended += "mended_from" in walked.memo  # also when a kept subdirectory went too
        fresh = walk(root)
        assert sorted(walked.entries) == sorted(fresh.entries)
        for text in TREE_QUERIES:
            query = q.parse(text)
            assert rank(query, walked.entries, memo=walked.memo) == rank(query, fresh.entries, memo=fresh.memo), text
        assert "mended_from" not in walked.memo and "buffer" in walked.memo
    assert buffers_mended == 5
    index.clear()


def test_a_mend_beside_a_name_differing_in_case_and_below_a_non_ascii_one(tmp_path, small_blocks):
    """The mend finds what to drop with the buffer's lowered text and the entries it does not
    hold: neither a sibling spelled in another case nor a non-ASCII directory may be missed."""
    root = _tree(tmp_path)
    index = WalkIndex()
    walked, _ = index.walk(root)
    rank(q.parse("main"), walked.entries, memo=walked.memo)
    os.unlink(os.path.join(root, "Src", "m1", "main_1_0.rs"))
    open(os.path.join(root, "Src", "m1", "main_new.rs"), "w").close()
    os.unlink(os.path.join(root, "ünï", "mainé.rs"))
    open(os.path.join(root, "ünï", "mainë.rs"), "w").close()
    walked, _ = index.walk(root)
    assert walked.mended and "mended_from" in walked.memo
    fresh = walk(root)
    assert len(walked.entries) == len(fresh.entries) and sorted(walked.entries) == sorted(fresh.entries)
    for text in TREE_QUERIES + ["main_1_0", "ë"]:
        query = q.parse(text)
        assert rank(query, walked.entries, memo=walked.memo) == rank(query, fresh.entries, memo=fresh.memo), text
    index.clear()
