"""A helper's file-system backend chosen without pluggy (``codespace.contract.helper_plugins``):
the same mark, the same hook table, the same choice as the plugin manager, and the plugin
manager's road whenever the plain reading could differ."""

from __future__ import annotations

import itertools
import marshal
import os
import sys
import time
import textwrap
from pathlib import Path

import pluggy
import pytest

import codespace
from codespace import hookspecs
from codespace.contract import gate, installed
from codespace.contract.helper_plugins import (HOOK_ARGUMENTS, NOT_PLAIN, filesystem_suppliers, kept_suppliers,
                                               plain_filesystem, selected, suppliers_to_keep)
from codespace.contract.markers import hookimpl
from codespace.plugins import ENV_ALLOW, ENV_BLOCK, Plugins
from codespace.workspace import Workspace

OPTIONS = [{}, {"tryfirst": True}, {"trylast": True}, {"hookwrapper": True}, {"wrapper": True},
           {"optionalhook": True}, {"specname": "codespace_filesystem"}]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_the_mark_is_pluggys(options):
    def ours(): ...
    def theirs(): ...
    hookimpl(**options)(ours)
    pluggy.HookimplMarker("codespace")(**options)(theirs)
    assert ours.codespace_impl == theirs.codespace_impl
    assert codespace.hookimpl is hookimpl
    assert hookimpl(ours) is ours


def test_hook_table_is_the_specifications():
    pm = pluggy.PluginManager("codespace")
    pm.add_hookspecs(hookspecs)
    specs = {name: getattr(pm.hook, name).spec for name in dir(hookspecs) if name.startswith("codespace_")}
    assert {n: (*s.argnames, *s.kwargnames) for n, s in specs.items()} == HOOK_ARGUMENTS
    # The plain road knows no historic hook and no warning on implementation.
    assert not [n for n, s in specs.items() if s.opts.get("historic") or s.warn_on_impl or s.warn_on_impl_args]


