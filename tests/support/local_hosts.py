"""Stand-ins for a host's ssh argv: the remote command runs here with `bash -c` (the same
mktemp/cat/python3 command line the real one runs over ssh), or ssh fails, or nothing answers."""

from installer.hosts.ssh import Target


class HereHost(Target):
    def ssh_argv(self, command: str | None = None) -> list[str]:
        assert command is not None
        return ["bash", "-c", command]


class DownHost(Target):
    def ssh_argv(self, command: str | None = None) -> list[str]:
        return ["sh", "-c", f"echo 'ssh: connect to host {self.address} port 22: No route to host' >&2; exit 255"]


class SilentHost(Target):
    def ssh_argv(self, command: str | None = None) -> list[str]:
        return ["sleep", "30"]
