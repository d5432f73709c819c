"""Run a function inside a network namespace without a process: in a short-lived thread
that entered it (``setns`` is per thread; Python 3.11 has no ``os.setns``).

What such a thread opens belongs to that namespace: ``/proc/sys/net`` files (sysctls),
netlink sockets (libbpf's tc attachment, :func:`clawbed.claw.server.libbpf.tc_attach`),
sockets for ``ioctl``. A load's set-up used to start an ``ip netns exec`` or ``tc -n``
process for each of these (about 15 per CLAW set-up and teardown).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from clawbed.netns import ResourceError

_T = TypeVar("_T")
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def in_netns(ns_name: str, what: str, fn: Callable[[], _T]) -> _T:
    """``fn()`` run in a thread inside namespace ``ns_name``; its result. An ``OSError``
    (or :class:`ResourceError`) it raises comes back as a :class:`ResourceError` naming the
    namespace and ``what``."""
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
