"""``codespace.contract.installed`` reads the installed plugins as importlib.metadata does.

Compared with ``importlib.metadata.entry_points`` on this environment's path and on
constructed directories: duplicates under one normalised name on one directory and on
two, egg-info directories and files, comments and blank lines, sections before and
after, and the cases it must hand back to importlib.metadata (None)."""

from __future__ import annotations

import importlib.metadata as metadata
import marshal
import sys
import zipfile
from pathlib import Path

import pytest

from codespace.contract.installed import GROUP, entry_points


def _importlib(path: list[str], group: str = GROUP) -> list[tuple[str, str]]:
    found = metadata.entry_points(group=group) if path is sys.path else _on(path, group)
    return [(ep.name, ep.value) for ep in found]


def _on(path: list[str], group: str) -> list:
    distributions = metadata.distributions(path=path)
    seen: set[str] = set()
    out = []
    for dist in distributions:  # entry_points() dedupes by normalised name, first found wins
        key = dist._normalized_name  # noqa: SLF001 - the key importlib.metadata itself uses
        if key in seen:
            continue
        seen.add(key)
        out.extend(ep for ep in dist.entry_points if ep.group == group)
    return out


def _dist(root: Path, dirname: str, entry_points_txt: str | None, *, version: str = "1.0") -> Path:
    directory = root / dirname
    directory.mkdir(parents=True)
    name = dirname.partition("-")[0]
    (directory / ("METADATA" if dirname.endswith(".dist-info") else "PKG-INFO")).write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points_txt is not None:
        (directory / "entry_points.txt").write_text(entry_points_txt)
    return directory


def test_this_environment() -> None:
    assert entry_points() == _importlib(sys.path)
    assert entry_points("console_scripts") == _importlib(sys.path, "console_scripts")


def test_constructed_directories(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _dist(a, "Plug_One-1.0.dist-info", "[codespace.plugins]\none = plug_one.plugin\n")
    _dist(a, "plug.one-2.0.dist-info", "[codespace.plugins]\nshadowed = nowhere\n")  # same name, same directory
    _dist(a, "legacy-0.1.egg-info", "# a comment\n\n[console_scripts]\nx = y:z\n[codespace.plugins]\n  legacy =  legacy.hooks:plugin  \n")
    (a / "lonely.egg-info").write_text("Metadata-Version: 2.1\nName: lonely\n")  # egg-info as a file: no entry points
    _dist(a, "noeps-1.0.dist-info", None)
    _dist(a, "before-1.0.dist-info", "orphan = before.any\n[codespace.plugins]\nbefore = before.plugin\n")
    _dist(b, "plug_one-3.0.dist-info", "[codespace.plugins]\nagain = from_b\n")  # shadowed by a's
    _dist(b, "two-1.0.dist-info", "[codespace.plugins]\ntwo = two.plugin\ntwo = two.again\n")
    path = [str(a), str(tmp_path / "missing"), str(b)]
    ours = entry_points(path=path)
    assert ours == _importlib(path)
    assert {name for name, _ in ours} == {"one", "legacy", "before", "two"}
    assert entry_points("console_scripts", path=path) == _importlib(path, "console_scripts")


@pytest.mark.parametrize("case", ["zip", "egg", "no equals sign", "upper-case suffix"])
def test_hands_back_what_it_does_not_read(tmp_path: Path, case: str) -> None:
    root = tmp_path / "site"
    root.mkdir()
    path = [str(root)]
    if case == "zip":
        with zipfile.ZipFile(tmp_path / "dists.zip", "w") as z:
            z.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
            z.writestr("zipped-1.0.dist-info/entry_points.txt", "[codespace.plugins]\nz = zipped\n")
        path.append(str(tmp_path / "dists.zip"))
    elif case == "egg":
        (tmp_path / "thing-1.0.egg" / "EGG-INFO").mkdir(parents=True)
        path.append(str(tmp_path / "thing-1.0.egg"))
    elif case == "no equals sign":
        _dist(root, "broken-1.0.dist-info", "[codespace.plugins]\njust a name\n")
    else:
        _dist(root, "Shout-1.0.DIST-INFO", "[codespace.plugins]\nshout = shout\n")
    assert entry_points(path=path) is None


def test_discovered_entry_points_give_what_importlib_metadatas_do(example_plugins):
    from codespace.contract.installed import discovered

    ours = discovered()
    theirs = list(metadata.entry_points(group=GROUP))
    assert ours is not None and [(e.name, e.value) for e in ours] == [(e.name, e.value) for e in theirs]
    for mine, reference in zip(ours, theirs):
        assert (mine.dist.name, mine.dist.version) == (reference.dist.name, reference.dist.version)
        assert mine.dist.metadata.get_all("Project-URL") == reference.dist.metadata.get_all("Project-URL")
    example = next(e for e in ours if e.name == "example")
    assert example.load() is next(e for e in theirs if e.name == "example").load()


def _age(*roots: Path, seconds: int = 60) -> None:
    """Date every file and directory below ``roots`` (and the roots) ``seconds`` back."""
    import os
    import time

    then = time.time() - seconds
    for root in roots:
        for path in [root, *root.rglob("*")]:
            os.utime(path, (then, then))


def test_a_kept_answer_holds_until_what_it_was_read_from_changes(tmp_path: Path, monkeypatch) -> None:
    from codespace.contract.installed import kept_answer, scan_to_keep

    site = tmp_path / "site"
    _dist(site, "one-1.0.dist-info", "[codespace.plugins]\none = one.plugin\n")
    _dist(site, "quiet-1.0.dist-info", None)
    monkeypatch.setattr(sys, "path", [str(site), str(tmp_path / "missing")])
    fresh, record = scan_to_keep()
    assert fresh == [("one", "one.plugin")] and record is None  # just written: too recent to keep
    _age(site)
    answer, record = scan_to_keep()
    assert answer == fresh == entry_points() and record is not None
    assert kept_answer(marshal.loads(marshal.dumps(record))) == answer  # what the code cache writes and reads

    def changed(change) -> list | None:  # noqa: ANN001
        change()
        return kept_answer(record)

    entry = site / "one-1.0.dist-info" / "entry_points.txt"
    assert changed(lambda: entry.write_text("[codespace.plugins]\none = one.other\n")) is None  # edited in place
    _age(site)
    answer, record = scan_to_keep()
    assert answer == [("one", "one.other")] and kept_answer(record) == answer
    assert changed(lambda: _dist(site, "two-1.0.dist-info", "[codespace.plugins]\ntwo = two\n")) is None  # installed
    _age(site)
    answer, record = scan_to_keep()
    assert changed(lambda: (site / "quiet-1.0.dist-info" / "entry_points.txt").write_text("")) is None  # added
    _age(site)
    answer, record = scan_to_keep()
    assert changed(lambda: (tmp_path / "missing").mkdir()) is None  # a directory on the path appeared
    _age(site, tmp_path / "missing")
    answer, record = scan_to_keep()
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])
    assert kept_answer(record) is None  # another path


@pytest.mark.parametrize("record", [None, 3, (), ("a", "b"), ([("x", 1)], (), ()), ([], "path", ()), b"junk"])
def test_anything_but_a_kept_record_is_no_answer(record: object) -> None:
    from codespace.contract.installed import kept_answer

    assert kept_answer(record) is None
