"""SSH key pairs and known_hosts lines made on the control machine.

The lab's root login key and the host key a cloud deployment pins (terraform/provision.py) are
both ed25519 pairs made by ssh-keygen, and both end up as known_hosts lines that SSH checks
strictly.
"""

import os
from pathlib import Path

from installer.base.procs import run

KEY_NAME = "id_ed25519"


def ensure_key_pair(ssh_dir: Path, comment: str) -> Path:
    """The private key in ssh_dir, generated on first use; its public key sits next to it (.pub)."""
    key = ssh_dir / KEY_NAME
    if key.exists() and key.with_suffix(".pub").exists():
        return key
    ssh_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    key.unlink(missing_ok=True)
    key.with_suffix(".pub").unlink(missing_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)])
    os.chmod(key, 0o600)
    return key


def known_hosts_lines(host_keys: dict[str, list[str]]) -> list[str]:
    """known_hosts lines for {address: [public key lines]}, comments dropped."""
    lines = []
    for address, keys in host_keys.items():
        for key in keys:
            key_type, blob = key.split()[:2]
            lines.append(f"{address} {key_type} {blob}")
    return lines


def write_known_hosts(path: Path, host_keys: dict[str, list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in known_hosts_lines(host_keys)))
