"""Run a program with one hardening step made to fail: ``python pin_deny.py dumpable|core -- ARGV``.

A seccomp filter answers EPERM to ``prctl(PR_SET_DUMPABLE, ...)`` (``dumpable``) or to setting
``RLIMIT_CORE`` through ``setrlimit``/``prlimit64`` (``core``; reading limits still works, which
the C library does at start-up), then the program is executed. Nothing else is refused, so the
exit status says how the program handles that one failure (upstream: 5 and 7).

Run as a script by path (no package import), so it costs one bare interpreter start.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

AUDIT_ARCH_X86_64 = 0xC000003E
NR_PRCTL, NR_SETRLIMIT, NR_PRLIMIT64 = 157, 160, 302
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 4, 38, 22
SECCOMP_MODE_FILTER = 2
RLIMIT_CORE = 4
ALLOW, DENY = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
ARCH, NR = 4, 0


def arg_low(index: int) -> int:
    return 16 + 8 * index


def arg_high(index: int) -> int:
    return 16 + 8 * index + 4


def _program(step: str) -> list[tuple[int, int, int, int]]:
    """Classic BPF as (code, jt, jf, k); jumps are relative to the next instruction."""
    head = [(LD_W_ABS, 0, 0, ARCH), (JEQ_K, 1, 0, AUDIT_ARCH_X86_64), (RET_K, 0, 0, ALLOW), (LD_W_ABS, 0, 0, NR)]
    if step == "dumpable":
        return head + [
            (JEQ_K, 0, 3, NR_PRCTL),
            (LD_W_ABS, 0, 0, arg_low(0)),
            (JEQ_K, 0, 1, PR_SET_DUMPABLE),
            (RET_K, 0, 0, DENY),
            (RET_K, 0, 0, ALLOW),
        ]
    if step == "core":
        return head + [
            (JEQ_K, 0, 2, NR_SETRLIMIT),  # 4
            (LD_W_ABS, 0, 0, arg_low(0)),  # 5: resource
            (JEQ_K, 7, 8, RLIMIT_CORE),  # 6: -> 14 DENY, else 15 ALLOW
            (JEQ_K, 0, 7, NR_PRLIMIT64),  # 7
            (LD_W_ABS, 0, 0, arg_low(1)),  # 8: resource
            (JEQ_K, 0, 5, RLIMIT_CORE),  # 9
            (LD_W_ABS, 0, 0, arg_low(2)),  # 10: the new limit's pointer; NULL only reads the limit
            (JEQ_K, 0, 2, 0),  # 11
            (LD_W_ABS, 0, 0, arg_high(2)),  # 12
            (JEQ_K, 1, 0, 0),  # 13: NULL -> ALLOW
            (RET_K, 0, 0, DENY),  # 14
            (RET_K, 0, 0, ALLOW),  # 15
        ]
    raise SystemExit(f"pin_deny: unknown step {step!r} (dumpable or core)")


def install(step: str) -> None:
    program = _program(step)
    raw = b"".join(struct.pack("HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program), ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: pin_deny.py dumpable|core -- PROGRAM [ARG...]\n")
        return 2
    install(argv[0])
    os.execv(argv[2], argv[2:])
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
