"""Random trees and random patches over them, for the differential run.

Each case is a function of (seed, index) alone, so a disagreement can be replayed
exactly. Most patches are built from the files they target, then bent the ways
agents bend them (indentation, trailing whitespace, typographic punctuation,
blank lines, end-of-file markers, moves over existing files); a share are broken
on purpose (stacked ``@@``, bad headers, ``*** End of File`` misuse, envelope
errors) so the error paths are compared too. Paths stay inside the tree: upstream
writes anywhere, CodeSpace refuses paths outside the workspace (the hostile tests
cover that difference).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from .fuzz_envelope import break_patch, envelope

ROOT = "{ROOT}"  # replaced by the tree's absolute path in each run

_WORDS = [
    "def", "return", "x", "y", "foo", "bar", "value", "if", "else:", "pass", "print(x)", "# note", "{", "}",
    "let", "const", "a = 1", "b = 2", "naïve", "café", "✅", "x - y", "it's", '"q"', "i++", "end", "0", "@@",
    "*** x", "-", "+", "class A:", "self.v", "(", ")", "=>", "ok", "über", "日本", "a\tb",
]
# Typographic characters upstream's loosest pass maps to ASCII, and look-alikes it does not.
_MAPPED = ["\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2015", "\u2212", "\u2018", "\u2019", "\u201a",
           "\u201b", "\u201c", "\u201d", "\u201e", "\u201f", "\u00a0", "\u2002", "\u2003", "\u2009", "\u202f",
           "\u205f", "\u3000"]
_UNMAPPED = ["\u2026", "\u00ab", "\u00bb", "\u2032", "\u02bc", "\uff0d", "\uff07", "\u00ad", "\u200b", "\u2000",
             "\u2001", "\u1680", "\x1c", "\x1f", "\x85", "\u2028"]
_TO_ASCII = {**dict.fromkeys(_MAPPED[:7], "-"), **dict.fromkeys(_MAPPED[7:11], "'"),
             **dict.fromkeys(_MAPPED[11:15], '"'), **dict.fromkeys(_MAPPED[15:], " ")}
_INDENTS = ["", "", "", "  ", "    ", "\t", "\t  ", "        ", " \u3000", "\u00a0"]
_TRAILING = ["", "", "", "", " ", "  ", "\t", " \t", "\u00a0", "\u3000", "\x0b", "\x0c"]
_NAMES = ["a.txt", "b.py", "c.md", "notes", "sp ace.txt", "é.txt", "data.json", "x", "Makefile", "deep.rs"]
_DIRS = ["src", "docs", "src/sub", "t", "n e w"]


@dataclass
class Case:
    index: int
    files: dict[str, bytes | None]  # None: a directory
    patch: str
    tags: list[str] = field(default_factory=list)


def _line(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.1:
        return ""
    if roll < 0.14:
        return rng.choice([" ", "  ", "\t", "\u3000"])
    words = rng.sample(_WORDS, rng.randint(1, 4))
    text = " ".join(words)
    if rng.random() < 0.2:
        text = text.replace(" ", rng.choice(_MAPPED + _UNMAPPED), 1) if " " in text else text + rng.choice(_MAPPED)
    if rng.random() < 0.15:
        text += " " + rng.choice(_MAPPED + _UNMAPPED[:4])
    return rng.choice(_INDENTS) + text + rng.choice(_TRAILING)


def _file_lines(rng: random.Random) -> list[str]:
    count = rng.choice([0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20])
    lines: list[str] = []
    for _ in range(count):
        if lines and rng.random() < 0.15:
            lines.append(rng.choice(lines))  # duplicates make the first-match rule matter
        else:
            lines.append(_line(rng))
    return lines


def _render(rng: random.Random, lines: list[str], tags: list[str]) -> bytes:
    style = rng.choices(["lf", "crlf", "cr", "mixed"], [60, 15, 10, 15])[0]
    tags.append(style)
    out = []
    for line in lines:
        end = {"lf": "\n", "crlf": "\r\n", "cr": "\r"}.get(style) or rng.choice(["\n", "\r\n", "\r"])
        out.append(line + end)
    text = "".join(out)
    if lines and rng.random() < 0.2:
        text = text.rstrip("\r\n")
        tags.append("no-final-newline")
    if rng.random() < 0.05:
        text = "\ufeff" + text
        tags.append("bom")
    data = text.encode("utf-8")
    roll = rng.random()
    if roll < 0.03:
        cut = rng.randint(0, len(data))
        data = data[:cut] + rng.choice([b"\xff", b"\xe2\x82", b"\xed\xa0\x80", b"\xc3", b"\xf0\x9f\x98", b"\x80"]) + data[cut:]
        tags.append("invalid-utf8")
    elif roll < 0.05:
        cut = rng.randint(0, len(data))
        data = data[:cut] + b"\x00" + data[cut:]
        tags.append("nul")
    return data


def _split(data: bytes) -> list[str]:
    text = data.decode("utf-8", "replace")
    parts = re.split(r"\r\n|\r|\n", text)
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def _bend(rng: random.Random, text: str, tags: list[str]) -> str:
    """How an agent misquotes a line: mostly harmless to upstream's loose passes."""
    roll = rng.random()
    if roll < 0.08:
        tags.append("bend-trailing")
        return text.rstrip(" \t") + rng.choice(["", " ", "\t"])
    if roll < 0.14:
        tags.append("bend-indent")
        return rng.choice(_INDENTS) + text.lstrip(" \t\u3000\u00a0")
    if roll < 0.2:
        tags.append("bend-punctuation")
        if any(c in text for c in _TO_ASCII):
            return "".join(_TO_ASCII.get(c, c) for c in text)
        return text.replace("-", rng.choice(_MAPPED[:7])).replace("'", "\u2019").replace('"', "\u201c")
    if roll < 0.21:
        tags.append("bend-wrong")
        return text + " changed"
    if roll < 0.215:
        tags.append("bend-unmapped")
        return text.replace(" ", rng.choice(_UNMAPPED), 1) + rng.choice(_UNMAPPED)
    return text


