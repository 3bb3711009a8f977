"""What ``grep`` takes and returns: the MCP boundary, validated by pydantic."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from codespace.contract import MAX_GLOBS, Strict

MAX_CONTEXT = 20
DEFAULT_MAX_BYTES = 64 * 1024
DEFAULT_MAX_MATCHES = 500
DEFAULT_TIMEOUT_MS = 20_000
MAX_TIMEOUT_MS = 120_000


class GrepArgs(Strict):
    pattern: str = Field(min_length=1, max_length=4096, description="What to look for: a regular expression "
                         "(Rust regex syntax, as ripgrep) or, with literal=true, plain text.")
    path: str = Field(default=".", description="Directory (searched recursively) or file to search.")
    literal: bool = Field(default=False, description="Treat pattern as plain text, not a regex.")
    case: Literal["sensitive", "insensitive", "smart"] = Field(
        default="smart", description="'smart': case-insensitive unless the pattern has an upper-case letter.")
    include: list[str] = Field(default_factory=list, max_length=MAX_GLOBS, description="Globs (gitignore-style) a file must match, "
                               "e.g. '*.py' or 'src/**/*.rs'.")
    exclude: list[str] = Field(default_factory=list, max_length=MAX_GLOBS, description="Globs (gitignore-style) of files and "
                               "directories to leave out.")
    gitignore: bool = Field(default=False, description="Honour .gitignore files at and below path (and skip .git).")
    include_hidden: bool = Field(default=True, description="Search names starting with '.'.")
    context: int = Field(default=0, ge=0, le=MAX_CONTEXT, description="Lines of context before and after each match.")
    before: int | None = Field(default=None, ge=0, le=MAX_CONTEXT, description="Lines before each match (overrides context).")
    after: int | None = Field(default=None, ge=0, le=MAX_CONTEXT, description="Lines after each match (overrides context).")
    max_matches: int | None = Field(default=None, ge=1, description=f"Cap on matching lines returned "
                                    f"(default {DEFAULT_MAX_MATCHES}, at most limits.walk_max_entries).")
    max_bytes: int | None = Field(default=None, ge=1024, description=f"Cap on the response size (default "
                                  f"{DEFAULT_MAX_BYTES}, at most limits.walk_max_response_bytes).")
    max_line_chars: int = Field(default=500, ge=20, le=100_000, description="Longer lines are cut to this many "
                                "characters (line_truncated says so).")
    timeout_ms: int = Field(default=DEFAULT_TIMEOUT_MS, ge=1, le=MAX_TIMEOUT_MS, description="Stop searching after this long.")
    cursor: str | None = Field(default=None, max_length=8192, description="next_cursor of an earlier call with the same "
                               "arguments: resume after its last match.")


    @field_validator("pattern")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\0" in value:
            raise ValueError("pattern holds a NUL character, which cannot be passed to ripgrep; "
                             "write it as the regex escape \\x00 instead")
        return value


class ContextLine(BaseModel):
    line_number: int
    line: str


class GrepMatch(BaseModel):
    path: str = Field(description="Relative to the searched directory, '/'-separated (the file's own name when a file "
                      "was searched). Bytes that are not UTF-8 appear as \\xNN.")
    line_number: int
    line: str = Field(description="The matching line, without its line break.")
    before: list[ContextLine] = Field(default_factory=list)
    after: list[ContextLine] = Field(default_factory=list)
    line_truncated: bool | None = Field(default=None, description="True when line was cut to max_line_chars.")


class SkippedFile(BaseModel):
    path: str
    reason: str


class GrepResult(BaseModel):
    path: str = Field(description="What was searched.")
    matches: list[GrepMatch]
    files_with_matches: int = Field(description="Distinct files among matches.")
    binary_files_skipped: int = Field(description="Binary files (holding a NUL byte) in which the pattern matched; "
                                      "their lines are not returned (search them with read_file encoding=base64).")
    truncated: bool
    truncated_reason: str | None = Field(default=None, description="Which limit stopped the search.")
    next_cursor: str | None = Field(default=None, description="Pass as cursor (same arguments) to get the next matches.")
    skipped: list[SkippedFile] = Field(default_factory=list, description="Files or lines that could not be searched "
                                       "or returned, and why.")
