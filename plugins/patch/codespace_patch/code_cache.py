"""The patch helper's modules read from one file instead of one file each.

``codespace-apply-patch`` lives for one patch, and most of its time is start-up: about 36
modules of the core, codespace-fs and this plugin, each found on the path, its ``.pyc``
opened, checked, read and unmarshalled by importlib's path machinery (about 2.5 ms of a
20 ms run, measured in ``benchmarks/patch_bench.py``; the released binary's whole run is
13-17 ms). This module keeps the compiled code of the modules one run loaded in a single
file in this package's ``__pycache__`` and serves them from it in the next run.

It is a cache of the ``.pyc`` files with their rules: written only where they are written
(never when ``sys.dont_write_bytecode`` is set), one per interpreter (cache tag) and import
path (a different path could resolve a name to another file), and nothing is served once
a directory of that path has changed since the run that wrote it (a name could now be found
in it first); a module is served only
while its source file has the size and modification time it had when its code was taken,
and only from code whose ``.pyc`` matched its source then; anything else (a missing,
short or foreign file, a changed source) falls through to the normal import and marks
the cache to be written again at exit. Whoever can write this package's ``__pycache__``
could already replace its ``.pyc`` files, so the file adds no way in.

The same file keeps a few answers for the next run (:func:`remember`, :func:`remembered`):
the installed plugins, which the command typed in a shell would otherwise find by reading
every distribution's metadata at each start. Whoever asks checks that an answer still holds.
"""

# No ``from __future__ import annotations``: this module loads before the cache can serve
# anything, and that statement imports ``__future__`` the slow way; from the cache it is cheap.
import marshal
import os
import sys

MAGIC = b"CSCC"  # then the head's length (4 bytes, little-endian), the head (format, index, memo, path), the code
FORMAT = 3  # 2: the head holds the memo too; 3: and the import path's directories as they were
PREFIX = "helper-road."
KEEP = 8  # cache files per directory, the most recently written

# importlib's frozen halves, always loaded (``importlib`` itself is a package to import).
_bootstrap = sys.modules["_frozen_importlib"]
_external = sys.modules["_frozen_importlib_external"]


def _digest(text: str) -> str:
    """A stable 61-bit digest of ``text`` for a file name (str's hash is salted per process;
    hashlib costs more; a byte loop in Python, 0.1 ms): its bytes as one integer, modulo a prime."""
    value = int.from_bytes(text.encode("utf-8", "surrogatepass"), "little") % ((1 << 61) - 1)
    return f"{value:016x}"


_CODE = type(_digest.__code__)  # not compile()'s: the first compile in a process costs 2 ms


def cache_file() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    key = _digest("\0".join([sys.executable, *sys.path]))
    return os.path.join(here, "__pycache__", f"{PREFIX}{sys.implementation.cache_tag}.{key}.bin")


class _Loader:
    """Runs a module's code from the cache; the module's ``__file__`` and ``__cached__`` are
    its source's and ``.pyc``'s, as the path loader sets them."""

    def __init__(self, cache: "CodeCache") -> None:
        self.cache = cache

    def create_module(self, spec):  # noqa: ANN001, ANN201 - the default module
        return None

    def exec_module(self, module) -> None:  # noqa: ANN001
        code = self.cache.ready.pop(module.__spec__.name)  # unmarshalled by find_spec, which could still decline
        exec(code, module.__dict__)  # noqa: S102 - the module's own compiled code


def _fix_filename(code, origin: str):  # noqa: ANN001, ANN202
    import _imp  # built in

    _imp._fix_co_filename(code, origin)  # as the path loader does, should the tree have moved
    return code


