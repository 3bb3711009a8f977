"""The grammar and its error messages (apply-patch.md §2-§3), checked against what
the 0.171.0 binary printed for the same inputs."""

from __future__ import annotations

import pytest

from codespace_patch import AddFile, DeleteFile, ParseError, UpdateFile, parse_patch
from codespace_patch.errors import LINE_PREFIXES, VALID_HEADERS

FIRST = "Invalid patch: The first line of the patch must be '*** Begin Patch'"
LAST = "Invalid patch: The last line of the patch must be '*** End Patch'"


def error_of(text: str) -> str:
    with pytest.raises(ParseError) as info:
        parse_patch(text)
    return info.value.message


def test_sections_and_paths():
    patch = parse_patch(
        "*** Begin Patch\n*** Add File: a.txt\n+one\n+\n*** Delete File: d.txt\n"
        "*** Update File: u.txt\n*** Move to: v.txt\n@@ ctx\n-old\n+new\n keep\n*** End Patch"
    )
    add, delete, update = patch.sections
    assert add == AddFile("a.txt", "one\n\n", 2)
    assert delete == DeleteFile("d.txt", 5)
    assert isinstance(update, UpdateFile) and update.path == "u.txt" and update.move_to == "v.txt"
    (chunk,) = update.chunks
    assert chunk.context == "ctx"
    assert chunk.lines == [("-", "old"), ("+", "new"), (" ", "keep")]
    assert chunk.old == ["old", "keep"] and chunk.new == ["new", "keep"]


def test_add_without_lines_is_an_empty_file_and_crlf_patch_is_lf():
    (add,) = parse_patch("*** Begin Patch\r\n*** Add File: e\r\n*** End Patch\r\n").sections
    assert add.contents == ""
    (add,) = parse_patch("*** Begin Patch\r\n*** Add File: e\r\n+x\r\r\n*** End Patch").sections
    assert add.contents == "x\n"


def test_extra_spaces_after_a_marker_stay_in_the_path_trailing_ones_do_not():
    (add,) = parse_patch("*** Begin Patch\n*** Add File:   n.txt  \n+x\n*** End Patch").sections
    assert add.path == "  n.txt"


@pytest.mark.parametrize("text", ["", "   \n\n", "*** Begin Patch", "*** Begin Patch\n*** Add File: a\n+x"])
def test_empty_or_unterminated_patches_blame_the_last_line(text):
    assert error_of(text) == LAST


@pytest.mark.parametrize("text", ["*** Begin Patch v2\n*** End Patch", "xx\n*** End Patch", "*** begin patch\n*** End Patch"])
def test_first_line(text):
    assert error_of(text) == FIRST


def test_outer_whitespace_uses_rusts_set():
    assert parse_patch("\u3000\n *** Begin Patch \n*** Add File: a\n+x\n\t*** End Patch\u2028").sections
    # U+001C is whitespace to Python's strip() but not to Rust's trim().
    assert error_of("\x1c*** Begin Patch\n*** End Patch") == FIRST


@pytest.mark.parametrize("opener", ["<<EOF", "<<'EOF'", '<<"EOF"'])
def test_heredoc_wrapper(opener):
    patch = parse_patch(f"{opener}\n*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\nfooEOF")
    assert [s.path for s in patch.sections] == ["a"]


@pytest.mark.parametrize("opener", ["<< EOF", "<<'PATCH'", "apply_patch <<'EOF'", "<<EOF  "])
def test_other_heredoc_openers_are_not_unwrapped(opener):
    assert error_of(f"{opener}\n*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\nEOF") == FIRST


def test_heredoc_inner_errors_and_line_numbers():
    assert error_of("<<EOF\n*** Begin Patch\n*** Add File: a\n+x\nEOF") == LAST
    assert error_of("<<EOF\n*** Begin Patch\nfoo\n*** End Patch\nEOF") == (
        f"Invalid patch hunk on line 2: 'foo' is not a valid hunk header. {VALID_HEADERS}"
    )


