"""The environment a command starts with, built from the policy's env rules.

Order follows upstream's shell environment policy: inherit, drop the default
secret-looking names, drop ``exclude``, apply ``set``, keep only ``include_only``.
Per-call variables from the agent are applied last but can never re-add a name the
policy excluded.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import EnvPolicy

CORE_VARIABLES = ("PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "USER")
DEFAULT_EXCLUDES = ("*KEY*", "*SECRET*", "*TOKEN*")


def _matches(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in patterns)


def excluded_names(policy: EnvPolicy) -> tuple[str, ...]:
    return (*(() if policy.ignore_default_excludes else DEFAULT_EXCLUDES), *policy.exclude)


def build_env(policy: EnvPolicy, server_env: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    if policy.inherit == "all":
        env = dict(server_env)
    elif policy.inherit == "core":
        env = {k: server_env[k] for k in CORE_VARIABLES if k in server_env}
    else:
        env = {}
    excludes = excluded_names(policy)
    env = {k: v for k, v in env.items() if not _matches(k, excludes)}
    env.update(policy.set)
    if policy.include_only:
        env = {k: v for k, v in env.items() if _matches(k, policy.include_only)}
    for key, value in (extra or {}).items():
        if _matches(key, excludes) and key not in policy.set:
            continue
        env[key] = value
    return env


def refused_extra(policy: EnvPolicy, extra: Mapping[str, str]) -> list[str]:
    """Names the agent asked to set that the policy drops (reported, not silently lost)."""
    excludes = excluded_names(policy)
    return sorted(k for k in extra if _matches(k, excludes) and k not in policy.set)