class CodeCache:
    """A meta-path finder over the cache file (or over nothing, when there is none)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.index: dict[str, tuple] = {}
        self.data = b""
        self.base = 0
        self.stale = True  # nothing to serve yet: write one at exit
        self.ready: dict[str, object] = {}
        self.memo: dict[str, object] = {}  # answers kept for the next run (remember / remembered)
        self.memo_changed = False
        self.before = set(sys.modules)  # loaded before the cache could serve them (by site, say): not kept
        self.path_stamps = _path_stamps()  # before any import this run makes, so a change during it is seen
        self._loader = _Loader(self)
        self._read()

    def _read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
            if data[:4] != MAGIC:
                return
            size = int.from_bytes(data[4:8], "little")
            fmt, index, memo, path = marshal.loads(data[8:8 + size])
        except (OSError, ValueError, EOFError, TypeError):
            return
        if fmt != FORMAT or type(index) is not dict or not all(map(_well_formed, index.items())):
            return
        if path != self.path_stamps:
            # A module or package added to (or removed from) a directory of the path may now be
            # found before the one whose code is kept, or a plugin's hook module with it (found by
            # testing from outside: a package added earlier on PYTHONPATH was not seen). The path
            # finder tells a changed directory by its modification time too.
            return
        if type(memo) is dict and all(type(key) is str for key in memo):
            self.memo = memo
        self.index, self.data, self.base, self.stale = index, data, 8 + size, False

    def _code(self, entry: tuple):  # noqa: ANN202 - a code object, or None
        origin, offset, length = entry[0], entry[5], entry[6]
        start = self.base + offset
        if start + length > len(self.data):
            return None
        try:
            code = marshal.loads(memoryview(self.data)[start:start + length])
        except (EOFError, ValueError, TypeError):
            return None
        return _fix_filename(code, origin) if type(code) is _CODE else None

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        entry = self.index.get(name)
        if entry is None:
            return None
        origin, cached, package = entry[:3]
        code = self._code(entry) if _stamp(origin) == entry[3:5] else None
        if code is None:
            self.stale = True  # the path loader takes it; the cache is written again at exit
            return None
        self.ready[name] = code
        spec = _bootstrap.ModuleSpec(name, self._loader, origin=origin, is_package=package)
        spec.has_location = True
        spec.cached = cached
        if package:
            spec.submodule_search_locations = [os.path.dirname(origin)]
        return spec

    def save(self) -> None:
        """Write the cache when it is missing or stale, or when this run loaded a module it
        lacks (another road: atomic mode, a failure's hints), keeping what is still valid."""
        if sys.dont_write_bytecode:
            return
        loaded = [(name, module) for name, module in list(sys.modules.items()) if name not in self.before]
        missing = [(name, module) for name, module in loaded if name not in self.index and _source_spec(module)]
        if not self.stale and not missing and not self.memo_changed:
            return
        kept: dict[str, tuple[bytes, tuple]] = {}
        for name, entry in self.index.items():
            if _stamp(entry[0]) == entry[3:5] and self.base + entry[5] + entry[6] <= len(self.data):
                start = self.base + entry[5]
                kept[name] = (bytes(self.data[start:start + entry[6]]), entry[:5])
        for name, module in loaded:
            if name not in kept:
                found = _from_pyc(module)
                if found is not None:
                    kept[name] = found
        self._write(kept)

    def _write(self, entries: dict[str, tuple[bytes, tuple]]) -> None:
        index: dict[str, tuple] = {}
        offset = 0
        for name, (blob, entry) in entries.items():
            index[name] = (*entry, offset, len(blob))
            offset += len(blob)
        head = marshal.dumps((FORMAT, index, self.memo, self.path_stamps))
        tmp = f"{self.path}.{os.getpid()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + len(head).to_bytes(4, "little") + head + b"".join(blob for blob, _ in entries.values()))
            os.replace(tmp, self.path)
            _prune(os.path.dirname(self.path))
        except OSError:  # an unwritable __pycache__ (an install owned by another user): no cache
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _prune(directory: str) -> None:
    """Keep the KEEP most recently written caches: every import path has its own (a test's
    temporary plugin directory makes a new one), and none is worth keeping for long."""
    caches = []
    for name in os.listdir(directory):
        if name.startswith(PREFIX) and name.endswith(".bin"):
            try:
                caches.append((os.stat(os.path.join(directory, name)).st_mtime_ns, name))
            except OSError:
                continue
    for _, name in sorted(caches, reverse=True)[KEEP:]:
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass


_ENTRY_TYPES = (str, str, bool, int, int, int, int)  # origin, cached, package, mtime_ns, size, offset, length


def _well_formed(item: tuple) -> bool:
    name, entry = item
    return type(name) is str and type(entry) is tuple and len(entry) == len(_ENTRY_TYPES) and all(
        type(value) is kind for value, kind in zip(entry, _ENTRY_TYPES))


def _path_stamps() -> tuple:
    """Each entry of the import path with its stamp (None where there is none): a directory's
    modification time tells that a name could now be found elsewhere than where it was."""
    return tuple((entry, _stamp(entry or ".")) for entry in sys.path)


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _source_spec(module: object):  # noqa: ANN202
    """The module's spec when the path loader read it from a source file and its ``.pyc``."""
    spec = getattr(module, "__spec__", None)
    if spec is None or not spec.has_location or not spec.cached or not spec.origin:
        return None
    return spec if type(spec.loader).__name__ == "SourceFileLoader" else None


def _from_pyc(module: object) -> tuple[bytes, tuple] | None:
    """The code of ``module`` as its ``.pyc`` holds it, when that ``.pyc`` matches the source."""
    spec = _source_spec(module)
    if spec is None:
        return None
    try:
        st = os.stat(spec.origin)
        with open(spec.cached, "rb") as f:
            pyc = f.read()
    except OSError:
        return None
    # The path loader's own check of a timestamp .pyc: the magic, flags 0, mtime and size mod 2**32.
    flags = int.from_bytes(pyc[4:8], "little")
    recorded = (int.from_bytes(pyc[8:12], "little"), int.from_bytes(pyc[12:16], "little"))
    if len(pyc) < 16 or pyc[:4] != _external.MAGIC_NUMBER or flags != 0 or \
            recorded != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF):
        return None
    package = spec.submodule_search_locations is not None
    return pyc[16:], (spec.origin, spec.cached, package, st.st_mtime_ns, st.st_size)


_installed: CodeCache | None = None


def install() -> CodeCache:
    """Serve the modules of the cache from now on (once per process)."""
    global _installed
    if _installed is None:
        _installed = CodeCache(cache_file())
        sys.meta_path.insert(0, _installed)
    return _installed


def remembered(key: str) -> object:
    """What the previous run kept under ``key`` with :func:`remember` (None when nothing, or
    no cache is installed). The caller checks that it still holds: this is a cache."""
    return None if _installed is None else _installed.memo.get(key)


def remember(key: str, value: object) -> None:
    """Keep ``value`` (what ``marshal`` can write) for the next run, written with the code at
    exit. For an answer that costs the helper more to compute than to check, such as the
    installed plugins (:func:`codespace.contract.installed.scan_to_keep`)."""
    if _installed is not None and _installed.memo.get(key) != value:
        _installed.memo[key] = value
        _installed.memo_changed = True


def save() -> None:
    """Called as the helper leaves, its output flushed: a cache it cannot write is no failure."""
    if _installed is not None:
        try:
            _installed.save()
        except Exception:  # noqa: BLE001, S110 - the next run imports as if there were no cache
            pass
