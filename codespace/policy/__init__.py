"""Workspace policy: the TOML model, path rules, command rules and command environments.

The rules need no pydantic; every name loads on first use from the module that holds it,
so that a one-shot helper reading only the path rules and the plain defaults
(``plain.py``) does without pydantic, and without the command rules' parsers.
"""

# name -> the module of this package that defines it
_EXPORTS = {
    "Access": "model", "Limits": "model", "Policy": "model", "PolicyError": "model", "load_policy": "model",
    "CommandRules": "commands", "split_shell": "commands",
    "build_env": "env", "refused_extra": "env",
    "PathRule": "paths", "PathRules": "paths", "normalize": "paths", "validate_agent_path": "paths",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'codespace.policy' has no attribute {name!r}")
    value = getattr(__import__(f"{__name__}.{where}", fromlist=[name]), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return __all__
