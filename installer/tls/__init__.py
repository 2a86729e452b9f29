"""TLS for a deployment: its CA, host certificates, renewal, and checks of certificates users bring."""

from installer.tls.store import TLSError, days_to_expiry, host_files, prepare, report

__all__ = ["TLSError", "days_to_expiry", "host_files", "prepare", "report"]
