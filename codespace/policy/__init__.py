"""Workspace policy: the TOML model, path rules, command rules and command environments."""

from .commands import CommandRules, split_shell
from .env import build_env, refused_extra
from .model import Access, Limits, Policy, PolicyError, load_policy
from .paths import PathRule, PathRules, normalize, validate_agent_path

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
