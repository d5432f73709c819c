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

from clawbed import tcpstack
from clawbed.netns import Namespace

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


def read_sysctl(ns: Namespace, key: str) -> str:
    """A sysctl's value in ``ns``, whitespace-normalised."""
    path = "/proc/sys/" + key.replace(".", "/")
    return " ".join(ns.run(["cat", path]).stdout.split())


def apply_server_sysctls(ns: Namespace, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """Set :data:`SERVER_SYSCTLS` (updated by ``overrides``) in ``ns``; the previous values,
    for :func:`restore_sysctls`. A failure names the sysctl (``ResourceError``)."""
    wanted = {**SERVER_SYSCTLS, **(overrides or {})}
    previous: dict[str, str] = {}
    for key, value in wanted.items():
        previous[key] = read_sysctl(ns, key)
        ns.sysctl(key, value)  # echo joins the words of tcp_wmem with single spaces
    return previous


def restore_sysctls(ns: Namespace, previous: dict[str, str]) -> None:
    """Put back what :func:`apply_server_sysctls` changed (nothing if the namespace is gone)."""
    if not os.path.exists(ns.path):
        return
    for key, value in previous.items():
        ns.sysctl(key, value)
