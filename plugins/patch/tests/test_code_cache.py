"""The helper's code cache (codespace_patch.code_cache): modules served from one file only
while their sources are unchanged, everything else through the normal import, and a cache
it cannot read or write never a failure. Each case runs real interpreters on a package
built for it, with a cache file of its own."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import codespace_patch

PATCH_ROOT = str(Path(codespace_patch.__file__).resolve().parents[1])

DRIVER = textwrap.dedent("""
    import json, sys
    sys.path[:0] = [{patch_root!r}, {tree!r}]
    from codespace_patch.code_cache import CodeCache
    cache = CodeCache({cache!r})
    sys.meta_path.insert(0, cache)
    import pkg.mod
    try:
        pkg.mod.fail()
    except ValueError as exc:
        where = exc.__traceback__.tb_next.tb_frame.f_code.co_filename
    print(json.dumps({{
        "value": pkg.mod.VALUE, "loader": type(pkg.mod.__loader__).__name__,
        "package_loader": type(pkg.__loader__).__name__, "file": pkg.mod.__file__, "cached": pkg.mod.__cached__,
        "path": list(pkg.__path__), "traceback_file": where,
    }}))
    cache.save()
""")


def _tree(root: Path, value: str) -> None:
    (root / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text(f"VALUE = {value!r}\n\ndef fail():\n    raise ValueError('x')\n")


def _run(tmp_path: Path, *flags: str, cache: Path | None = None) -> dict:
    tree = tmp_path / "tree"
    code = DRIVER.format(patch_root=PATCH_ROOT, tree=str(tree), cache=str(cache or tmp_path / "cache.bin"))
    done = subprocess.run([sys.executable, "-I", "-S", *flags, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _head(cache: Path) -> tuple:
    """(format, index, memo, import path) of a cache file, as the runs that wrote it saw them (a
    CodeCache made here would find this process's path, not theirs, and hold nothing)."""
    data = cache.read_bytes()
    return marshal.loads(data[8:8 + int.from_bytes(data[4:8], "little")])


def test_second_run_is_served_from_the_cache_with_the_path_loaders_attributes(tmp_path):
    _tree(tmp_path / "tree", "one")
    first = _run(tmp_path)
    assert first["loader"] == "SourceFileLoader" and (tmp_path / "cache.bin").is_file()
    second = _run(tmp_path)
    assert second["loader"] == second["package_loader"] == "_Loader"
    assert {k: second[k] for k in ("value", "file", "cached", "path", "traceback_file")} == \
        {k: first[k] for k in ("value", "file", "cached", "path", "traceback_file")}
    assert second["traceback_file"] == str(tmp_path / "tree" / "pkg" / "mod.py")


def test_a_changed_source_is_imported_from_itself_and_the_cache_rewritten(tmp_path):
    _tree(tmp_path / "tree", "one")
    _run(tmp_path)
    _run(tmp_path)
    _tree(tmp_path / "tree", "two, longer")
    changed = _run(tmp_path)
    assert changed["value"] == "two, longer" and changed["loader"] == "SourceFileLoader"
    again = _run(tmp_path)
    assert again["value"] == "two, longer" and again["loader"] == "_Loader"


def test_a_module_the_cache_lacks_is_added(tmp_path):
    _tree(tmp_path / "tree", "one")
    (tmp_path / "tree" / "pkg" / "__init__.py").write_text("")
    _run(tmp_path)
    (tmp_path / "tree" / "pkg" / "mod.py").write_text(
        "from . import extra\nVALUE = extra.X\n\ndef fail():\n    raise ValueError('x')\n")
    (tmp_path / "tree" / "pkg" / "extra.py").write_text("X = 'from extra'\n")
    assert _run(tmp_path)["value"] == "from extra"
    assert _run(tmp_path)["loader"] == "_Loader"
    assert {"pkg", "pkg.mod", "pkg.extra"} <= set(_head(tmp_path / "cache.bin")[1])


@pytest.mark.parametrize("content", [b"", b"CSCC", b"CSCC\xff\xff\xff\x7f", b"not a cache at all" * 100,
                                     b"CSCC\x05\x00\x00\x00\x00\x01\x02\x03\x04"])
def test_a_damaged_cache_file_is_ignored_and_replaced(tmp_path, content):
    _tree(tmp_path / "tree", "one")
    (tmp_path / "cache.bin").write_bytes(content)
    assert _run(tmp_path)["loader"] == "SourceFileLoader"
    assert _run(tmp_path)["loader"] == "_Loader"


def test_a_cut_or_foreign_code_entry_falls_back_for_that_module(tmp_path):
    _tree(tmp_path / "tree", "one")
    _run(tmp_path)
    data = (tmp_path / "cache.bin").read_bytes()
    (tmp_path / "cache.bin").write_bytes(data[: len(data) - 40])  # the index intact, the last code cut short
    cut = _run(tmp_path)
    assert cut["value"] == "one" and "SourceFileLoader" in (cut["loader"], cut["package_loader"])
    assert _run(tmp_path)["loader"] == "_Loader"  # and written whole again
    from codespace_patch.code_cache import FORMAT, MAGIC

    _, index, _, path = _head(tmp_path / "cache.bin")
    assert index
    head = marshal.dumps((FORMAT, {name: (*entry[:5], 0, 2) for name, entry in index.items()}, {}, path))
    (tmp_path / "cache.bin").write_bytes(MAGIC + len(head).to_bytes(4, "little") + head + marshal.dumps(42))
    foreign = _run(tmp_path)  # each entry unmarshals to an int, not code
    assert foreign["value"] == "one" and foreign["loader"] == foreign["package_loader"] == "SourceFileLoader"
    for index in ({"pkg": ("short",)}, {"pkg.mod": [1, 2]}, {3: ()}, ["not", "a", "dict"]):
        head = marshal.dumps((FORMAT, index, {}, path))
        (tmp_path / "cache.bin").write_bytes(MAGIC + len(head).to_bytes(4, "little") + head)
        assert _run(tmp_path)["value"] == "one"


def test_a_module_added_earlier_on_the_path_is_found_not_the_kept_one(tmp_path):
    """Found by testing from outside: the kept code of pkg was served while a pkg added to a
    directory before it on the path would be imported by a fresh run."""
    _tree(tmp_path / "tree", "one")
    first = tmp_path / "first"
    first.mkdir()
    code = DRIVER.format(patch_root=PATCH_ROOT, tree=str(tmp_path / "tree"), cache=str(tmp_path / "cache.bin"))
    code = code.replace("sys.path[:0] = [", f"sys.path[:0] = [{str(first)!r}, ", 1)

    def run() -> dict:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    run()
    assert run()["loader"] == "_Loader"  # served from the cache
    _tree(first, "shadow")
    shadowed = run()
    assert shadowed["value"] == "shadow" and shadowed["file"] == str(first / "pkg" / "mod.py"), shadowed
    assert run()["value"] == "shadow"


def test_no_cache_is_written_where_bytecode_is_not_or_cannot_be(tmp_path):
    _tree(tmp_path / "tree", "one")
    _run(tmp_path, "-B")
    assert not (tmp_path / "cache.bin").exists()
    unwritable = tmp_path / "missing-dir" / "cache.bin"
    assert _run(tmp_path, cache=unwritable)["loader"] == "SourceFileLoader"
    assert not unwritable.exists()


def test_a_cache_directory_another_user_owns_is_left_alone(tmp_path):
    """The package's ``__pycache__`` exists but this process may not write it (root installed
    the package; an agent's uid runs the helper): the import goes on, nothing is written."""
    import shutil
    import tempfile

    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv is needed to run the helper as another uid")
        as_user = ["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups"]
    else:
        as_user = []
    # Outside tmp_path, whose parents only root may enter: the other uid must reach the tree.
    root = Path(tempfile.mkdtemp(prefix="code-cache-"))
    try:
        root.chmod(0o755)
        _tree(root / "tree", "one")
        pycache = root / "tree" / "pkg" / "__pycache__"
        pycache.mkdir(mode=0o755)
        if not as_user:
            pycache.chmod(0o555)  # not ours to write, as another user's would be
        code = DRIVER.format(patch_root=PATCH_ROOT, tree=str(root / "tree"), cache=str(pycache / "cache.bin"))
        done = subprocess.run([*as_user, sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        assert json.loads(done.stdout)["value"] == "one"
        assert list(pycache.iterdir()) == []
    finally:
        if not as_user:
            (root / "tree" / "pkg" / "__pycache__").chmod(0o755)
        shutil.rmtree(root, ignore_errors=True)


def test_only_the_most_recent_caches_are_kept(tmp_path):
    from codespace_patch.code_cache import KEEP, PREFIX

    _tree(tmp_path / "tree", "one")
    directory = tmp_path / "pycache"
    directory.mkdir()
    for n in range(KEEP + 3):
        old = directory / f"{PREFIX}tag.{n:016x}.bin"
        old.write_bytes(b"old")
        os.utime(old, ns=(n * 10**9, n * 10**9))
    (directory / "unrelated.bin").write_bytes(b"kept")
    _run(tmp_path, cache=directory / f"{PREFIX}tag.new.bin")
    left = sorted(p.name for p in directory.iterdir())
    assert f"{PREFIX}tag.new.bin" in left and "unrelated.bin" in left
    assert len([n for n in left if n.startswith(PREFIX)]) == KEEP
    assert f"{PREFIX}tag.{0:016x}.bin" not in left and f"{PREFIX}tag.{KEEP + 2:016x}.bin" in left


MEMO_DRIVER = textwrap.dedent("""
    import json, sys
    sys.path[:0] = [{site!r}, {patch_root!r}, {core_root!r}]
    from codespace_patch import code_cache
    cache = code_cache.CodeCache({cache!r})
    code_cache._installed = cache
    from codespace.contract import installed
    scans = []
    scan = installed._scan
    installed._scan = lambda *a: scans.append(1) or scan(*a)  # counted, not replaced
    from codespace_patch.cli import _installed_plugins
    sys.path[:] = [{site!r}]  # imports done: only the constructed site is scanned
    print(json.dumps({{"found": _installed_plugins(), "scanned": len(scans)}}))
    cache.save()
""")


def test_the_command_keeps_the_installed_plugins_until_a_distribution_changes(tmp_path):
    """The command typed in a shell finds the installed plugins itself: the answer is kept in
    the cache file and served while nothing it was read from changed; a plugin installed
    since is found at once."""
    import codespace

    site = tmp_path / "site"
    (site / "alpha-1.0.dist-info").mkdir(parents=True)
    (site / "alpha-1.0.dist-info" / "entry_points.txt").write_text("[codespace.plugins]\nalpha = alpha.plugin\n")
    core_root = str(Path(codespace.__file__).resolve().parents[1])

    def run() -> dict:
        code = MEMO_DRIVER.format(site=str(site), patch_root=PATCH_ROOT, core_root=core_root,
                                  cache=str(tmp_path / "cache.bin"))
        done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def age() -> None:
        then = os.stat(site).st_mtime - 60
        for path in [site, *site.rglob("*")]:
            os.utime(path, (then, then))

    first = run()
    assert first == {"found": [["alpha", "alpha.plugin"]], "scanned": 1}
    assert run()["scanned"] == 1  # just written: too recent to keep
    age()
    assert run()["scanned"] == 1
    kept = run()
    assert kept == {"found": first["found"], "scanned": 0}
    (site / "beta-1.0.dist-info").mkdir()
    (site / "beta-1.0.dist-info" / "entry_points.txt").write_text("[codespace.plugins]\nbeta = beta.plugin\n")
    after = run()
    assert ["beta", "beta.plugin"] in after["found"] and after["scanned"] == 1


SUPPLIERS_DRIVER = textwrap.dedent("""
    import json, sys
    sys.path[:0] = {paths!r}
    from codespace_patch import code_cache
    cache = code_cache.CodeCache({cache!r})
    code_cache._installed = cache
    sys.meta_path.insert(0, cache)
    from codespace_patch.cli import main
    code = main([{patch!r}], plugins={plugins!r})
    cache.save()
    print(json.dumps({{"code": code, "probe": {probe!r} in sys.modules}}))
""")


def test_a_plugin_with_no_file_system_is_not_imported_while_it_stays_so(tmp_path):
    """The helper keeps which plugins could supply its file system: one that cannot is not
    imported on the next runs, until a file it was judged by changes (here: it gains the hook)."""
    from codespace_patch.conformance.helper import TEST_PLUGINS
    from codespace_patch.spawn import _paths, _plugins

    site, ws = tmp_path / "site", tmp_path / "ws"
    ws.mkdir()
    (site / "probe-1.0.dist-info").mkdir(parents=True)
    (site / "probe-1.0.dist-info" / "entry_points.txt").write_text("[codespace.plugins]\nprobe = cs_probe\n")
    probe = site / "cs_probe.py"
    probe.write_text("from codespace import hookimpl\n\nCODESPACE_STATIC_HOOKS = True\n\n"
                     "@hookimpl\ndef codespace_doctor(workspace):\n    return []\n")
    extra = (str(TEST_PLUGINS), str(site))
    plugins, paths = [list(p) for p in _plugins(extra)], list(_paths(extra))  # as the helper is started
    assert ["probe", "cs_probe"] in plugins
    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "CODESPACE_STATE_DIR": str(tmp_path / "state"), "CODESPACE_PLUGINS_ALLOW": "patch_testfs,patch,probe"}
    runs = iter(range(100))

    def run() -> bool:
        n = next(runs)
        code = SUPPLIERS_DRIVER.format(paths=paths, cache=str(tmp_path / "cache.bin"), plugins=plugins, probe="cs_probe",
                                       patch=f"*** Begin Patch\n*** Add File: n{n}.txt\n+{n}\n*** End Patch")
        done = subprocess.run([sys.executable, "-I", "-S", "-c", code], cwd=ws, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.splitlines()[-1])
        assert result["code"] == 0 and (ws / f"n{n}.txt").read_text() == f"{n}\n", (done.stdout, done.stderr)
        return result["probe"]

    def age(seconds: int) -> None:
        then = time.time() - seconds
        for path in (probe, site):
            os.utime(path, (then, then))

    assert run()  # just written: too recent to judge it by
    age(60)
    assert run()  # judged now, and kept
    assert not run() and not run()
    probe.write_text(probe.read_text() + "\n@hookimpl\ndef codespace_filesystem(workspace):\n    return None\n")
    age(30)
    assert run() and run()  # a supplier now (declining), so imported every time