@pytest.mark.parametrize("allow, block, env", [
    (None, (), {}), (["a", "c"], (), {}), (None, ["b"], {}), (None, (), {ENV_ALLOW: "a, b"}),
    (["a", "b"], (), {ENV_ALLOW: "b,c"}), (None, (), {ENV_BLOCK: "c"}), (["a"], ["a"], {}),
])
def test_selection_is_plugin_managers(allow, block, env, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in "abc":
        (tmp_path / f"sel_{name}.py").write_text("")
    loaded = Plugins.load(allow=allow, block=block, env=env, builtins=(),
                          discovered=[gate.InstalledPlugin(n, f"sel_{n}") for n in "cab"])
    assert selected("cab", allow, block, env) == sorted(i.name for i in loaded.listing() if i.status == "loaded")


FS = '''
from codespace import hookimpl

class FS:
    def __init__(self, tag): self.tag = tag

@hookimpl{options}
def codespace_filesystem({arguments}):
    {body}
'''


def _plugin(root: Path, name: str, *, options: str = "", arguments: str = "workspace", body: str = "return FS(__name__)",
            extra: str = "") -> tuple[str, str]:
    module = f"hp_{name}_{next(_serial)}"
    (root / f"{module}.py").write_text(FS.format(options=options, arguments=arguments, body=body) + textwrap.dedent(extra))
    return name, module


_serial = itertools.count()


def _both(workspace, installed):  # noqa: ANN001, ANN202 - the two roads' answers, as tags
    plain = plain_filesystem(workspace, [gate.InstalledPlugin(n, v) for n, v in installed], allow=None, block=(),
                             env={})
    fs, _ = Plugins.load(builtins=(), env={}, discovered=[gate.InstalledPlugin(n, v) for n, v in installed]
                         ).filesystem(workspace)
    tag = lambda found: found if found is None or found is NOT_PLAIN else found.tag  # noqa: E731
    return tag(plain), tag(fs)


@pytest.fixture
def roots(tmp_path, monkeypatch, ws, state):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, Workspace.open(ws, state_dir=state)
    for name in [m for m in sys.modules if m.startswith("hp_")]:
        del sys.modules[name]


def test_same_choice_as_the_plugin_manager(roots):
    root, workspace = roots
    first, second = _plugin(root, "first"), _plugin(root, "second")
    declines = _plugin(root, "zlast", body="return None")
    no_arguments = _plugin(root, "noargs", arguments="", body="return FS(__name__)")
    with_default = _plugin(root, "default", arguments="workspace, extra=1")
    for installed in ([first, second], [second, first], [first, declines], [declines], [no_arguments, first],
                      [with_default], [first, _plugin(root, "other", extra="@hookimpl\ndef codespace_doctor(workspace): ...")]):
        plain, managed = _both(workspace, installed)
        assert plain is not NOT_PLAIN and plain == managed, installed


@pytest.mark.parametrize("case", ["tryfirst", "wrapper", "unknown hook", "argument not in the spec", "raises",
                                  "import fails", "twice", "one module under two names", "a method"])
def test_anything_else_takes_the_plugin_managers_road(roots, case):
    root, workspace = roots
    plain_one = _plugin(root, "a")
    installed = {
        "tryfirst": [_plugin(root, "b", options="(tryfirst=True)")],
        "wrapper": [_plugin(root, "b", options="(hookwrapper=True)", body="yield")],
        "unknown hook": [_plugin(root, "b", extra="@hookimpl\ndef codespace_filesytem(workspace): ...")],
        "argument not in the spec": [_plugin(root, "b", arguments="workspace, backends")],
        "raises": [_plugin(root, "b", body="raise RuntimeError('broken backend')")],
        "import fails": [("b", "hp_no_such_module")],
        "twice": [plain_one],
        "one module under two names": [("b", plain_one[1])],
        "a method": [_plugin(root, "b", extra="class K:\n    @hookimpl\n    def codespace_doctor(self, workspace): ...\n"
                                              "codespace_doctor = K().codespace_doctor\n")],
    }[case]
    assert plain_filesystem(workspace, [gate.InstalledPlugin(n, v) for n, v in [plain_one, *installed]],
                            allow=None, block=(), env={}) is NOT_PLAIN


def test_gate_takes_the_plugin_managers_road_when_the_plain_one_declines(roots):
    root, workspace = roots
    good, bad = _plugin(root, "a"), ("b", "hp_no_such_module")
    fs, failed = gate.filesystem(workspace, [good, bad])
    assert fs.tag == good[1] and failed == ["b: import failed: ModuleNotFoundError: No module named 'hp_no_such_module'"]
    fs, failed = gate.filesystem(workspace, [good])
    assert fs.tag == good[1] and failed == []


def _no_filesystem(root: Path, name: str, *, static: bool = True) -> tuple[str, str]:
    """A plugin with a hook, but not the file-system one; ``static``: it says so (STATIC_HOOKS)."""
    module = f"hp_{name}_{next(_serial)}"
    (root / f"{module}.py").write_text("from codespace import hookimpl\n" + ("CODESPACE_STATIC_HOOKS = True\n" if static else "")
                                       + "\n@hookimpl\ndef codespace_doctor(workspace):\n    return []\n")
    return name, module


def test_suppliers_are_what_the_choice_can_depend_on(roots):
    """Left out: only a loaded, plainly read plugin with no file-system hook; the choice over
    what is left is the choice over all."""
    root, workspace = roots
    first, declines = _plugin(root, "first"), _plugin(root, "zdeclines", body="return None")
    other, unloaded = _no_filesystem(root, "other"), _no_filesystem(root, "unloaded")
    # Found by testing from outside: a hook may exist only when another module imports (or under
    # an environment variable), which no file of the plugin shows: only a module that declares its
    # hooks static is ever left out.
    undeclared = _no_filesystem(root, "undeclared", static=False)
    __import__(undeclared[1])
    assert filesystem_suppliers([undeclared])[0] == [undeclared]
    wrapped = _plugin(root, "wrapped", options="(tryfirst=True)")
    installed = [first, declines, other, wrapped, ("attr", f"{other[1]}:codespace_doctor"), unloaded,
                 ("missing", "hp_no_such_module")]
    for _, module in [first, declines, other, wrapped]:
        __import__(module)
    suppliers, files = filesystem_suppliers(installed)
    assert suppliers == [first, declines, wrapped, ("attr", f"{other[1]}:codespace_doctor"), unloaded,
                         ("missing", "hp_no_such_module")]
    assert files == [str(root), str(root / f"{other[1]}.py")]  # the directory too: a module added there
    assert unloaded[1] not in sys.modules  # judged only if loaded: nothing is imported to judge
    plain = [first, declines, other]
    assert _both(workspace, filesystem_suppliers(plain)[0]) == _both(workspace, plain)
    # A name given twice stays, both times: the plugin manager's road must see it.
    assert filesystem_suppliers([other, other])[0] == [other, other]


def test_kept_suppliers_hold_until_a_file_they_were_judged_by_changes(roots):
    root, workspace = roots
    first, other = _plugin(root, "first"), _no_filesystem(root, "other")
    for _, module in [first, other]:
        __import__(module)
    source = root / f"{other[1]}.py"
    assert suppliers_to_keep([first, other]) is None  # just written: too recent to tell a change from it
    for path in (source, root):
        os.utime(path, ns=(time.time_ns() - 60 * 10**9,) * 2)
    record = suppliers_to_keep([first, other])
    assert marshal.loads(marshal.dumps(record)) == record
    assert kept_suppliers(record, [first, other]) == [first]
    assert kept_suppliers(record, [other, first]) is None  # another list (order counts: it is the loading order)
    assert kept_suppliers(record, [first]) is None
    assert suppliers_to_keep([first]) is None  # nothing left out: nothing worth keeping
    for damaged in (None, (), ("x",), (record[0], record[1], ((str(source), "not a stamp"),))):
        assert kept_suppliers(damaged, [first, other]) is None
    (root / "hp_new_module.py").write_text("")  # a module added beside it: what its hooks could now import
    assert kept_suppliers(record, [first, other]) is None
    record = (record[0], record[1], tuple((p, installed.file_stamp(p)) for p, _ in record[2]))
    assert kept_suppliers(record, [first, other]) == [first]
    source.write_text(source.read_text() + "\n@hookimpl\ndef codespace_filesystem(workspace):\n    return None\n")
    assert kept_suppliers(record, [first, other]) is None
