"""One exception tree for every mistake a user can make or a host can report.

The CLI turns any InstallerError into one red line and exit code 1; anything else is a bug and
keeps its traceback.
"""


class InstallerError(Exception):
    """Base of every error the CLI reports as a one-line message (plus optional detail lines)."""

    def __init__(self, message: str, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.details = details or []


class InventoryError(InstallerError):
    """The inventory file is malformed or inconsistent; details hold one line per problem."""


class LabError(InstallerError):
    """The local lab (systemd-nspawn hosts) could not be created, inspected or removed."""


class BundleError(InstallerError):
    """The offline bundle could not be built, or a bundle failed verification."""


class PreflightError(InstallerError):
    """One or more hosts are not fit for an install; nothing was changed on any host."""


class AnsibleError(InstallerError):
    """The configuration run failed on one or more hosts."""


class CommandError(InstallerError):
    """An external command we depend on (debootstrap, ip, pip, ...) failed."""
