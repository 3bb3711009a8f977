"""Locating chunks and rewriting text (apply-patch.md §5, §7, §8), on the pure functions."""

from __future__ import annotations

import random

import pytest

from codespace_patch import ApplyError, parse_patch, rewrite
from codespace_patch.diff import unified
from codespace_patch.line_endings import Lines
from codespace_patch.rust_text import RUST_WHITESPACE, trim
from codespace_patch.seek import Seeker
from codespace_patch.conformance.fuzz import _chunks, _file_lines


def update(text: str, *body: str) -> str:
    (section,) = parse_patch("\n".join(["*** Begin Patch", "*** Update File: f", *body, "*** End Patch"])).sections
    return rewrite(text, section.chunks, "/w/f").text()


def failure(text: str, *body: str) -> ApplyError:
    with pytest.raises(ApplyError) as info:
        update(text, *body)
    return info.value


# -- line model ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "texts", "terms"),
    [
        ("a\r\rb\n", ["a", "", "b"], ["\r", "\r", "\n"]),
        ("x\nfoo\r\r\ny", ["x", "foo", "", "y"], ["\n", "\r", "\r\n", ""]),
        ("", [], []),
        ("a\n", ["a"], ["\n"]),
        ("a\x0bb\x0c\x1c\x85\u2028c", ["a\x0bb\x0c\x1c\x85\u2028c"], [""]),
    ],
)
def test_lines_split_only_at_cr_and_lf(text, texts, terms):
    lines = Lines.parse(text)
    assert (lines.texts, lines.terms) == (texts, terms)


def test_preferred_ending_is_the_first():
    assert Lines.parse("a\r\nb\nc").preferred == "\r\n"
    assert Lines.parse("a\rb\r\n").preferred == "\r"
    assert Lines.parse("abc").preferred == "\n"


# -- matching passes -------------------------------------------------------------------


def test_rust_whitespace_set():
    assert trim("\u3000\u2028 a \x85\u00a0") == "a"
    assert trim("\x1ca\x1f") == "\x1ca\x1f"
    assert trim("\u200ba") == "\u200ba"
    assert set(RUST_WHITESPACE) >= {"\t", "\n", "\x0b", "\x0c", "\r", " ", "\u1680", "\u205f"}


def test_exact_match_further_down_beats_a_loose_match_further_up():
    seeker = Seeker(["foo ", "x", "foo"])
    assert seeker.find(["foo"], 0) == 2
    assert seeker.find(["foo "], 0) == 0
    assert seeker.find(["  foo"], 0) == 0  # pass 3


def test_all_lines_must_match_under_the_same_pass():
    seeker = Seeker(["a ", "b"])
    assert seeker.find(["a", "b"], 0) == 0  # pass 2 for both
    assert Seeker(["a\tb"]).find(["a b"], 0) is None  # inner whitespace is not normalised


@pytest.mark.parametrize("fancy", ["\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2015", "\u2212"])
def test_dashes(fancy):
    assert Seeker([f"a {fancy} b"]).find(["a - b"], 0) == 0
    assert Seeker(["a - b"]).find([f"a {fancy} b"], 0) == 0


@pytest.mark.parametrize(
    ("fancy", "ascii"),
    [("\u2018x\u2019", "'x'"), ("\u201ax\u201b", "'x'"), ("\u201cx\u201d", '"x"'), ("\u201ex\u201f", '"x"'),
     ("a\u00a0b", "a b"), ("a\u202fb", "a b"), ("a\u3000b", "a b"), ("a\u2009b", "a b")],
)
def test_quotes_and_spaces(fancy, ascii):
    assert Seeker([fancy]).find([ascii], 0) == 0


@pytest.mark.parametrize("other", ["\u2026", "\u00ab", "\u2000", "\u2001", "\u1680", "\u00ad", "\u200b", "\uff0d", "\u2032"])
def test_look_alikes_that_do_not_map(other):
    assert Seeker([f"a{other}b"]).find(["a-b"], 0) is None
    assert Seeker([f"a{other}b"]).find(["a b"], 0) is None


def test_accents_are_not_folded():
    assert Seeker(["café"]).find(["cafe"], 0) is None


def test_end_of_file_anchor_has_no_fallback():
    seeker = Seeker(["a", "b", "a", "c"])
    assert seeker.find(["a"], 0, end_of_file=True) is None
    assert seeker.find(["c"], 0, end_of_file=True) == 3
    assert seeker.find(["a", "b", "a", "c", "d"], 0) is None


