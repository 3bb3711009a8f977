"""The per-command helper: checks handshake v1 and runs its command under the engine it names.

One process per sandboxed command, with the same code and the same handshake (protocol v1)
however it started:

- started alone by the server (``wrap``, terminal sessions and the fallback) as
  ``python -I -S .../codespace_linux_sandbox/__main__.py`` (:mod:`.entry`) with the command's
  stdio and two inherited descriptors: the handshake (JSON) and, unless the policy needs
  none, the seccomp program (raw BPF), named by ``CODESPACE_FD_HANDSHAKE`` /
  ``CODESPACE_FD_SECCOMP`` (:func:`run_started_alone`);
- forked by the warm helper (:mod:`.zygote`, the fast path ``launch``), which receives the
  same two descriptors and the command's stdio over its socket and calls :func:`run`.

Its own environment holds nothing else but the location of the core's hardening module
(:mod:`.core_hardening`); the command's environment travels in the handshake. What each
engine does, and where, is the table in :mod:`.engines`.

Exit codes of the helper itself (the command's own code otherwise): 125 when the
handshake is refused or the sandbox cannot be built (the message, on stderr, names the
field, both protocol versions or the rule), 5 / 7 when hardening fails (upstream's codes),
126 / 127 when the command cannot be executed / is not found (Landlock engine; bwrap
reports its own).
"""


from . import handshake as hs_module
from .engines import ENGINES
from .failure import SETUP_FAILED_EXIT_CODE, fail

__all__ = ["SETUP_FAILED_EXIT_CODE", "run", "run_started_alone"]


def run(raw: bytes, seccomp_fd: int | None, *, hardened: bool = False, userns_fd: int | None = None) -> int:
    """Check the handshake ``raw`` and run its command; ``seccomp_fd`` holds the BPF program.
    ``hardened``: this process is already hardened (forked by the warm helper); ``userns_fd``: the
    user namespace describing ``options.run_as``'s id mapping, when the server sent one."""
    try:
        hs = hs_module.decode(raw)
    except hs_module.HandshakeError as exc:
        return fail(str(exc))
    if hs["options"]["seccomp"] != "none" and seccomp_fd is None:
        return fail(f"the policy needs the {hs['options']['seccomp']} seccomp filter but the server sent none "
                    "(no seccomp descriptor); refusing to run unfiltered")
    if (hs["options"]["seccomp"] == "restricted_unix") != bool(hs["policy"].get("allow_unix_sockets")):
        return fail("handshake fields 'options.seccomp' = 'restricted_unix' and 'policy.allow_unix_sockets' go "
                    "together (the filter leaves connect() to the broker of the listed sockets)")
    return ENGINES[hs["engine"]].run_in_helper(hs, seccomp_fd, hardened=hardened, userns_fd=userns_fd)


def run_started_alone(argv: list[str]) -> int:
    """The helper started by the server for one command: the handshake is on an inherited descriptor."""
    if argv:
        return fail("takes no arguments: the server passes the handshake on the descriptor named by "
                    "CODESPACE_FD_HANDSHAKE (protocol version 1)", 2)
    try:
        raw = hs_module.read_inherited("handshake")
    except hs_module.HandshakeError as exc:
        return fail(str(exc))
    if raw is None:
        return fail("no handshake: CODESPACE_FD_HANDSHAKE is not set (this helper is started by the "
                    "CodeSpace server, protocol version 1)", 2)
    return run(raw, hs_module.inherited_fd("seccomp"))
