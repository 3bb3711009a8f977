"""The kept tool listing is keyed by the policy's ``[plugins]`` table as well as by its
bytes (codespace.transports.listing): that is sound only while the listing depends on
the policy through which plugins load and nothing else. Every other section is set
to a value other than its default here, and the listing must not move."""

from __future__ import annotations

import pytest

from codespace.testing import build_app
from codespace.transports.listing import build_result

VERSION = "2025-11-25"

OTHER_SECTIONS = [
    '[filesystem]\nsymlinks = "never"\nhardlinks = "refuse"\nextra_protected = ["secrets"]\nhome = "hidden"\n',
    '[commands]\ndefault = "deny"\nopaque_shell = "deny"\n[[commands.rules]]\nprogram = "git"\ndecision = "allow"\n',
    '[env]\ninherit = "none"\nset = { LANG = "C.UTF-8" }\n',
    '[network]\naccess = "allowlist"\nallowed_domains = ["example.org"]\n',
    '[sandbox]\nmode = "off"\n',
    '[limits]\nmax_read_bytes = 4096\nmax_file_bytes = 1048576\nexec_timeout_ms = 5000\nmax_sessions = 3\n'
    'walk_max_entries = 100\noutput_cap_bytes = 2048\nmax_argument_bytes = 4096\n',
    '[store]\nmax_records = 50\nmax_age_days = 2.5\n',
    '[runtime]\nworker = "child"\n',
]


def _listing(tmp_path, name: str, policy: str | None) -> bytes:
    app = build_app(tmp_path / f"ws-{name}", state_dir=tmp_path / f"state-{name}", policy=policy)
    return build_result(app.registry, VERSION)


def test_no_section_but_plugins_moves_the_listing(tmp_path, example_plugins):
    (tmp_path / "ws-default").mkdir()
    default = _listing(tmp_path, "default", None)
    for n, section in enumerate(OTHER_SECTIONS):
        (tmp_path / f"ws-{n}").mkdir()
        assert _listing(tmp_path, str(n), section) == default, f"the listing depends on:\n{section}"
    (tmp_path / "ws-all").mkdir()
    assert _listing(tmp_path, "all", "\n".join(OTHER_SECTIONS)) == default


@pytest.mark.parametrize("plugins", ['allow = ["fs"]', 'block = ["example"]'])
def test_the_plugins_table_does(tmp_path, example_plugins, plugins):
    (tmp_path / "ws-default").mkdir()
    (tmp_path / "ws-plugins").mkdir()
    default = _listing(tmp_path, "default", None)
    assert b'"name":"tally"' in default  # the example plugin's tool
    assert b'"name":"tally"' not in _listing(tmp_path, "plugins", f"[plugins]\n{plugins}\n")


def test_a_listing_built_from_code_changed_since_the_start_is_not_kept(tmp_path, monkeypatch):
    """Found by testing from outside: a server that had loaded a module before it was edited (or
    upgraded) kept its listing stamped with the edited file's time, so every later start served
    the old listing (a new result field missing from the output schema). A module changed
    since this process started is not stamped: the listing is not kept."""
    import importlib
    import os
    import sys
    import time

    from codespace.transports import listing
    from codespace.transports.listing import ListingCache

    # As if this process started now: the suite's earlier tests loaded modules they had just written.
    monkeypatch.setattr(listing, "_LOADED_BY_NS", time.time_ns())
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    module = tmp_path / "lib" / "edited_after_loading.py"
    module.parent.mkdir()
    module.write_text("VALUE = 1\n")
    earlier = time.time() - 3600  # before this process started
    os.utime(module, (earlier, earlier))
    monkeypatch.syspath_prepend(str(module.parent))
    importlib.import_module("edited_after_loading")
    result = b'{"tools":[{"name":"t"}]}'
    try:
        kept = ListingCache(str(tmp_path), None)
        kept.save(result)
        assert kept.load() is not None  # loaded before any change: kept
        module.write_text("VALUE = 2\n")
        later = time.time() + 1
        os.utime(module, (later, later))
        changed = ListingCache(str(tmp_path / "other"), "/nonexistent/policy.toml")
        for path in (changed.path, changed.by_plugins):
            if path is not None and path.exists():
                path.unlink()
        changed.save(result)
        assert not changed.path.exists()
    finally:
        sys.modules.pop("edited_after_loading", None)
