"""Opening sockets and files inside a network namespace, without moving this process.

Split from :mod:`clawbed.netns` so that short-lived processes which only need a socket in a
namespace (the CLAW server agent, started once per load) do not pay for importing pyroute2,
which ``clawbed.netns`` imports with itself (~60 ms of a process's start).
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

from clawbed.errors import ResourceError

_T = TypeVar("_T")
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def in_netns(ns_name: str, what: str, fn: Callable[[], _T]) -> _T:
    """``fn()`` run in a short-lived thread inside namespace ``ns_name``; its result.

    What such a thread opens belongs to that namespace (sockets, netlink sockets,
    ``/proc/sys/net`` files) and stays there; this process does not move (``setns`` is per
    thread; Python 3.11 has no ``os.setns``). An ``OSError`` (or :class:`ResourceError`) ``fn``
    raises comes back as a :class:`ResourceError` naming the namespace and ``what``.
    """
    result: dict[str, object] = {}

    def run() -> None:
        try:
            with open(f"/var/run/netns/{ns_name}") as f:
                if _libc.setns(f.fileno(), _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err))
            result["value"] = fn()
        except (OSError, ResourceError) as e:
            result["error"] = e

    t = threading.Thread(target=run, name=f"setns-{ns_name}")
    t.start()
    t.join()
    if "error" in result:
        e = result["error"]
        detail = (getattr(e, "strerror", None) or str(e)) if isinstance(e, OSError) else str(e)
        raise ResourceError(f"in namespace {ns_name}: {what}: {detail}") from e  # type: ignore[misc]
    return result["value"]  # type: ignore[return-value]


def socket_in_namespace(ns_name: str, family: int = socket.AF_INET,
                        kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A socket created inside namespace ``ns_name`` (it stays there; this process does not
    move): :func:`in_netns`."""
    return in_netns(ns_name, "creating a socket", lambda: socket.socket(family, kind))
