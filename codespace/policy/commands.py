"""Argv-level command rules.

Rules match a program and its arguments, never substrings of a command line. A
shell string is split into its simple commands (``a && b | c; d``) and each one is
checked; common wrappers (``env``, ``nice``, ``timeout``, ``bash -c`` ...) are looked
through so ``env rm -rf x`` is judged as ``rm -rf x`` too. What cannot be seen
statically (command substitution, ``eval``) is "opaque" and follows
``commands.opaque_shell``.

Command rules are a guard against mistakes, not the security boundary: the
sandbox is. README.md says so.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..contract.errors import Refused

if TYPE_CHECKING:
    from .model import CommandRule, CommandsPolicy

_SEPARATORS = {"&&", "||", ";", "|", "&", "|&", ";;", "(", ")", "\n"}
_REDIRECTS = {">", ">>", "<", "<<", "<<<", ">&", "<&", "&>", "&>>", ">|", "<>"}
_OPAQUE_MARKERS = ("$(", "`", "<(", ">(")
_OPAQUE_PROGRAMS = {"eval", "source", ".", "exec"}
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"}
# Wrappers whose real command follows their own options.
_WRAPPERS = {"env", "nice", "nohup", "timeout", "stdbuf", "time", "command", "sudo", "doas", "ionice", "setsid", "xargs"}
_MAX_DEPTH = 4


def split_shell(script: str) -> tuple[list[list[str]], bool]:
    """Split a shell string into simple commands; the flag says some part is opaque."""
    opaque = any(marker in script for marker in _OPAQUE_MARKERS)
    lexer = shlex.shlex(script, posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: bash itself would refuse; judge what we can't parse as opaque
        return [], True
    commands: list[list[str]] = []
    current: list[str] = []
    skip_next = False
    for token in tokens:
        if skip_next:
            skip_next = False
            continue
        if token in _SEPARATORS:
            if current:
                commands.append(current)
            current = []
        elif token in _REDIRECTS:
            if token == "<<":
                opaque = True  # a heredoc body is data, not commands; we do not parse it
            if current and current[-1].isdigit():
                current.pop()  # the fd number of "2>&1"
            skip_next = True
        else:
            current.append(token)
    if current:
        commands.append(current)
    return commands, opaque


def _strip_assignments(argv: list[str]) -> list[str]:
    i = 0
    while i < len(argv) and "=" in argv[i] and not argv[i].startswith("=") and argv[i].split("=", 1)[0].isidentifier():
        i += 1
    return argv[i:]


def _unwrap_wrapper(argv: list[str]) -> list[str] | None:
    """The command a wrapper runs, skipping its options (best effort)."""
    name = os.path.basename(argv[0])
    rest = argv[1:]
    if name == "env":
        while rest and (rest[0].startswith("-") or "=" in rest[0]):
            rest = rest[2:] if rest[0] in ("-u", "--unset", "-C", "--chdir", "-S") else rest[1:]
        return rest or None
    if name == "timeout":
        while rest and rest[0].startswith("-"):
            rest = rest[2:] if rest[0] in ("-s", "--signal", "-k", "--kill-after") else rest[1:]
        return rest[1:] or None  # the duration
    if name in ("nice", "ionice", "stdbuf", "sudo", "doas"):
        while rest and rest[0].startswith("-"):
            takes_value = rest[0] in ("-n", "-c", "-u", "-g", "-i", "-o", "-e", "--adjustment") and "=" not in rest[0]
            rest = rest[2:] if takes_value else rest[1:]
        return rest or None
    if name == "xargs":
        while rest and rest[0].startswith("-"):
            takes_value = rest[0] in ("-I", "-n", "-P", "-d", "-E", "-L", "-s", "-a")
            rest = rest[2:] if takes_value else rest[1:]
        return rest or None
    while rest and rest[0].startswith("-"):
        rest = rest[1:]
    return rest or None


def expand(argv: list[str], depth: int = 0) -> Iterator[tuple[list[str], bool]]:
    """Yield every command ``argv`` runs as far as we can see, with an opaque flag."""
    argv = _strip_assignments(argv)
    if not argv:
        return
    if depth > _MAX_DEPTH:
        yield argv, True
        return
    name = os.path.basename(argv[0])
    yield argv, name in _OPAQUE_PROGRAMS or argv[0].startswith("$")
    if name in _WRAPPERS:
        inner = _unwrap_wrapper(argv)
        if inner:
            yield from expand(inner, depth + 1)
    elif name in _SHELLS:
        script = _shell_script(argv[1:])
        if script is not None:
            commands, opaque = split_shell(script)
            if opaque:
                yield argv, True
            for command in commands:
                yield from expand(command, depth + 1)


def _shell_script(args: list[str]) -> str | None:
    """The script of ``sh -c SCRIPT`` / ``bash -lc SCRIPT`` forms, else None."""
    for i, arg in enumerate(args):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return args[i + 1] if i + 1 < len(args) else None
        if not arg.startswith("-"):
            return None  # a script file: its contents are not ours to read
    return None


def _rule_matches(rule: CommandRule, argv: list[str]) -> bool:
    program = argv[0]
    target = program if "/" in rule.program else os.path.basename(program)
    if not fnmatch.fnmatchcase(target, rule.program):
        return False
    if rule.args is None:
        return True
    args = argv[1:]
    for i, pattern in enumerate(rule.args):
        if pattern == "**":
            return True
        if i >= len(args) or not fnmatch.fnmatchcase(args[i], pattern):
            return False
    return len(args) == len(rule.args)


def _describe(index: int, rule: CommandRule) -> str:
    shape = f"program={rule.program!r}" + (f", args={rule.args!r}" if rule.args is not None else "")
    return f"commands.rules[{index}] ({shape})"


class CommandRules:
    def __init__(self, policy: CommandsPolicy) -> None:
        self.policy = policy

    def check_argv(self, argv: list[str]) -> Refused | None:
        return self._check(list(expand(argv)), shown=shlex.join(argv))

    def check_shell(self, script: str) -> Refused | None:
        commands, opaque = split_shell(script)
        seen: list[tuple[list[str], bool]] = []
        for command in commands:
            seen.extend(expand(command))
        if opaque:
            seen.append(([], True))
        return self._check(seen, shown=script)

    def _check(self, seen: list[tuple[list[str], bool]], shown: str) -> Refused | None:
        allowed_any = False
        for argv, opaque in seen:
            if opaque and self.policy.opaque_shell == "deny":
                return Refused(
                    "commands.opaque_shell",
                    f"refused by policy: the command {_short(shown)} contains parts that cannot be checked "
                    "statically (command substitution, eval, source, a heredoc or a variable as program) and "
                    "commands.opaque_shell = 'deny'. To proceed: pass an argv list, or spell the commands out.",
                )
            if not argv:
                continue
            for index, rule in enumerate(self.policy.rules):
                if _rule_matches(rule, argv):
                    if rule.decision == "deny":
                        reason = f": {rule.reason}" if rule.reason else ""
                        return Refused(
                            f"commands.rules[{index}]",
                            f"refused by policy: {shlex.join(argv)!s} matches {_describe(index, rule)}, "
                            f"decision deny{reason}. To proceed: run a different command or ask the operator.",
                        )
                    allowed_any = True
        if self.policy.default == "deny":
            for argv, _ in seen:
                if argv and not any(r.decision == "allow" and _rule_matches(r, argv) for r in self.policy.rules):
                    return Refused(
                        "commands.default",
                        f"refused by policy: no allow rule matches {shlex.join(argv)} and commands.default = 'deny'. "
                        "To proceed: use a command the policy allows (see workspace_info).",
                    )
            if not allowed_any:
                return Refused("commands.default", "refused by policy: commands.default = 'deny' and no command found")
        return None


def _short(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
