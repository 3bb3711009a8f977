"""The engine table (codespace_linux_sandbox.engines): every name in it is real code."""

from __future__ import annotations

import importlib
import typing
from pathlib import Path

import codespace_linux_sandbox
import pytest
from codespace_linux_sandbox.engines import ENGINES
from codespace_linux_sandbox.protocol import Engine


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_part_of_an_engine_names_real_code(name):
    engine = ENGINES[name]
    assert engine.name == name
    for reference in (engine.server, engine.helper, engine.child):
        module, _, function = reference.partition(":")
        if function:
            assert callable(getattr(importlib.import_module(f"codespace_linux_sandbox.{module}"), function)), reference
        else:  # a script run by path (inside the sandbox)
            assert (Path(codespace_linux_sandbox.__file__).parent / f"{module}.py").is_file(), reference


def test_the_handshake_names_the_engines_of_the_table():
    assert set(typing.get_args(Engine)) == set(ENGINES)
