"""systemd socket activation: the listening socket belongs to systemd, not to the process.

With `private-llm-gateway.socket`, systemd binds the public port and hands the socket over as
fd 3 (LISTEN_FDS/LISTEN_PID, sd_listen_fds(3)). A restart then never refuses a connection:
while the old process finishes its streams and the new one starts, the kernel keeps queueing
new connections on the socket systemd still holds, and the new process accepts them. That is
what lets `installer upgrade` replace a gateway under load without a failed request.
"""

import os
import socket

SD_LISTEN_FDS_START = 3


def inherited_socket(environ: dict[str, str] | None = None) -> socket.socket | None:
    """The socket systemd passed to this process, or None when started without activation."""
    env = os.environ if environ is None else environ
    if env.get("LISTEN_PID") != str(os.getpid()) or int(env.get("LISTEN_FDS", "0") or 0) < 1:
        return None
    # Not inherited by anything this process starts.
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        env.pop(name, None)
    os.set_inheritable(SD_LISTEN_FDS_START, False)
    # fileno= without family/type: Python reads them from the descriptor (TCP, v4 or v6).
    return socket.socket(fileno=SD_LISTEN_FDS_START)
