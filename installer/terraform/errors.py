"""Errors of the provisioning step; both are user-facing InstallerErrors (one red line)."""

from installer.base.errors import InstallerError


class TerraformError(InstallerError):
    """Terraform failed, or its outputs do not follow the host contract."""


class CredentialsError(InstallerError):
    """No cloud credentials in the environment or the provider's files (before any API call)."""