def test_environment_id():
    assert parse_patch("*** Begin Patch\n  *** Environment ID:   x  \n*** Add File: a\n+x\n*** End Patch").environment_id == "x"
    assert error_of("*** Begin Patch\n*** Environment ID: \n*** End Patch") == (
        "Invalid patch: apply_patch environment_id cannot be empty"
    )
    assert error_of("*** Begin Patch\n*** Environment ID:x\n*** Environment ID:\n*** End Patch") == (
        "Invalid patch: apply_patch environment_id cannot be specified more than once"
    )
    assert error_of("*** Begin Patch\n*** Add File: a\n+x\n*** Environment ID: y\n*** End Patch") == (
        f"Invalid patch hunk on line 4: '*** Environment ID: y' is not a valid hunk header. {VALID_HEADERS}"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", f"Invalid patch hunk on line 2: '' is not a valid hunk header. {VALID_HEADERS}"),
        ("*** Frobnicate File: foo", f"Invalid patch hunk on line 2: '*** Frobnicate File: foo' is not a valid hunk header. {VALID_HEADERS}"),
        ("*** Add File: ", f"Invalid patch hunk on line 2: '*** Add File:' is not a valid hunk header. {VALID_HEADERS}"),
        ("*** Delete File: f\nfoo", f"Invalid patch hunk on line 3: 'foo' is not a valid hunk header. {VALID_HEADERS}"),
        ("*** Add File: a\n+x\n\n+y", f"Invalid patch hunk on line 4: '' is not a valid hunk header. {VALID_HEADERS}"),
        ("*** Update File: f", "Invalid patch hunk on line 2: Update file hunk for path 'f' is empty"),
        ("*** Update File: f\n*** Move to: g", "Invalid patch hunk on line 2: Update file hunk for path 'f' is empty"),
        ("*** Update File: f\n*** End of File", "Invalid patch hunk on line 2: Update file hunk for path 'f' is empty"),
        ("*** Update File: f\n@@", "Invalid patch hunk on line 4: Update hunk does not contain any lines"),
        ("*** Update File: f\n@@\n*** End of File", "Invalid patch hunk on line 4: Update hunk does not contain any lines"),
        ("*** Update File: f\n@@ x\n@@ y\n-a", f"Invalid patch hunk on line 4: Unexpected line found in update hunk: '@@ y'. {LINE_PREFIXES}"),
        ("*** Update File: f\n@@\n*** Add File: x", f"Invalid patch hunk on line 4: Unexpected line found in update hunk: '*** Add File: x'. {LINE_PREFIXES}"),
        # A section header is quoted trimmed, as upstream quotes it (found by testing from outside).
        ("*** Update File: f\n@@ a\n*** Add File: x  ", f"Invalid patch hunk on line 4: Unexpected line found in update hunk: '*** Add File: x'. {LINE_PREFIXES}"),
        # A leading End of File is passed over, so what follows is judged as if it were absent.
        ("*** Update File: f\n*** End of File\nxx", f"Invalid patch hunk on line 4: Unexpected line found in update hunk: 'xx'. {LINE_PREFIXES}"),
        ("*** Update File: f\n\t-a", f"Invalid patch hunk on line 3: Unexpected line found in update hunk: '\t-a'. {LINE_PREFIXES}"),
        ("*** Update File: f\n-a\n\tx", "Invalid patch hunk on line 4: Expected update hunk to start with a @@ context marker, got: '\tx'"),
        ("*** Update File: f\n*** Move to: \n-a", f"Invalid patch hunk on line 3: Unexpected line found in update hunk: '*** Move to: '. {LINE_PREFIXES}"),
        ("*** Update File: f\n*** Move to: a\n*** Move to: b\n-a", f"Invalid patch hunk on line 4: Unexpected line found in update hunk: '*** Move to: b'. {LINE_PREFIXES}"),
        ("*** Update File: f\n-a\n*** Move to: b", "Invalid patch hunk on line 4: Expected update hunk to start with a @@ context marker, got: '*** Move to: b'"),
        ("*** Update File: f\n-a\n*** End of File\n x", "Invalid patch hunk on line 5: Expected update hunk to start with a @@ context marker, got: ' x'"),
        ("*** Update File: f\n@@\n\t*** End Patch", f"Invalid patch hunk on line 4: Unexpected line found in update hunk: '\t*** End Patch'. {LINE_PREFIXES}"),
        ("*** Add File: a\n+x\n*** End Patch\n*** End Patch", LAST[len("Invalid patch: "):]),
        ("*** Update File: f\n-a\n*** End Patch\n\n*** Add File: b\n+x", LAST[len("Invalid patch: "):]),
    ],
)
def test_error_messages(body, message):
    got = error_of(f"*** Begin Patch\n{body}\n*** End Patch")
    assert got == message or got == "Invalid patch: " + message


def test_blank_lines_are_context_except_after_end_of_file():
    (update,) = parse_patch("*** Begin Patch\n*** Update File: f\n-b\n+B\n\n\n@@\n-c\n*** End Patch").sections
    assert update.chunks[0].old == ["b", "", ""]
    (update,) = parse_patch(
        "*** Begin Patch\n*** Update File: f\n-a\n+b\n*** End of File\n   \n\t\n\n*** End Patch"
    ).sections
    assert update.chunks[0].end_of_file and update.chunks[0].lines == [("-", "a"), ("+", "b")]


def test_indented_markers_inside_an_update_are_context_lines():
    (update,) = parse_patch(
        "*** Begin Patch\n*** Update File: f\n-a\n  *** Add File: x\n @@\n *** End of File\n *** End Patch\n*** End Patch"
    ).sections
    assert update.chunks[0].lines == [("-", "a"), (" ", " *** Add File: x"), (" ", "@@"), (" ", "*** End of File"),
                                      (" ", "*** End Patch")]


def test_at_foo_is_not_a_header():
    assert "Expected update hunk" in error_of("*** Begin Patch\n*** Update File: f\n-a\n@@foo\n*** End Patch")
    (update,) = parse_patch("*** Begin Patch\n*** Update File: f\n@@\t\n-a\n@@  two\n-b\n*** End Patch").sections
    assert [c.context for c in update.chunks] == ["", " two"]


def test_end_patch_then_blank_lines_then_end_patch():
    assert parse_patch("*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n \n*** End Patch").sections


def test_no_sections_parses():
    assert parse_patch("*** Begin Patch\n*** End Patch").sections == ()


def test_an_end_of_file_before_any_chunk_is_passed_over():
    """Found by testing from outside: upstream applies '*** End of File' straight after the Update
    header or its Move line (any number of them, trailing spaces too), as though absent: the
    chunk after it is not anchored at the end, a Move may still follow, and a blank line after
    it is an empty context line. This answered "Update file hunk ... is empty"."""
    (update,) = parse_patch("*** Begin Patch\n*** Update File: f\n*** End of File\n*** End of File  \n"
                            "*** Move to: m\n-a\n+A\n*** End Patch").sections
    assert update.move_to == "m" and update.chunks[0].old == ["a"] and not update.chunks[0].end_of_file
    (moved,) = parse_patch("*** Begin Patch\n*** Update File: f\n*** Move to: m\n*** End of File\n-c\n+C\n"
                           "*** End Patch").sections
    assert moved.move_to == "m" and moved.chunks[0].old == ["c"]
    (blank,) = parse_patch("*** Begin Patch\n*** Update File: f\n*** End of File\n\n-c\n+C\n*** End Patch").sections
    assert blank.chunks[0].old == ["", "c"]
