"""Waking idle workers on this machine at once on SQLite: Unix datagram sockets in a directory
beside the database file; polling remains the fallback.

Each worker binds `<database file>.wake/<worker id>.sock` (the directory is 0700: only the
user who owns it can send); a commit that queues work sends one byte to every socket there.
Nothing here blocks the sender or raises to it: a socket nobody listens on any more (its worker
was killed) is removed, a full one is already awake, and anything else leaves that worker to its
poll. Without AF_UNIX (Windows) there are no sockets and every worker polls.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from pathlib import Path

from sqlalchemy.engine import URL

log = logging.getLogger("webapp.worker")

DIRECTORY_SUFFIX = ".wake"
WAKE_BYTE = b"!"


def wake_directory(url: URL) -> Path | None:
    """`<database file>.wake` for a SQLite database file; None for an in-memory one or another
    database (which has its own way, or none)."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:"):  # a URI filename: left to polling
        return None
    return Path(os.path.abspath(database + DIRECTORY_SUFFIX))


def wake_workers(directory: Path) -> int:
    """Sends one byte to every worker socket in `directory`; returns how many took it."""
    family = getattr(socket, "AF_UNIX", None)
    if family is None:
        return 0
    try:
        paths = sorted(directory.glob("*.sock"))
    except OSError:  # no directory (no worker ever bound here) or not ours
        return 0
    woken = 0
    with socket.socket(family, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for path in paths:
            try:
                sender.sendto(WAKE_BYTE, str(path))
                woken += 1
            except ConnectionRefusedError:  # the worker died without removing its socket
                with contextlib.suppress(OSError):
                    path.unlink()
            except OSError:  # a full buffer is already a wake-up; the rest poll
                pass
    return woken


class WakeSocket:
    """A worker's end: `wait()` returns True for each wake-up, False once closed."""

    def __init__(self, path: Path, receiver: socket.socket) -> None:
        self.path = path
        self.receiver = receiver

    @classmethod
    def bind(cls, directory: Path, name: str) -> WakeSocket | None:
        """Binds `directory/<name>.sock`, or returns None (the worker then polls): no AF_UNIX,
        a directory that cannot be made private, or a path too long for a socket."""
        family = getattr(socket, "AF_UNIX", None)
        if family is None:
            return None
        path = directory / f"{name}.sock"
        receiver = socket.socket(family, socket.SOCK_DGRAM)
        try:
            directory.mkdir(mode=0o700, exist_ok=True)
            directory.chmod(0o700)  # made by an older umask, or by hand
            # A leftover of the same name is a dead worker's: ids are never reused while the
            # database lives (a new database restarts them).
            path.unlink(missing_ok=True)
            receiver.bind(str(path))
        except OSError as error:
            receiver.close()
            log.warning(
                "local_wakeup_unavailable",
                extra={
                    "action": "local_wakeup_unavailable",
                    "path": str(path),
                    "error": str(error),
                },
            )
            return None
        return cls(path, receiver)

    def wait(self) -> bool:
        """Blocks until a wake-up arrives (True) or the socket is closed (False)."""
        try:
            return bool(self.receiver.recv(64))
        except OSError:
            return False

    def close(self) -> None:
        """Removes the socket file, then ends a `wait()` in progress."""
        self.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.receiver.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv with b""
        self.receiver.close()
