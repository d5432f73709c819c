"""The server namespace's TCP settings (spec: "Server sysctls in its namespace").

- ``tcp_no_metrics_save = 1``: no RTT/cwnd cached from one connection to the next, so each
  test starts from the same state (the paper's server does the same);
- ``tcp_slow_start_after_idle = 0``: an HTTP/2 connection that pauses between requests
  keeps its window (the paper, after the HTTP/2 wiki);
- ``tcp_wmem`` maximum of 64 MiB: TCP's send-buffer autotuning stops at this, and it must
  hold about twice the largest window (the kernel sizes the buffer at ~2 x cwnd x
  per-segment memory). The largest LTE W_claw is about 150 Mbit/s (100 RBs, two layers,
  MCS 28) x 1 s of bufferbloated RTT = 19 MB, so the socket never limits W_claw.

These apply to every scheme, so that schemes differ only in congestion control. A run's server
stack era (``server_stack``, clawbed/tcpstack.py, docs/tcp-stacks.md) and its ``server_sysctls``
go over them, in that order, as the ``overrides`` of :func:`apply_server_sysctls`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from clawbed import tcpstack
from clawbed.netns import Namespace, in_netns

_T = TypeVar("_T")

#: Send buffer autotuning: minimum, default, maximum, bytes.
TCP_WMEM_BYTES = (4096, 1 << 20, 64 << 20)

SERVER_SYSCTLS: dict[str, str] = {
    "net.ipv4.tcp_no_metrics_save": "1",
    "net.ipv4.tcp_slow_start_after_idle": "0",
    "net.ipv4.tcp_wmem": " ".join(str(v) for v in TCP_WMEM_BYTES),
}


#: The sysctls a run may set over :data:`SERVER_SYSCTLS`: the network stack's only.
OVERRIDABLE_KEY = tcpstack.SYSCTL_KEY


def check_overrides(overrides: dict[str, str]) -> None:
    """A ValueError naming the first override that is not a ``net.ipv4.*`` or ``net.core.*`` key
    with a value (the same check as the UE's, :func:`clawbed.tcpstack.check_sysctls`)."""
    tcpstack.check_sysctls(overrides)


def in_namespace(ns: Namespace, what: str, fn: Callable[[], _T]) -> _T:
    """``fn()`` run in a thread inside ``ns`` (:func:`~clawbed.netns.in_netns`;
    ``/proc/sys/net`` shows the reading thread's namespace): a sysctl read or written without
    an ``ip netns exec`` process each (a load's set-up made eight). Errors name ``what``."""
    return in_netns(ns.name, what, fn)


def _sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def read_sysctl(ns: Namespace, key: str) -> str:
    """A sysctl's value in ``ns``, whitespace-normalised."""
    path = _sysctl_path(key)
    return in_namespace(ns, f"reading {key}", lambda: " ".join(open(path).read().split()))


def write_sysctl(ns: Namespace, key: str, value: str | int) -> None:
    """Set a sysctl of ``ns`` (a list value's words joined with single spaces, as echo would)."""
    path = _sysctl_path(key)
    text = " ".join(str(value).split()) + "\n"

    def write() -> None:
        with open(path, "w") as f:
            f.write(text)

    in_namespace(ns, f"setting {key} to {value}", write)


def set_sysctls(ns: Namespace, values: dict[str, str]) -> dict[str, str]:
    """Set ``values`` in ``ns`` in one thread of the namespace; the previous values."""
    def apply() -> dict[str, str]:
        previous: dict[str, str] = {}
        for key, value in values.items():
            path = _sysctl_path(key)
            try:
                with open(path) as f:
                    previous[key] = " ".join(f.read().split())
                with open(path, "w") as f:
                    f.write(" ".join(str(value).split()) + "\n")
            except OSError as e:
                raise OSError(e.errno, f"{key} = {value}: {e.strerror}") from e
        return previous

    return in_namespace(ns, "setting sysctls", apply)


def apply_server_sysctls(ns: Namespace, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """Set :data:`SERVER_SYSCTLS` (updated by ``overrides``) in ``ns``; the previous values,
    for :func:`restore_sysctls`. A failure names the sysctl (``ResourceError``)."""
    return set_sysctls(ns, {**SERVER_SYSCTLS, **(overrides or {})})


def restore_sysctls(ns: Namespace, previous: dict[str, str]) -> None:
    """Put back what :func:`apply_server_sysctls` changed (nothing if the namespace is gone)."""
    if not os.path.exists(ns.path):
        return
    set_sysctls(ns, previous)