@pytest.mark.parametrize(("candidates", "indexed", "codable"),
                         [(0, False, True), (1, False, True), (32, False, True), (32, True, True), (1, True, True),
                          (1, False, False)])
def test_the_linear_search_answers_as_the_passes_do(monkeypatch, candidates, indexed, codable):
    """Past a few candidate positions the seek turns to a substring search over the lines
    coded as characters, and once scanning a view has cost enough it looks positions up in an
    index of it; whichever it does, the answer is the four passes' own (brute force here, over
    small files where every position is a candidate)."""
    from codespace_patch import seek

    monkeypatch.setattr(seek, "_CANDIDATES", candidates)
    monkeypatch.setattr(seek, "_INDEX_AFTER", -(1 << 30) if indexed else 1 << 30)
    monkeypatch.setattr(seek, "_MAX_CODE", seek._MAX_CODE if codable else 1)  # else: candidates one by one
    rng = random.Random(candidates)
    alphabet = ["a", "b", " a", "a ", "\u2013", "-", "c"]
    for _ in range(1500):
        lines = [rng.choice(alphabet) for _ in range(rng.randint(1, 40))]
        pattern = [rng.choice(alphabet) for _ in range(rng.randint(1, 5))]
        start, eof = rng.randint(0, len(lines)), rng.random() < 0.2
        want = None
        if len(pattern) <= len(lines):
            first = max(start, len(lines) - len(pattern)) if eof else start
            for normalise in seek.PASSES:
                view, wanted = list(map(normalise, lines)), list(map(normalise, pattern))
                want = next((i for i in range(first, len(lines) - len(pattern) + 1)
                             if view[i:i + len(pattern)] == wanted), None)
                if want is not None:
                    break
        assert Seeker(lines).find(pattern, start, eof) == want, (lines, pattern, start, eof)


