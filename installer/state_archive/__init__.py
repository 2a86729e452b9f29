"""`installer state export|import`: the control machine's state for a deployment, moved to
another machine as one encrypted archive (age format, passphrase or recipient key).

contents.py says what of the state folder moves and what is left out; crypto.py encrypts and
decrypts; archive.py writes and reads the tar inside, refusing members that could escape the
target; restore.py puts it in place whole or not at all.
"""

from installer.base.errors import InstallerError


class StateArchiveError(InstallerError):
    """A state archive could not be written, opened or restored; nothing was changed."""
