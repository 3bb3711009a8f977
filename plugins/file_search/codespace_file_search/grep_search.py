"""The ``grep`` search itself, blocking: the target opened and checked, rg run on it, its
records collected within the bounds (the tool's definition is :mod:`.grep_tool`)."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import threading
import time

from codespace.contract import ToolError

from . import grep_cursor, grep_view
from .grep_argv import build_argv, hidden_below, rg_binary
from .grep_collect import Collector
from .grep_models import DEFAULT_MAX_BYTES, DEFAULT_MAX_MATCHES, GrepArgs
from .grep_process import MEMORY_LIMIT, OUT_OF_MEMORY, RgRun, Stopped
from .grep_target import Target, open_target

log = logging.getLogger(__name__)


def search(args: GrepArgs, rules, limits, cancel: threading.Event | None = None, *,  # noqa: ANN001
           refuse_hardlinks: bool = False) -> dict:
    """The whole search, blocking: the ``grep`` result as plain data. ``refuse_hardlinks``
    (``filesystem.hardlinks = 'refuse'``): files with several links are not searched, as they
    are not read (found by testing from outside: grep showed a hidden file's lines through one)."""
    resume = grep_cursor.decode(args)
    target = open_target(args.path, rules, refuse_hardlinks=refuse_hardlinks)
    try:
        hidden = hidden_below(rules, target.real) if target.is_dir else []
        argv = [rg_binary(), *build_argv(args, hidden, single_file=not target.is_dir)]
        return _run(args, argv, target, resume, limits, cancel, refuse_hardlinks)
    finally:
        target.close()


def _collector(args: GrepArgs, limits, resume, target: Target, refuse_hardlinks: bool) -> Collector:  # noqa: ANN001
    before = args.context if args.before is None else args.before
    after = args.context if args.after is None else args.after
    return Collector(
        before=before, after=after,
        max_matches=min(args.max_matches or DEFAULT_MAX_MATCHES, limits.walk_max_entries),
        max_bytes=min(args.max_bytes or DEFAULT_MAX_BYTES, limits.walk_max_response_bytes),
        max_line_chars=args.max_line_chars, resume=resume,
        single_name=None if target.is_dir else os.fsencode(target.name), searched=args.path,
        linked=_several_links(target.fd) if refuse_hardlinks and target.is_dir else None,
    )


def _several_links(dir_fd: int):  # noqa: ANN202
    """Whether a file rg names (relative to the searched directory) has several hard links."""
    def linked(raw: bytes) -> bool:
        try:
            return os.stat(raw, dir_fd=dir_fd, follow_symlinks=False).st_nlink > 1
        except OSError:
            return True  # gone or unreadable now: not shown either
    return linked


def _run(args: GrepArgs, argv: list[str], target: Target, resume, limits, cancel,  # noqa: ANN001
         refuse_hardlinks: bool) -> dict:
    collect = _collector(args, limits, resume, target, refuse_hardlinks)
    deadline = time.monotonic() + args.timeout_ms / 1000
    cwd = f"/proc/{os.getpid()}/fd/{target.fd}" if target.is_dir else "/"
    run = RgRun(argv, cwd=cwd, stdin=subprocess.DEVNULL if target.is_dir else target.fd,
                deadline=deadline, cancel=cancel, before_exec=_no_link_view() if target.is_dir else None)
    timed_out = False
    status = None
    try:
        for record in run.records(collect.oversize, collect.skipping, collect.pass_over):
            collect.feed(record)
        status = run.stop(kill=False)
    except Stopped as stop:
        if stop.reason == "cancelled":
            raise ToolError(f"the search of {args.path} was cancelled", code="cancelled") from None
        if stop.reason == "fifo":
            raise _fifo_refusal(args, target) from None
        timed_out = True
    finally:
        if status is None:  # stopped early, or failed here: rg must not run on
            run.stop(kill=True)
    collect.finish_file()
    if any(line.startswith(OUT_OF_MEMORY) for line in run.failure):
        raise _out_of_memory(args)
    if not timed_out and status == 2 and not collect.saw_output:
        raise _rg_failure(args, run.failure)
    return _result(args, collect, run, timed_out)


def _no_link_view():  # noqa: ANN202
    """rg's walk in a tree that follows no link (:mod:`.grep_view`), where the kernel allows it."""
    global _view_warned
    why = grep_view.available()
    if why is None:
        return grep_view.enter
    if not _view_warned:
        _view_warned = True
        log.warning("grep: rg walks without the no-link view (%s); a directory swapped for a link while rg "
                    "walks could be followed", why)
    return None


_view_warned = False


def _fifo_refusal(args: GrepArgs, target: Target) -> ToolError:
    """What stopped rg: the first ``.gitignore`` below the searched directory that is a FIFO
    (looked for only once rg is found waiting on one; links are not followed)."""
    found = None
    top = f"/proc/self/fd/{target.fd}"
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        if ".gitignore" in filenames:
            try:
                if stat.S_ISFIFO(os.lstat(os.path.join(dirpath, ".gitignore")).st_mode):
                    found = os.path.relpath(os.path.join(dirpath, ".gitignore"), top)
                    break
            except OSError:
                continue
    where = os.path.join(args.path, found) if found else "a .gitignore file below it"
    return ToolError(
        f"gitignore=true made ripgrep open {where}, which is a FIFO (named pipe), not a file: it waits for a "
        f"writer that never comes, so the search of {args.path} was stopped with nothing found. To proceed: "
        "remove or rename that FIFO, or search with gitignore=false.",
        code="not_regular", details={"argument": "gitignore", **({"path": where} if found else {})},
    )


def _out_of_memory(args: GrepArgs) -> ToolError:
    return ToolError(
        f"the search of {args.path} was stopped: ripgrep needed more than the {MEMORY_LIMIT >> 20} MiB of memory "
        "grep allows it" + (" (most likely a .gitignore with very many patterns: gitignore=true compiles them all)"
                            if args.gitignore else " (a very long line, or a very large pattern)")
        + ". To proceed: " + ("search with gitignore=false (leave paths out with exclude globs), or " if args.gitignore
                              else "") + "narrow path or include.",
        code="grep_failed", details={"limit_bytes": MEMORY_LIMIT},
    )


def _rg_failure(args: GrepArgs, lines: list[bytes]) -> ToolError:
    text = "\n".join(line.decode("utf-8", "replace") for line in lines)[:2000] or "rg exited with status 2"
    if "regex parse error" in text or "regex" in text.split("\n", 1)[0]:
        return ToolError(f"pattern is not a valid regular expression (Rust regex syntax): {text}\nTo proceed: fix "
                         "the pattern, or pass literal=true to search for the text as it is.",
                         code="invalid_pattern", details={"argument": "pattern"})
    if "glob" in text:
        return ToolError(f"a glob in include or exclude is not valid: {text}\nTo proceed: fix the glob "
                         "(gitignore syntax).", code="invalid_argument", details={"argument": "include/exclude"})
    if "error building NFA" in text and (args.include or args.exclude):
        # Found by testing from outside: hundreds of long globs within the limits overflow rg's matcher.
        return ToolError(f"the include and exclude globs together are more than ripgrep's glob matcher can "
                         f"build ({len(args.include)} include, {len(args.exclude)} exclude; rg said: {text}). "
                         "To proceed: pass fewer or shorter globs, or narrow path instead.",
                         code="invalid_argument", details={"argument": "include/exclude"})
    return ToolError(f"grep failed: {text}", code="grep_failed")


def _messages(lines: list[bytes]) -> list[bytes]:
    """rg's messages on stderr, each whole: one about a file whose name holds a line break spans
    several lines (found by testing from outside: skipped showed "rg: ./a" of "a\\nb/.gitignore")."""
    messages: list[bytes] = []
    for line in lines:
        if line.startswith(b"rg: "):
            messages.append(line)
        elif messages:
            messages[-1] += b"\n" + line
    return messages


def _result(args: GrepArgs, collect: Collector, run: RgRun, timed_out: bool) -> dict:
    skipped = collect.skipped + [
        {"path": "", "reason": message.decode("utf-8", "backslashreplace")[:500]} for message in _messages(run.failure)
    ]
    if timed_out:
        # Files arrive in no order, so what was found in time is not a prefix of the sorted
        # whole: no cursor could continue it without gaps.
        reason = (f"timeout_ms ({args.timeout_ms} ms): these are the matches found in time, not the first ones "
                  "in path order, and there is no cursor; narrow path or include, or raise timeout_ms")
    else:
        reason = collect.dropped
    last = collect.last()
    return {
        "path": args.path, "matches": collect.matches(), "files_with_matches": collect.files(),
        "binary_files_skipped": collect.binary_files, "truncated": reason is not None, "truncated_reason": reason,
        "next_cursor": grep_cursor.encode(args, last) if collect.dropped and not timed_out and last else None,
        "skipped": skipped[:50],
    }