def test_a_long_chunk_that_almost_matches_everywhere_is_not_quadratic(tmp_path):
    """3,000 lines of "a" then "b" against 100,000 lines of "a": every position is a candidate
    that fails on the last line. It took 70 s (and held the server); a subprocess bound keeps a
    return of that from hanging the suite."""
    import subprocess
    import sys

    script = ("from codespace_patch.seek import Seeker\n"
              "print(Seeker(['a'] * 100000).find(['a'] * 3000 + ['b'], 0), Seeker(['a'] * 100000 + ['b'])"
              ".find(['a'] * 3000 + ['b'], 0))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.split() == ["None", "97000"]


def test_many_chunks_that_each_fail_the_exact_pass_are_not_quadratic():
    """150,000 one-line chunks against 150,000 lines "x ": each chunk's exact pass scanned the
    rest of the file before the next pass matched at once (90 s). Bounded by the subprocess."""
    import subprocess
    import sys

    script = ("from codespace_patch.seek import Seeker\n"
              "seeker, cursor = Seeker(['x '] * 150000), 0\n"
              "for _ in range(150000):\n    cursor = seeker.find(['x'], cursor) + 1\nprint(cursor)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.split() == ["150000"]


def test_a_failing_chunk_of_common_lines_is_diagnosed_in_bounded_time():
    """The same chunk through the whole failure path: the message's closest window cast a vote
    per (expected line, equal file line), 300 million here (76 s). Bounded by the subprocess."""
    import subprocess
    import sys

    script = ("from codespace_patch import ApplyError, parse_patch, rewrite\n"
              "body = ['*** Begin Patch', '*** Update File: f', '@@', *(['-a'] * 3000), '-b', '*** End Patch']\n"
              "(section,) = parse_patch('\\n'.join(body)).sections\n"
              "try:\n    rewrite('a\\n' * 100000, section.chunks, '/w/f')\n"
              "except ApplyError as exc:\n    print(exc.message.splitlines()[0])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.startswith("Failed to find expected lines in /w/f"), done.stdout


# -- rewriting -------------------------------------------------------------------------


def test_context_lines_keep_the_files_text_and_terminator():
    assert update("  foo  \nbar\n", " foo", "-bar", "+baz") == "  foo  \nbaz\n"
    assert update("a1 \nb\nc1 \nd\n", " a1", "-b", "+B", " c1", "-d", "+D") == "a1 \nB\nc1 \nD\n"
    assert update("a1 \r\nb\nc1 \rd", " a1", "-b", "+B", " c1", "-d", "+D") == "a1 \r\nB\r\nc1 \rD\r\n"


def test_every_line_ends_terminated_even_for_a_context_only_chunk():
    assert update("one\ntwo", " one") == "one\ntwo\n"
    assert update("no newline at end", "-no newline at end", "+first line", "+second line") == "first line\nsecond line\n"
    assert update("a", "-a") == ""


def test_new_lines_take_the_preferred_ending():
    assert update("a\r\nb\nc\n", "-b", "+B") == "a\r\nB\r\nc\n"
    assert update("a\rb\r", " a", "+n") == "a\rn\rb\r"


def test_pure_insertion_appends_at_end_whatever_the_header():
    assert update("def a():\n    pass\nx\n", "@@ def a():", "+new") == "def a():\n    pass\nx\nnew\n"
    assert update("line1\nline2\n", "@@", "+added line 1", "+added line 2") == "line1\nline2\nadded line 1\nadded line 2\n"
    assert update("", "+x") == "x\n"
    assert update("last", "+x") == "last\nx\n"


def test_trailing_empty_line_is_dropped_once_when_nothing_matches():
    assert update("x\ny\n", " y", "-", "+z") == "x\ny\nz\n"
    assert update("x\ny\n", "-", "+z") == "z\nx\ny\n"
    assert update("x\ny\n", "@@ x", "-", "+z") == "x\nz\ny\n"
    assert update("x \ny\n", " x", "", "+z") == "x \n\nz\ny\n"


def test_chunks_must_follow_file_order_and_context_header_precedes_the_block():
    err = failure("a\nb\nc\n", "@@", "-c", "+C", "@@", "-a", "+A")
    assert err.message == "Failed to find expected lines in /w/f:\na"
    err = failure("def f():\n    x\n", "@@ def f():", "-def f():", "+def g():")
    assert err.message == "Failed to find expected lines in /w/f:\ndef f():"
    assert failure("a\n", "@@ nope", "-a").message == "Failed to find context 'nope' in /w/f"


def test_one_unmatched_chunk_fails_the_whole_file():
    err = failure("a\nb\n", "-a", "+A", "@@", "-zzz", "+Z")
    assert err.message == "Failed to find expected lines in /w/f:\nzzz"


def test_bom_is_part_of_line_one():
    assert failure("\ufeffa\nb\n", "-a", "+A").message.startswith("Failed to find expected lines")
    assert update("\ufeffa\nb\n", "-\ufeffa", "+A") == "A\nb\n"


def test_failure_details_point_at_the_chunk_and_the_closest_lines():
    text = "".join(f"line {i}\n" for i in range(1, 40)) + "    value = compute(x)\n    return value\n"
    err = failure(text, "@@", "-line 2", "+two", "@@", "     value = compute(y)", "-    return value", "+    return 0")
    assert err.details["chunk"] == 2 and err.details["chunks"] == 2
    assert err.details["expected"] == ["    value = compute(y)", "    return value"]
    assert err.details["closest"]["start_line"] == 40
    assert "chunk 2 of 2" in err.hint and "    return value" in err.hint


def test_large_file_many_chunks_is_exact():
    lines = [f"def function_{i}(arg):\n    a = {i}\n    b = a + 1\n    return b\n\n" for i in range(2000)]
    body = []
    for i in range(0, 2000, 10):
        body += [f"@@ def function_{i}(arg):", f"     a = {i}", "-    b = a + 1", "+    b = a + 2", "+    c = b", "     return b"]
    out = update("".join(lines), *body)
    assert out.count("b = a + 2") == 200 and out.count("b = a + 1") == 1800


def test_context_lines_are_not_part_of_an_edit_so_end_of_file_ties_keep_chunk_order():
    assert update("a\nb\n", "@@", "+X", "@@", " b", "-", "+Y") == "a\nb\nX\nY\n"
    assert update("a\nb\n", "@@", "+P", "@@", " b", "+Y") == "a\nb\nP\nY\n"
    assert update("a\nb\n", "@@", " b", "+Y", "@@", "+P") == "a\nb\nY\nP\n"
    assert update("a\nb\n", "@@", "+P", "@@", "-b", "+Y") == "a\nY\nP\n"


def test_removed_and_added_lines_take_the_patch_text_even_when_equal():
    assert update("a\r\nfoo  \n", "-foo", "+foo") == "a\r\nfoo\r\n"
    assert update("x\na \nb \n", " x", "-a", "-b", "+b", "+a") == "x\nb\na\n"
    assert update("q\nx \ny\n", "-q", " x", "+x") == "x \nx\ny\n"


@pytest.mark.parametrize("seed", range(300))
def test_the_text_path_and_the_line_path_agree(seed):
    """rewrite() works on the text itself when it can; the line-by-line path must give
    the same new text, the same kept runs and the same diff, or the same failure."""
    from codespace_patch.applying import rewrite_by_lines

    rng = random.Random(seed)
    lines = [line.replace("\r", "").replace("\x0b", "").replace("\x0c", "") for line in _file_lines(rng)]
    old = "".join(line + "\n" for line in lines)  # LF only and terminated: the text path's domain
    body = _chunks(rng, lines, [])
    (section,) = parse_patch("\n".join(["*** Begin Patch", "*** Update File: f", *body, "*** End Patch"])).sections
    try:
        by_lines = rewrite_by_lines(old, section.chunks, "/w/f")
    except ApplyError as exc:
        with pytest.raises(ApplyError) as info:
            rewrite(old, section.chunks, "/w/f")
        assert info.value.message == exc.message
        return
    result = rewrite(old, section.chunks, "/w/f")
    assert result.text() == by_lines.text()
    assert result.kept == by_lines.kept
    assert unified(result.old, result.new, result.kept, "a/f", "b/f") == unified(
        by_lines.old, by_lines.new, by_lines.kept, "a/f", "b/f"
    )


@pytest.mark.parametrize("seed", range(300))
def test_the_byte_path_gives_the_text_paths_bytes_or_steps_aside(seed):
    """rewrite_ascii() (the helper's road: no diff wanted) gives exactly the bytes rewrite()
    gives, or None; and None only outside its domain or where the exact pass does not find
    every chunk in file order (rewrite's text path also steps aside there)."""
    from codespace_patch.applying import _rewrite_text, rewrite_ascii

    rng = random.Random(seed)
    lines = _file_lines(rng)
    if seed % 3:  # LF only for two seeds in three, ASCII too for one; every kind of file for the third
        lines = [line.replace("\r", "") for line in lines]
    if seed % 3 == 2:
        lines = [line.encode("ascii", "replace").decode() for line in lines]
    old = "".join(line + "\n" for line in lines)
    body = _chunks(rng, lines, [])
    (section,) = parse_patch("\n".join(["*** Begin Patch", "*** Update File: f", *body, "*** End Patch"])).sections
    data = old.encode("utf-8", "surrogatepass")
    got = rewrite_ascii(data, section.chunks)
    in_domain = data.isascii() and data.endswith(b"\n") and b"\r" not in data
    if got is None:
        assert not in_domain or _rewrite_text(old, section.chunks) is None
        return
    assert in_domain
    assert got == rewrite(old, section.chunks, "/w/f").text().encode("utf-8", "surrogatepass")


def test_the_byte_path_keeps_non_ascii_added_lines_and_leaves_non_ascii_files():
    from codespace_patch.applying import rewrite_ascii

    (section,) = parse_patch("*** Begin Patch\n*** Update File: f\n@@ a\n b\n-c\n+\u00e9\u2014\n*** End Patch").sections
    assert rewrite_ascii(b"a\nb\nc\nd\n", section.chunks) == "a\nb\n\u00e9\u2014\nd\n".encode()
    assert rewrite_ascii("a\nb\nc\n\u00e9\n".encode(), section.chunks) is None  # not ASCII: the text path
    (loose,) = parse_patch("*** Begin Patch\n*** Update File: f\n@@\n b\u2014\n-c\n+x\n*** End Patch").sections
    assert rewrite_ascii(b"b-\nc\n", loose.chunks) is None  # only a looser pass finds it
    assert rewrite("b-\nc\n", loose.chunks, "/w/f").text() == "b-\nx\n"


def test_the_text_path_is_taken_for_lf_files_and_left_for_others():
    from codespace_patch.applying import TextLines

    (section,) = parse_patch("*** Begin Patch\n*** Update File: f\n@@\n a\n-b\n+c\n*** End Patch").sections
    assert isinstance(rewrite("a\nb\n", section.chunks, "/w/f").new, TextLines)
    assert not isinstance(rewrite("a\r\nb\r\n", section.chunks, "/w/f").new, TextLines)  # CRLF
    assert not isinstance(rewrite("a\nb", section.chunks, "/w/f").new, TextLines)  # unterminated
    assert not isinstance(rewrite("a \nb\n", section.chunks, "/w/f").new, TextLines)  # needs a looser pass
    (insertion,) = parse_patch("*** Begin Patch\n*** Update File: f\n@@\n+z\n*** End Patch").sections
    assert not isinstance(rewrite("a\nb\n", insertion.chunks, "/w/f").new, TextLines)  # after the last line
    assert rewrite("a\nb\n", insertion.chunks, "/w/f").text() == "a\nb\nz\n"
