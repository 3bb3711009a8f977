"""Glob patterns matched in bounded time, whatever a workspace's ``.ignore`` or
``.gitignore`` or an agent's ``include``/``exclude`` holds (:func:`guard_globs`, for the walks of
codespace-fs and codespace-file-search).

pathspec compiles a glob to a Python regex, which backtracks: each ``*`` becomes
``[^/]*`` and each ``**`` a run that crosses ``/``, and a pattern with several of them
(``********z``, ``*a*a*a*a*b``, ``a/**/b/**/c/**/d``) tries every way to share a path
among them, time exponential in their number (eight stars on a 60-character name: 19 s,
with the whole server stalled, as the regex engine keeps the interpreter). A file in the
workspace is not a reason to let that happen.

So each pattern that has more than one such run gets a guard: a path short enough that
the regex cannot try more than ``BUDGET`` ways is matched by the regex (fast, in C); a
longer one by ``Backtracker``, which runs the same regex's program in the same order but
never tries one (instruction, position) twice, so it answers the very match the regex
would (pathspec reads which group matched) in time linear in the path.
"""

from __future__ import annotations

import re
from re import _constants as C  # noqa: N812 - the regex parser's opcodes
from re import _parser

BUDGET = 10_000_000
"""Most ways the regex may try to match a path before the linear matcher takes it."""

_CROSSING = "crossing"  # a run that may cross '/' ('.+', '.*'): its length is up to the path's
_WITHIN = "within"  # a run that stops at '/' ('[^/]*'): its length is up to one name's


class Unsupported(Exception):
    """A construct pathspec does not emit: such a pattern keeps its regex unguarded."""


def _runs(tree) -> tuple[int, int]:  # noqa: ANN001 - a parsed regex
    """(runs that may cross '/', runs that stop at it) in a parsed regex."""
    crossing = within = 0
    for op, av in tree:
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, body = av
            if hi == C.MAXREPEAT:
                if any(sub_op == C.IN and (C.NEGATE, None) in sub_av and (C.LITERAL, ord("/")) in sub_av
                       or sub_op == C.NOT_LITERAL and sub_av == ord("/") for sub_op, sub_av in body):
                    within += 1
                else:
                    crossing += 1
            c, w = _runs(body)
            crossing, within = crossing + c, within + w
        elif op == C.SUBPATTERN:
            c, w = _runs(av[3])
            crossing, within = crossing + c, within + w
        elif op == C.BRANCH:
            for alternative in av[1]:
                c, w = _runs(alternative)
                crossing, within = crossing + c, within + w
    return crossing, within


# Instructions of the program: (kind, a, b)
_CHAR, _SPLIT, _JMP, _SAVE, _AT, _MATCH = range(6)


def _char_test(op, av):  # noqa: ANN001, ANN202 - one opcode and its argument -> a test of one character
    if op == C.LITERAL:
        return lambda ch: ch == chr(av)
    if op == C.NOT_LITERAL:
        return lambda ch: ch != chr(av)
    if op == C.ANY:
        return lambda ch: ch != "\n"  # pathspec's regexes have no DOTALL
    if op == C.IN:
        negate, chars, ranges = False, set(), []
        for item, arg in av:
            if item == C.NEGATE:
                negate = True
            elif item == C.LITERAL:
                chars.add(chr(arg))
            elif item == C.RANGE:
                ranges.append((chr(arg[0]), chr(arg[1])))
            else:
                raise Unsupported(f"class item {item}")
        return lambda ch: (ch in chars or any(lo <= ch <= hi for lo, hi in ranges)) != negate
    raise Unsupported(f"opcode {op}")


