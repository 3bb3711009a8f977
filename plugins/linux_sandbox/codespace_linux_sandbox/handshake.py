"""The helper's side of handshake v1: read it from the inherited pipe and check it by hand.

Runs in the per-command helper.

No pydantic and no ``json`` package here: ``json`` imports ``re``, and both cost
milliseconds on every sandboxed command. The C scanner behind ``json`` (``_json``) parses
the payload; the checks below name the field that is wrong, and a version mismatch names
both versions. ``SCHEMA`` mirrors :class:`codespace_linux_sandbox.protocol.Handshake`
(a test compares them).
"""


import posix

from .engines import ENGINES

VERSION = 1
FD_VARIABLES = {"handshake": b"CODESPACE_FD_HANDSHAKE", "seccomp": b"CODESPACE_FD_SECCOMP"}


class HandshakeError(Exception):
    """The handshake is refused; the message says why (field, versions)."""


_STR, _INT, _BOOL, _STRS, _ENV = "a string", "an integer", "true or false", "a list of strings", "an object of strings"

# field -> (kind, required, allowed values)
SCHEMA: dict[str, tuple[str, bool, tuple[str, ...] | None]] = {
    "engine": (_STR, True, tuple(ENGINES)),
    "command.argv": (_STRS, True, None),
    "command.cwd": (_STR, True, None),
    "command.env": (_ENV, True, None),
    "policy.readable": (_STRS, True, None),
    "policy.writable": (_STRS, True, None),
    "policy.deny_read": (_STRS, True, None),
    "policy.protected": (_STRS, True, None),
    "policy.network": (_STR, True, ("off", "proxy", "on")),
    "policy.proxy": ("an object or null", False, None),
    "policy.allow_unix_sockets": (_ENV, False, None),
    "options.seccomp": (_STR, True, ("restricted", "proxy_routed", "proxy_tcp", "vsock_restricted", "restricted_unix",
                                     "none")),
    "options.mount_proc": (_BOOL, False, None),
    "options.bwrap": (_STR, False, None),
    "options.run_dir": (_STR, True, None),
    "options.landlock_abi": (_INT, False, None),
    "options.runtime": (_STRS, False, None),
    "options.run_as": ("an object or null", False, None),
    "options.max_processes": (_INT, False, None),
}


class _ScanContext:
    """What ``_json.make_scanner`` reads from a JSONDecoder."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"{name} is not allowed")


def _parse(data: bytes) -> object:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HandshakeError(f"the handshake is not UTF-8 (byte {exc.start})") from None
    try:
        import _json

        value, end = _json.make_scanner(_ScanContext)(text, 0)
        if end == len(text):
            return value
    except Exception:  # noqa: BLE001, S110 - the C scanner needs json.decoder loaded to describe errors
        pass
    # Only a malformed handshake gets here: the full decoder (and its import) for a precise message.
    import json

    try:
        return json.loads(text, parse_constant=_ScanContext.parse_constant)
    except ValueError as exc:
        raise HandshakeError(f"the handshake is not valid JSON: {exc}") from None


def _ok(kind: str, value: object) -> bool:
    if kind == _STR:
        return type(value) is str
    if kind == _INT:
        return type(value) is int
    if kind == _BOOL:
        return type(value) is bool
    if kind == _STRS:
        return type(value) is list and all(type(v) is str for v in value)
    if kind == _ENV:
        return type(value) is dict and all(type(v) is str for v in value.values())
    return value is None or type(value) is dict


def decode(data: bytes) -> dict:
    """Parse and check a handshake; raises HandshakeError naming the problem."""
    value = _parse(data)
    if type(value) is not dict:
        raise HandshakeError("the handshake must be a JSON object")
    version = value.get("version")
    if version is None:
        raise HandshakeError(f"handshake field 'version' is missing (this helper speaks protocol version {VERSION})")
    if version != VERSION:
        raise HandshakeError(
            f"handshake protocol version {version!r} is not supported: this helper speaks version {VERSION} "
            "(the server and the helper come from different codespace-linux-sandbox releases; install them together)"
        )
    for name, (kind, required, allowed) in SCHEMA.items():
        section, _, field = name.partition(".")
        holder = value.get(section) if field else value
        if field and type(holder) is not dict:
            raise HandshakeError(f"handshake field '{section}' is missing or not an object")
        key = field or section
        if key not in holder:
            if required:
                raise HandshakeError(f"handshake field '{name}' is missing")
            continue
        item = holder[key]
        if not _ok(kind, item) and not (not required and item is None):
            raise HandshakeError(f"handshake field '{name}' must be {kind}")
        if allowed is not None and item not in allowed:
            raise HandshakeError(f"handshake field '{name}' is {item!r}; expected one of {', '.join(allowed)}")
    if not value["command"]["argv"]:
        raise HandshakeError("handshake field 'command.argv' is empty")
    proxy = value["policy"].get("proxy")
    if proxy is not None:
        if type(proxy.get("socket")) is not str or not proxy["socket"].startswith("/"):
            raise HandshakeError("handshake field 'policy.proxy.socket' must be an absolute path")
        port = proxy.get("port")
        if type(port) is not int or not 0 < port < 65536:
            raise HandshakeError("handshake field 'policy.proxy.port' must be a port number (1-65535)")
    run_as = value["options"].get("run_as")
    if run_as is not None:
        for key in ("uid", "gid"):
            if type(run_as.get(key)) is not int or not 0 < run_as[key] < 4294967295:
                raise HandshakeError(f"handshake field 'options.run_as.{key}' must be an id other than 0 "
                                     "(a sandboxed command never runs as host root)")
        if type(run_as.get("idmap", False)) is not bool:
            raise HandshakeError("handshake field 'options.run_as.idmap' must be true or false")
    elif posix.geteuid() == 0:
        raise HandshakeError("handshake field 'options.run_as' is required when the helper runs as root: a sandboxed "
                             "command never runs as host root (the server names the unprivileged ids)")
    return value


def read_inherited(name: str) -> bytes | None:
    """The payload of the inherited pipe ``name`` (None when the server sent none); closes it."""
    raw = posix.environ.get(FD_VARIABLES[name])
    if raw is None:
        return None
    try:
        fd = int(raw)
    except ValueError:
        raise HandshakeError(f"{FD_VARIABLES[name].decode()}={raw!r} is not a descriptor number") from None
    chunks = []
    try:
        while True:
            chunk = posix.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        raise HandshakeError(f"cannot read the {name} pipe (descriptor {fd}): {exc.strerror}") from None
    posix.close(fd)
    return b"".join(chunks)


def inherited_fd(name: str) -> int | None:
    """The descriptor of the inherited pipe ``name``, left open (bwrap reads the seccomp program itself)."""
    raw = posix.environ.get(FD_VARIABLES[name])
    return int(raw) if raw is not None and raw.isdigit() else None
