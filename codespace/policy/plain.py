"""The default policy as plain values, for a process that must start fast.

A workspace without a policy file gets the defaults of the models in ``model.py``,
and the server holds them as those models. A one-shot helper (the patch helper,
asking ``codespace.contract.gate``) reads a handful of them, and loading pydantic to
read them took more of its time than its work did: :class:`PlainDefaults` answers
those from the values below and anything else from the models, loaded on first use.
A test compares every value here with the model's default.
"""

from __future__ import annotations

from .defaults import DEFAULT_PROTECTED_ANCHORED, DEFAULT_PROTECTED_NAMES, MiB, all_protected, merged_paths

TYPE_CHECKING = False  # not typing's (nor functools'): the patch helper loads this module, and they cost it more
if TYPE_CHECKING:
    from typing import Any

    from .defaults import Access
    from .model import Policy


def _plain_values() -> dict[str, dict[str, Any]]:
    """What the helper reads, by section; new lists each time, as the models make them."""
    return {
        "filesystem": {
            "paths": {}, "protected": [*DEFAULT_PROTECTED_NAMES, *DEFAULT_PROTECTED_ANCHORED],
            "extra_protected": [], "symlinks": "within_root", "hardlinks": "allow", "home": "credentials",
            "home_readable": [],
        },
        "limits": {"max_argument_bytes": 4 * MiB, "max_file_bytes": 64 * MiB},
        "store": {"state_dir": None},
        "plugins": {"allow": None, "block": []},
        "runtime": {"worker": "off", "daemon_dir": None, "lane_spin_us": 2000},
    }


_VALIDATED: list[Policy] = []


def _validated() -> Policy:
    """The model's defaults, built once."""
    if not _VALIDATED:
        from .model import default_policy

        _VALIDATED.append(default_policy())
    return _VALIDATED[0]


class _ReadOnly:
    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"the policy is read-only ({name})")


class _Section(_ReadOnly):
    """One section's plain values; any other field comes from the model's defaults."""

    def __init__(self, name: str, values: dict[str, Any]) -> None:
        self.__dict__.update(values, _section=name)

    def __getattr__(self, name: str) -> Any:  # only names the plain values lack
        return getattr(getattr(_validated(), self.__dict__["_section"]), name)


class _FilesystemSection(_Section):
    def merged_paths(self) -> dict[str, Access]:
        return merged_paths(self)

    def all_protected(self) -> list[str]:
        return all_protected(self)


class PlainDefaults(_ReadOnly):
    """The default :class:`Policy` as a one-shot process reads it: the sections and fields
    above as plain values, every other one (and the model's methods) from ``Policy()``."""

    def __init__(self) -> None:
        for name, values in _plain_values().items():
            section = _FilesystemSection if name == "filesystem" else _Section
            self.__dict__[name] = section(name, values)

    def __getattr__(self, name: str) -> Any:  # only names the plain values lack
        return getattr(_validated(), name)
