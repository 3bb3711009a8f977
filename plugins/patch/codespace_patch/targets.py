"""The paths a parsed patch touches: what the core judges before anything is applied
(the gateway through :meth:`PatchBackend.plan`, the helper through the core's gate)."""

from __future__ import annotations

from codespace.contract.gate import Target, normalize

from .parser import AddFile, DeleteFile, Patch


def targets_of(patch: Patch, cwd: str) -> list[Target]:
    """Each section's path, and a move's destination, absolute and normalised against ``cwd``."""
    targets: list[Target] = []
    for section in patch.sections:
        path = normalize(section.path, cwd)
        if isinstance(section, AddFile):
            targets.append(Target(path, "add"))
        elif isinstance(section, DeleteFile):
            targets.append(Target(path, "delete"))
        elif section.move_to is None:
            targets.append(Target(path, "update"))
        else:
            targets.append(Target(path, "move", "move_source"))
            targets.append(Target(normalize(section.move_to, cwd), "move", "move_destination"))
    return targets
