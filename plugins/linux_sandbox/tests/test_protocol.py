"""Handshake v1: the pydantic models, the helper's hand-written reader, and refusals."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from codespace_linux_sandbox import handshake
from codespace_linux_sandbox.backend import helper_argv
from codespace_linux_sandbox.helper import SETUP_FAILED_EXIT_CODE
from codespace_linux_sandbox.launcher import helper_environment
from codespace_linux_sandbox.protocol import (
    PROTOCOL_VERSION,
    Command,
    Handshake,
    Options,
    Policy,
    RunAs,
)
from pydantic import ValidationError


def _valid() -> Handshake:
    return Handshake(
        engine="bubblewrap",
        command=Command(argv=["/bin/true"], cwd="/", env={"PATH": "/usr/bin:/bin"}),
        policy=Policy(readable=["/"], writable=[], deny_read=[], protected=[], network="off"),
        options=Options(seccomp="none", bwrap="/usr/bin/bwrap", run_dir="/nonexistent",
                        run_as=RunAs(uid=65534, gid=65534, idmap=True) if os.geteuid() == 0 else None),
    )


def run_helper(payload: bytes | None, extra_env: dict[str, str] | None = None) -> tuple[int, str]:
    env = {**helper_environment(), **(extra_env or {})}
    fds = []
    if payload is not None:
        r, w = os.pipe()
        os.write(w, payload)
        os.close(w)
        env["CODESPACE_FD_HANDSHAKE"] = str(r)
        fds.append(r)
    run = subprocess.run(helper_argv(), env=env, pass_fds=fds, capture_output=True, timeout=30, check=False)
    for fd in fds:
        os.close(fd)
    return run.returncode, run.stderr.decode()


def _with(**changes: object) -> bytes:
    data = json.loads(_valid().encode())
    for dotted, value in changes.items():
        section, _, field = dotted.partition("__")
        if field:
            if value is None:
                del data[section][field]
            else:
                data[section][field] = value
        elif value is None:
            del data[section]
        else:
            data[section] = value
    return json.dumps(data).encode()


def test_the_helper_reads_what_the_model_writes():
    decoded = handshake.decode(_valid().encode())
    assert decoded == json.loads(_valid().model_dump_json())
    assert PROTOCOL_VERSION == handshake.VERSION == 1


def test_helper_schema_matches_the_pydantic_model():
    """handshake.SCHEMA is written by hand; it must name exactly the model's fields and
    agree on which are required."""
    schema = Handshake.model_json_schema()
    defs = schema["$defs"]
    fields = {}
    for section in ("command", "policy", "options"):
        ref = schema["properties"][section]["$ref"].rsplit("/", 1)[1]
        required = set(defs[ref].get("required", []))
        for name in defs[ref]["properties"]:
            fields[f"{section}.{name}"] = name in required
    fields["engine"] = True
    assert {name: spec[1] for name, spec in handshake.SCHEMA.items()} == fields


def test_version_mismatch_names_both_versions():
    code, err = run_helper(_with(version=2))
    assert code == SETUP_FAILED_EXIT_CODE
    assert "version 2" in err and "version 1" in err and err.startswith("codespace-linux-sandbox:")


def test_the_model_refuses_another_version():
    with pytest.raises(ValidationError):
        Handshake.model_validate_json(_with(version=2))


@pytest.mark.parametrize("field", ["command__argv", "policy__writable", "options__run_dir", "engine", "policy"])
def test_missing_field_is_named(field):
    code, err = run_helper(_with(**{field: None}))
    name = field.replace("__", ".")
    assert code == SETUP_FAILED_EXIT_CODE
    assert f"'{name}'" in err and "missing" in err


@pytest.mark.parametrize(("field", "value", "words"), [
    ("command__argv", "ls", "must be a list of strings"),
    ("command__argv", [], "is empty"),
    ("policy__network", "sideways", "expected one of off, proxy, on"),
    ("engine", "chroot", "expected one of bubblewrap, landlock"),
    ("command__env", {"A": 1}, "must be an object of strings"),
    ("options__seccomp", "proxy", "expected one of restricted, proxy_routed, proxy_tcp"),
    ("options__max_processes", "many", "must be an integer"),
    ("options__max_processes", -5, "must be a positive count of processes, not -5"),
])
def test_malformed_field_is_named(field, value, words):
    code, err = run_helper(_with(**{field: value}))
    assert code == SETUP_FAILED_EXIT_CODE
    assert f"'{field.replace('__', '.')}'" in err and words in err


@pytest.mark.parametrize(("route", "words"), [
    ({"socket": "relative.sock", "port": 3128}, "'policy.proxy.socket' must be an absolute path"),
    ({"socket": "/run/route.sock", "port": 0}, "'policy.proxy.port' must be a port number"),
    ({"port": 3128}, "'policy.proxy.socket' must be an absolute path"),
])
def test_malformed_proxy_route_is_named(route, words):
    code, err = run_helper(_with(policy__proxy=route))
    assert code == SETUP_FAILED_EXIT_CODE and words in err


@pytest.mark.parametrize(("payload", "words"), [
    (b"{not json", "not valid JSON"),
    (b'{"version": 1} trailing', "Extra data"),
    (b"[1, 2]", "must be a JSON object"),
    (b"\xff\xfe", "not UTF-8"),
    (b'{"engine": "bubblewrap"}', "'version' is missing"),
])
def test_malformed_handshake_is_refused(payload, words):
    code, err = run_helper(payload)
    assert code == SETUP_FAILED_EXIT_CODE and words in err


def test_no_handshake_descriptor():
    code, err = run_helper(None)
    assert code == 2 and "CODESPACE_FD_HANDSHAKE" in err and "version 1" in err


def test_a_required_filter_must_arrive():
    data = json.loads(_valid().encode())
    data["options"]["seccomp"] = "restricted"
    code, err = run_helper(json.dumps(data).encode())
    assert code == SETUP_FAILED_EXIT_CODE and "refusing to run unfiltered" in err


def test_helper_runs_without_pydantic_or_the_core():
    """The helper (per command, or the warm one) must not import pydantic, json or the core (start-up cost)."""
    probe = ("import sys; sys.path.insert(0, %r); import codespace_linux_sandbox.helper, "
             "codespace_linux_sandbox.bwrap_argv, codespace_linux_sandbox.supervise, "
             "codespace_linux_sandbox.placeholders, codespace_linux_sandbox.proxy_route, "
             "codespace_linux_sandbox.zygote, codespace_linux_sandbox.entry, codespace_linux_sandbox.bwrap_engine; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('pydantic', 'json', 're', 'codespace', 'typing', 'ctypes', 'os')))")
    root = os.path.dirname(os.path.dirname(handshake.__file__))
    run = subprocess.run([helper_argv()[0], "-I", "-S", "-c", probe % root], capture_output=True, text=True, timeout=30, check=False)
    assert run.stdout.strip() == "[]", run.stdout + run.stderr
