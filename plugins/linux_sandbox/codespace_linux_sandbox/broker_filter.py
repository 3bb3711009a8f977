"""The Unix-socket broker's notifying filter, and its start under bubblewrap, with no heavy import.

Runs in the per-command helper: :func:`program` also in the command's process (Landlock, through
:mod:`.unix_broker`), :func:`install_before_spawn` on the helper's thread that spawns bwrap.

A helper started alone pays for every module it imports on every command: ``ctypes``, ``socket``,
``select`` and ``threading`` cost a per-command helper more than the rest of its start together
(``-X importtime``: ``socket`` alone pulls in ``enum`` and ``selectors``). So the filter goes on
through ``_ctypes`` (:mod:`.libc`) and the broker's thread comes from ``_thread``; that thread
runs the serve function it is handed (the bwrap engine's, which imports :mod:`.unix_broker` on
that thread), while bwrap builds the sandbox in another process. A call the
filter notifies before the broker is ready waits for it; none is lost.
"""


import _ctypes
import _signal
import _thread
import posix

from . import libc

SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
NR = {"x86_64": {"connect": 42, "socketpair": 53, "listen": 50},
      "aarch64": {"connect": 203, "socketpair": 199, "listen": 201}}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
SECCOMP_RET_ALLOW, SECCOMP_RET_USER_NOTIF = 0x7FFF0000, 0x7FC00000
PR_SET_NO_NEW_PRIVS = 38
SOCK_DGRAM, SOCK_RAW = 2, 3


class _Byte(_ctypes._SimpleCData):
    _type_ = "B"


def program(listen: bool) -> bytes:
    """connect, datagram socketpair (and ``listen``) -> USER_NOTIF; everything else allowed (the
    other filter decides the rest, and kills a foreign architecture)."""
    machine = posix.uname().machine
    nr = NR[machine]
    ld_abs, jeq, ret, and_k = 0x20, 0x15, 0x06, 0x54

    def op(code: int, jt: int, jf: int, k: int) -> bytes:  # struct sock_filter, native order
        return code.to_bytes(2, "little") + bytes((jt, jf)) + k.to_bytes(4, "little")

    # Jump offsets count from the next instruction: 10 is "allow", 11 is "notify".
    body = [
        op(ld_abs, 0, 0, 4),  # 0: seccomp_data.arch
        op(jeq, 0, 8, AUDIT_ARCH[machine]),  # 1: else allow
        op(ld_abs, 0, 0, 0),  # 2: seccomp_data.nr
        op(jeq, 7, 0, nr["connect"]),  # 3: notify
        op(jeq, 6 if listen else 5, 0, nr["listen"]),  # 4: notify when brokered, else allow
        op(jeq, 0, 4, nr["socketpair"]),  # 5: else allow
        op(ld_abs, 0, 0, 16 + 8 * 1),  # 6: args[1], low half: the type and its flags
        op(and_k, 0, 0, 0xF),  # 7: the type
        op(jeq, 2, 0, SOCK_DGRAM),  # 8: notify
        op(jeq, 1, 0, SOCK_RAW),  # 9: notify (SOCK_RAW on AF_UNIX is a datagram socket)
        op(ret, 0, 0, SECCOMP_RET_ALLOW),  # 10
        op(ret, 0, 0, SECCOMP_RET_USER_NOTIF),  # 11
    ]
    return b"".join(body)


def install_filter(listen: bool) -> int:
    """Add the notifying filter to the calling thread; its listener (close-on-exec)."""
    code = program(listen)
    instructions = (_Byte * len(code)).from_buffer_copy(code)
    # struct sock_fprog: unsigned short len, (padding), struct sock_filter *filter
    fprog = (len(code) // 8).to_bytes(2, "little") + bytes(6) + _ctypes.addressof(instructions).to_bytes(8, "little")
    number = SYS_SECCOMP[posix.uname().machine]
    listener = libc.syscall(libc.Long(number), SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, fprog)
    if listener < 0:
        error = libc.errno()
        raise OSError(error, f"installing the Unix socket broker failed: {posix.strerror(error)}")
    return listener


def install_before_spawn(rules: dict, serve: "Callable[[int, dict], None]") -> None:
    """In the helper (bubblewrap), on the thread that is about to spawn bwrap: the filter goes on
    this thread, so bwrap and the command inherit it; a broker thread serves it. This thread does
    no connect, socketpair or listen of its own afterwards."""
    handed: list[int] = []
    go = _thread.allocate_lock()
    go.acquire()

    def run() -> None:
        go.acquire()  # the GIL is free meanwhile: this thread costs the spawn nothing
        if handed:
            serve(handed[0], rules)  # it loads the broker's modules on this thread

    # Started first: a thread inherits its creator's filters, and the broker must not be under its own.
    # With every signal blocked (it inherits the mask too): see unix_broker.start.
    mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())
    try:
        _thread.start_new_thread(run, ())
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
    try:
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # bwrap sets it for the command anyway
            raise OSError(libc.errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        handed.append(install_filter(bool(rules.get("listen"))))
    finally:
        go.release()