class _Compiler:
    def __init__(self) -> None:
        self.prog: list[list] = []

    def emit(self, kind: int, a=None, b=None) -> int:  # noqa: ANN001
        self.prog.append([kind, a, b])
        return len(self.prog) - 1

    def tree(self, tree) -> None:  # noqa: ANN001
        for op, av in tree:
            self.node(op, av)

    def node(self, op, av) -> None:  # noqa: ANN001, C901
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            self.repeat(*av, greedy=op == C.MAX_REPEAT)
        elif op == C.SUBPATTERN:
            group, add_flags, del_flags, body = av
            if add_flags or del_flags:
                raise Unsupported("inline flags")
            if group is not None:
                self.emit(_SAVE, 2 * group)
            self.tree(body)
            if group is not None:
                self.emit(_SAVE, 2 * group + 1)
        elif op == C.BRANCH:
            ends = []
            alternatives = av[1]
            for k, alternative in enumerate(alternatives):
                split = self.emit(_SPLIT) if k < len(alternatives) - 1 else None
                if split is not None:
                    self.prog[split][1] = split + 1
                self.tree(alternative)
                if split is not None:
                    ends.append(self.emit(_JMP))
                    self.prog[split][2] = len(self.prog)
            for end in ends:
                self.prog[end][1] = len(self.prog)
        elif op == C.AT:
            if av not in (C.AT_BEGINNING, C.AT_BEGINNING_STRING, C.AT_END, C.AT_END_STRING):
                raise Unsupported(f"assertion {av}")
            self.emit(_AT, av)
        else:
            self.emit(_CHAR, _char_test(op, av))

    def repeat(self, lo: int, hi: int, body, greedy: bool) -> None:  # noqa: ANN001
        for _ in range(lo):
            self.tree(body)
        if hi == C.MAXREPEAT:
            split = self.emit(_SPLIT)
            self.tree(body)
            self.emit(_JMP, split)
            self._order(split, split + 1, len(self.prog), greedy)
            return
        splits = []
        for _ in range(hi - lo):
            splits.append(self.emit(_SPLIT))
            self.tree(body)
        for split in splits:
            self._order(split, split + 1, len(self.prog), greedy)

    def _order(self, split: int, body: int, out: int, greedy: bool) -> None:
        self.prog[split][1], self.prog[split][2] = (body, out) if greedy else (out, body)


class _Match:
    """What pathspec reads of a match."""

    def __init__(self, text: str, slots: list, names: dict[str, int], end: int) -> None:
        self.string, self._slots, self._names, self._end = text, slots, names, end

    def groupdict(self) -> dict[str, str | None]:
        return {name: self.group(n) for name, n in self._names.items()}

    def group(self, n: int = 0) -> str | None:
        if n == 0:
            return self.string[self._slots[0]:self._end]
        lo, hi = self._slots[2 * n], self._slots[2 * n + 1]
        return None if lo is None or hi is None else self.string[lo:hi]

    def span(self) -> tuple[int, int]:
        return self._slots[0], self._end

    def start(self) -> int:
        return self._slots[0]

    def end(self) -> int:
        return self._end


