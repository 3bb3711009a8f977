"""What a plugin reports to ``codespace doctor``."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Check:
    """One doctor line: what was checked, whether it is fine, and how to fix it."""

    name: str
    ok: bool
    detail: str
    hint: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)
