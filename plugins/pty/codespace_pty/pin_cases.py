"""The terminal sessions the pin check runs through upstream and through ours.

A case is a command plus steps: type bytes (then wait until given output has
appeared, so that what the terminal shows does not depend on scheduling), or resize.
Fixed cases cover each behaviour once; generated cases (seeded) vary the text,
the codes, the sizes and the amounts.
"""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass, field

CHUNK_CEILING = 8192  # upstream reads the master 8 KiB at a time


@dataclass(frozen=True)
class Step:
    write: bytes = b""
    resize: tuple[int, int] | None = None
    wait_for: bytes = b""
    """Output that must appear after this step before the next one."""


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    """echo, exit, signal, interrupt, size, resize, after_exit, bulk, modes."""
    argv: list[str]
    steps: list[Step] = field(default_factory=list)
    size: tuple[int, int] | None = None
    """Rows and columns at start (None: the default, 24x80)."""

    @property
    def needs_app_server(self) -> bool:
        # exec-server's process/start has no size and no resize; app-server's command/exec has both.
        return self.size is not None or any(step.resize for step in self.steps)


def _sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def fixed_cases() -> list[Case]:
    return [
        Case("initial size", "size", ["stty", "size"]),
        Case("terminal modes", "modes", ["stty", "-a"]),
        Case("typed line echoed and read", "echo", ["cat"],
             [Step(b"hello\n", wait_for=b"hello\r\nhello\r\n"), Step(b"\x04")]),
        Case("exit 7", "exit", _sh("exit 7")),
        Case("exit by SIGTERM", "signal", _sh("kill -TERM $$")),
        Case("typed ^C stops the foreground command", "interrupt", ["sleep", "30"], [Step(b"\x03")]),
        Case("size asked at start", "size", ["stty", "size"], size=(40, 132)),
        Case("resize while running", "resize", _sh("read x; stty size"),
             [Step(resize=(30, 100)), Step(b"\n", wait_for=b"\r\n")]),
        Case("output just before exit", "bulk", _sh("printf 'one\\ntwo\\n'; exit 3")),
        Case("output by a child after the leader exits", "after_exit",
             _sh("trap '' HUP; (sleep 0.3; echo after) & echo before; exit 0")),
        Case("20000 bytes in 8 KiB chunks", "bulk", _sh("head -c 20000 /dev/zero | tr '\\000' x")),
    ]


_TEXT = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;-_=+@#%/"
_SIGNALS = [signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGKILL, signal.SIGUSR1]


def _text(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choice(_TEXT) for _ in range(rng.randint(low, high))).strip() or "x"


def generated_case(rng: random.Random, index: int) -> Case:
    """One generated case; the kind cycles so every kind is drawn in a short run."""
    kind = ("echo", "exit", "signal", "size", "resize", "bulk", "printf")[index % 7]
    tag = f"generated #{index}"
    if kind == "echo":
        lines = [_text(rng, 1, 60) + f" {index}.{n}" for n in range(rng.randint(1, 3))]
        steps = [Step(line.encode() + b"\n", wait_for=(line.encode() + b"\r\n") * 2) for line in lines]
        return Case(f"{tag}: {len(lines)} typed line(s) to cat", "echo", ["cat"], [*steps, Step(b"\x04")])
    if kind == "exit":
        code = rng.randint(0, 255)
        return Case(f"{tag}: exit {code}", "exit", _sh(f"exit {code}"))
    if kind == "signal":
        signum = rng.choice(_SIGNALS)
        return Case(f"{tag}: exit by {signal.Signals(signum).name}", "signal", _sh(f"kill -{int(signum)} $$"))
    if kind == "size":
        rows, cols = rng.randint(1, 200), rng.randint(1, 300)
        return Case(f"{tag}: size {rows}x{cols} at start", "size", ["stty", "size"], size=(rows, cols))
    if kind == "resize":
        rows, cols = rng.randint(1, 200), rng.randint(1, 300)
        return Case(f"{tag}: resize to {rows}x{cols}", "resize", _sh("read x; stty size"),
                    [Step(resize=(rows, cols)), Step(b"\n", wait_for=b"\r\n")])
    if kind == "bulk":
        count = rng.randint(1, 120_000)
        return Case(f"{tag}: {count} bytes", "bulk", _sh(f"head -c {count} /dev/zero | tr '\\000' y"))
    text = _text(rng, 1, 200)
    return Case(f"{tag}: printf {len(text)} chars", "bulk", ["printf", "%s\\n", text])


def generated_cases(seed: int, count: int) -> list[Case]:
    rng = random.Random(seed)
    return [generated_case(rng, index) for index in range(count)]
