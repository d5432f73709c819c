"""The namespaces of one emulated cell, with a small Mininet-like API.

Layout (``<rid>`` is the run id of the :class:`~clawbed.netns.Resources` stack; the server
namespace exists only after :meth:`CellTopology.add_server`)::

    UE namespace cb<rid>u<i>                                core namespace cb<rid>core
    ┌──────────────────────────┐                            ┌───────────────────────────┐
    │ TUN cb<rid>t<i>          │◀──── clawbed-emu ─────────▶│ TUN cb<rid>tc             │
    │ 10.65.0.<i+1> (/32)      │  (root namespace, reads    │ 10.64.0.1 (/32)           │
    │ default route → TUN      │   and writes both TUNs)    │ 10.65.0.0/16 → TUN        │
    │ clients, CLAW client     │                            │ servers, CLAW server agent│
    └──────────────────────────┘                            │ veth cb<rid>cs 10.66.0.1  │
                                                            └─────────────┬─────────────┘
                                        wired link, TBF-shaped (optional) │
                                                            ┌─────────────┴─────────────┐
                                  server namespace cb<rid>srv │ veth cb<rid>sv 10.66.0.2  │
                                                            │ default route → core      │
                                                            └───────────────────────────┘

Choice: the servers run in the core namespace itself, on the core TUN's address, rather than
in a server namespace behind a veth. Every packet between a UE and a server then crosses the
emulator and nothing else (no extra forwarding hop whose latency or queue would add to the
model's), and a server's tc/BPF programs attach to the core TUN. A run that needs a
wireline bottleneck behind the core adds a server namespace with :meth:`CellTopology.add_server`:
a veth from the core namespace (which then forwards between it and the core TUN), what the
server sends optionally shaped by a TBF as it enters the core — the wired bottleneck, below
the cell's capacity.

The namespaces are made here; the TUN devices are made by ``clawbed-emu`` when it starts (it
needs their descriptors) and vanish when it exits. Everything is created through the
``Resources`` stack, so closing the stack removes it on success, error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass, field
from typing import Sequence

from clawbed.netns import Endpoint, Namespace, OwnedProcess, Resources

#: Address of the core TUN, where the servers listen.
DEFAULT_CORE_ADDRESS = ipaddress.IPv4Address("10.64.0.1")
#: UE ``i`` gets host ``i + 1`` of this network.
DEFAULT_UE_NETWORK = ipaddress.IPv4Network("10.65.0.0/16")
#: MTU of every TUN, bytes (Ethernet-sized, as on an LTE bearer after PDCP).
DEFAULT_MTU_BYTES = 1500
#: The wired link between the core and a server namespace: the core's end is host 1, the
#: server's host 2.
DEFAULT_SERVER_NETWORK = ipaddress.IPv4Network("10.66.0.0/24")


class _InNamespace:
    """Running things in a node's namespace (``self.ns``), owned by its run (``self._res``)."""

    ns: Namespace
    _res: Resources

    @property
    def name(self) -> str:
        return self.ns.name

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run inside this node's namespace."""
        return self.ns.command(argv)

    def run(self, argv: Sequence[str], *, check: bool = True,
            timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to completion in the namespace; its output is captured as text."""
        return self.ns.run(argv, check=check, timeout_s=timeout_s)

    def popen(self, argv: Sequence[str], *, name: str, **kwargs: object) -> OwnedProcess:
        """Start ``argv`` in the namespace as a process owned by the run (stopped when it closes)."""
        return self._res.process(self.ns.command(argv), name=name, **kwargs)


@dataclass
class Node(_InNamespace):
    """One namespace of the topology: where processes run, and its TUN as the emulator makes it."""

    #: The namespace (``Namespace.name`` is what the emulator's config names).
    ns: Namespace
    #: The TUN device's interface name inside ``ns``.
    tun: str
    #: The TUN's IPv4 address.
    address: ipaddress.IPv4Address
    #: Destinations routed through the TUN (``"default"`` or ``A.B.C.D/N``).
    routes: list[str]
    _res: Resources = field(repr=False)


@dataclass(frozen=True)
class Shaping:
    """A token bucket (tc ``tbf``) on a link's egress: the wired bottleneck."""

    #: Rate in tc's notation (``10mbit``; ``mbps`` would be megabytes per second).
    rate: str
    #: Bucket size, bytes: the longest burst at line rate (at least one MTU-sized packet).
    burst_bytes: int = 32 * 1024
    #: Longest time a packet may wait in the queue, ms (the queue holds rate × latency).
    latency_ms: float = 50.0

    def tc_args(self) -> list[str]:
        """The ``tbf ...`` arguments of ``tc qdisc add``."""
        return ["tbf", "rate", self.rate, "burst", str(self.burst_bytes), "latency", f"{self.latency_ms:g}ms"]


@dataclass
class ServerNode(_InNamespace):
    """A server namespace behind the core, on a (shaped) veth."""

    ns: Namespace
    #: The veth end in ``ns``: where the UEs' packets arrive (attach server-side tc programs here).
    device: str
    #: The servers' address (``device``'s).
    address: ipaddress.IPv4Address
    #: The veth end in the core namespace, and its address (the server's gateway).
    core_device: str
    core_address: ipaddress.IPv4Address
    #: The TBF on what the server sends (server → UEs), at the core's end of the link, if any.
    shaping: Shaping | None
    _res: Resources = field(repr=False)


@dataclass
class UeNode(Node):
    """A UE: its index in the emulator's ``ues`` list."""

    index: int = 0


class CellTopology:
    """One core namespace and ``n_ues`` UE namespaces, created in ``res`` (removed when it closes).

    >>> with Resources(new_run_id(), ledger) as res:
    ...     topo = CellTopology(res, n_ues=2)
    ...     topo.ues[0].run(["ping", "-c", "1", str(topo.core.address)])  # once the emulator runs
    ...     server = topo.add_server(Shaping("10mbit"))          # a wired bottleneck behind the core
    ...     topo.ues[0].run(["ping", "-c", "1", str(server.address)])
    """

    def __init__(
        self,
        res: Resources,
        n_ues: int = 1,
        *,
        core_address: ipaddress.IPv4Address | str = DEFAULT_CORE_ADDRESS,
        ue_network: ipaddress.IPv4Network | str = DEFAULT_UE_NETWORK,
        mtu_bytes: int = DEFAULT_MTU_BYTES,
    ) -> None:
        if n_ues < 1:
            raise ValueError(f"n_ues must be at least 1, got {n_ues}")
        ue_network = ipaddress.IPv4Network(ue_network)
        core_address = ipaddress.IPv4Address(core_address)
        if n_ues > ue_network.num_addresses - 2:
            raise ValueError(f"ue_network {ue_network} has room for {ue_network.num_addresses - 2} UEs, not {n_ues}")
        if core_address in ue_network:
            raise ValueError(f"core_address {core_address} lies inside ue_network {ue_network}")
        self.res = res
        self.run_id = res.run_id
        self.mtu_bytes = mtu_bytes
        self.ue_network = ue_network
        self.core = Node(res.namespace("core"), res.name("tc"), core_address, [str(ue_network)], res)
        self.ues: list[UeNode] = [
            UeNode(res.namespace(f"u{i}"), res.name(f"t{i}"), ue_network.network_address + i + 1,
                   ["default"], res, index=i)
            for i in range(n_ues)
        ]
        #: The server namespace behind the core, once :meth:`add_server` made it.
        self.server: ServerNode | None = None

    def add_server(self, shaping: Shaping | None = None, *,
                   network: ipaddress.IPv4Network | str = DEFAULT_SERVER_NETWORK) -> ServerNode:
        """A server namespace ``cb<rid>srv`` joined to the core namespace by a veth on
        ``network`` (core end host 1, server end host 2), with ``shaping`` as a TBF on what
        the server sends (the downlink direction: server → UEs), applied where it enters
        the core namespace.

        The core namespace forwards between the veth and its TUN (``ip_forward``, a
        per-namespace setting that goes with the namespace); the server's default route is
        the core's end. May be called before or after the emulator starts; once per topology.
        """
        if self.server is not None:
            raise ValueError(f"{self!r} already has a server namespace ({self.server.name})")
        network = ipaddress.IPv4Network(network)
        if network.num_addresses < 4:
            raise ValueError(f"server network {network} needs room for two hosts")
        if network.overlaps(self.ue_network) or self.core.address in network:
            raise ValueError(f"server network {network} overlaps the UEs' {self.ue_network} or the core's "
                             f"{self.core.address}")
        core_address, server_address = network.network_address + 1, network.network_address + 2
        ns = self.res.namespace("srv")
        device, core_device = self.res.name("sv"), self.res.name("cs")
        self.res.veth(Endpoint(ns, device, str(server_address), network.prefixlen),
                      Endpoint(self.core.ns, core_device, str(core_address), network.prefixlen),
                      mtu=self.mtu_bytes)
        self.core.ns.sysctl("net.ipv4.ip_forward", 1)
        ns.run(["ip", "route", "add", "default", "via", str(core_address), "dev", device])
        if shaping is not None:
            self._shape_towards_ues(core_device, shaping)
        self.server = ServerNode(ns, device, server_address, core_device, core_address, shaping, self.res)
        return self.server

    def _shape_towards_ues(self, core_device: str, shaping: Shaping) -> None:
        """The TBF on what the server sends, at the core's end of the link (its ingress,
        redirected through an IFB device of the core namespace): a hop away from the
        server, as a router would be. On the server's own egress the kernel would push the
        TBF's queue back into the sending socket (TCP small queues), so TCP would never fill
        its window nor lose a packet there, unlike behind any real wired bottleneck."""
        ifb = self.res.name("if")
        core = self.core.ns
        # Recorded for `clawbed cleanup`; it also goes with the core namespace.
        self.res.ledger.record("link", ifb, netns=core.name)
        core.run(["ip", "link", "add", ifb, "mtu", str(self.mtu_bytes), "type", "ifb"])
        core.run(["ip", "link", "set", ifb, "up"])
        core.run(["tc", "qdisc", "add", "dev", ifb, "root", *shaping.tc_args()])
        core.run(["tc", "qdisc", "add", "dev", core_device, "handle", "ffff:", "ingress"])
        core.run(["tc", "filter", "add", "dev", core_device, "parent", "ffff:", "protocol", "ip", "u32",
                  "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb])

    @property
    def server_address(self) -> ipaddress.IPv4Address:
        """Where servers in the core namespace listen (the core TUN's address)."""
        return self.core.address

    def __repr__(self) -> str:
        server = f", server {self.server.name}" if self.server is not None else ""
        return f"CellTopology(run {self.run_id}: core {self.core.name}, {len(self.ues)} UE(s){server})"
