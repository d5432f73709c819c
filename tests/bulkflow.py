"""A bulk TCP download across an emulated cell, for the tests that measure one (bandwidth
estimation, receive-window caps, Vegas)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

from clawbed.netns import socket_in_namespace


@contextlib.contextmanager
def bulk_download(server_ns: str, ue_ns: str, address: str, port: int) -> Iterator[socket.socket]:
    """A connection from namespace ``ue_ns`` to ``address:port`` in ``server_ns``: the server
    sends as fast as TCP lets it and the UE reads everything, until the block ends. Yields the
    server's socket (its TCP_INFO and congestion control are the flow's)."""
    listener = socket_in_namespace(server_ns)
    client = socket_in_namespace(ue_ns)
    stop = threading.Event()
    try:
        listener.bind((address, port))
        listener.listen(1)
        client.connect((address, port))
        conn, _ = listener.accept()

        def sink() -> None:
            while not stop.is_set():
                try:
                    if not client.recv(1 << 20):
                        return
                except OSError:
                    return

        def pump() -> None:
            data = b"\0" * (1 << 16)
            while not stop.is_set():
                try:
                    conn.send(data)
                except OSError:
                    return

        threads = [threading.Thread(target=sink, daemon=True), threading.Thread(target=pump, daemon=True)]
        for t in threads:
            t.start()
        try:
            yield conn
        finally:
            stop.set()
            for s in (conn, client):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            for t in threads:
                t.join(timeout=5)
            conn.close()
    finally:
        stop.set()
        client.close()
        listener.close()