def _context_line(rng: random.Random, text: str, tags: list[str]) -> str:
    bent = _bend(rng, text, tags)
    if bent == "" and rng.random() < 0.5:
        return ""  # an empty patch line is an empty context line too
    return " " + bent


def _chunks(rng: random.Random, lines: list[str], tags: list[str]) -> list[str]:
    n = len(lines)
    out: list[str] = []
    cursor = 0
    for number in range(rng.randint(1, 3)):
        if rng.random() < 0.1 or n == 0:
            tags.append("pure-insertion")
            header = rng.choice(["@@", "@@ " + rng.choice(lines[cursor:])]) if lines[cursor:] else "@@"
            if number == 0 and rng.random() < 0.4:
                header = None
            if header:
                out.append(header)
            out += ["+" + _line(rng) for _ in range(rng.randint(1, 3))]
            continue
        if cursor >= n:
            break
        if rng.random() < 0.12:
            # Lines added after the file's last line: ties at the end with pure insertions.
            tags.append("tail-insertion")
            keep = rng.randint(1, min(2, n - cursor))
            out.append(rng.choice(["@@", "@@ "]))
            out += [_context_line(rng, lines[i], tags) for i in range(n - keep, n)]
            if rng.random() < 0.3:
                out.append(rng.choice(["", " "]))  # an empty line the file lacks: the retry drops it
                tags.append("trailing-empty-context")
            out += ["+" + _line(rng) for _ in range(rng.randint(1, 2))]
            cursor = n
            continue
        start = rng.randint(cursor, min(n - 1, cursor + 6))
        removed = rng.choice([0, 1, 1, 1, 2, 3])
        end = min(n, start + removed)
        before = rng.randint(0, min(3, start - cursor))
        after = rng.randint(0, min(3, n - end))
        header = rng.choices(["none", "anchor", "first", "missing", "plain"], [10, 25, 2, 2, 61])[0]
        if header == "none" and number > 0:
            header = "plain"
        if header == "anchor" and start - before - 1 < cursor:
            header = "plain"
        if header == "anchor":
            anchor = rng.randint(cursor, start - before - 1)
            out.append("@@ " + _bend(rng, lines[anchor], tags))
            tags.append("context-header")
        elif header == "first":
            out.append("@@ " + (lines[start - before] if start - before < n else "nothing"))
            tags.append("context-header-equals-first")
        elif header == "missing":
            out.append("@@ no such line anywhere")
            tags.append("context-header-missing")
        elif header == "plain":
            out.append(rng.choice(["@@", "@@", "@@ ", "@@\t"]))
        body: list[str] = []
        body += [_context_line(rng, lines[i], tags) for i in range(start - before, start)]
        body += ["-" + _bend(rng, lines[i], tags) for i in range(start, end)]
        body += ["+" + _line(rng) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        body += [_context_line(rng, lines[i], tags) for i in range(end, end + after)]
        if rng.random() < 0.05:
            body.append("")
            tags.append("trailing-empty-context")
        if rng.random() < 0.04 and len(body) > 2:
            cut = rng.randint(1, len(body) - 1)
            body = body[:cut] + [" " + _line(rng)] + body[cut:]
            tags.append("interleaved")
        if not body:
            body = [" " + (lines[start] if start < n else "")]
        out += body
        if end + after == n and rng.random() < 0.4:
            out.append("*** End of File")
            tags.append("end-of-file")
        elif rng.random() < 0.03:
            out.append("*** End of File")
            tags.append("end-of-file-misplaced")
        cursor = end + after
    return out


def _path(rng: random.Random, rel: str) -> str:
    roll = rng.random()
    if roll < 0.05:
        return "./" + rel
    if roll < 0.08:
        return "zz/../" + rel
    if roll < 0.12:
        return f"{ROOT}/{rel}"
    return rel


def _new_name(rng: random.Random, taken: set[str]) -> str:
    for _ in range(50):
        name = rng.choice(_NAMES)
        if rng.random() < 0.5:
            name = rng.choice(_DIRS) + "/" + name
        if rng.random() < 0.3:
            name = name.replace(".", f"{rng.randint(0, 9)}.", 1) if "." in name else name + str(rng.randint(0, 9))
        if name not in taken:
            return name
    return f"fresh{rng.randint(0, 10**6)}.txt"


def _tree(rng: random.Random, tags: list[str]) -> tuple[dict[str, bytes | None], dict[str, list[str]]]:
    files: dict[str, bytes | None] = {}
    texts: dict[str, list[str]] = {}
    for _ in range(rng.randint(1, 5)):
        name = _new_name(rng, set(files))
        if any(other.startswith(name + "/") or name.startswith(other + "/") for other in files):
            continue
        lines = _file_lines(rng)
        files[name] = _render(rng, lines, tags)
        texts[name] = _split(files[name])
    if rng.random() < 0.2:
        files["emptydir"] = None
    if rng.random() < 0.15:
        files["dir/inner.txt"] = b"inner\n"
    return files, texts


def _sections(rng: random.Random, files: dict[str, bytes | None], texts: dict[str, list[str]], tags: list[str]) -> list[str]:
    existing = [p for p, d in files.items() if d is not None]
    dirs = [p for p, d in files.items() if d is None] + sorted({p.rsplit("/", 1)[0] for p in existing if "/" in p})
    out: list[str] = []
    taken = set(files)
    gone: set[str] = set()  # deleted or moved away by an earlier section

    def pick() -> str:
        live = [p for p in existing if p not in gone]
        return rng.choice(live if live and rng.random() < 0.9 else existing)

    for _ in range(rng.choices([1, 2, 3, 4], [45, 30, 15, 10])[0]):
        kind = rng.choices(["update", "add", "delete", "move"], [55, 18, 12, 15])[0]
        if kind == "add":
            roll = rng.random()
            if roll < 0.15 and existing:
                target = rng.choice(existing)
                tags.append("add-overwrite")
            elif roll < 0.2 and dirs:
                target = rng.choice(dirs)
                tags.append("add-onto-dir")
            elif roll < 0.23 and existing:
                target = rng.choice(existing) + "/under.txt"
                tags.append("add-under-file")
            else:
                target = _new_name(rng, taken)
            taken.add(target)
            lead = rng.choice(["", "", "", " "])
            out.append(f"*** Add File: {lead}{_path(rng, target)}")
            for _ in range(rng.choice([0, 1, 2, 3])):
                text = _line(rng)
                if rng.random() < 0.03:
                    text += "\rcr-inside"
                    tags.append("cr-in-added-line")
                out.append("+" + text)
        elif kind == "delete":
            roll = rng.random()
            if roll < 0.7 and existing:
                target = pick()
                gone.add(target)
            elif roll < 0.85 and dirs:
                target = rng.choice(dirs)
                tags.append("delete-dir")
            else:
                target = "missing.txt"
                tags.append("delete-missing")
            out.append(f"*** Delete File: {_path(rng, target)}")
        else:
            if existing and rng.random() < 0.92:
                source = pick()
            else:
                source = rng.choice(dirs) if dirs and rng.random() < 0.5 else "missing.txt"
                tags.append("update-missing-or-dir")
            out.append(f"*** Update File: {_path(rng, source)}")
            if kind == "move":
                roll = rng.random()
                if roll < 0.2 and existing:
                    destination = rng.choice(existing)
                    tags.append("move-overwrite")
                elif roll < 0.27:
                    destination = source
                    tags.append("move-same")
                elif roll < 0.3 and dirs:
                    destination = rng.choice(dirs)
                    tags.append("move-onto-dir")
                else:
                    destination = _new_name(rng, taken)
                taken.add(destination)
                gone.add(source)
                out.append(f"*** Move to: {_path(rng, destination)}")
            out += _chunks(rng, texts.get(source, []), tags)
    return out


def generate(seed: int, index: int) -> Case:
    rng = random.Random(f"{seed}:{index}")
    tags: list[str] = []
    files, texts = _tree(rng, tags)
    body = _sections(rng, files, texts, tags)
    begin = end = None
    if rng.random() < 0.15:
        body, begin, end = break_patch(rng, body, tags)
    # The patch travels as one argv string, which cannot hold NUL.
    patch = envelope(rng, body, tags, begin, end).replace("\0", "0")
    return Case(index, files, patch, sorted(set(tags)))
