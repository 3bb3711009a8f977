"""The outside of a fuzzed patch: the envelope around its body (the begin and end markers,
heredoc wrappers, CRLF, outer whitespace, environment ids, padded headers), and the damage
done on purpose to a share of the bodies, so that upstream's and CodeSpace's error paths are
compared too. Every choice comes from the caller's ``rng``, in the order it always had: a case
stays a function of (seed, index)."""

from __future__ import annotations

import random

_BREAKERS = [
    "stacked", "bad-header", "empty-update", "empty-chunk", "eof-then-junk", "junk-line", "move-late",
    "move-twice", "no-end", "no-begin", "end-then-junk", "blank-in-add", "env-empty", "env-twice", "env-late",
    "tab-end", "indented-move", "double-end", "begin-v2", "empty-patch",
]


def break_patch(rng: random.Random, body: list[str], tags: list[str]) -> tuple[list[str], str | None, str | None]:
    """Damage the patch on purpose; returns (body, begin override, end override)."""
    what = rng.choice(_BREAKERS)
    tags.append("broken:" + what)
    begin = end = None
    headers = [i for i, line in enumerate(body) if line.startswith("@@")]
    updates = [i for i, line in enumerate(body) if line.startswith("*** Update File:")]
    if what == "stacked" and headers:
        i = rng.choice(headers)
        body = body[:i + 1] + ["@@ " + rng.choice(["def m():", "class A", "x"])] + body[i + 1:]
    elif what == "bad-header":
        body = body + [rng.choice(["*** Frobnicate File: x", "foo", "", "***Add File: y", "*** Add File:"])]
    elif what == "empty-update":
        body = body + ["*** Update File: " + rng.choice(["a.txt", "x"])]
    elif what == "empty-chunk":
        body = body + ["*** Update File: a.txt", "@@"]
    elif what == "eof-then-junk" and headers:
        i = rng.choice(headers)
        body = body[:i + 2] + ["*** End of File", rng.choice([" x", "-y", "+z", "", "  "])] + body[i + 2:]
    elif what == "junk-line" and headers:
        i = rng.choice(headers)
        body = body[:i + 2] + [rng.choice(["\tx", "#c", "*x", "x", "**"])] + body[i + 2:]
    elif what == "move-late" and headers:
        i = rng.choice(headers)
        body = body[:i + 2] + ["*** Move to: late.txt"] + body[i + 2:]
    elif what == "move-twice" and updates:
        i = rng.choice(updates)
        body = body[:i + 1] + ["*** Move to: m1.txt", "*** Move to: m2.txt"] + body[i + 1:]
    elif what == "indented-move" and updates:
        i = rng.choice(updates)
        body = body[:i + 1] + [" *** Move to: m1.txt"] + body[i + 1:]
    elif what == "no-end":
        end = rng.choice(["", "*** End", "*** end patch", "EOF"])
    elif what == "no-begin":
        begin = rng.choice(["*** Begin", "*** Begin Patch v2", "Begin Patch", "<<EOF"])
    elif what == "end-then-junk":
        body = body + ["*** End Patch", rng.choice(["junk", "*** Add File: q", "*** End Patch"])]
    elif what == "blank-in-add":
        body = body + ["*** Add File: blank.txt", "+x", "", "+y"]
    elif what == "env-empty":
        body = ["*** Environment ID:" + rng.choice(["", " ", "\t"])] + body
    elif what == "env-twice":
        body = ["*** Environment ID: a", "*** Environment ID: " + rng.choice(["b", ""])] + body
    elif what == "env-late":
        body = body + ["*** Environment ID: z"]
    elif what == "tab-end":
        end = "\t*** End Patch" if not body or not body[-1].startswith("*** ") else None
        body = body + ["\t*** End Patch"] if end is None else body
    elif what == "double-end":
        body = body + ["*** End Patch", "", "  "]
    elif what == "begin-v2":
        begin = "*** Begin Patch v2"
    elif what == "empty-patch":
        body = []
    return body, begin, end


def envelope(rng: random.Random, body: list[str], tags: list[str], begin: str | None, end: str | None) -> str:
    begin = begin if begin is not None else rng.choice(["*** Begin Patch"] * 8 + [" *** Begin Patch", "*** Begin Patch \t"])
    end = end if end is not None else rng.choice(["*** End Patch"] * 8 + [" *** End Patch", "*** End Patch  ", "\t*** End Patch"])
    if rng.random() < 0.03:
        body = ["*** Environment ID: " + rng.choice(["abc", "x y", "  z "])] + body
        tags.append("env-id")
    if rng.random() < 0.05:
        body = [("  " + line if line.startswith("*** ") and not line.startswith("*** Move") else line) for line in body]
        tags.append("padded-headers")
    lines = [begin, *body, end]
    if rng.random() < 0.03:
        lines += ["", "*** End Patch"]
        tags.append("end-twice")
    text = "\n".join(lines)
    roll = rng.random()
    if roll < 0.04:
        opener = rng.choice(["<<EOF", "<<'EOF'", '<<"EOF"', "<< EOF", "<<'PATCH'"])
        text = f"{opener}\n{text}\n{rng.choice(['EOF', 'EOF', 'fooEOF', 'EOF '])}"
        tags.append("heredoc")
    if rng.random() < 0.06:
        text = text.replace("\n", "\r\n")
        tags.append("crlf-patch")
    if rng.random() < 0.08:
        text = rng.choice(["\n", "  \n\n", "\t", "\u3000"]) + text + rng.choice(["\n", "\n\n", "  ", "\r\n"])
        tags.append("outer-whitespace")
    return text
