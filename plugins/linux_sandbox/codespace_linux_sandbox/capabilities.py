"""What this process's credentials allow, read from ``/proc/self/status`` (no import beyond builtins:
the per-command helper asks it too)."""

CAP_SETUID, CAP_SYS_ADMIN = 7, 21


def capable(bit: int) -> bool:
    """Capability ``bit`` in the effective set."""
    try:
        with open("/proc/self/status") as f:
            caps = next(line for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return bool(int(caps.split()[1], 16) >> bit & 1)


def has_cap_sys_admin() -> bool:
    """CAP_SYS_ADMIN: needed for ``unshare(CLONE_NEWPID)`` and for mounts."""
    return capable(CAP_SYS_ADMIN)