class Backtracker:
    """A regex's first match, found as Python's engine finds it (same program, same order of
    choices) but visiting each (instruction, position) once: a second visit could only fail
    as the first did, since nothing later depends on how it was reached (no back-references)."""

    def __init__(self, regex: re.Pattern) -> None:
        if regex.flags & ~(re.UNICODE):
            raise Unsupported("flags")
        parsed = _parser.parse(regex.pattern, regex.flags)
        compiler = _Compiler()
        compiler.tree(parsed)
        compiler.emit(_MATCH)
        self.prog = [tuple(i) for i in compiler.prog]
        self.slots = 2 * (regex.groups + 1)
        self.names = dict(regex.groupindex)
        self.anchored = bool(parsed.data) and parsed.data[0] == (C.AT, C.AT_BEGINNING)

    def search(self, text: str) -> _Match | None:
        seen: set[tuple[int, int]] = set()
        for start in range(len(text) + 1):
            found = self._run(text, start, seen)
            if found is not None or self.anchored:
                return found
        return None

    def match(self, text: str) -> _Match | None:
        return self._run(text, 0, set())

    def _at(self, where, text: str, pos: int) -> bool:  # noqa: ANN001
        if where in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
            return pos == 0
        if where == C.AT_END:  # as Python's '$': the end, or before a newline that ends the text
            return pos == len(text) or (pos == len(text) - 1 and text[pos] == "\n")
        return pos == len(text)

    def _run(self, text: str, start: int, seen: set) -> _Match | None:  # noqa: C901 - the machine's loop
        prog, n = self.prog, len(text)
        slots: list = [None] * self.slots
        slots[0] = start
        stack: list[tuple] = [(0, start)]
        while stack:
            item = stack.pop()
            if len(item) == 3:  # undo a saved position on the way back
                slots[item[1]] = item[2]
                continue
            pc, pos = item
            while (pc, pos) not in seen:
                seen.add((pc, pos))
                kind, a, b = prog[pc]
                if kind == _CHAR:
                    if pos >= n or not a(text[pos]):
                        break
                    pc, pos = pc + 1, pos + 1
                elif kind == _SPLIT:
                    stack.append((b, pos))
                    pc = a
                elif kind == _JMP:
                    pc = a
                elif kind == _SAVE:
                    stack.append((None, a, slots[a]))
                    slots[a] = pos
                    pc += 1
                elif kind == _AT:
                    if not self._at(a, text, pos):
                        break
                    pc += 1
                else:
                    return _Match(text, slots, self.names, pos)
        return None


class Guarded:
    """A pattern's regex, as pathspec uses it, that takes the linear matcher for a path on
    which the regex could try more than ``BUDGET`` ways."""

    def __init__(self, regex: re.Pattern, crossing: int, within: int) -> None:
        self.regex = regex
        self.pattern, self.flags = regex.pattern, regex.flags
        self.groups, self.groupindex = regex.groups, regex.groupindex
        self.crossing, self.within = crossing, within
        self.linear = Backtracker(regex)

    def _costly(self, text: str) -> bool:
        longest = max(map(len, text.split("/")))
        return (len(text) + 1) ** self.crossing * (longest + 1) ** self.within > BUDGET

    def search(self, text: str):  # noqa: ANN201 - re.Match or _Match
        return self.linear.search(text) if self._costly(text) else self.regex.search(text)

    def match(self, text: str):  # noqa: ANN201
        return self.linear.match(text) if self._costly(text) else self.regex.match(text)


MAX_GLOB_CHARS = 1024
MAX_GLOB_STARS = 32
MAX_GLOBS = 256
"""Most patterns an agent's ``include`` or ``exclude`` may hold: each costs the walk's set-up
and every path it matches (found by testing from outside: 200,000 of them kept a walk busy
for a minute before its time bound was first read, and gave grep's rg an argument list the
kernel refused)."""


def glob_too_costly(pattern: str) -> str | None:
    """Why a pattern is refused (an agent's) or skipped (an ignore file's line), or None. The
    linear matcher runs in Python, in time about the pattern's length times the path's: a
    4,000-character pattern took 2.5 s over one 4 KB path; no real pattern comes near these."""
    if len(pattern) > MAX_GLOB_CHARS:
        return f"it is {len(pattern)} characters long, more than {MAX_GLOB_CHARS}"
    if pattern.count("*") > MAX_GLOB_STARS:
        return f"it holds {pattern.count('*')} '*', more than {MAX_GLOB_STARS}"
    return None


def guard_globs(spec):  # noqa: ANN001, ANN201 - pathspec.GitIgnoreSpec
    """``spec`` with each pattern that could backtrack without bound guarded (in place)."""
    for pattern in spec.patterns:
        regex = getattr(pattern, "regex", None)
        if not isinstance(regex, re.Pattern):  # None (a comment line), or guarded already
            continue
        crossing, within = _runs(_parser.parse(regex.pattern, regex.flags))
        if crossing + within < 2:
            continue  # one run: at most one way per position, linear already
        try:
            pattern.regex = Guarded(regex, crossing, within)
        except Unsupported:
            continue
    return spec
