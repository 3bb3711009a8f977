"""Workspace policy: the TOML model, path rules, command rules and command environments.

The rules need no pydantic; the model's names load on first use, so that a one-shot
helper reading only the rules and the plain defaults (``plain.py``) does without it.
"""

from typing import Any

from .commands import CommandRules, split_shell
from .env import build_env, refused_extra
from .paths import PathRule, PathRules, normalize, validate_agent_path

_FROM_MODEL = ("Access", "Limits", "Policy", "PolicyError", "load_policy")

__all__ = [
    "Access",
    "CommandRules",
    "Limits",
    "PathRule",
    "PathRules",
    "Policy",
    "PolicyError",
    "build_env",
    "load_policy",
    "normalize",
    "refused_extra",
    "split_shell",
    "validate_agent_path",
]


def __getattr__(name: str) -> Any:
    if name in _FROM_MODEL:
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module 'codespace.policy' has no attribute {name!r}")
