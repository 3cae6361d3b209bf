"""What keeps `llmrl up` from leaving processes behind or colliding with them.

- `die_with_parent` runs in each child between fork and exec: on Linux it asks the kernel
  (prctl PR_SET_PDEATHSIG) to send the child SIGTERM when the launcher dies, even by SIGKILL,
  so no service lives on holding its ports. Elsewhere it does nothing (Ctrl-C/SIGTERM still
  stop every child in order).
- `port_listened` tells whether a TCP port is taken, and `port_holder` names the process
  listening on it (Linux /proc; None when it cannot tell, e.g. another user's process), for
  the refusal when a port is taken.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h
_LISTEN = "0A"  # TCP state in /proc/net/tcp


def die_with_parent(parent_pid: int) -> None:
    """Between fork and exec: SIGTERM this process when `parent_pid` (the launcher) dies."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # the launcher died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def port_listened(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a process listens on host:port. SO_REUSEADDR, as servers bind: connections in
    TIME_WAIT left by a service just stopped do not count as taken."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def port_holder(port: int) -> str | None:
    """'pid N (command line)' of the process listening on `port`, or None if unknown."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:  # gone, or not ours to read
            continue
        if _links(fds) & inodes:
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                command = "?"
            return f"pid {proc.name} ({command[:120]})"
    return None


def _links(fds: list[Path]) -> set[str]:
    links = set()
    for fd in fds:
        try:
            links.add(os.readlink(fd))
        except OSError:  # closed since it was listed
            continue
    return links
