"""The sandbox's engines, and in which process each part of an engine's code runs.

Four processes take part in a sandboxed command:

- the **server** (:mod:`.backend`, :mod:`.launcher`, :mod:`.seccomp`, :mod:`.protocol`): picks
  the engine once, builds handshake v1 per command, starts or asks for a helper;
- the **warm helper** (:mod:`.zygote`): started once per server, forks per-command helpers;
- the **per-command helper** (:mod:`.helper`, then the engine's module): checks the
  handshake, builds the sandbox, supervises the command and outlives it;
- the **command's child**: the process that becomes the command, between fork and exec.

==============  ==============================  ===================================  ====================================
engine          server, once per server         per-command helper                   command's child, before exec
==============  ==============================  ===================================  ====================================
``bubblewrap``  ``engine_choice:probe_bwrap``   ``bwrap_engine:run_in_helper``       bwrap itself (namespaces,
                (user, pid, ipc and net         (mount plan, placeholders, proxy     mounts, ``--cap-drop``,
                namespaces; can it mount        route, bwrap as PID 1 of the         ``--seccomp``); network off:
                ``/proc``)                      helper's namespace, signals)         the broker's filter, inherited
                                                                                     (``broker_filter:install_before_spawn``)
``landlock``    ``engine_choice:landlock_abi``  ``landlock_engine:run_in_helper``    ``landlock_child:confine_and_exec``
                (the kernel's Landlock ABI)     (ruleset, private TMPDIR, fork,      (capabilities, no_new_privs,
                                                subreaper, signals)                  Landlock, seccomp, exec)
==============  ==============================  ===================================  ====================================

Per command the server also shapes the handshake by engine (:meth:`.backend.LinuxSandbox.handshake`):
with Landlock there is no network namespace, so network 'proxy' becomes TCP to the proxy's
host port only (seccomp ``proxy_tcp``); with bubblewrap the proxy listens inside the
sandbox's own namespace. The helper imports only the module of the engine it runs.
"""


class Engine:
    """One row of the table: ``module:function`` names of this package, by process."""

    __slots__ = ("child", "helper", "name", "server")

    def __init__(self, name: str, *, server: str, helper: str, child: str) -> None:
        self.name = name
        self.server = server
        self.helper = helper
        self.child = child

    def run_in_helper(self, hs: dict, seccomp_fd: int | None, *, hardened: bool, userns_fd: int | None) -> int:
        """The per-command helper's part: run the command of the checked handshake ``hs``."""
        module, _, function = self.helper.partition(":")
        entry = getattr(__import__(f"{__package__}.{module}", fromlist=[function]), function)
        return entry(hs, seccomp_fd, hardened=hardened, userns_fd=userns_fd)


ENGINES = {
    "bubblewrap": Engine(
        "bubblewrap", server="engine_choice:probe_bwrap", helper="bwrap_engine:run_in_helper", child="broker_filter:install_before_spawn"),
    "landlock": Engine(
        "landlock", server="engine_choice:landlock_abi", helper="landlock_engine:run_in_helper",
        child="landlock_child:confine_and_exec"),
}
